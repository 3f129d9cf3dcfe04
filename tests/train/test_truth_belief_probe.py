"""benchmarks/truth_belief_probe.py: a week a model played learns only its last belief, set to the person's true
profile; teacher weeks train as ``rhythm sft`` trains them."""

from __future__ import annotations

import numpy as np

from rhythm.grader import true_belief
from rhythm.protocol import format_ending, parse_reply
from rhythm.train.data import DataOptions, build_examples, tokenize_examples

from .helpers import load_benchmark, own_and_teacher_weeks


def test_only_the_last_belief_is_learned_and_it_is_the_truth(tmp_path, tiny_student):
    from transformers import AutoTokenizer

    probe = load_benchmark("truth_belief_probe")
    path, records = own_and_teacher_weeks(tmp_path)  # seeds 0 and 1 the student's own weeks, seed 2 the teacher's
    options = DataOptions(val_fraction=0.0, strip_reasoning=True)
    rows, _ = probe.truth_examples([str(path)], options)
    plain, report = build_examples([str(path)], options)
    tok = AutoTokenizer.from_pretrained(tiny_student)
    out = probe.truth_weights(rows, tok, 1536, report)
    reference = tokenize_examples(plain, tok, 1536, report)
    for row, example, before in zip(rows["train"], out["train"], reference["train"], strict=True):
        record = next(r for r in records if r["seed"] == row["seed"])
        last = record["steps"][-1]
        if row["seed"] == 2:  # a teacher week: untouched
            assert example["loss_weights"] == before["loss_weights"] and row["messages"] == before["messages"]
            continue
        truth = np.round(true_belief("in-dist", "train", [row["seed"]])[0], 2)
        assert row["messages"][-1]["content"] == format_ending([float(x) for x in truth], last["action"])
        assert row["messages"][:-1] == before["messages"][:-1]  # its earlier replies stay as it played them
        learned = [i for i, w in enumerate(example["loss_weights"]) if w > 0]
        assert [tok.decode(example["input_ids"][i]) for i in learned] == [f"{x:.2f}" for x in truth]
        assert [example["labels"][i] for i in learned] == [example["input_ids"][i] for i in learned]
        assert sum(label != -100 for label in example["labels"]) == 3
        assert parse_reply(row["messages"][-1]["content"]).action_name == last["action"]
