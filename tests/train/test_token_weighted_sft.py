"""benchmarks/token_weighted_sft.py: ``rhythm sft`` with every token of a week labelled and weighted by token (the
FW rows of docs/student.md). Its patch must reach the trainer: replacing the module's ``tokenize_examples`` did not,
since ``build_trainer`` bound its default when it was defined."""

from __future__ import annotations

import pytest

from rhythm.train import sft
from rhythm.train.data import DataReport

from .helpers import load_benchmark


class Built(Exception):
    pass


def test_the_patch_reaches_the_trainer_and_weights_every_token(monkeypatch: pytest.MonkeyPatch, tiny_student) -> None:
    from transformers import AutoTokenizer

    bench = load_benchmark("token_weighted_sft")
    monkeypatch.setattr(sft, "run_sft", sft.run_sft)  # undone after the test: patch() replaces it
    seen = {}

    def build_trainer(cfg, **hooks):
        seen.update(hooks)
        raise Built

    monkeypatch.setattr(sft, "build_trainer", build_trainer)
    bench.patch(0.1, True)
    with pytest.raises(Built):
        sft.run_sft(sft.SFTRunConfig(output_dir="unused"))
    tokenizer = AutoTokenizer.from_pretrained(tiny_student)
    rows = {"train": [{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "obs"},
                                    {"role": "assistant", "content": "BELIEF: S=0.30 M=0.70 W=0.55\nACTION: NAP"}],
                       "episode": "e"}]}
    (week,) = seen["tokenize"](rows, tokenizer, None, DataReport())["train"]
    assert week["labels"] == week["input_ids"] and set(week["loss_weights"]) == {0.1, 1.0}
