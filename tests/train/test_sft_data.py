"""Episodes JSONL -> chat examples: one whole week per example (protocol v2), split by person,
filtered and reported."""

from __future__ import annotations

import io
import re
import sys

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.errors import RhythmError
from rhythm.protocol import SYSTEM_PROMPT, conversation, format_ending, parse_reply
from rhythm.train.data import (
    BELOW_MIN_SCORE,
    EMPTY_REPLY,
    PARSE_FAILURE,
    DataOptions,
    build_examples,
    split_episodes,
)

from .helpers import masked_runs, write_episodes, write_v1_episodes


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    """Bayes (seeds 0-7) and heuristic (seeds 4-9) on in-dist: seeds 4-7 are the same people twice."""
    d = tmp_path_factory.mktemp("data")
    bayes = d / "bayes.jsonl"
    heur = d / "heuristic.jsonl"
    return bayes, heur, write_episodes(bayes, range(8)), write_episodes(heur, range(4, 10), agent="heuristic")


def test_one_example_per_episode_is_the_whole_week_as_one_conversation(episodes):
    bayes, _, records, _ = episodes
    rows, report = build_examples(str(bayes), DataOptions(val_fraction=0.0))
    assert report.episodes_read == 8 and report.steps_read == 8 * 28
    assert len(rows["train"]) == 8 and rows["validation"] == []
    by_key = {f"{r['condition']}/{r['split']}/{r['seed']}": r for r in records}
    for row in rows["train"]:
        rec = by_key[row["episode"]]
        messages = row["messages"]
        assert messages == conversation([s["observation"] for s in rec["steps"]], [s["response"] for s in rec["steps"]])
        assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
        assert [m["role"] for m in messages[1:]] == ["user", "assistant"] * 28
        assert "t" not in row and row["seed"] == rec["seed"] and row["agent"] == "bayes"
        assert not any("Recent anomalies" in m["content"] for m in messages)  # the history is the conversation


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
        assert sum(r["episode"] == ep for r in rows["validation"]) in (1, 2)  # one week per teacher
    assert report.validation_episodes == len(val_eps) == 3
    assert report.train_examples + report.validation_examples == 8 + 6
    again, _ = build_examples([str(bayes), str(heur)], opts)
    assert [(r["episode"], r["agent"]) for r in again["validation"]] == [(r["episode"], r["agent"]) for r in rows["validation"]]


def test_a_filter_leaves_the_validation_people_as_they_were_less_those_it_drops(episodes):
    """The split is drawn over every person read, before min_score: runs that differ only in a filter validate on the
    same people (the audit: min_score 0.6 moved two of three validation people into train and drew two others)."""
    bayes, heur, records, heur_records = episodes
    opts = DataOptions(val_fraction=0.3, seed=7)
    rows, _ = build_examples([str(bayes), str(heur)], opts)
    scores = sorted(r["score"]["final_score"] for r in records + heur_records)
    cut = scores[len(scores) // 2]
    kept, report = build_examples([str(bayes), str(heur)], DataOptions(val_fraction=0.3, seed=7, min_score=cut))
    assert report.dropped_episodes  # the filter left some weeks out
    before = {r["episode"] for r in rows["validation"]}
    after = {r["episode"] for r in kept["validation"]}
    assert after <= before and not {r["episode"] for r in kept["train"]} & before


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
    assert len(rows["train"]) == 5
    assert report.dropped_episodes == {BELOW_MIN_SCORE: 3}
    assert report.dropped_steps == {BELOW_MIN_SCORE: 3 * 28}
    assert "dropped 3 episodes (3 episode final_score below min_score)" in report.summary_line()


def test_a_file_named_twice_is_read_twice_and_the_report_says_so(episodes):
    bayes, _, records, _ = episodes
    rows, report = build_examples([str(bayes), str(bayes)], DataOptions(val_fraction=0.0))
    assert len(rows["train"]) == 2 * len(records)  # each week twice: the DAgger stage's copies weigh double
    assert f"{bayes} read 2 times (its weeks weigh 2x)" in report.summary_line()
    _, once = build_examples(str(bayes), DataOptions(val_fraction=0.0))
    assert "times" not in once.summary_line()


def test_strip_reasoning_keeps_belief_and_action_lines(episodes):
    bayes, _, records, _ = episodes
    rows, _ = build_examples(str(bayes), DataOptions(val_fraction=0.0, strip_reasoning=True))
    by_key = {f"{r['condition']}/{r['split']}/{r['seed']}": r for r in records}
    for row in rows["train"]:
        steps = by_key[row["episode"]]["steps"]
        replies = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        assert len(replies) == 28
        assert [m["content"] for m in row["messages"] if m["role"] == "user"] == [s["observation"] for s in steps]
        for reply, step in zip(replies, steps):
            parsed = parse_reply(step["response"])
            assert reply == format_ending(parsed.belief, parsed.action)
            assert reply.splitlines()[0].startswith("BELIEF: S=") and reply.splitlines()[-1].startswith("ACTION: ")
            assert len(reply) < len(step["response"])


def test_parse_failures_drop_the_whole_week_and_are_counted(tmp_path, episodes):
    """One turn cannot be cut out of a conversation: a bad reply leaves its week out, counted."""
    _, _, records, _ = episodes
    bad = orjson.loads(orjson.dumps(records[0]))
    bad["steps"][3]["response"] = "I would rather not say."
    bad["steps"][3]["parse_ok"] = False
    empty = orjson.loads(orjson.dumps(records[1]))
    empty["steps"][5]["response"] = ""
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in (bad, empty, records[2])))
    rows, report = build_examples(str(path), DataOptions(val_fraction=0.0))
    assert [r["seed"] for r in rows["train"]] == [records[2]["seed"]]
    assert report.dropped_episodes == {PARSE_FAILURE: 1, EMPTY_REPLY: 1}
    assert report.dropped_steps == {PARSE_FAILURE: 28, EMPTY_REPLY: 28}
    rows, report = build_examples(str(path), DataOptions(val_fraction=0.0, drop_parse_failures=False))
    assert sorted(r["seed"] for r in rows["train"]) == sorted([records[0]["seed"], records[2]["seed"]])
    kept = next(r for r in rows["train"] if r["seed"] == records[0]["seed"])
    assert kept["messages"][2 * 3 + 2]["content"] == "I would rather not say."  # kept as written, in its place


def test_strip_reasoning_drops_a_week_whose_reply_has_no_belief_line(tmp_path, episodes):
    """The stripped reply would be its ACTION line alone, teaching the student to leave its belief out."""
    from rhythm.train.data import NO_BELIEF

    _, _, records, _ = episodes
    bad = orjson.loads(orjson.dumps(records[0]))
    bad["steps"][3]["response"] = f"Hard to tell yet.\nBELIEF: unsure\nACTION: {bad['steps'][3]['action']}"
    assert parse_reply(bad["steps"][3]["response"]).belief is None and parse_reply(bad["steps"][3]["response"]).ok
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in (bad, records[1])))
    rows, report = build_examples(str(path), DataOptions(val_fraction=0.0, strip_reasoning=True))
    assert [r["seed"] for r in rows["train"]] == [records[1]["seed"]]
    assert report.dropped_episodes == {NO_BELIEF: 1} and report.dropped_steps == {NO_BELIEF: 28}
    rows, report = build_examples(str(path), DataOptions(val_fraction=0.0))  # as written: the teacher's own text
    assert len(rows["train"]) == 2 and report.dropped_episodes == {}


def test_eval_split_weeks_are_refused_as_training_data(tmp_path, episodes):
    """Eval's people stay unseen by construction: a week of one in the data names its line, before any training."""
    _, _, records, _ = episodes
    leaked = orjson.loads(orjson.dumps(records[1]))
    leaked["split"] = "eval"
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in (records[0], leaked)))
    with pytest.raises(RhythmError, match=r"x\.jsonl:2: a week of an eval-split person \(in-dist/eval/1\); training on it"):
        build_examples(str(path), DataOptions())


def test_reads_stdin(monkeypatch, episodes):
    bayes, _, _, _ = episodes
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(bayes.read_bytes())))
    rows, report = build_examples("-", DataOptions(val_fraction=0.25))
    assert report.files == ["-"] and report.episodes_read == 8 and len(rows["validation"]) == 2


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


@pytest.mark.parametrize("options", [DataOptions(), DataOptions(min_score=1.01), DataOptions(strip_reasoning=True)])
def test_a_v1_file_is_refused_with_one_line_before_any_filter(tmp_path, episodes, options):
    """Old files are never silently mixed in or thinned out by a filter: the first v1 record stops the read."""
    _, _, records, _ = episodes
    path = tmp_path / "old.jsonl"
    path.write_bytes(orjson.dumps(records[0]) + b"\n")
    write_v1_episodes(tmp_path / "v1.jsonl", records[1:3])
    path.write_bytes(path.read_bytes() + (tmp_path / "v1.jsonl").read_bytes())
    with pytest.raises(RhythmError) as err:
        build_examples(str(path), options)
    msg = str(err.value)
    assert msg.startswith(f"{path}:2: record is text protocol v1, this rhythm speaks v2") and "\n" not in msg


@pytest.mark.parametrize("strip", [True, False])
def test_loss_mask_covers_every_assistant_turn_and_nothing_else(episodes, tiny_student, strip):
    """A whole-week example through the tiny student's chat template: the tokens marked for loss are
    exactly the 28 replies, each with its <|im_end|>, and no system, user or scaffold token."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_student)
    rows, _ = build_examples(str(episodes[0]), DataOptions(val_fraction=0.0, strip_reasoning=strip))
    messages = rows["train"][0]["messages"]
    out = tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    runs = masked_runs(ids, mask)
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    assert len(runs) == len(replies) == 28
    assert [tok.decode(r) for r in runs] == [reply + "<|im_end|>" for reply in replies]
    unmasked = tok.decode([i for i, m in zip(ids, mask, strict=True) if not m])
    for m in messages:
        if m["role"] != "assistant":
            assert m["content"] in unmasked
    assert unmasked.count("<|im_start|>assistant\n") == 28  # the turn header is context, not target


def test_explored_steps_are_refused_with_the_probe_that_trains_them(tmp_path, episodes):
    """Weeks with ``explored`` steps (benchmarks/dagger_probe.py --actions student) are the probe's to train."""
    path = tmp_path / "explored.jsonl"
    record = orjson.loads(episodes[0].read_bytes().splitlines()[0])
    record["steps"][3]["explored"] = True
    path.write_bytes(orjson.dumps(record) + b"\n")
    with pytest.raises(RhythmError, match=re.escape(f"{path}:1: explored steps train with python benchmarks/dagger_probe.py sft")):
        build_examples(str(path), DataOptions(val_fraction=0.0))
    rows, _ = build_examples(str(path), DataOptions(val_fraction=0.0, first_turns=3))  # the opening has none
    assert len(rows["train"]) == 1


@pytest.mark.parametrize("n", [1, 3, 8])
def test_first_turns_keeps_each_weeks_opening_and_its_replies(episodes, n):
    bayes, _, records, _ = episodes
    whole, _ = build_examples(str(bayes), DataOptions(val_fraction=0.0))
    rows, report = build_examples(str(bayes), DataOptions(val_fraction=0.0, first_turns=n))
    assert report.steps_read == 8 * 28 and len(rows["train"]) == 8  # every week still read and kept
    assert report.steps_past_first_turns == 8 * (28 - n) and report.dropped_steps == {}  # read = trained + cut
    assert f"{8 * (28 - n)} steps past first_turns left out" in report.summary_line()
    for row, full in zip(rows["train"], whole["train"]):
        assert row["episode"] == full["episode"]
        assert [m["role"] for m in row["messages"][1:]] == ["user", "assistant"] * n
        assert row["messages"] == full["messages"][: 1 + 2 * n]  # exactly the whole week's first n turns


def test_first_turns_longer_than_a_week_is_the_whole_week(episodes):
    bayes = episodes[0]
    whole, _ = build_examples(str(bayes), DataOptions(val_fraction=0.0))
    rows, _ = build_examples(str(bayes), DataOptions(val_fraction=0.0, first_turns=100))
    assert rows == whole


def test_examples_come_tokenized_exactly_as_trls_own_preparation(episodes, tiny_student, tmp_path):
    """tokenize_examples renders each week once, in batches; TRL then skips its own preparation, so the ids and
    labels must be what SFTTrainer would have made of the untokenized week."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from rhythm.train.common import checkpointing_name
    from rhythm.train.data import DataReport, tokenize_examples

    tok = AutoTokenizer.from_pretrained(tiny_student)
    rows, _ = build_examples(str(episodes[0]), DataOptions(val_fraction=0.0, strip_reasoning=True))
    ours = tokenize_examples(rows, tok, None, DataReport(), chunk=3)
    args = SFTConfig(output_dir=str(tmp_path), max_length=None, assistant_only_loss=True, report_to="none", use_cpu=True,
                     **{checkpointing_name(): False})
    trl_made = SFTTrainer(model=str(tiny_student), args=args, train_dataset=Dataset.from_list(rows["train"]),
                          processing_class=tok).train_dataset
    by_episode = {e["episode"]: e for e in ours["train"]}
    assert len(trl_made) == len(by_episode) == 8
    for e in trl_made:
        assert (e["input_ids"], e["labels"]) == (by_episode[e["episode"]]["input_ids"], by_episode[e["episode"]]["labels"])


def test_weeks_over_max_length_are_dropped_and_counted_never_cut(episodes, tiny_student):
    from transformers import AutoTokenizer

    from rhythm.train.data import TOO_LONG, DataReport, tokenize_examples

    tok = AutoTokenizer.from_pretrained(tiny_student)
    rows, _ = build_examples(str(episodes[0]), DataOptions(val_fraction=0.25))
    report = DataReport()
    whole = tokenize_examples(rows, tok, None, report)
    lengths = sorted(len(e["input_ids"]) for split in whole.values() for e in split)
    assert report.max_tokens == lengths[-1] and TOO_LONG not in report.dropped_episodes
    cut = lengths[len(lengths) // 2]
    report = DataReport()
    kept = tokenize_examples(rows, tok, cut, report)
    assert all(len(e["input_ids"]) <= cut for split in kept.values() for e in split)  # kept weeks are whole
    n_kept = sum(len(v) for v in kept.values())
    assert report.dropped_episodes[TOO_LONG] == len(lengths) - n_kept == sum(n > cut for n in lengths)
    assert report.dropped_steps[TOO_LONG] == 28 * report.dropped_episodes[TOO_LONG]  # whole weeks, each step counted
    assert report.episodes_kept == len({e["episode"] for split in kept.values() for e in split})
    assert report.train_examples == len(kept["train"]) and report.max_tokens == lengths[-1]
    with pytest.raises(RhythmError, match="every training week is longer than max_length=10 tokens"):
        tokenize_examples(rows, tok, 10, DataReport())
