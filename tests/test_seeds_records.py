"""Seed ranges from the command line, and crash-safe JSONL."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.errors import RhythmError
from rhythm.records import JsonlWriter, done_keys, iter_jsonl, read_episodes, repair_torn_tail
from rhythm.seeds import format_seeds, parse_seeds


@pytest.mark.parametrize(
    "spec, seeds",
    [("0-4", [0, 1, 2, 3, 4]), ("0,5,9", [0, 5, 9]), ("10000-10002", [10000, 10001, 10002]), (" 3 , 1-2 ,3", [3, 1, 2]), ("7", [7])],
)
def test_parse_seeds(spec: str, seeds: list[int]) -> None:
    assert parse_seeds(spec) == seeds


@pytest.mark.parametrize(
    "spec, message",
    [
        ("5-x", "malformed seed range '5-x' at '5-x'; expected e.g. 0-29"),
        ("", "empty seed range; expected e.g. 0-29"),
        ("1--2", "malformed seed range '1--2'"),
        ("a", "malformed seed range 'a'"),
        ("3-1", "seed range '3-1' runs backwards; write 1-3"),
        ("-1", "malformed seed range '-1'"),
        ("1,,2", "malformed seed range '1,,2' at ''"),
        ("0-99999999", "seed range '0-99999999' has more than 10,000,000 seeds"),
    ],
)
def test_malformed_seed_specs_are_refused(spec: str, message: str) -> None:
    with pytest.raises(RhythmError, match=re.escape(message)):
        parse_seeds(spec)


@settings(deadline=None)
@given(st.sets(st.integers(0, 10**6), min_size=1, max_size=40))
def test_format_then_parse_round_trips(seeds: set[int]) -> None:
    assert parse_seeds(format_seeds(sorted(seeds))) == sorted(seeds)


def _rec(seed: int) -> dict:
    return {"schema": 1, "env_version": "rhythm-v1", "condition": "in-dist", "split": "train", "seed": seed,
            "agent": "x", "steps": [{"t": 0, "action": "NAP", "response": "ACTION: NAP", "observation": "o"}], "score": {}}


def test_writer_emits_whole_lines_and_resume_repairs_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with JsonlWriter(path) as w:
        for s in range(3):
            w.write(_rec(s))
    with path.open("ab") as fh:
        fh.write(orjson.dumps(_rec(3))[:25])  # a writer killed mid-line
    assert done_keys(path) == {("in-dist", "train", s) for s in range(3)}
    with pytest.raises(RhythmError, match="exists"):
        JsonlWriter(path)
    with JsonlWriter(path, resume=True) as w:
        assert w.repaired == 25
        w.write(_rec(3))
    lines = path.read_bytes().splitlines()
    assert [orjson.loads(x)["seed"] for x in lines] == [0, 1, 2, 3]
    assert repair_torn_tail(path) == 0


def test_resume_keeps_a_whole_last_record_that_lacks_only_its_newline(tmp_path: Path) -> None:
    """Counted as done by resume, so it must not be cut: the newline is added instead."""
    path = tmp_path / "out.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(_rec(s)) for s in range(3)))  # no final newline
    assert done_keys(path) == {("in-dist", "train", s) for s in range(3)}
    with JsonlWriter(path, resume=True) as w:
        assert w.repaired == 0
        w.write(_rec(3))
    assert [orjson.loads(x)["seed"] for x in path.read_bytes().splitlines()] == [0, 1, 2, 3]
    one = tmp_path / "one.jsonl"
    one.write_bytes(orjson.dumps(_rec(0)))  # a single whole line, no newline at all
    assert repair_torn_tail(one) == 0 and one.read_bytes().endswith(b"}\n")


def test_bad_lines_are_reported_with_path_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(orjson.dumps(_rec(0)) + b"\n{not json\n")
    with pytest.raises(RhythmError, match=r"bad.jsonl:2: not valid JSON"):
        list(iter_jsonl(path))
    path.write_bytes(orjson.dumps(_rec(0)) + b"\n" + orjson.dumps({"seed": 1}) + b"\n")
    with pytest.raises(RhythmError, match=r"bad.jsonl:2: episode record lacks"):
        list(read_episodes(path))
    with pytest.raises(RhythmError, match="not found"):
        list(iter_jsonl(tmp_path / "nope.jsonl"))
