"""Seed ranges from the command line, and crash-safe JSONL."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.env.constants import ENV_VERSION, PROTOCOL_VERSION
from rhythm.errors import RhythmError
from rhythm.records import SCHEMA_VERSION, JsonlWriter, done_keys, iter_jsonl, read_episodes, repair_torn_tail
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
        ("0-99999999", "'0-99999999' names more than 10,000,000 seeds"),
        ("0-9999998,10000000-19999998", "names more than 10,000,000 seeds"),  # the cap is on the whole spec
        ("\u0663", "malformed seed range"),  # an Arabic-Indic three: seeds are ASCII digits
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
    return {"schema": SCHEMA_VERSION, "protocol": PROTOCOL_VERSION, "env_version": ENV_VERSION, "condition": "in-dist",
            "split": "train", "seed": seed, "agent": "x",
            "steps": [{"t": 0, "action": "NAP", "response": "ACTION: NAP", "observation": "o"}], "score": {}}


def test_writer_emits_whole_lines_and_resume_repairs_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with JsonlWriter(path) as w:
        for s in range(3):
            w.write(_rec(s))
    with path.open("ab") as fh:
        fh.write(orjson.dumps(_rec(3))[:25])  # a writer killed mid-line
    assert set(done_keys(path)) == {("in-dist", "train", s) for s in range(3)}
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
    assert set(done_keys(path)) == {("in-dist", "train", s) for s in range(3)}
    with JsonlWriter(path, resume=True) as w:
        assert w.repaired == 0
        w.write(_rec(3))
    assert [orjson.loads(x)["seed"] for x in path.read_bytes().splitlines()] == [0, 1, 2, 3]
    one = tmp_path / "one.jsonl"
    one.write_bytes(orjson.dumps(_rec(0)))  # a single whole line, no newline at all
    assert repair_torn_tail(one) == 0 and one.read_bytes().endswith(b"}\n")


def test_a_folder_given_as_a_jsonl_file_is_named_as_a_folder(tmp_path: Path) -> None:
    with pytest.raises(RhythmError, match=re.escape(f"{tmp_path} is a folder; give a JSONL file")):
        list(read_episodes(tmp_path))


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


@pytest.mark.parametrize("change, needle", [
    (lambda r: r.update(seed=2**64 - 1), "seed must be an integer in [0, "),
    (lambda r: r.update(seed=True), "seed must be an integer"),
    (lambda r: r.update(condition=["in-dist"]), "unknown condition ['in-dist']"),
    (lambda r: r.update(split="test"), "unknown split 'test'"),
    (lambda r: r.update(score=5), "score must be an object of numbers"),
    (lambda r: r.update(score={"final_score": "high"}), "score must be an object of numbers"),
    (lambda r: r["steps"][0].update(action="FLY"), "step 0 has unknown action 'FLY'"),
    (lambda r: r["steps"][0].update(t=1), "step 0 has t=1"),
    (lambda r: r["steps"][0].update(response=5), "step 0 has no response text"),
    (lambda r: r["steps"][0].update(meters=None), None),  # meters are optional; null means not recorded
    (lambda r: r["steps"][0].update(meters=["a"] * 5), "step 0: meters must be 5 numbers"),
    (lambda r: r["steps"][0].update(belief=["0.5", 0.5, 0.5]), "step 0: belief must be 3 numbers or null"),
    (lambda r: r["steps"][0].update(reward="x"), "step 0: reward must be a number"),
    (lambda r: r.update(steps=[{**r["steps"][0], "t": t} for t in range(29)]), "29 steps; a week has 28"),
])
def test_a_record_of_the_wrong_types_is_one_line_naming_it(tmp_path: Path, change, needle) -> None:
    """Every reader (reeval, relabel, sft, grpo, analyze, upload) reads records through this check, so a wrong type
    is one line naming the file, line and field, never a traceback deep in a reader."""
    record = _rec(0)
    change(record)
    path = tmp_path / "r.jsonl"
    path.write_bytes(orjson.dumps(_rec(1)) + b"\n" + orjson.dumps(record) + b"\n")
    if needle is None:
        assert len(list(read_episodes(path))) == 2
        return
    with pytest.raises(RhythmError, match=re.escape("r.jsonl:2: ") + ".*" + re.escape(needle)):
        list(read_episodes(path))


def test_a_record_read_back_from_its_line_is_the_record_written() -> None:
    """``EpisodeRecord.from_dict`` (what ``rhythm eval --resume`` keeps) gives back the same line, keys it does not
    name (a relabelled week's mark, an explored step) included."""
    from rhythm.agents.base import EpisodeSpec
    from rhythm.agents.episodes import play
    from rhythm.agents.registry import make_agent
    from rhythm.records import EpisodeRecord, dumps

    for record in play(make_agent("bayes"), [EpisodeSpec("ood", "eval", s) for s in range(2)]):
        line = orjson.loads(dumps(record))
        line["relabelled"] = {"beliefs": "bayes filter"}
        line["steps"][3]["explored"] = True
        again = EpisodeRecord.from_dict(line)
        assert dumps(again) == dumps(line) and again.steps[3].explored and again.seed == record.seed
