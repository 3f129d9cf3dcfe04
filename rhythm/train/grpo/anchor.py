"""A KL anchor to the starting policy on states drawn from the run's prompts, whatever the batch scores (``anchor_weight``).

Branch mode's reward is exact for the states it scores, but a small student generalises each update to
every state: a few hundred groups that favour resting over DEEP_WORK move its DEEP_WORK frequency
everywhere (docs/grpo-ablation.md, second round). The anchor adds, at every optimizer step, ``anchor_weight`` times the KL
from the starting policy to the current one on ``anchor_states`` states drawn from a fixed pool of the
run's prompts (full vocabulary, at each position of the starting policy's greedy reply; drawn apart from
the batch, so a state the batch scores is among them only by chance), so a change must pay on the scored
states without moving the others: InstructGPT's PPO-ptx idea, with the
starting policy's own replies in place of pre-training text, so no teacher data is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rhythm.train.grpo.probe import PolicyProbe, reply_logprobs


class Anchor:
    """The starting policy's greedy replies and distributions on a pool of states, and the KL to them."""

    def __init__(self, prompts: Sequence[Any], tokenizer: Any, max_new_tokens: int, stop_ids: Sequence[int],
                 per_step: int, seed: int) -> None:
        self.pool = PolicyProbe(prompts, tokenizer, max_new_tokens, stop_ids)
        self.per_step = min(int(per_step), len(self.pool.prompts))
        self.rng = np.random.default_rng(seed)

    def draw(self) -> np.ndarray:
        """The pool states of the next KL term (one draw per training micro-batch)."""
        return self.rng.choice(len(self.pool.prompts), self.per_step, replace=False)

    def skip(self, draws: int) -> None:
        """Make the draws a resumed run's checkpoint already made, so it goes on with the states an uninterrupted
        run would draw next."""
        for _ in range(int(draws)):
            self.draw()

    def kl(self, model: Any):
        """Mean per-token KL(start || current) on ``per_step`` pool states drawn afresh, with its gradient."""
        import torch

        if self.pool.start_replies is None:
            raise RuntimeError("Anchor.pool.start must run (on the starting policy) before kl")
        picked = self.draw()
        now = reply_logprobs(model, [self.pool.prompt_ids[i] for i in picked],
                             [self.pool.start_replies[i] for i in picked], self.pool.pad_id)
        starts = [self.pool.start_logprobs[i].to(n.device) for i, n in zip(picked, now, strict=True)]
        return torch.stack([(s.exp() * (s - n)).sum(-1).mean() for s, n in zip(starts, now, strict=True)]).mean()


def anchored(trainer_cls: type, anchor: Anchor, weight: float) -> type:
    """``trainer_cls`` whose training loss adds ``weight`` x the anchor's KL (logged as ``anchor/kl``)."""

    class AnchoredTrainer(trainer_cls):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if not model.training:
                return loss
            kl = anchor.kl(model)
            self._metrics["train"]["anchor/kl"].append(float(kl.detach()))
            # TRL's loss comes as this micro-batch's share of the step (``loss_is_scaled_for_ga``: transformers does not
            # divide it again), so the KL takes its share too: ``weight`` per optimizer step, whatever the accumulation
            return loss + weight * kl / max(1, getattr(self, "current_gradient_accumulation_steps", 1))

    return AnchoredTrainer
