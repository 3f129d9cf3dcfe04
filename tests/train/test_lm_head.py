"""The CPU fused head scores only labelled positions and gives TRL's own outputs and gradients."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trl.trainer.utils import add_fused_lm_head  # noqa: E402

from rhythm.train.lm_head import SFT_OUTPUTS, score_labelled_positions_only  # noqa: E402


def _pair(tiny_student: Path, outputs: tuple[str, ...], temperature: float):
    from transformers import AutoModelForCausalLM

    models = []
    for compact in (False, True):
        m = AutoModelForCausalLM.from_pretrained(tiny_student)
        add_fused_lm_head(m, temperature=temperature, outputs=outputs)
        if compact:
            score_labelled_positions_only(m, outputs=outputs, temperature=temperature)
        models.append(m)
    return models


def _run(model, ids, labels):
    model.zero_grad()
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels, fused_lm_head=True)
    (out.loss + (0.0 if out.entropy is None else 0.1 * out.entropy.sum())).backward()
    return out, [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize(("outputs", "temperature"), [(SFT_OUTPUTS, 1.0), (("log_probs", "entropy"), 0.7)])
def test_outputs_and_gradients_equal_trls_fused_head(tiny_student: Path, outputs, temperature, monkeypatch) -> None:
    from trl.kernels import ChunkedLogProbFunction

    rows: list[int] = []
    original = ChunkedLogProbFunction.apply
    monkeypatch.setattr(ChunkedLogProbFunction, "apply", lambda hidden, *a: rows.append(len(hidden)) or original(hidden, *a))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 900, (3, 40), generator=g)
    labels = ids.clone()
    labels[torch.rand(ids.shape, generator=g) < 0.8] = -100  # the replies: a fifth of the tokens
    trl_model, compact_model = _pair(tiny_student, outputs, temperature)
    (a, ga), (b, gb) = _run(trl_model, ids, labels), _run(compact_model, ids, labels)
    assert torch.equal(a.label_mask, b.label_mask)
    assert rows == [3 * 39, int(b.label_mask.sum())]  # TRL on the CPU projects every position; this, the labelled ones
    assert torch.allclose(a.loss, b.loss, atol=1e-6)
    for name in outputs:
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape
        assert torch.equal(x, y) if x.dtype == torch.bool else torch.allclose(x, y, atol=1e-5)
    assert len(ga) == len(gb) and all(torch.allclose(x, y, atol=1e-6) for x, y in zip(ga, gb))


def test_a_batch_without_labels_is_a_differentiable_zero_and_plain_calls_are_untouched(tiny_student: Path) -> None:
    _, model = _pair(tiny_student, SFT_OUTPUTS, 1.0)
    ids = torch.randint(3, 900, (2, 12))
    out, _ = _run(model, ids, torch.full_like(ids, -100))
    assert out.loss.item() == 0.0 and not out.label_mask.any()
    plain = model(input_ids=ids)  # generation and eval: the model's own forward, full logits
    assert plain.logits.shape == (2, 12, model.config.vocab_size)


def test_a_model_trl_did_not_patch_is_left_alone(tiny_student: Path) -> None:
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_student)
    before = m.forward
    score_labelled_positions_only(m)
    assert m.forward == before
