"""``observation_loss``: the week's labels at each weight, and the fused head's loss equal to weighted
cross-entropy (replies 1, everything else the weight)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.errors import RhythmError
from rhythm.train.observation_loss import OFFSET, week_labels

weeks = st.integers(min_value=1, max_value=40).flatmap(lambda n: st.tuples(
    st.lists(st.integers(min_value=0, max_value=200_000), min_size=n, max_size=n),
    st.lists(st.booleans(), min_size=n, max_size=n)))


@given(weeks, st.floats(min_value=0.0, max_value=1.0))
@settings(max_examples=200, deadline=None)
def test_replies_keep_their_ids_and_the_rest_follows_the_weight(week, weight):
    ids, mask = week
    labels = week_labels(ids, mask, weight)
    assert len(labels) == len(ids)
    for t, m, lab in zip(ids, mask, labels, strict=True):
        if m:
            assert lab == t
        elif weight == 0.0:
            assert lab == -100
        elif weight == 1.0:
            assert lab == t
        else:
            assert lab < -100 and OFFSET - lab == t  # never TRL's ignore index, and decodable


def test_a_weight_outside_zero_one_is_refused():
    with pytest.raises(RhythmError, match="observation_loss must be in"):
        week_labels([1, 2], [True, False], 1.5)


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("cpu_head", [False, True])
def test_loss_is_cross_entropy_with_the_observations_weighted(tiny_student: Path, cpu_head: bool) -> None:
    """Sum of weight x token NLL over every labelled token / labelled tokens, as SFTTrainer reduces it; on
    TRL's own head and on the CPU head, composed with the action weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    from rhythm.train.lm_head import SFT_OUTPUTS, score_labelled_positions_only
    from rhythm.train.observation_loss import weight_observation_losses
    from rhythm.train.token_weights import action_token_ids, weight_action_losses

    tok = AutoTokenizer.from_pretrained(tiny_student)
    model = AutoModelForCausalLM.from_pretrained(tiny_student)
    add_fused_lm_head(model, outputs=SFT_OUTPUTS)
    if cpu_head:
        score_labelled_positions_only(model)
    meditate = action_token_ids(tok)["MEDITATE"]
    weight_action_losses(model, {"MEDITATE": 3.0}, tok)
    assert weight_observation_losses(model, 0.25)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 900, (2, 30), generator=g)
    ids[0, 6] = meditate
    reply = torch.rand(ids.shape, generator=g) < 0.3
    reply[0, 6] = True
    labels = torch.tensor([week_labels(i, m, 0.25) for i, m in zip(ids.tolist(), reply.tolist(), strict=True)])
    labels[1, 25:] = -100  # padding
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels, fused_lm_head=True)
    loss = -out.log_probs.sum() / (labels[:, 1:] != -100).sum()  # TRL counts labels != -100
    assert out.label_mask.sum() == (labels[:, 1:] != -100).sum()
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1]
    target = ids[:, 1:]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
    weight = torch.where(reply[:, 1:], 1.0, 0.25)
    weight[target == meditate] *= 3.0
    weight[1, 24:] = 0.0
    expected = (nll * weight).sum() / (weight > 0).sum()
    assert torch.allclose(loss, expected, atol=1e-5)
    loss.backward()


def test_the_wrapper_is_only_needed_strictly_between_zero_and_one(tiny_student: Path) -> None:
    from transformers import AutoModelForCausalLM

    from rhythm.train.observation_loss import weight_observation_losses

    model = AutoModelForCausalLM.from_pretrained(tiny_student)
    assert not weight_observation_losses(model, 0.0) and not weight_observation_losses(model, 1.0)
    with pytest.raises(RhythmError, match="fused LM head"):
        weight_observation_losses(model, 0.5)
