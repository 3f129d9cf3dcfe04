"""``observation_loss``: the week's labels at each weight, and the fused head's loss equal to weighted
cross-entropy (replies 1, everything else the weight)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.env.constants import ACTIONS
from rhythm.env.render import ECHOED_ACTION, render_observation
from rhythm.errors import RhythmError
from rhythm.train.observation_loss import OFFSET, echo_tokens, week_labels

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


@given(weeks, st.data(), st.sampled_from([0.0, 0.1, 0.5, 1.0]))
@settings(max_examples=200, deadline=None)
def test_echoed_actions_follow_their_own_weight(week, data, weight):
    """Echo tokens outside the replies take ``echo_weight`` (0, 1 or the observation weight); the rest as before."""
    ids, mask = week
    echo = data.draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)))
    echo_weight = data.draw(st.sampled_from([0.0, 1.0, weight]))
    labels = week_labels(ids, mask, weight, echo, echo_weight)
    plain, as_echo = week_labels(ids, mask, weight), week_labels(ids, mask, echo_weight)
    for i, lab in enumerate(labels):
        assert lab == (plain[i] if mask[i] or not echo[i] else as_echo[i])
    assert week_labels(ids, mask, weight, echo, None) == plain


def test_a_weight_outside_zero_one_is_refused():
    with pytest.raises(RhythmError, match="observation_loss must be in"):
        week_labels([1, 2], [True, False], 1.5)
    with pytest.raises(RhythmError, match=r"echo_loss must be 0, 1 or observation_loss \(0.1\)"):
        week_labels([1, 2], [True, False], 0.1, [0, 1], 0.3)


@given(st.lists(st.tuples(st.integers(0, 27), st.integers(-1, len(ACTIONS) - 1)), min_size=1, max_size=6),
       st.integers(min_value=1, max_value=7))
@settings(max_examples=100, deadline=None)
def test_echo_tokens_cover_exactly_the_echoed_action_names(steps, width):
    """On rendered observations cut into tokens of ``width`` characters, the marked tokens are those that
    overlap an echoed name, and their text covers the names in order."""
    text = "\n".join(render_observation(t, [0.5] * 5, a, [0.1] * 5, [-0.1] * 5) for t, a in steps)
    offsets = [(i, min(i + width, len(text))) for i in range(0, len(text), width)]
    mask = echo_tokens(text, offsets)
    names = [ACTIONS[a] for _, a in steps if a >= 0]
    assert len(mask) == len(offsets)
    covered = "".join(text[s:e] if m else "|" for (s, e), m in zip(offsets, mask, strict=True))
    for name in names:
        assert name in covered
    spans = [m.span(1) for m in ECHOED_ACTION.finditer(text)]
    assert [ACTIONS[a] for _, a in steps if a >= 0] == [text[s:e] for s, e in spans]
    for (s, e), m in zip(offsets, mask, strict=True):
        assert m == any(s < b and a < e for a, b in spans)


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
