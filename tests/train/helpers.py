"""Teacher data for the training tests: real bayes episodes, written as the generate stage writes them."""

from __future__ import annotations

from pathlib import Path

from rhythm.agents import make_agent
from rhythm.agents.base import EpisodeSpec
from rhythm.episodes import play
from rhythm.records import JsonlWriter


def write_episodes(path: Path, seeds, *, condition: str = "in-dist", agent: str = "bayes") -> list[dict]:
    records = [r.to_dict() for r in play(make_agent(agent), [EpisodeSpec(condition, "train", s) for s in seeds])]
    with JsonlWriter(path) as w:
        for r in records:
            w.write(r)
    return records
