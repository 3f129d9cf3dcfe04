"""benchmarks/world_model_probe.py: a week a model played learns its observations at ``own_obs`` and its replies at
``own_reply``; teacher weeks train as ``rhythm sft`` trains them."""

from __future__ import annotations

import pytest

from rhythm.train.data import DataOptions, build_examples, tokenize_examples

from .helpers import load_benchmark, own_and_teacher_weeks


@pytest.mark.parametrize("own_reply", [0.0, 0.5])
def test_own_weeks_learn_their_observations_and_teacher_weeks_are_untouched(tmp_path, tiny_student, own_reply):
    from transformers import AutoTokenizer

    probe = load_benchmark("world_model_probe")
    path, records = own_and_teacher_weeks(tmp_path)  # seeds 0 and 1 the student's own weeks, seed 2 the teacher's
    rows, report = build_examples([str(path)], DataOptions(val_fraction=0.0, strip_reasoning=True))
    tok = AutoTokenizer.from_pretrained(tiny_student)
    out = probe.world_model_weights(0.3, own_reply)(rows, tok, 1536, report, observation_loss=0.1, echo_loss=1.0)
    plain = tokenize_examples(rows, tok, 1536, report, observation_loss=0.1, echo_loss=1.0)  # as rhythm sft
    replies = tokenize_examples(rows, tok, 1536, report)  # assistant-only: weight 1 exactly on the replies
    assert report.train_examples == 3 and len(out["train"]) == 3
    for example in out["train"]:
        i = next(k for k, e in enumerate(plain["train"]) if e["seed"] == example["seed"])
        reference, reply_mask = plain["train"][i], [w == 1.0 for w in replies["train"][i]["loss_weights"]]
        assert example["input_ids"] == reference["input_ids"]
        if example["seed"] == 2:  # a teacher week: as rhythm sft weighs it
            assert example["loss_weights"] == reference["loss_weights"]
            continue
        expected = [own_reply if reply else 0.3 for reply in reply_mask]
        assert example["loss_weights"] == expected
        assert example["labels"] == [t if w > 0 else -100 for t, w in zip(example["input_ids"], expected, strict=True)]
