"""The refine run's probe: KL to the starting policy and greedy-action changes on fixed states."""

from __future__ import annotations

import numpy as np
import pytest

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.protocol import parse_reply, record_conversation
from rhythm.train.grpo.probe import PolicyProbe, reply_logprobs


@pytest.fixture(scope="module")
def prompts():
    records = [r.to_dict() for r in play(make_agent("heuristic"), [EpisodeSpec("in-dist", "train", s) for s in range(2)])]
    return [record_conversation(r, t) for r in records for t in (0, 5, 13)]


def _load(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("probe_batch", [32, 2])  # the states in one batch, and sorted by length into three
def test_probe_is_zero_at_the_start_and_moves_with_the_policy(prompts, sft_model, probe_batch, monkeypatch):
    import torch

    monkeypatch.setattr("rhythm.train.grpo.probe.PROBE_BATCH", probe_batch)
    model, tokenizer = _load(sft_model)
    probe = PolicyProbe(prompts, tokenizer, max_new_tokens=16, stop_ids=[tokenizer.eos_token_id])
    probe.start(model)
    assert len(probe.start_replies) == len(prompts) and all(probe.start_replies)
    for i, prompt_ids in enumerate(probe.prompt_ids):  # each state's figures are its own, whatever its batch
        with torch.no_grad():
            alone = reply_logprobs(model, [prompt_ids], [probe.start_replies[i]], probe.pad_id)[0]
        assert torch.allclose(probe.start_logprobs[i], alone, atol=1e-4)
    same = probe.measure(model)
    assert same["probe/kl"] == pytest.approx(0.0, abs=1e-6)
    assert same["probe/action_changed"] == 0.0 and same["probe/belief_shift"] == pytest.approx(0.0, abs=1e-9)

    # the KL is KL(now || start) over the whole vocabulary at each of the start's reply positions
    with torch.no_grad():
        model.lm_head.weight.mul_(3.0)  # sharper at every position (the head may be tied: the input side moves too)
    moved = probe.measure(model)
    now = probe.logprobs(model, probe.start_replies)
    by_hand = np.mean([float((n.exp() * (n - s)).sum(-1).mean()) for n, s in zip(now, probe.start_logprobs, strict=True)])
    assert moved["probe/kl"] > 1e-3 and moved["probe/kl"] == pytest.approx(by_hand, rel=1e-6)

    # the action and belief figures are the greedy replies' (each prompt decoded alone, no batch padding) against
    # the start's: this sharper head changes some of them
    def alone(prompt_ids):
        ids = torch.tensor([prompt_ids])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        return parse_reply(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))

    before, after = probe.start_decisions, [alone(p) for p in probe.prompt_ids]
    changed = np.mean([a.action != b.action for a, b in zip(after, before, strict=True)])
    shift = np.mean([np.abs(np.subtract(a.belief, b.belief)).mean() for a, b in zip(after, before, strict=True)
                     if a.belief is not None and b.belief is not None])  # a reply that states none has no shift
    assert 0.0 < moved["probe/action_changed"] == pytest.approx(changed)
    assert 0.0 < moved["probe/belief_shift"] == pytest.approx(shift)


def test_probe_must_start_before_it_measures(prompts, sft_model):
    model, tokenizer = _load(sft_model)
    probe = PolicyProbe(prompts, tokenizer, max_new_tokens=16, stop_ids=[tokenizer.eos_token_id])
    with pytest.raises(RuntimeError, match="start must run before measure"):
        probe.measure(model)
