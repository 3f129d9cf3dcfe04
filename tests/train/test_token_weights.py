"""Class-balanced action loss: the weights' arithmetic, what counts as a learned action, and a loss equal
to weighted cross-entropy on TRL's own fused head and on the CPU head alike."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.env.constants import ACTIONS
from rhythm.errors import RhythmError
from rhythm.train.token_weights import action_token_ids, action_weights, learned_action_counts

counts_st = st.dictionaries(st.sampled_from(ACTIONS), st.integers(1, 10_000), min_size=1)


@settings(deadline=None)
@given(counts_st, st.floats(0.0, 2.0), st.floats(1.0, 50.0))
def test_weights_are_one_for_the_most_common_bounded_and_ordered(counts, balance, cap):
    w = action_weights(Counter(counts), balance, cap)
    assert set(w) == set(counts)
    most = max(counts.values())
    assert all(1.0 - 1e-9 <= v <= cap + 1e-9 for v in w.values())
    assert all(w[a] == 1.0 for a, n in counts.items() if n == most)
    for a in counts:
        for b in counts:
            if counts[a] <= counts[b]:
                assert w[a] >= w[b] - 1e-4  # rarer is weighed at least as much


def test_weights_arithmetic_and_bad_settings():
    w = action_weights(Counter({"SLEEP": 400, "MEDITATE": 100, "LEARN": 1}), 0.5, 10.0)
    assert w == pytest.approx({"LEARN": 10.0, "MEDITATE": 2.0, "SLEEP": 1.0})
    assert action_weights(Counter({"SLEEP": 400, "MEDITATE": 100}), 0.0, 10.0) == {"MEDITATE": 1.0, "SLEEP": 1.0}
    assert action_weights(Counter(), 1.0, 10.0) == {}
    with pytest.raises(RhythmError, match="action_balance"):
        action_weights(Counter({"SLEEP": 1}), -0.1, 10.0)
    with pytest.raises(RhythmError, match="action_weight_cap"):
        action_weights(Counter({"SLEEP": 1}), 1.0, 0.5)


def test_only_the_learned_part_of_a_reply_counts():
    rows = [{"messages": [
        {"role": "user", "content": "After SLEEP: change ..."},
        {"role": "assistant", "content": "BELIEF: S=0.50 M=0.50 W=0.50\nACTION: MEDITATE", "context": "", "after": ""},
        {"role": "assistant", "content": "BELIEF: S=0.50 M=0.50 W=0.50", "context": "", "after": "\nACTION: NAP"},
        {"role": "assistant", "content": "\nACTION: DEEP_WORK", "context": "BELIEF: S=0.50 M=0.50 W=0.50", "after": ""},
        {"role": "assistant", "content": "Plan: SLEEP is best.\nBELIEF: S=0.40 M=0.50 W=0.50\nACTION: SLEEP"},
    ]}]
    assert learned_action_counts(rows) == Counter({"MEDITATE": 1, "DEEP_WORK": 1, "SLEEP": 1})


def test_action_tokens_must_be_distinct():
    class Shared:
        def __call__(self, text, add_special_tokens=False):
            name = text.strip()
            return {"input_ids": [7 if name in ("DEEP_WORK", "ADMIN") else 100 + ACTIONS.index(name), 3]}

    with pytest.raises(RhythmError, match="DEEP_WORK, ADMIN share one"):
        action_token_ids(Shared())


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("cpu_head", [False, True])
def test_loss_is_weighted_cross_entropy(tiny_student: Path, cpu_head: bool) -> None:
    """TRL's loss from the wrapped head: sum of weight x token NLL over labelled tokens / labelled tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    from rhythm.train.lm_head import SFT_OUTPUTS, score_labelled_positions_only
    from rhythm.train.token_weights import weight_action_losses

    tok = AutoTokenizer.from_pretrained(tiny_student)
    model = AutoModelForCausalLM.from_pretrained(tiny_student)
    add_fused_lm_head(model, outputs=SFT_OUTPUTS)
    if cpu_head:
        score_labelled_positions_only(model)
    ids_of = action_token_ids(tok)
    by_token = weight_action_losses(model, {"MEDITATE": 4.0, "SLEEP": 1.0, "NAP": 2.5}, tok)
    assert by_token == {ids_of["MEDITATE"]: 4.0, ids_of["NAP"]: 2.5}
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 900, (2, 30), generator=g)
    ids[0, 5], ids[0, 9], ids[1, 20] = ids_of["MEDITATE"], ids_of["NAP"], ids_of["SLEEP"]
    labels = ids.clone()
    labels[torch.rand(ids.shape, generator=g) < 0.5] = -100
    labels[0, 5], labels[0, 9], labels[1, 20] = ids[0, 5], ids[0, 9], ids[1, 20]
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels, fused_lm_head=True)
    loss = -out.log_probs.sum() / out.label_mask.sum()  # as SFTTrainer.compute_loss reduces it
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1]
    target = labels[:, 1:]
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1).clamp(min=0),
                                            reduction="none").view(target.shape)
    weight = torch.ones_like(nll)
    weight[target == ids_of["MEDITATE"]] = 4.0
    weight[target == ids_of["NAP"]] = 2.5
    mask = target != -100
    expected = (nll * weight)[mask].sum() / mask.sum()
    assert torch.allclose(loss, expected, atol=1e-5)
    assert not torch.allclose(loss, nll[mask].mean(), atol=1e-3)  # the weights did something
    loss.backward()  # and it trains


def test_a_model_without_trls_head_is_refused(tiny_student: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rhythm.train.token_weights import weight_action_losses

    with pytest.raises(RhythmError, match="fused LM head"):
        weight_action_losses(AutoModelForCausalLM.from_pretrained(tiny_student), {"MEDITATE": 2.0},
                             AutoTokenizer.from_pretrained(tiny_student))
