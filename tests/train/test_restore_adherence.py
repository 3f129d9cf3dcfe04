"""benchmarks/restore_adherence.py: where the restore pairs name an action, how often a week played it, and the
probability a model gives it there."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.agents.restore import restoring_action
from rhythm.env.rhythm_env import RhythmEnv
from rhythm.errors import RhythmError
from rhythm.records import JsonlWriter
from tests.train.helpers import load_benchmark

SPECS = [EpisodeSpec("ood", "train", s) for s in range(6)]


@pytest.fixture(scope="module")
def weeks():
    """bayes's own ood weeks and the same people with the restore rule forced (benchmarks/serenity_room.py)."""
    room = load_benchmark("serenity_room")
    own = [r.to_dict() for r in play(make_agent("bayes"), SPECS)]
    ruled = [r.to_dict() for r in play(room.RuledStudent(make_agent("bayes"), 0.25, rule="restore"), SPECS)]
    return own, ruled


def test_the_rules_own_weeks_play_it_everywhere_and_the_teachers_do_not(weeks):
    probe = load_benchmark("restore_adherence")
    own, ruled = weeks
    forced = probe.adherence(ruled, 0.25)
    assert forced["weeks"] == len(SPECS) and forced["named_per_week"] > 0 and forced["played_share"] == 1.0
    assert probe.adherence(own, 0.25)["played_share"] < 1.0
    assert probe.adherence(own, 0.0)["named_per_week"] == 0  # no meter is below 0


def test_named_states_read_the_meters_the_agent_saw(weeks):
    probe = load_benchmark("restore_adherence")
    own, _ = weeks
    record = own[0]
    env = RhythmEnv(condition="ood", split="train")
    obs, _ = env.reset(seed=record["seed"])
    np.testing.assert_allclose(probe.start_meters([record])[0], obs[:5], atol=1e-6)  # the observation opens with the 5 meters
    mixed = [*own, *[{**r, "condition": "in-dist"} for r in own[:2]]]  # two (condition, split) batches, interleaved
    for i, m in enumerate(probe.start_meters(mixed)):
        np.testing.assert_array_equal(m, probe.start_meters([mixed[i]])[0])
    for rec, t, action in probe.named_states(own, 0.3):
        seen = probe.start_meters([rec])[0] if t == 0 else rec["steps"][t - 1]["meters"]
        assert restoring_action(seen, t, 0.3) == action


@pytest.mark.slow
def test_the_command_reports_each_file_and_each_model(weeks, sft_model, tmp_path, capsys):
    probe = load_benchmark("restore_adherence")
    own, _ = weeks
    path = tmp_path / "own.jsonl"
    with JsonlWriter(path) as w:
        for r in own:
            w.write(r)
    args = argparse.Namespace(episodes=[str(path)], condition="ood", below=0.3, model=[str(sft_model)], states=4, seed=0)
    probe.run(args)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["played_share"] == probe.adherence(own, 0.3)["played_share"]
    assert lines[1]["model"] == str(sft_model) and lines[1]["states"] == 4
    # by hand, at the same four states: one forward pass to just after "ACTION:", a softmax over the ten action names
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rhythm.env.constants import ACTIONS, EPISODE_STEPS
    from rhythm.protocol import before_action, record_conversation

    tok, model = AutoTokenizer.from_pretrained(sft_model), AutoModelForCausalLM.from_pretrained(sft_model).eval()
    named = [x for x in probe.named_states(own, 0.3) if x[1] < EPISODE_STEPS - 1]
    picked = sorted(np.random.default_rng(0).permutation(len(named))[:4])
    names = [tok.get_vocab()[" " + a] for a in ACTIONS]
    probs, top = [], []
    for record, t, action in (named[i] for i in picked):
        prompt = tok.apply_chat_template(record_conversation(record, t), add_generation_prompt=True, tokenize=True,
                                         return_dict=True)["input_ids"]
        head = tok(f"{before_action(record['steps'][t]['response'])}\nACTION:", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + head])).logits[0, -1, names]
        probs.append(float(torch.softmax(logits, -1)[ACTIONS.index(action)]))
        top.append(int(logits.argmax()) == ACTIONS.index(action))
    assert lines[1]["p_rule_action"] == pytest.approx(np.mean(probs), abs=1e-3)
    assert lines[1]["rule_action_most_likely"] == pytest.approx(np.mean(top), abs=1e-3)
    with pytest.raises(RhythmError, match="no in-dist week"):
        probe.run(argparse.Namespace(**{**vars(args), "condition": "in-dist", "model": []}))


def test_bad_input_is_one_line_and_exit_code_2(weeks, tmp_path):
    """The probe's error funnel (benchmarks/_common.run_or_exit): a file with no week of the condition asked for."""
    import subprocess
    import sys

    from tests.train.helpers import REPO

    path = tmp_path / "ood.jsonl"
    with JsonlWriter(path) as w:
        for r in weeks[0]:
            w.write(r)
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "restore_adherence.py"), str(path), "--condition",
                           "in-dist"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == f"restore_adherence: error: {path}: no in-dist week"
