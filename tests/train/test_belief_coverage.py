"""benchmarks/belief_coverage.py: the loss stays on the replies' belief numbers alone, one a week or every one."""

from __future__ import annotations

from rhythm.train.data import DataOptions, build_examples, tokenize_examples

from .helpers import load_benchmark, own_and_teacher_weeks


def test_one_number_a_week_or_every_number(tmp_path, tiny_student):
    from transformers import AutoTokenizer

    probe = load_benchmark("belief_coverage")
    path, records = own_and_teacher_weeks(tmp_path)
    rows, report = build_examples([str(path)], DataOptions(val_fraction=0.0, strip_reasoning=True))
    tok = AutoTokenizer.from_pretrained(tiny_student)
    plain = tokenize_examples(rows, tok, 1536, report)["train"]
    one = probe.belief_numbers_only("one")(rows, tok, 1536, report)["train"]
    every = probe.belief_numbers_only("all")(rows, tok, 1536, report)["train"]
    again = probe.belief_numbers_only("one")(rows, tok, 1536, report)["train"]
    for base, a, b, c, record in zip(plain, one, every, again, records, strict=True):
        kept = [i for i, w in enumerate(b["loss_weights"]) if w > 0]
        stated = [f"{x:.2f}" for s in record["steps"] for x in s["belief"]]
        assert [tok.decode(b["input_ids"][i]) for i in kept] == stated  # every belief number, nothing else
        assert all(base["loss_weights"][i] == 1.0 for i in kept)  # each was in the shipped loss
        single = [i for i, w in enumerate(a["loss_weights"]) if w > 0]
        assert len(single) == 1 and single[0] in kept
        assert [i for i, label in enumerate(a["labels"]) if label != -100] == single
        assert a["loss_weights"] == c["loss_weights"]  # drawn by the week: the same draw every time
