"""Loss weights of a tokenized week: the replies at 1, the observations' echoed action names at ``echo_loss``
and the rest at ``observation_loss`` (the trainer's loss on them: tests/train/test_sft_train.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.env.constants import ACTIONS
from rhythm.env.render import ECHOED_ACTION, render_observation
from rhythm.train.data import echo_tokens, week_weights

weeks = st.integers(min_value=1, max_value=40).flatmap(lambda n: st.tuples(
    st.lists(st.booleans(), min_size=n, max_size=n), st.lists(st.booleans(), min_size=n, max_size=n)))
weights = st.floats(min_value=0.0, max_value=1.0)


@given(weeks, weights, st.one_of(st.none(), weights))
@settings(max_examples=200, deadline=None)
def test_replies_weigh_one_echoes_echo_loss_and_the_rest_observation_loss(week, observation, echo):
    reply, echoed = week
    w = week_weights(reply, observation, echoed, echo)
    assert len(w) == len(reply)
    for r, e, x in zip(reply, echoed, w, strict=True):
        assert x == (1.0 if r else echo if e and echo is not None else observation)
    assert week_weights(reply, observation) == week_weights(reply, observation, echoed, None)


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
