"""The tiny offline student by name: ``rhythm-tiny`` (and ``rhythm-tiny-4l``) -> its cached folder.

Its tokenizer learns the protocol text that the built-in agents write (bayes, heuristic and random
weeks of every condition, train split), so it is built here, above those agents and the episode runner;
the build itself (tokenizer, architecture, cache) is :mod:`rhythm.model.tiny`. The cache key covers the
corpus text, so a changed teacher sentence, env version or code version builds a fresh student
instead of reusing an old one.
"""

from __future__ import annotations

import functools
from pathlib import Path

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.baselines import HeuristicAgent, RandomAgent
from rhythm.agents.episodes import play
from rhythm.agents.teachers import BayesAgent
from rhythm.env.constants import CONDITIONS
from rhythm.model.tiny import TINY_MODELS, TINY_NAME, TinySpec, cached_tiny_student, tiny_cache_path
from rhythm.protocol import FORMAT_REMINDER, SYSTEM_PROMPT


def protocol_corpus(spec: TinySpec) -> list[str]:
    """Deterministic protocol text: the system prompt, observations and replies of built-in agents."""
    return list(_corpus(spec.corpus_episodes))


@functools.lru_cache(maxsize=4)
def _corpus(episodes: int) -> tuple[str, ...]:
    texts = [SYSTEM_PROMPT, FORMAT_REMINDER]
    for condition in CONDITIONS:
        specs = [EpisodeSpec(condition, "train", s) for s in range(episodes)]
        for make in (BayesAgent, HeuristicAgent, RandomAgent):
            for rec in play(make(), specs):
                for step in rec.steps:
                    texts.append(step.observation)
                    texts.append(step.response)
    return tuple(texts)


def tiny_student_path(spec: TinySpec = TinySpec()) -> Path:
    """The cached tiny student of ``spec``, built on first use."""
    return cached_tiny_student(spec, protocol_corpus(spec))


def tiny_student_name(spec: TinySpec = TinySpec()) -> str:
    """The cache folder name of the tiny student of ``spec`` (built or not): it changes with the agents' text, the
    protocol, the env version and the build code, so a stage stamp holding it goes stale with any of them."""
    return tiny_cache_path(spec, protocol_corpus(spec)).name


def resolve_model(name_or_path: str) -> str:
    """``rhythm-tiny`` / ``rhythm-tiny-4l`` -> the cached tiny student's path; anything else as given."""
    spec = TINY_MODELS.get(name_or_path)
    return str(tiny_student_path(spec)) if spec is not None else name_or_path


def resolve_base(name: str) -> str:
    """A base model name as the user or an adapter wrote it -> something ``from_pretrained`` can load.

    ``rhythm-tiny`` is the cached tiny student; so is a missing path whose folder name is the tiny
    student's (an adapter trained on another machine or in another cache records that machine's path).
    """
    if name in TINY_MODELS:
        return resolve_model(name)
    local = Path(name).expanduser()
    if not local.exists() and local.name.startswith(TINY_NAME + "-"):
        for spec in TINY_MODELS.values():
            if tiny_cache_path(spec, protocol_corpus(spec)).name == local.name:  # build only the student that matches
                return str(tiny_student_path(spec))
    return name
