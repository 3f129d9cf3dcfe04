"""The teacher-forced belief probe: shapes, the teacher's own errors, and a clear refusal for tokenizers
without one token per number."""

from __future__ import annotations

import numpy as np
import pytest

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.registry import make_agent
from rhythm.env.profiles import belief_of, sample_profiles
from rhythm.episodes import play
from rhythm.errors import RhythmError


@pytest.mark.slow
def test_probe_reads_one_belief_per_step_and_the_teachers_own_error(tiny_student):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rhythm.eval.teacher_forced import teacher_forced_errors

    records = [r.to_dict() for r in play(make_agent("bayes"), [EpisodeSpec("in-dist", "train", s) for s in (0, 1)])]
    tok = AutoTokenizer.from_pretrained(tiny_student)
    model = AutoModelForCausalLM.from_pretrained(tiny_student).eval()
    student, teacher = teacher_forced_errors(model, tok, records)
    assert student.shape == teacher.shape == (2, 28)
    assert np.all((student >= 0) & (student <= 1))
    for row, rec in zip(teacher, records, strict=True):
        truth = belief_of(sample_profiles("in-dist", "train", np.array([rec["seed"]])))[0]
        expected = [np.abs(np.array(s["belief"]) - truth).mean() for s in rec["steps"]]
        assert np.allclose(row, expected)


def test_probe_refuses_a_tokenizer_that_splits_numbers():
    from rhythm.eval.teacher_forced import teacher_forced_errors

    class Digits:
        def get_vocab(self):
            return {str(d): d for d in range(10)}

    with pytest.raises(RhythmError, match="one token per number"):
        teacher_forced_errors(None, Digits(), [])
