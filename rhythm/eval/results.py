"""``eval_results_v2.json`` as a typed object: :class:`EvalResults` is what ``rhythm eval`` writes and what
the report, the tables, the plots and the quickstart read (``EvalResults.load(path)``, ``results.save(path)``).

The file format is the one ``rhythm eval`` has always written (sorted keys, indented, byte-identical
for identical results); keys this model does not name are kept as they are, so a file round-trips.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from rhythm.env.constants import CONDITIONS
from rhythm.errors import RhythmError
from rhythm.eval.names import display_name
from rhythm.records import write_atomic


def episodes_path(output: str | Path) -> Path:
    """Where the per-episode records of a results file go: ``<stem>.episodes.jsonl`` beside it."""
    out = Path(output)
    return out.with_name(out.stem + ".episodes.jsonl")


class MeanCI(BaseModel):
    """A mean with its seeded bootstrap 95% interval (both None when no episode had a value)."""

    model_config = ConfigDict(frozen=True)

    mean: float | None
    ci95: tuple[float, float] | None = None


class ReferenceScores(BaseModel):
    """A reference agent's means on the same seeds."""

    model_config = ConfigDict(frozen=True, extra="allow")

    final_score: float | None = None
    final_score_v2: float | None = None
    behaviour_score: float | None = None


class ConditionResults(BaseModel):
    """The report of one condition (see :func:`rhythm.eval.evaluate.summarize_condition`)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    final_score: MeanCI
    final_score_v2: MeanCI
    episodes: int = 0
    split: str = "eval"
    seeds: str = ""
    behaviour_score: MeanCI = MeanCI(mean=None)
    belief_mae: MeanCI = MeanCI(mean=None)
    belief_mae_by_dim: dict[str, float] | None = None
    belief_mae_prior: float | None = None
    belief_mae_by_step: list[float | None] = []
    belief_stated_rate: float | None = None
    crashes: float | None = None
    win_rate_vs: dict[str, float] = {}
    normalized_score: float | None = None
    parse_failure_rate: float | None = None
    cut_reply_rate: float | None = None
    """Replies that stopped at the token cap (None: an agent that writes none, or a file from before it was counted)."""
    usage: dict[str, Any] | None = None
    """The agent's replies over every week, for one that writes them: tokens, requests and ``cost_usd`` (None where
    a price or a reply's usage is missing), as each week's ``usage`` holds them, summed."""
    action_counts: dict[str, int] = {}
    references: dict[str, ReferenceScores] = {}


class EvalResults(BaseModel):
    """One ``rhythm eval`` run: the agent, its provenance, and a :class:`ConditionResults` per condition."""

    model_config = ConfigDict(frozen=True, extra="allow")

    agent: str
    conditions: dict[str, ConditionResults]
    display_name: str = ""
    """How tables and plots name the agent (:func:`rhythm.eval.names.display_name`); "" in older files."""
    grader: str = "v3"
    env_version: str = ""
    protocol: int | None = None
    split: str = "eval"
    config: dict[str, Any] = {}
    config_hash: str = ""
    versions: dict[str, Any] = {}

    @classmethod
    def load(cls, path: str | Path) -> EvalResults:
        """Read and check a results file; a file of another shape is a one-line error."""
        path = Path(path)
        if not path.is_file():
            raise RhythmError(f"{path} is a folder; give its eval_results_v2.json" if path.is_dir() else f"file not found: {path}")
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as err:
            raise RhythmError(f"{path}: not valid JSON ({err})") from None
        if not isinstance(data, dict) or not isinstance(data.get("conditions"), dict) or "agent" not in data:
            raise RhythmError(f"{path}: not a rhythm eval results file (needs 'agent' and 'conditions')")
        if not data["conditions"]:
            raise RhythmError(f"{path}: holds no condition's results")
        for cond, entry in data["conditions"].items():
            if cond not in CONDITIONS:
                raise RhythmError(f"{path}: unknown condition {cond!r}; expected one of {', '.join(CONDITIONS)}")
            for key in ("final_score", "final_score_v2"):
                stat = entry.get(key) if isinstance(entry, dict) else None
                if not isinstance(stat, dict) or "mean" not in stat:
                    raise RhythmError(f"{path}: conditions.{cond}.{key} is missing or has no mean")
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise RhythmError(f"{path}: not a rhythm eval results file ({where}: {first['msg']})") from None

    @property
    def name(self) -> str:
        """The agent's display name: the recorded one, or (older files) one derived from the agent string."""
        return self.display_name or display_name(self.agent)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)

    def save(self, path: str | Path) -> Path:
        """Write the results JSON (sorted keys, indented): byte-identical for identical results."""
        path = Path(path)  # a run killed while writing leaves the last results whole
        write_atomic(path, orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
        return path
