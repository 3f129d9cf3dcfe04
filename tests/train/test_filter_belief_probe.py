"""benchmarks/filter_belief_probe.py: in a week a model played, the steps drawn are relabelled with the bayes
filter's posterior for that week's own actions and observations, and only their numbers are learned; the other
steps stay as played, out of the loss; teacher weeks train as ``rhythm sft`` trains them."""

from __future__ import annotations

import pytest

from rhythm.agents.filtering import filter_beliefs
from rhythm.protocol import format_ending
from rhythm.train.data import DataOptions, build_examples, tokenize_examples

from .helpers import load_benchmark, own_and_teacher_weeks


@pytest.mark.parametrize("share", [0.3, 1.0])
def test_drawn_steps_learn_the_filter_and_nothing_else(tmp_path, tiny_student, share):
    from transformers import AutoTokenizer

    probe = load_benchmark("filter_belief_probe")
    path, records = own_and_teacher_weeks(tmp_path)  # seeds 0 and 1 the student's own weeks, seed 2 the teacher's
    options = DataOptions(val_fraction=0.0, strip_reasoning=True)
    rows, _ = probe.filter_examples(share, seed=0)([str(path)], options)
    plain, report = build_examples([str(path)], options)
    tok = AutoTokenizer.from_pretrained(tiny_student)
    out = probe.filter_weights(rows, tok, 1536, report)
    reference = tokenize_examples(plain, tok, 1536, report)
    posterior = filter_beliefs(records)
    for row, example, before in zip(rows["train"], out["train"], reference["train"], strict=True):
        assert "relabelled" not in example  # the marker does not reach the trainer's dataset
        if row["seed"] == 2:  # a teacher week: untouched
            assert example["loss_weights"] == before["loss_weights"] and row["messages"] == before["messages"]
            continue
        record = next(r for r in records if r["seed"] == row["seed"])
        chosen = row["relabelled"]
        if share == 1.0:
            assert chosen == list(range(len(record["steps"])))
        replies = [i for i, m in enumerate(row["messages"]) if m["role"] == "assistant"]
        old = [m["content"] for m in before["messages"] if m["role"] == "assistant"]
        expected: list[str] = []
        for k, (at, step) in enumerate(zip(replies, record["steps"], strict=True)):
            if k in chosen:
                stated = [round(float(x), 2) for x in posterior[records.index(record), k]]
                assert row["messages"][at]["content"] == format_ending(stated, step["action"])
                expected += [f"{x:.2f}" for x in stated]
            else:  # as the student played it
                assert row["messages"][at]["content"] == old[k]
        learned = [i for i, w in enumerate(example["loss_weights"]) if w > 0]
        assert [tok.decode(example["input_ids"][i]) for i in learned] == expected
        assert sum(label != -100 for label in example["labels"]) == 3 * len(chosen)


def test_share_one_builds_what_rhythm_sfts_filter_beliefs_builds(tmp_path, tiny_student):
    """At ``--share 1`` the probe and ``filter_beliefs`` (rows FB3-FB6 and the shipped config) give the same
    tokens, labels and weights, week for week."""
    from transformers import AutoTokenizer

    probe = load_benchmark("filter_belief_probe")
    path, _ = own_and_teacher_weeks(tmp_path)
    tok = AutoTokenizer.from_pretrained(tiny_student)
    rows, report = probe.filter_examples(1.0, seed=0)([str(path)], DataOptions(val_fraction=0.0, strip_reasoning=True))
    mine = probe.filter_weights(rows, tok, 1536, report)
    plain, report = build_examples([str(path)], DataOptions(val_fraction=0.0, strip_reasoning=True, filter_beliefs=True))
    product = tokenize_examples(plain, tok, 1536, report)
    keys = ("input_ids", "labels", "loss_weights")
    assert [[e[k] for k in keys] for e in mine["train"]] == [[e[k] for k in keys] for e in product["train"]]


def test_share_out_of_range_is_refused(capsys):
    probe = load_benchmark("filter_belief_probe")
    with pytest.raises(SystemExit) as exc:
        probe.main(["--share", "0", "--", "--config", "configs/sft-tiny-expert.yaml"])
    assert exc.value.code == 2
    assert "--share" in capsys.readouterr().err
