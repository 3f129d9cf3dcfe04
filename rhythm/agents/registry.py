"""Agents by name: the registry behind ``--agent`` and ``--teacher``.

``random``, ``heuristic`` (baselines), ``bayes``, ``oracle``, ``planner`` (built-in teachers),
``model:PATH`` (a causal LM, optionally a LoRA adapter), ``openai:MODEL`` and ``azure:DEPLOYMENT``
(chat endpoints). Agents import their heavy dependencies (torch, openai) only when built.

Agents of your own: in-process, :func:`register` a factory; for the command line (and for ``rhythm generate``'s
worker processes), an installed package names its factory in the ``rhythm.agents`` entry-point group
(``[project.entry-points."rhythm.agents"] mine = "my_pkg.agents:make"``), found on the first use of a name
the registry does not hold. A built-in name always means the built-in agent; a name two packages claim is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from rhythm.agents.base import Agent, BatchObservation, Decision, EpisodeSpec
from rhythm.agents.baselines import HeuristicAgent, RandomAgent
from rhythm.agents.llm import LLMAgent
from rhythm.agents.model import ModelAgent
from rhythm.agents.teachers import BayesAgent, OracleAgent, PlannerAgent
from rhythm.errors import RhythmError

AgentFactory = Callable[[str, Any], Agent]
_REGISTRY: dict[str, AgentFactory] = {}
ENTRY_POINT_GROUP = "rhythm.agents"
AGENT_METHODS = ("name", "reset", "act")
NEEDS_ARGUMENT = ("model", "openai", "azure")
TAKES_NO_ARGUMENT = ("random", "heuristic", "bayes", "oracle", "planner")


def register(kind: str) -> Callable[[AgentFactory], AgentFactory]:
    """Register a factory ``(argument, options) -> Agent`` for ``kind`` or ``kind:ARG`` (names are case-blind)."""

    def wrap(factory: AgentFactory) -> AgentFactory:
        _REGISTRY[kind.strip().lower()] = factory
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


def _plugins() -> dict[str, list[Any]]:
    """The installed packages' agents (``rhythm.agents`` entry points) by lower-cased name, built-ins left out: each
    name's distinct targets (one, unless two packages claim the name)."""
    found: dict[str, list[Any]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        name = ep.name.strip().lower()
        if name not in _REGISTRY and ep.value not in [e.value for e in found.get(name, [])]:
            found.setdefault(name, []).append(ep)
    return found


def agent_kinds() -> list[str]:
    return sorted({*_REGISTRY, *_plugins()})


def split_agent_spec(spec: str) -> tuple[str, str]:
    """``"model:runs/x"`` -> ``("model", "runs/x")``; ``"bayes"`` -> ``("bayes", "")``."""
    kind, _, arg = spec.partition(":")
    return kind.strip().lower(), arg.strip()


def check_agent_spec(spec: str) -> tuple[str, str]:
    kind, arg = split_agent_spec(spec)
    if kind not in _REGISTRY and kind not in _plugins():
        raise RhythmError(f"unknown agent {spec!r}; expected one of {', '.join(agent_kinds())} (model:PATH, openai:MODEL)")
    if kind in NEEDS_ARGUMENT and not arg:
        raise RhythmError(f"agent {kind!r} needs an argument, e.g. {kind}:NAME")
    if kind in TAKES_NO_ARGUMENT and arg:
        raise RhythmError(f"agent {kind!r} takes no argument, got {spec!r}; its settings are config keys (--set)")
    return kind, arg


def make_agent(spec: str, options: Any = None) -> Agent:
    """Build the agent named by ``spec`` (``kind`` or ``kind:ARG``) with stage ``options``."""
    kind, arg = check_agent_spec(spec)
    factory = _REGISTRY.get(kind) or _load_plugin(kind)
    agent = factory(arg, options)
    missing = [m for m in AGENT_METHODS if not hasattr(agent, m)]
    if missing:
        raise RhythmError(f"agent {spec!r} is not an agent: it has no {', '.join(missing)} (rhythm.agents.base.Agent)")
    return agent


def _load_plugin(kind: str) -> AgentFactory:
    """The factory a ``rhythm.agents`` entry point names, or one line saying why it cannot be loaded."""
    eps = _plugins()[kind]
    if len(eps) > 1:
        raise RhythmError(f"agent {kind!r} is named by more than one installed package: "
                          f"{', '.join(e.value for e in eps)}; uninstall one")
    ep = eps[0]
    try:
        factory = ep.load()
    except Exception as err:  # an installed package's import error, reported as bad input
        raise RhythmError(f"agent {kind!r}: cannot load {ep.value!r} ({type(err).__name__}: {err})") from None
    if not callable(factory):
        raise RhythmError(f"agent {kind!r}: {ep.value!r} is not callable (a factory (argument, options) -> agent)")
    return factory


__all__ = ["ENTRY_POINT_GROUP", "Agent", "BatchObservation", "Decision", "EpisodeSpec", "agent_kinds", "make_agent",
           "register"]
