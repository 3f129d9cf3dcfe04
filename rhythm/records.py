"""Episode records and their JSONL files: the one format every stage reads and writes.

One episode per line (orjson). Readers report a bad line as ``path:line: what is wrong``. Writers emit
whole lines only, flushed as each episode finishes, so a crash or Ctrl-C never leaves half a record;
``resume`` drops a torn last line and reports which episodes are already done. ``-`` means stdin or
stdout, so stages pipe in a shell.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from rhythm.env.constants import (
    ACTIONS,
    BELIEF_DIMS,
    CONDITIONS,
    ENV_VERSION,
    EPISODE_STEPS,
    N_METERS,
    PROTOCOL_VERSION,
    SPLITS,
)
from rhythm.errors import RhythmError
from rhythm.seeds import MAX_SEED

SCHEMA_VERSION = 2
"""2: records carry ``protocol`` (the text protocol version their observations and replies follow)."""
EPISODE_KEYS = ("schema", "env_version", "condition", "split", "seed", "agent", "steps", "score")
STEP_KEYS = ("t", "action", "response", "observation")


@dataclass
class StepRecord:
    """One step as played: what the agent saw and said, and what happened."""

    t: int
    day: int
    slot: int
    observation: str
    response: str
    belief: list[float] | None
    action: str
    parse_ok: bool
    reward: float
    meters: list[float]
    explored: bool = False
    """The action was not the agent's own choice (benchmarks/dagger_probe.py; written only when true)."""

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        if not d.pop("explored"):
            return d
        return {**d, "explored": True}


@dataclass
class EpisodeRecord:
    """One finished episode (SPEC section 5)."""

    env_version: str
    condition: str
    split: str
    seed: int
    agent: str
    config_hash: str
    created_at: str
    steps: list[StepRecord]
    score: dict[str, Any]
    usage: dict[str, float] = field(default_factory=dict)
    model: str | None = None
    schema: int = SCHEMA_VERSION
    protocol: int = PROTOCOL_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "schema": self.schema,
            "protocol": self.protocol,
            "env_version": self.env_version,
            "condition": self.condition,
            "split": self.split,
            "seed": self.seed,
            "agent": self.agent,
            "model": self.model,
            "config_hash": self.config_hash,
            "created_at": self.created_at,
            "steps": [s.to_dict() for s in self.steps],
            "score": self.score,
            "usage": self.usage,
        }
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> EpisodeRecord:
        """The record a line of a JSONL holds (one :meth:`to_dict` wrote); keys it does not name go to ``extra``,
        so ``from_dict(d).to_dict() == d``."""
        d = dict(record)
        steps = [StepRecord(**{"explored": False, **s}) for s in d.pop("steps")]
        known = {f.name for f in fields(cls)} - {"steps", "extra"}
        return cls(steps=steps, **{k: d.pop(k) for k in list(d) if k in known}, extra=d)


def sidecar_path(output: str | Path) -> Path:
    """``<output>.config.yaml``: the effective config and provenance written beside an episodes JSONL."""
    return Path(str(output) + ".config.yaml")


def episode_key(record: dict[str, Any]) -> tuple[str, str, int]:
    """What identifies an episode within a file: (condition, split, seed)."""
    return (record["condition"], record["split"], int(record["seed"]))


def each_person_once(weeks: Iterable[tuple[str, dict[str, Any]]], why: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, record)`` pairs as given, a person (:func:`episode_key`) given twice refused; ``why`` says what the
    second week would spoil (a mean that counts it double, an interval that narrows)."""
    seen: dict[tuple[str, str, int], str] = {}
    for where, record in weeks:
        key = episode_key(record)
        if key in seen:
            raise RhythmError(f"{where}: {key[0]} person {key[2]} ({key[1]} split) appears twice (first at {seen[key]}); {why}")
        seen[key] = where
        yield where, record


def graded_belief(record: dict[str, Any]) -> list[float] | None:
    """The belief the grader grades: the one a week states at its last step (None when that step states none,
    which scores no belief, whatever an earlier step said)."""
    steps = record["steps"]
    return steps[-1].get("belief") if steps else None


def score_field(record: dict[str, Any], key: str, *, needed: bool = False) -> float | None:
    """``record``'s ``score.KEY`` as a number: None where the score or the field is missing or null, or, with
    ``needed``, a one-line :class:`RhythmError` naming the week (a reader that cannot do without it)."""
    score = record.get("score")
    value = score.get(key) if isinstance(score, dict) else None
    if value is None and needed:
        raise RhythmError(f"{record.get('condition')} person {record.get('seed')} has no score.{key}")
    return None if value is None else float(value)


def dumps(record: dict[str, Any] | EpisodeRecord) -> bytes:
    data = record.to_dict() if isinstance(record, EpisodeRecord) else record
    return orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def write_atomic(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` only once all of it is written beside it: a run killed while writing, or a
    reader at the same moment, sees the old file whole or the new one, never part of one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(data)
    partial.replace(target)


def write_episodes(path: str | Path, records: Iterator[dict[str, Any]] | list[dict[str, Any]]) -> int:
    """Write ``records`` as a whole JSONL file, replacing ``path`` only once every line is written (an earlier
    file survives a failed run), or to stdout for ``-``; returns how many were written."""
    lines = [dumps(r) for r in records]
    if str(path) == "-":
        sys.stdout.buffer.write(b"".join(lines))
        sys.stdout.buffer.flush()
        return len(lines)
    write_atomic(path, b"".join(lines))
    return len(lines)


def _open_input(path: str | Path) -> tuple[BinaryIO, str]:
    if str(path) == "-":
        return sys.stdin.buffer, "<stdin>"
    p = Path(path)
    if p.is_dir():
        raise RhythmError(f"{p} is a folder; give a JSONL file (a run folder holds e.g. eval_results_v2.episodes.jsonl)")
    if not p.is_file():
        raise RhythmError(f"file not found: {p}")
    return p.open("rb"), str(p)


def iter_jsonl(path: str | Path, *, skip_torn_last: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)``; a bad line raises ``path:line: what is wrong``.

    With ``skip_torn_last`` a final line without its newline that does not parse (a writer killed
    mid-line) is skipped instead of raising.
    """
    handle, name = _open_input(path)
    try:
        lineno = 0
        for raw in handle:
            lineno += 1
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as err:
                if skip_torn_last and not raw.endswith(b"\n"):
                    return
                raise RhythmError(f"{name}:{lineno}: not valid JSON ({err.msg})") from None
            if not isinstance(obj, dict):
                raise RhythmError(f"{name}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


def file_list(files: str) -> list[str]:
    """The paths of a comma-separated list (``a.jsonl,b.jsonl``), an empty part (a trailing comma) left out."""
    return [part.strip() for part in files.split(",") if part.strip()]


def check_episode(obj: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate the fields an episode record must have; raise ``where: what is missing``."""
    missing = [k for k in EPISODE_KEYS if k not in obj]
    if missing:
        raise RhythmError(f"{where}: episode record lacks {', '.join(missing)}")
    if not isinstance(obj["steps"], list) or not obj["steps"]:
        raise RhythmError(f"{where}: episode record has no steps")
    if len(obj["steps"]) > EPISODE_STEPS:
        raise RhythmError(f"{where}: episode record has {len(obj['steps'])} steps; a week has {EPISODE_STEPS}")
    for i, step in enumerate(obj["steps"]):
        if not isinstance(step, dict):
            raise RhythmError(f"{where}: step {i} is not an object")
        lacking = [k for k in STEP_KEYS if k not in step]
        if lacking:
            raise RhythmError(f"{where}: step {i} lacks {', '.join(lacking)}")
        _check_step(step, i, where)
    seed = obj["seed"]
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise RhythmError(f"{where}: seed must be an integer in [0, {MAX_SEED}], got {seed!r}")
    for key, known in (("condition", CONDITIONS), ("split", SPLITS)):
        if obj[key] not in known:
            raise RhythmError(f"{where}: unknown {key} {obj[key]!r}; expected one of {', '.join(known)}")
    score = obj["score"]
    if score is not None and not (isinstance(score, dict) and all(_number(v) or v is None for v in score.values())):
        raise RhythmError(f"{where}: score must be an object of numbers (or null), got {score!r}"[:300])
    return obj


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_step(step: dict[str, Any], i: int, where: str) -> None:
    """The types a step's fields must have, where a reader uses them (one line naming the step)."""
    if step["t"] != i or isinstance(step["t"], bool):
        raise RhythmError(f"{where}: step {i} has t={step['t']!r}; steps must run 0, 1, 2... to replay a state")
    if step["action"] not in ACTIONS:
        raise RhythmError(f"{where}: step {i} has unknown action {step['action']!r}; expected one of {', '.join(ACTIONS)}")
    for key in ("response", "observation"):
        if not isinstance(step[key], str):
            raise RhythmError(f"{where}: step {i} has no {key} text (got {type(step[key]).__name__})")
    for key, size in (("meters", N_METERS), ("belief", len(BELIEF_DIMS))):
        value = step.get(key)
        if value is not None and not (isinstance(value, list) and len(value) == size and all(map(_number, value))):
            raise RhythmError(f"{where}: step {i}: {key} must be {size} numbers{' or null' if key == 'belief' else ''}, got {value!r}")
    if "reward" in step and not _number(step["reward"]):
        raise RhythmError(f"{where}: step {i}: reward must be a number, got {step['reward']!r}")


def record_protocol(record: dict[str, Any]) -> int:
    """The text protocol a record was written under (records before schema 2 are protocol v1)."""
    value = record.get("protocol", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def check_protocol(record: dict[str, Any], where: str) -> None:
    """Raise one line if the record's observations and replies are not in this rhythm's text protocol.

    A v1 record shows each step alone with a 5-step history; mixing it into v2 conversations would
    silently train or prompt on another format, so it is refused with what to do instead.
    """
    found = record_protocol(record)
    if found == -1:
        raise RhythmError(f"{where}: protocol must be a whole number (this rhythm speaks {PROTOCOL_VERSION}), "
                          f"got {record.get('protocol')!r}")
    if found != PROTOCOL_VERSION:
        raise RhythmError(
            f"{where}: record is text protocol v{found}, this rhythm speaks v{PROTOCOL_VERSION} "
            "(one episode = one conversation); regenerate it with `rhythm generate` "
            "(reeval and plots still read it)"
        )


def read_episodes(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``("path:line", record)`` for every episode in a JSONL file (or ``-``), validated."""
    name = "<stdin>" if str(path) == "-" else str(path)
    for lineno, obj in iter_jsonl(path):
        where = f"{name}:{lineno}"
        yield where, check_episode(obj, where)


def check_trainable(record: dict[str, Any], where: str) -> None:
    """Refuse a week of an eval-split person as training data: eval's people stay unseen by construction, or
    ``rhythm eval`` would score the student on people it was trained on (the published run's leak)."""
    if record.get("split") == "eval":
        raise RhythmError(f"{where}: a week of an eval-split person ({record.get('condition')}/eval/"
                          f"{record.get('seed')}); training on it would leak into rhythm eval's tables: train on "
                          "train-split weeks (rhythm generate plays the train split)")


def check_output(path: str | Path, *, inputs: Iterable[str | Path] = (), folder: bool = False, what: str = "output") -> None:
    """Refuse, before any work, an output that cannot be written where it is asked for: an empty path, one of
    the run's ``inputs``, a folder where a file goes (or a file where a ``folder`` goes), a path under a file, a
    place this process may not write in. ``-`` (stdout) always passes."""
    if str(path) == "-":
        return
    if not str(path).strip():
        raise RhythmError(f"the {what} path is empty; give a {'folder' if folder else 'file'}")
    out = Path(path).expanduser()
    if any(str(i) != "-" and str(i).strip() and Path(i).expanduser().resolve() == out.resolve() for i in inputs):
        raise RhythmError(f"{what} {out} is also an input of this run; write it somewhere else")
    if folder and out.exists() and not out.is_dir():
        raise RhythmError(f"{what} {out} is a file; give a folder")
    if not folder and out.is_dir():
        raise RhythmError(f"{what} {out} is a folder; give a file path")
    nearest = out if folder else out.parent
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not nearest.is_dir():
        raise RhythmError(f"cannot write {what} {out}: {nearest} is a file, not a folder")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise RhythmError(f"cannot write {what} {out}: no permission to write in {nearest}")


def repair_torn_tail(path: Path) -> int:
    """Cut a partial last line (no trailing newline) off ``path``; returns the bytes removed. A last line that
    is a whole record and lacks only its newline (a file written by hand or by another tool) is kept, and
    the newline added, since resuming counts it as done."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb+") as fh:
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return 0
        keep = _last_line_start(fh, size)
        fh.seek(keep)
        try:
            whole = isinstance(orjson.loads(fh.read(size - keep)), dict)
        except orjson.JSONDecodeError:
            whole = False
        if whole:
            fh.seek(size)
            fh.write(b"\n")
            return 0
        fh.truncate(keep)
        return size - keep


def _last_line_start(fh: BinaryIO, size: int, block: int = 65536) -> int:
    """The offset just after the last newline of an open file of ``size`` bytes (0: it has none)."""
    pos = size
    while pos > 0:
        start = max(0, pos - block)
        fh.seek(start)
        idx = fh.read(pos - start).rfind(b"\n")
        if idx >= 0:
            return start + idx + 1
        pos = start
    return 0


def done_keys(path: Path) -> dict[tuple[str, str, int], str | None]:
    """Episodes already complete in ``path`` (for ``--resume``), each with the ``config_hash`` it was made under;
    tolerates a torn last line. A week of another env or text protocol is refused (:func:`check_resumable`)."""
    if not path.exists():
        return {}
    keys = {}
    for lineno, obj in iter_jsonl(path, skip_torn_last=True):
        try:
            keys[episode_key(obj)] = obj.get("config_hash")
        except (KeyError, TypeError, ValueError):
            raise RhythmError(f"{path}:{lineno}: cannot resume: record lacks condition/split/seed") from None
        check_resumable(obj, f"{path}:{lineno}", "give another output")
    return keys


def check_resumable(record: dict[str, Any], where: str, instead: str) -> None:
    """Refuse to resume beside a week of another env version or text protocol (the config hash does not cover
    them: an upgrade keeps the settings and changes the weeks); ``instead`` says what to do."""
    if record.get("env_version") != ENV_VERSION or record_protocol(record) != PROTOCOL_VERSION:
        raise RhythmError(f"{where}: a week of env {record.get('env_version')}, protocol v{record_protocol(record)} (this "
                          f"rhythm: {ENV_VERSION}, v{PROTOCOL_VERSION}); --resume would mix them: {instead}")


class JsonlWriter:
    """Append whole records to a file (or stdout), flushed per record.

    Each record is one ``write`` of one complete line to a file opened in append mode, so readers and
    crashes only ever see whole lines.
    """

    def __init__(self, path: str | Path, *, resume: bool = False) -> None:
        self.path = None if str(path) == "-" else Path(path)
        self.repaired = 0
        if self.path is None:
            self._fh: BinaryIO | io.BufferedWriter = sys.stdout.buffer
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume:
            self.repaired = repair_torn_tail(self.path)
        elif self.path.exists() and self.path.stat().st_size > 0:
            raise RhythmError(f"{self.path} exists; pass --resume to continue it or choose another --output")
        self._fh = self.path.open("ab")

    def write(self, record: dict[str, Any] | EpisodeRecord) -> None:
        self.write_line(dumps(record))

    def write_line(self, line: bytes) -> None:
        """Write one already-serialised record (must end with a newline)."""
        if not line.endswith(b"\n"):
            raise ValueError("a JSONL line must end with a newline")
        self._fh.write(line)
        self._fh.flush()
        if self.path is not None:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self.path is not None:
            self._fh.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
