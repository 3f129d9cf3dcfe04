"""The refine run's anchor: KL(start || now) on pool states outside the batch, with its gradient."""

from __future__ import annotations

import pytest

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.protocol import record_conversation
from rhythm.train.grpo.anchor import Anchor


@pytest.fixture(scope="module")
def prompts():
    records = [r.to_dict() for r in play(make_agent("heuristic"), [EpisodeSpec("in-dist", "train", s) for s in range(2)])]
    return [record_conversation(r, t) for r in records for t in (0, 5, 13)]


def test_anchor_is_zero_at_the_start_and_is_the_forward_kl_once_moved(prompts, sft_model):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(sft_model), AutoTokenizer.from_pretrained(sft_model)
    anchor = Anchor(prompts, tokenizer, max_new_tokens=16, stop_ids=[tokenizer.eos_token_id], per_step=len(prompts), seed=0)
    anchor.pool.start(model)
    assert float(anchor.kl(model).detach()) == pytest.approx(0.0, abs=1e-6)
    with torch.no_grad():
        model.lm_head.weight.mul_(2.0)
    kl = anchor.kl(model)
    pool = anchor.pool
    now = pool.logprobs(model, pool.start_replies)
    by_hand = torch.stack([(s.exp() * (s - n)).sum(-1).mean() for n, s in zip(now, pool.start_logprobs, strict=True)]).mean()
    assert float(kl.detach()) > 1e-3 and float(kl.detach()) == pytest.approx(float(by_hand.detach()), rel=1e-5)
    kl.backward()
    assert model.lm_head.weight.grad is not None and float(model.lm_head.weight.grad.abs().sum()) > 0
    assert Anchor(prompts, tokenizer, 16, [tokenizer.eos_token_id], per_step=99, seed=0).per_step == len(prompts)


@pytest.mark.parametrize("accumulation", [1, 2, 4])
def test_the_anchor_weighs_its_kl_once_per_optimizer_step_whatever_the_accumulation(accumulation):
    """TRL's GRPO loss comes as each micro-batch's share of the step (transformers does not divide it again): a KL
    added whole to every micro-batch weighed ``anchor_weight`` x the accumulation steps (20 for 5 at 4)."""
    from collections import defaultdict

    import torch

    from rhythm.train.grpo.anchor import anchored

    class StepShare:  # TRL's side: each micro-batch's loss is its share of the step's
        loss_is_scaled_for_ga = True

        def __init__(self) -> None:
            self.current_gradient_accumulation_steps = accumulation
            self._metrics = {"train": defaultdict(list)}

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return torch.tensor(1.0 / accumulation)

    class FixedKL:
        def kl(self, model):
            return torch.tensor(0.5)

    trainer, model = anchored(StepShare, FixedKL(), 5.0)(), torch.nn.Linear(1, 1)
    step = sum(trainer.compute_loss(model, {}) for _ in range(accumulation))
    assert float(step) == pytest.approx(1.0 + 5.0 * 0.5)
    assert trainer._metrics["train"]["anchor/kl"] == [0.5] * accumulation
