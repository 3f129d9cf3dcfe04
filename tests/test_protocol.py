"""The reply parser: tolerant, last valid line wins, never raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.env.constants import ACTION_INDEX, ACTIONS
from rhythm.protocol import FALLBACK_ACTION, SYSTEM_PROMPT, chat_messages, format_ending, parse_reply


def act(name: str) -> int:
    return ACTION_INDEX[name]


@pytest.mark.parametrize(
    "text, action, belief",
    [
        ("BELIEF: S=0.30 M=0.70 W=0.55\nACTION: DEEP_WORK", "DEEP_WORK", (0.30, 0.70, 0.55)),
        ("belief: s=0.3 m=0.7 w=0.55\naction: deep_work", "DEEP_WORK", (0.3, 0.7, 0.55)),
        ("**BELIEF:** S = 0.30, M = 0.70, W = 0.55\n**ACTION:** `deep work`", "DEEP_WORK", (0.3, 0.7, 0.55)),
        ("__ACTION__: _Family-Time_", "FAMILY_TIME", None),
        ("I think... ACTION: SLEEP because it is night.", "SLEEP", None),
        ("ACTION: NAP\nmore thoughts\nACTION: SOCIALIZE\n", "SOCIALIZE", None),
        ("ACTION: SOCIALIZE\nACTION: PARTY_HARD", "SOCIALIZE", None),  # last *valid* wins
        ("BELIEF: S=0.1 M=0.2 W=0.3\nBELIEF: S=0.9 M=0.8\nACTION: MEDITATE", "MEDITATE", (0.1, 0.2, 0.3)),
        ("BELIEF: S=1.7 M=.5 W=0\nACTION=LEISURE", "LEISURE", (1.0, 0.5, 0.0)),
        ("### Action: Exercise.", "EXERCISE", None),
        ("> ACTION:   admin  ", "ADMIN", None),
    ],
)
def test_parses_tolerant_forms(text, action, belief) -> None:
    r = parse_reply(text)
    assert r.ok and r.action == act(action)
    assert r.belief == (None if belief is None else pytest.approx(belief))


@pytest.mark.parametrize("text", ["", "no decision here", "ACTION: SLEEPING", "ACTION:", "ACTIONS: NAP", "action DEEP_WORK", None, 42])
def test_unparseable_replies_fall_back_and_count(text) -> None:
    r = parse_reply(text)
    assert not r.ok and r.action == act(FALLBACK_ACTION)


def test_system_prompt_names_every_action_and_the_format() -> None:
    for name in ACTIONS:
        assert name in SYSTEM_PROMPT
    assert "BELIEF: S=" in SYSTEM_PROMPT and "ACTION:" in SYSTEM_PROMPT
    msgs = chat_messages("obs")
    assert [m["role"] for m in msgs] == ["system", "user"] and msgs[1]["content"] == "obs"


@settings(max_examples=300)
@given(st.text())
def test_never_raises_on_any_text(text: str) -> None:
    r = parse_reply(text)
    assert 0 <= r.action < len(ACTIONS)
    assert r.belief is None or all(0.0 <= v <= 1.0 for v in r.belief)


beliefs = st.tuples(*[st.floats(0, 1, allow_nan=False)] * 3)


@settings(max_examples=200)
@given(
    reasoning=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200).filter(
        lambda s: "action" not in s.lower() and "belief" not in s.lower()
    ),
    belief=beliefs,
    action=st.sampled_from(ACTIONS),
    upper=st.booleans(),
    stars=st.sampled_from(["", "**", "*", "`"]),
)
def test_round_trip_with_decoration(reasoning, belief, action, upper, stars) -> None:
    ending = format_ending(belief, action)
    if not upper:
        ending = ending.lower()
    ending = "\n".join(f"{stars}{line}{stars}" for line in ending.splitlines())
    r = parse_reply(f"{reasoning}\n{ending}")
    assert r.ok and r.action == act(action)
    assert r.belief == pytest.approx(tuple(round(v, 2) for v in belief), abs=1e-9)
