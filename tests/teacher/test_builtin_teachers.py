"""The built-in teachers: deterministic, infer the person, say what they do."""

from __future__ import annotations

import numpy as np

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.env.constants import ACTION_INDEX
from rhythm.env.profiles import belief_of, sample_profiles
from rhythm.protocol import parse_reply


def _strip(rec) -> dict:
    d = rec.to_dict()
    d.pop("created_at")
    d["usage"].pop("seconds")
    return d


def test_bayes_is_deterministic() -> None:
    specs = [EpisodeSpec("ood", "train", s) for s in (3, 11)]
    a = [_strip(r) for r in play(make_agent("bayes"), specs)]
    b = [_strip(r) for r in play(make_agent("bayes"), list(reversed(specs)))]
    assert a == list(reversed(b))  # also independent of batch order


def test_every_bayes_reply_parses_back_to_its_action_and_belief() -> None:
    specs = [EpisodeSpec(c, "train", s) for c in ("in-dist", "ood", "discrete") for s in range(3)]
    for rec in play(make_agent("bayes"), specs):
        for step in rec.steps:
            parsed = parse_reply(step.response)
            assert parsed.ok and parsed.action == ACTION_INDEX[step.action]
            assert parsed.belief is not None and np.allclose(parsed.belief, step.belief)
            for part in ("Implies:", "Belief after", "+-", "Plan:"):
                assert part in step.response


def test_bayes_infers_the_person() -> None:
    seeds = list(range(12))
    recs = play(make_agent("bayes"), [EpisodeSpec("in-dist", "eval", s) for s in seeds])
    truth = belief_of(sample_profiles("in-dist", "eval", np.array(seeds)))
    first = np.mean([np.abs(np.array(r.steps[0].belief) - t).mean() for r, t in zip(recs, truth)])
    last = np.mean([np.abs(np.array(r.steps[-1].belief) - t).mean() for r, t in zip(recs, truth)])
    assert last < 0.6 * first


def test_oracle_states_the_truth_and_outplays_the_heuristic() -> None:
    specs = [EpisodeSpec("discrete", "eval", s) for s in range(3)]
    oracle = play(make_agent("oracle"), specs)
    heur = play(make_agent("heuristic"), specs)
    truth = belief_of(sample_profiles("discrete", "eval", np.arange(3)))
    for rec, t in zip(oracle, truth):
        assert np.allclose(rec.steps[-1].belief, t, atol=1e-4)
    assert all(o.score["behaviour_score"] > h.score["behaviour_score"] for o, h in zip(oracle, heur))


def test_baselines_are_deterministic_and_state_no_belief() -> None:
    specs = [EpisodeSpec("in-dist", "eval", s) for s in range(4)]
    for name in ("random", "heuristic"):
        a, b = play(make_agent(name), specs), play(make_agent(name), specs)
        assert [[s.action for s in r.steps] for r in a] == [[s.action for s in r.steps] for r in b]
        assert all(s.belief is None for r in a for s in r.steps)
        assert all(parse_reply(s.response).ok for r in a for s in r.steps)
    rand = play(make_agent("random"), specs)
    assert len({s.action for r in rand for s in r.steps}) >= 8


