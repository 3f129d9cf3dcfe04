"""Agents by name: the registry behind ``--agent`` and ``--teacher``.

``random``, ``heuristic`` (baselines), ``bayes``, ``oracle``, ``planner`` (built-in teachers),
``model:PATH`` (a causal LM, optionally a LoRA adapter), ``openai:MODEL`` and ``azure:DEPLOYMENT``
(chat endpoints). Agents import their heavy dependencies (torch, openai) only when built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rhythm.agents.base import Agent, BatchObservation, Decision, EpisodeSpec
from rhythm.agents.baselines import HeuristicAgent, RandomAgent
from rhythm.agents.llm import LLMAgent
from rhythm.agents.model import ModelAgent
from rhythm.agents.teachers import BayesAgent, OracleAgent, PlannerAgent
from rhythm.errors import RhythmError

AgentFactory = Callable[[str, Any], Agent]
_REGISTRY: dict[str, AgentFactory] = {}


def register(kind: str) -> Callable[[AgentFactory], AgentFactory]:
    """Register a factory ``(argument, options) -> Agent`` for ``kind`` or ``kind:ARG``."""

    def wrap(factory: AgentFactory) -> AgentFactory:
        _REGISTRY[kind] = factory
        return factory

    return wrap


@register("random")
def _random(arg: str, options: Any) -> Agent:
    return RandomAgent()


@register("heuristic")
def _heuristic(arg: str, options: Any) -> Agent:
    return HeuristicAgent()


@register("bayes")
def _bayes(arg: str, options: Any) -> Agent:
    return BayesAgent(options)


@register("oracle")
def _oracle(arg: str, options: Any) -> Agent:
    return OracleAgent(options)


@register("planner")
def _planner(arg: str, options: Any) -> Agent:
    return PlannerAgent(options)


@register("openai")
def _openai(arg: str, options: Any) -> Agent:
    return LLMAgent("openai", arg, options)


@register("azure")
def _azure(arg: str, options: Any) -> Agent:
    return LLMAgent("azure", arg, options)


@register("model")
def _model(arg: str, options: Any) -> Agent:
    return ModelAgent(arg, options)


def agent_kinds() -> list[str]:
    return sorted(_REGISTRY)


def split_agent_spec(spec: str) -> tuple[str, str]:
    """``"model:runs/x"`` -> ``("model", "runs/x")``; ``"bayes"`` -> ``("bayes", "")``."""
    kind, _, arg = spec.partition(":")
    return kind.strip().lower(), arg.strip()


def check_agent_spec(spec: str) -> tuple[str, str]:
    kind, arg = split_agent_spec(spec)
    if kind not in _REGISTRY:
        raise RhythmError(f"unknown agent {spec!r}; expected one of {', '.join(agent_kinds())} (model:PATH, openai:MODEL)")
    if kind in ("model", "openai", "azure") and not arg:
        raise RhythmError(f"agent {kind!r} needs an argument, e.g. {kind}:NAME")
    return kind, arg


def make_agent(spec: str, options: Any = None) -> Agent:
    """Build the agent named by ``spec`` (``kind`` or ``kind:ARG``) with stage ``options``."""
    kind, arg = check_agent_spec(spec)
    return _REGISTRY[kind](arg, options)


__all__ = ["Agent", "BatchObservation", "Decision", "EpisodeSpec", "agent_kinds", "make_agent", "register"]
