"""Episodes JSONL -> chat examples: one per step, split by episode, filtered and reported."""

from __future__ import annotations

import io
import sys

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.errors import RhythmError
from rhythm.protocol import SYSTEM_PROMPT, format_ending, parse_reply
from rhythm.train.data import BELOW_MIN_SCORE, PARSE_FAILURE, DataOptions, build_examples, split_episodes

from .helpers import write_episodes


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    """Bayes (seeds 0-7) and heuristic (seeds 4-9) on in-dist: seeds 4-7 are the same people twice."""
    d = tmp_path_factory.mktemp("data")
    bayes = d / "bayes.jsonl"
    heur = d / "heuristic.jsonl"
    return bayes, heur, write_episodes(bayes, range(8)), write_episodes(heur, range(4, 10), agent="heuristic")


def test_one_example_per_step_with_protocol_messages(episodes):
    bayes, _, records, _ = episodes
    rows, report = build_examples(str(bayes), DataOptions(val_fraction=0.0))
    assert report.episodes_read == 8 and report.steps_read == 8 * 28
    assert len(rows["train"]) == 8 * 28 and rows["validation"] == []
    first = rows["train"][0]
    rec = next(r for r in records if f"{r['condition']}/{r['split']}/{r['seed']}" == first["episode"])
    step = next(s for s in rec["steps"] if s["t"] == first["t"])
    assert first["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": step["observation"]},
        {"role": "assistant", "content": step["response"]},
    ]
    assert "Recent anomalies" in rows["train"][40]["messages"][1]["content"]  # history is in the observation


def test_split_is_by_episode_and_deterministic(episodes):
    bayes, heur, _, _ = episodes
    opts = DataOptions(val_fraction=0.3, seed=7)
    rows, report = build_examples([str(bayes), str(heur)], opts)
    train_eps = {r["episode"] for r in rows["train"]}
    val_eps = {r["episode"] for r in rows["validation"]}
    assert train_eps and val_eps and not train_eps & val_eps
    # seeds 4-7 were played by two teachers: the person, not the file, decides the side
    assert len(train_eps | val_eps) == 10
    for ep in val_eps:
        assert sum(r["episode"] == ep for r in rows["validation"]) in (28, 56)
    assert report.validation_episodes == len(val_eps) == 3
    again, _ = build_examples([str(bayes), str(heur)], opts)
    assert [(r["episode"], r["t"], r["agent"]) for r in again["validation"]] == [
        (r["episode"], r["t"], r["agent"]) for r in rows["validation"]
    ]


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 60), frac=st.floats(0.0, 0.95), seed=st.integers(0, 2**31))
def test_split_episodes_property(n, frac, seed):
    keys = [f"in-dist/train/{i}" for i in range(n)]
    train, val = split_episodes(keys + keys[: n // 2], frac, seed)  # duplicates collapse
    assert train | val == set(keys) and not train & val
    assert train, "at least one episode always trains"
    if frac > 0 and n >= 2:
        assert val
    assert (train, val) == split_episodes(list(reversed(keys)), frac, seed)  # order of reading does not matter


def test_min_score_keeps_better_episodes_and_reports(episodes):
    bayes, _, records, _ = episodes
    scores = sorted(r["score"]["final_score"] for r in records)
    threshold = scores[3]
    rows, report = build_examples(str(bayes), DataOptions(val_fraction=0.0, min_score=threshold))
    kept = {int(e.split("/")[-1]) for e in {r["episode"] for r in rows["train"]}}
    assert kept == {r["seed"] for r in records if r["score"]["final_score"] >= threshold}
    assert report.dropped_episodes == {BELOW_MIN_SCORE: 3}
    assert report.dropped_steps == {BELOW_MIN_SCORE: 3 * 28}
    assert "dropped 84 steps" in report.summary_line()


def test_strip_reasoning_keeps_belief_and_action_lines(episodes):
    bayes, _, records, _ = episodes
    rows, _ = build_examples(str(bayes), DataOptions(val_fraction=0.0, strip_reasoning=True))
    by_key = {(f"{r['condition']}/{r['split']}/{r['seed']}", s["t"]): s["response"] for r in records for s in r["steps"]}
    for row in rows["train"]:
        original = by_key[(row["episode"], row["t"])]
        parsed = parse_reply(original)
        reply = row["messages"][2]["content"]
        assert reply == format_ending(parsed.belief, parsed.action)
        assert reply.splitlines()[0].startswith("BELIEF: S=") and reply.splitlines()[-1].startswith("ACTION: ")
        assert len(reply) < len(original)


def test_parse_failures_dropped_and_counted(tmp_path, episodes):
    _, _, records, _ = episodes
    rec = orjson.loads(orjson.dumps(records[0]))
    rec["steps"][3]["response"] = "I would rather not say."
    rec["steps"][3]["parse_ok"] = False
    rec["steps"][5]["response"] = ""
    path = tmp_path / "x.jsonl"
    path.write_bytes(orjson.dumps(rec) + b"\n")
    rows, report = build_examples(str(path), DataOptions(val_fraction=0.0))
    assert len(rows["train"]) == 26
    assert report.dropped_steps == {PARSE_FAILURE: 1, "empty reply": 1}
    rows, report = build_examples(str(path), DataOptions(val_fraction=0.0, drop_parse_failures=False))
    assert len(rows["train"]) == 27


def test_reads_stdin(monkeypatch, episodes):
    bayes, _, _, _ = episodes
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(bayes.read_bytes())))
    rows, report = build_examples("-", DataOptions(val_fraction=0.25))
    assert report.files == ["-"] and report.episodes_read == 8 and len(rows["validation"]) == 2 * 28


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r["steps"][2].pop("observation"), "x.jsonl:2: step 2 lacks observation"),
        (lambda r: r.pop("steps"), "x.jsonl:2: episode record lacks steps"),
        (lambda r: r["steps"][1].__setitem__("observation", 3), "x.jsonl:2: step 1 has no observation text"),
        (lambda r: r["score"].pop("final_score"), "x.jsonl:2: score.final_score is missing"),
    ],
)
def test_bad_record_names_file_and_line(tmp_path, episodes, mutate, message):
    _, _, records, _ = episodes
    bad = orjson.loads(orjson.dumps(records[1]))
    mutate(bad)
    path = tmp_path / "x.jsonl"
    path.write_bytes(orjson.dumps(records[0]) + b"\n" + orjson.dumps(bad) + b"\n")
    with pytest.raises(RhythmError) as err:
        build_examples(str(path), DataOptions(min_score=0.0))
    assert message in str(err.value)


def test_broken_json_line(tmp_path, episodes):
    _, _, records, _ = episodes
    path = tmp_path / "x.jsonl"
    path.write_bytes(orjson.dumps(records[0]) + b"\n{\"schema\": 1, \n")
    with pytest.raises(RhythmError, match=r"x\.jsonl:2: not valid JSON"):
        build_examples(str(path))


def test_nothing_left_is_an_error(tmp_path, episodes):
    bayes, _, _, _ = episodes
    with pytest.raises(RhythmError, match="no training examples left"):
        build_examples(str(bayes), DataOptions(min_score=1.01))
