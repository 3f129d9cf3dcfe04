"""benchmarks/own_weeks.py: rhythm sft on the student's own weeks, the two refinements kept out of the product.
``best``: each person's best scored usable week only. ``filter``: in a week a model played, the steps drawn are
relabelled with the bayes filter's posterior for that week's own actions and observations, and only their numbers
are learned; the other steps stay as played, out of the loss; teacher weeks train as ``rhythm sft`` trains them."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.agents.filtering import filter_beliefs
from rhythm.errors import RhythmError
from rhythm.protocol import format_ending
from rhythm.train.data import PARSE_FAILURE, DataOptions, build_examples, tokenize_examples

from .helpers import load_benchmark, own_and_teacher_weeks, write_episodes

ACTS = ["SLEEP", "EXERCISE", "DEEP_WORK", "MEDITATE"]


@pytest.fixture(scope="module")
def own_weeks():
    return load_benchmark("own_weeks")


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return write_episodes(tmp_path_factory.mktemp("own") / "bayes.jsonl", range(3))


@settings(max_examples=25, deadline=None)
@given(scores=st.lists(st.lists(st.sampled_from([0.1, 0.3, 0.5, 0.7]), min_size=1, max_size=4), min_size=1, max_size=3))
def test_best_keeps_each_persons_highest_score(tmp_path_factory, own_weeks, records, scores):
    """Expert iteration's filter: of the weeks one person was played, only the highest final score is learned
    (the first of equal ones); every other week is counted as dropped, with its steps."""
    path = tmp_path_factory.mktemp("best") / "own.jsonl"
    lines, best = [], {}
    for person, person_scores in enumerate(scores):
        for i, score in enumerate(person_scores):
            record = orjson.loads(orjson.dumps(records[person]))
            record["score"]["final_score"] = score
            record["steps"][0]["response"] = format_ending([0.5, 0.5, 0.5], ACTS[i])
            lines.append(orjson.dumps(record))
            best.setdefault(record["seed"], (score, i))
            best[record["seed"]] = max(best[record["seed"]], (score, i), key=lambda b: b[0])
    path.write_bytes(b"\n".join(lines) + b"\n")
    rows, report = own_weeks.best_examples([str(path)], DataOptions(val_fraction=0.0))
    assert {row["seed"]: row["messages"][2]["content"] for row in rows["train"]} == {
        seed: format_ending([0.5, 0.5, 0.5], ACTS[i]) for seed, (_, i) in best.items()}
    dropped = sum(len(s) for s in scores) - len(scores)
    assert report.files == [str(path)] and report.episodes_read == sum(len(s) for s in scores)
    assert report.episodes_kept == len(scores) and report.dropped_episodes.get(own_weeks.NOT_BEST, 0) == dropped
    assert report.dropped_steps.get(own_weeks.NOT_BEST, 0) == 28 * dropped
    everything, _ = build_examples(str(path), DataOptions(val_fraction=0.0))
    assert len(everything["train"]) == sum(len(s) for s in scores)  # rhythm sft itself learns every week


def test_best_leaves_an_unusable_week_to_its_own_reason_and_keeps_the_best_usable(tmp_path, own_weeks, records):
    """The highest score goes nowhere when its week has a reply with no valid ACTION: the person keeps its
    best usable week, and the broken one is counted as a parse failure, not as beaten."""
    good, broken = (orjson.loads(orjson.dumps(records[0])) for _ in range(2))
    good["score"]["final_score"], broken["score"]["final_score"] = 0.4, 0.9
    broken["steps"][3]["response"], broken["steps"][3]["parse_ok"] = "no action here", False
    path = tmp_path / "own.jsonl"
    path.write_bytes(orjson.dumps(broken) + b"\n" + orjson.dumps(good) + b"\n")
    rows, report = own_weeks.best_examples([str(path)], DataOptions(val_fraction=0.0))
    assert len(rows["train"]) == 1 and report.dropped_episodes == {PARSE_FAILURE: 1}


def test_best_needs_scores(tmp_path, own_weeks, records):
    bad = orjson.loads(orjson.dumps(records[0]))
    bad["score"] = None
    path = tmp_path / "x.jsonl"
    path.write_bytes(orjson.dumps(bad) + b"\n")
    with pytest.raises(RhythmError, match=r"x\.jsonl:1: score.final_score is missing"):
        own_weeks.best_examples([str(path)], DataOptions())
    with pytest.raises(RhythmError, match=r"stdin \(-\) cannot be one of them"):
        own_weeks.best_examples(["-"], DataOptions())


@pytest.mark.parametrize("share", [0.3, 1.0])
def test_filter_drawn_steps_learn_the_filter_and_nothing_else(tmp_path, tiny_student, own_weeks, share):
    from transformers import AutoTokenizer

    path, records = own_and_teacher_weeks(tmp_path)  # seeds 0 and 1 the student's own weeks, seed 2 the teacher's
    options = DataOptions(val_fraction=0.0, strip_reasoning=True)
    rows, _ = own_weeks.filter_examples(share, seed=0)([str(path)], options)
    plain, report = build_examples([str(path)], options)
    tok = AutoTokenizer.from_pretrained(tiny_student)
    out = own_weeks.filter_weights(rows, tok, 1536, report)
    reference = tokenize_examples(plain, tok, 1536, report)
    posterior = filter_beliefs(records)
    draws = np.random.default_rng(0)  # the seed's draws, own week by own week in the data's order
    for row, example, before in zip(rows["train"], out["train"], reference["train"], strict=True):
        assert "relabelled" not in example  # the marker does not reach the trainer's dataset
        if row["seed"] == 2:  # a teacher week: untouched
            assert example["loss_weights"] == before["loss_weights"] and row["messages"] == before["messages"]
            continue
        record = next(r for r in records if r["seed"] == row["seed"])
        chosen = row["relabelled"]
        assert chosen == [k for k in range(len(record["steps"])) if draws.random() < share]
        assert 0 < len(chosen) < len(record["steps"]) if share < 1 else len(chosen) == len(record["steps"])  # both kinds
        replies = [i for i, m in enumerate(row["messages"]) if m["role"] == "assistant"]
        old = [m["content"] for m in before["messages"] if m["role"] == "assistant"]
        expected: list[str] = []
        for k, (at, step) in enumerate(zip(replies, record["steps"], strict=True)):
            if k in chosen:
                stated = [round(float(x), 2) for x in posterior[records.index(record)][k]]
                assert row["messages"][at]["content"] == format_ending(stated, step["action"])
                expected += [f"{x:.2f}" for x in stated]
            else:  # as the student played it
                assert row["messages"][at]["content"] == old[k]
        learned = [i for i, w in enumerate(example["loss_weights"]) if w > 0]
        assert [tok.decode(example["input_ids"][i]) for i in learned] == expected
        assert sum(label != -100 for label in example["labels"]) == 3 * len(chosen)


@pytest.mark.slow
def test_filter_trains_the_filters_numbers_through_the_trainer(tmp_path, tiny_student, own_weeks):
    """Through the trainer's own dataloader, a week a model played carries the bayes filter's beliefs for its own
    actions and observations and is learned on those numbers alone (3 tokens a reply); a teacher week keeps its
    replies and their whole loss; the run trains."""
    from rhythm.train.sft import SFTRunConfig, build_trainer, run_sft

    path, records = own_and_teacher_weeks(tmp_path)
    for record in records[:2]:  # the "model" states the prior all week: what it says must not reach the labels
        record["steps"] = [{**s, "belief": [0.5] * 3, "response": format_ending([0.5] * 3, s["action"])} for s in record["steps"]]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    cfg = SFTRunConfig(model_name_or_path="rhythm-tiny", max_steps=2, learning_rate=1e-3, warmup_ratio=0.0,
                       per_device_train_batch_size=3, gradient_accumulation_steps=4, val_fraction=0.0, bf16=False, gradient_checkpointing=False,
                       strip_reasoning=True, max_length=1536, use_peft=False, data=str(path),
                       output_dir=str(tmp_path / "out"))
    hooks = dict(examples=own_weeks.filter_examples(), tokenize=own_weeks.filter_weights)
    run = build_trainer(cfg, quiet=True, **hooks)
    assert "relabelled" not in run.trainer.train_dataset.column_names
    tokenizer = run.trainer.processing_class
    posterior = filter_beliefs(records)
    for example in run.trainer.train_dataset:
        learned = [tokenizer.decode(t) for t, w in zip(example["input_ids"], example["loss_weights"], strict=True) if w > 0]
        if example["seed"] == 2:
            assert len(learned) > 3 * 28 and "ACTION:" in "".join(learned)  # the teacher's replies, whole
            continue
        assert learned == [f"{x:.2f}" for x in np.round(posterior[example["seed"]], 2).reshape(-1)]
        assert learned.count("0.50") < len(learned) / 2
    assert run_sft(cfg, quiet=True, **hooks)["global_step"] == 2


def test_filter_refuses_data_without_a_models_weeks_and_replies_with_reasoning(tmp_path, own_weeks):
    data = tmp_path / "teacher.jsonl"
    write_episodes(data, range(2))
    with pytest.raises(RhythmError, match="rewrites whole replies"):
        own_weeks.filter_examples()([str(data)], DataOptions(strip_reasoning=False))
    with pytest.raises(RhythmError, match=r"no week in the data was played by a model"):
        own_weeks.filter_examples()([str(data)], DataOptions(strip_reasoning=True))


def test_the_configs_load_and_bad_input_exits_2(capsys, own_weeks):
    from rhythm.config import load_config
    from rhythm.train.sft import SFTRunConfig

    for variant in ("best", "filter"):
        cfg = load_config(SFTRunConfig, f"benchmarks/configs/own-weeks-{variant}.yaml", [])
        assert cfg.output_dir == f"runs/own-weeks-{variant}" and cfg.strip_reasoning
    with pytest.raises(SystemExit) as exc:
        own_weeks.main(["filter", "--share", "0", "--", "--config", "benchmarks/configs/own-weeks-filter.yaml"])
    assert exc.value.code == 2 and "--share must be in (0, 1]" in capsys.readouterr().err
    assert own_weeks.main(["best", "--", "--config", "benchmarks/configs/own-weeks-best.yaml", "--set",
                           "data=missing.jsonl"]) == 2
    assert "file not found: missing.jsonl" in capsys.readouterr().err


def test_keep_actions_adds_each_replys_action_name_as_played(tmp_path, tiny_student, own_weeks):
    """``--keep-actions``: a relabelled week learns its filter numbers and, at every step, the action it played
    (one anchor token a reply here); a teacher week is untouched."""
    from transformers import AutoTokenizer

    path, records = own_and_teacher_weeks(tmp_path)
    options = DataOptions(val_fraction=0.0, strip_reasoning=True)
    rows, report = own_weeks.filter_examples(0.5, seed=1)([str(path)], options)
    tok = AutoTokenizer.from_pretrained(tiny_student)
    plain = own_weeks.filter_weights(rows, tok, 1536, report)
    rows, report = own_weeks.filter_examples(0.5, seed=1)([str(path)], options)
    anchored = own_weeks.filter_weights(rows, tok, 1536, report, keep_actions=True)
    for before, after in zip(plain["train"], anchored["train"], strict=True):
        record = next(r for r in records if r["seed"] == after["seed"])
        added = [tok.decode(t).strip() for t, w, v in zip(after["input_ids"], after["loss_weights"], before["loss_weights"],
                                                          strict=True) if w > 0 and v == 0]
        if after["seed"] == 2:
            assert added == [] and after["loss_weights"] == before["loss_weights"]
        else:
            assert added == [s["action"] for s in record["steps"]]
