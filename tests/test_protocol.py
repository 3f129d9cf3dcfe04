"""The text protocol: the conversation of an episode (protocol v2) and the reply parser (tolerant,
last valid line wins, never raises)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.env.constants import ACTION_INDEX, ACTIONS, PROTOCOL_VERSION
from rhythm.errors import RhythmError
from rhythm.protocol import (
    FALLBACK_ACTION,
    SYSTEM_PROMPT,
    before_action,
    conversation,
    format_ending,
    parse_reply,
    record_conversation,
)


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
        ("BELIEF: S=-0.2 M=0.70 W=+0.55\nACTION: SLEEP", "SLEEP", (0.0, 0.7, 0.55)),  # clipped below as above 1
        ("BELIEF: S=0.30 M=0.70 W=0.55 (was M=0.60)\nACTION: NAP", "NAP", (0.3, 0.7, 0.55)),  # a line's first value
        ("### Action: Exercise.", "EXERCISE", None),
        ("> ACTION:   admin  ", "ADMIN", None),
        ("BELIEF: S=30% M=70% W=55%\nACTION: NAP", "NAP", (0.30, 0.70, 0.55)),  # a percentage, not 30 clipped to 1
        ("BELIEF: S=30 % M=0.7 W=150%\nACTION: NAP", "NAP", (0.30, 0.70, 1.0)),
        # punctuation and text after the name, as chat models write it
        ("ACTION: DEEP_WORK, since cognition is high", "DEEP_WORK", None),
        ("ACTION: SLEEP; it is night", "SLEEP", None),
        ("ACTION: SLEEP: it is night", "SLEEP", None),
        ("ACTION: <SLEEP>", "SLEEP", None),  # the system prompt's own ACTION: <one action name>, copied
        ("ACTION: NAP\u200b", "NAP", None),
        ("ACTION: DEEP\u2013WORK", "DEEP_WORK", None),
        ("ACTION\uff1a SLEEP", "SLEEP", None),
        # an earlier mention of an action loses to the reply's own ACTION line, on another line or on the same one
        ("Previous action: SOCIALIZE drained them.\nBELIEF: S=0.3 M=0.7 W=0.55\nACTION: SLEEP, it is night", "SLEEP", (0.3, 0.7, 0.55)),
        ("Last action: SOCIALIZE drained V, so rest. BELIEF: S=0.2 M=0.6 W=0.5 ACTION: NAP", "NAP", (0.2, 0.6, 0.5)),
        ("ACTION: NAP then ACTION: PARTY_HARD", "NAP", None),  # the last *valid* one on a line, too
        # decimal commas and fractions are read as the numbers they are, not as their integer part
        ("BELIEF: S=0,30 M=0,70 W=0,55\nACTION: NAP", "NAP", (0.30, 0.70, 0.55)),
        ("BELIEF: S = 0.30, M = 0.70, W = 0.55\nACTION: NAP", "NAP", (0.30, 0.70, 0.55)),
        ("BELIEF: S=1/3 M=2 / 4 W=1/0\nACTION: NAP", "NAP", None),  # W's 1/0 is no number: no belief
        ("BELIEF: S=1/3 M=2 / 4 W=0.5\nACTION: NAP", "NAP", (1 / 3, 0.5, 0.5)),
        # scientific notation: 3e-1 is 0.3, not 3 clipped to 1
        ("BELIEF: S=3e-1 M=7E-1 W=5.5e-1\nACTION: NAP", "NAP", (0.3, 0.7, 0.55)),
        ("BELIEF: S=1e0 M=0,5e0 W=+2e-1\nACTION: NAP", "NAP", (1.0, 0.5, 0.2)),
    ],
)
def test_parses_tolerant_forms(text, action, belief) -> None:
    r = parse_reply(text)
    assert r.ok and r.action == act(action)
    assert r.belief == (None if belief is None else pytest.approx(belief))


@pytest.mark.parametrize("text", ["", "no decision here", "ACTION: SLEEPING", "ACTION:", "ACTIONS: NAP", "action DEEP_WORK", None, 42,
                                  "ACTION: NAP2", "ACTION: SLEEPY, it is late", "Last action: NAPPING ACTION: RESTING"])
def test_unparseable_replies_fall_back_and_count(text) -> None:
    r = parse_reply(text)
    assert not r.ok and r.action == act(FALLBACK_ACTION)


def test_system_prompt_names_every_action_and_the_format() -> None:
    for name in ACTIONS:
        assert name in SYSTEM_PROMPT
    assert "BELIEF: S=" in SYSTEM_PROMPT and "ACTION:" in SYSTEM_PROMPT
    msgs = conversation(["obs"])
    assert msgs == [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "obs"}]


# -- the conversation of an episode (protocol v2) ----------------------------------------------------


def test_conversation_alternates_user_and_assistant_after_one_system_prompt() -> None:
    obs, said = ["o0", "o1", "o2"], ["r0", "r1", "r2"]
    prompt = conversation(obs, said[:2])  # the prompt of the reply to o2
    assert [m["role"] for m in prompt] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in prompt] == [SYSTEM_PROMPT, "o0", "r0", "o1", "r1", "o2"]
    example = conversation(obs, said)  # a whole SFT example ends on the assistant
    assert example == [*prompt, {"role": "assistant", "content": "r2"}]
    # max_turns keeps the system prompt and the last K steps, each with its own reply
    assert conversation(obs, said[:2], max_turns=2) == [prompt[0], *prompt[3:]]
    assert conversation(obs, said, max_turns=1) == [prompt[0], {"role": "user", "content": "o2"},
                                                     {"role": "assistant", "content": "r2"}]
    assert conversation(obs, said, max_turns=99) == example


@pytest.mark.parametrize("n_replies", [0, 1, 4])
def test_conversation_refuses_replies_that_do_not_pair_with_the_observations(n_replies) -> None:
    with pytest.raises(ValueError, match="3 observations need 2 or 3 replies"):
        conversation(["o0", "o1", "o2"], [f"r{i}" for i in range(n_replies)])


@pytest.mark.parametrize("k", [0, -1])
def test_conversation_refuses_a_history_of_no_turns(k) -> None:
    with pytest.raises(ValueError, match="max_turns"):
        conversation(["o0"], max_turns=k)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 28),
    ends_on_reply=st.booleans(),
    max_turns=st.one_of(st.none(), st.integers(1, 30)),
    text=st.text(max_size=12),
)
def test_conversation_shape_for_any_length_and_window(n, ends_on_reply, max_turns, text) -> None:
    obs = [f"{text}obs{i}" for i in range(n)]
    said = [f"{text}reply{i}" for i in range(n if ends_on_reply else n - 1)]
    msgs = conversation(obs, said, max_turns=max_turns)
    kept = n if max_turns is None else min(n, max_turns)
    first = n - kept
    assert msgs[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert [m["role"] for m in msgs[1:]] == ["user", "assistant"] * (kept - 1) + ["user"] + (["assistant"] if ends_on_reply else [])
    assert [m["content"] for m in msgs[1::2]] == obs[first:]
    assert [m["content"] for m in msgs[2::2]] == said[first:]
    assert len(msgs) == 1 + 2 * kept - (0 if ends_on_reply else 1)


def _record(n: int = 28, **extra) -> dict:
    steps = [{"t": t, "observation": f"obs{t}", "response": f"why {t}\nACTION: NAP"} for t in range(n)]
    return {"schema": 2, "protocol": PROTOCOL_VERSION, "steps": steps, **extra}


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 28), data=st.data())
def test_record_conversation_up_to_t_with_and_without_the_reply(n, data) -> None:
    record = _record(n)
    t = data.draw(st.integers(0, n - 1))
    obs = [s["observation"] for s in record["steps"]]
    said = [s["response"] for s in record["steps"]]
    assert record_conversation(record, t) == conversation(obs[: t + 1], said[:t])
    assert record_conversation(record, t, include_reply=True) == conversation(obs[: t + 1], said[: t + 1])
    stripped = [f"ACTION: {ACTIONS[t % len(ACTIONS)]}" for t in range(n)]
    with_stripped = record_conversation(record, t, include_reply=True, replies=stripped)
    assert [m["content"] for m in with_stripped[2::2]] == stripped[: t + 1]
    k = data.draw(st.integers(1, 28))
    assert record_conversation(record, t, max_turns=k) == conversation(obs[: t + 1], said[:t], max_turns=k)


def test_record_conversation_defaults_to_the_last_step_and_refuses_steps_outside() -> None:
    record = _record(28)
    whole = record_conversation(record, include_reply=True)
    assert len(whole) == 1 + 2 * 28 and whole[-1]["content"] == record["steps"][-1]["response"]
    assert record_conversation(record) == whole[:-1]
    for t in (28, -1):
        with pytest.raises(ValueError, match="outside the episode's 28 steps"):
            record_conversation(record, t, where="f.jsonl:3")


@pytest.mark.parametrize("version", [None, 1, 3])
def test_record_conversation_refuses_another_protocol_with_one_line(version) -> None:
    record = _record(3)
    if version is None:  # a v1 file: schema 1, no protocol key
        del record["protocol"]
        record["schema"] = 1
    else:
        record["protocol"] = version
    with pytest.raises(RhythmError) as err:
        record_conversation(record, 1, where="old.jsonl:7")
    msg = str(err.value)
    assert msg.startswith("old.jsonl:7: record is text protocol v") and "\n" not in msg
    assert "rhythm generate" in msg


@pytest.mark.parametrize("version", ["2", True, 2.0, None])
def test_a_protocol_that_is_not_a_whole_number_is_named_as_such(version) -> None:
    record = _record(3)
    record["protocol"] = version
    with pytest.raises(RhythmError) as err:
        record_conversation(record, 1, where="odd.jsonl:4")
    assert str(err.value) == f"odd.jsonl:4: protocol must be a whole number (this rhythm speaks 2), got {version!r}"


def test_the_conversation_an_agent_sees_is_the_recorded_one() -> None:
    """What a language agent is shown at step t (BatchObservation.conversation) is what
    record_conversation rebuilds from the stored record: the one definition of a prompt."""
    from rhythm.agents.episodes import play_batch
    from rhythm.agents.registry import make_agent

    bayes = make_agent("bayes")
    seen: dict[tuple[int, int], list[dict]] = {}

    class Recording:
        name = "bayes"

        def reset(self, episodes):
            bayes.reset(episodes)

        def act(self, obs):
            for i in range(len(obs.prompts)):
                seen[i, obs.t] = obs.conversation(i)
                if obs.t == 27:
                    seen[i, -4] = obs.conversation(i, max_turns=4)
            return bayes.act(obs)

    records = [r.to_dict() for r in play_batch(Recording(), "in-dist", "train", [3, 4])]
    for i, record in enumerate(records):
        assert record["protocol"] == PROTOCOL_VERSION
        for t in range(28):
            assert seen[i, t] == record_conversation(record, t)
        assert seen[i, -4] == record_conversation(record, 27, max_turns=4)
        assert len(seen[i, 27]) == 1 + 2 * 28 - 1


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_on_any_text(text: str) -> None:
    r = parse_reply(text)
    assert 0 <= r.action < len(ACTIONS)
    assert r.belief is None or all(0.0 <= v <= 1.0 for v in r.belief)


beliefs = st.tuples(*[st.floats(0, 1, allow_nan=False)] * 3)


@settings(max_examples=200, deadline=None)
@given(percents=st.tuples(*[st.integers(0, 100)] * 3), space=st.sampled_from(["", " "]), noise=st.text(max_size=20))
def test_a_belief_in_percent_is_read_as_a_share(percents, space, noise) -> None:
    text = f"{noise}\nBELIEF: " + " ".join(f"{d}={p}{space}%" for d, p in zip("SMW", percents)) + "\nACTION: NAP"
    r = parse_reply(text)
    assert r.ok and r.belief == pytest.approx(tuple(p / 100 for p in percents))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["BELIEF:", "S=", "M=", "W=", "%", " ", "-", ".", "5", "30", "1e9", "\n", "ACTION: NAP"]),
                max_size=30))
def test_never_raises_on_belief_shaped_text(parts) -> None:
    r = parse_reply("".join(parts))
    assert 0 <= r.action < len(ACTIONS)
    assert r.belief is None or all(0.0 <= v <= 1.0 for v in r.belief)


@settings(max_examples=200, deadline=None)
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


@settings(max_examples=200, deadline=None)
@given(
    reasoning=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Zl", "Zp", "Cc")), max_size=60)
                       .filter(lambda s: "action" not in s.lower()), max_size=4),
    belief=st.none() | beliefs,
    action=st.sampled_from(ACTIONS),
    other=st.sampled_from(ACTIONS),
)
def test_before_action_is_the_reply_less_its_action_line(reasoning, belief, action, other) -> None:
    head = "\n".join([*reasoning, *([format_ending(belief, action).splitlines()[0]] if belief is not None else [])]).strip()
    reply = f"{head}\nACTION: {action}" if head else f"ACTION: {action}"
    assert before_action(reply) == head
    swapped = parse_reply(f"{head}\nACTION: {other}" if head else f"ACTION: {other}")
    assert swapped.ok and swapped.action == act(other) and swapped.belief == parse_reply(reply).belief
    assert before_action(head) == head.strip(), "a reply with no ACTION line is kept whole"


def test_before_action_keeps_a_reasoning_reply_up_to_its_last_action_line() -> None:
    reply = ("Saw after SLEEP: anomaly V+0.05.\nPlan: MEDITATE is best.\nBELIEF: S=0.49 M=0.46 W=0.56\n"
             "ACTION: NAP\n**ACTION:** meditate")
    assert before_action(reply) == ("Saw after SLEEP: anomaly V+0.05.\nPlan: MEDITATE is best.\n"
                                    "BELIEF: S=0.49 M=0.46 W=0.56\nACTION: NAP")
    assert before_action("BELIEF: S=0.1 M=0.2 W=0.3\nACTION: DEE") == "BELIEF: S=0.1 M=0.2 W=0.3", "a cut action line"
