"""What shows whether a refine run can learn, logged beside TRL's own metrics: a fixed set of states
the policy is probed on at every logging step.

- ``probe/kl``: KL(current policy || starting policy), per reply token, on the starting policy's
  greedy replies to the probe states (every vocabulary entry at every reply position), so it is
  measured even when the run's ``beta`` is 0 and TRL computes no KL.
- ``probe/action_changed``: the share of probe states whose greedy action differs from the starting
  policy's greedy action there (what eval would play differently).
- ``probe/belief_shift``: the mean absolute change of the greedy stated belief (S, M, W) there.

TRL itself logs ``reward`` (per step) and ``rewards/<name>/mean``; the reward log adds
``groups_without_spread`` (the share of groups whose replies all scored the same, so they carry no
gradient; :meth:`rhythm.train.grpo.rewards.RewardLog.pop_metrics`). Heavy imports happen inside the
functions that need them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rhythm.protocol import parse_reply

PROBE_BATCH = 32
"""Prompts a probe or an anchor pool runs through the model at once (sorted by length)."""


def encode_prompts(tokenizer: Any, prompts: Sequence[Any]) -> list[list[int]]:
    """Each conversation's token ids up to the reply, as the chat template renders it and as eval's
    lockstep engine encodes it (the rendered text, no special tokens added)."""
    return [tokenizer(tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False),
                      add_special_tokens=False)["input_ids"] for p in prompts]


def cut_at_stop(rows: Sequence[Sequence[int]], stop_ids: Sequence[int]) -> list[list[int]]:
    """Generated rows up to and including their first stop token (the padding after it dropped)."""
    out = []
    for row in rows:
        reply = []
        for tok in row:
            reply.append(int(tok))
            if tok in stop_ids:
                break
        out.append(reply)
    return out


def left_pad(rows: Sequence[Sequence[int]], pad_id: int):
    """``(ids, attention_mask)`` of token rows padded on the left (generation continues on the right)."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids, mask


def reply_logprobs(model: Any, prompt_ids: Sequence[Sequence[int]], replies: Sequence[Sequence[int]], pad_id: int) -> list[Any]:
    """Log-softmax over the vocabulary at each position of each reply, the reply teacher-forced after its
    prompt (one left-padded batch; the graph is kept when gradients are on)."""
    import torch

    ids, mask = left_pad([list(p) + list(r) for p, r in zip(prompt_ids, replies, strict=True)], pad_id)
    logits = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device)).logits.float()
    end = ids.shape[1]
    return [torch.log_softmax(logits[i, end - len(r) - 1:end - 1], dim=-1)  # the logits that predict each reply token
            for i, r in enumerate(replies)]


def greedy_replies(model: Any, prompt_ids: Sequence[Sequence[int]], pad_id: int, stop_ids: Sequence[int],
                   max_new_tokens: int) -> list[list[int]]:
    """Greedy reply token ids (stop token included when reached) for each prompt, as one left-padded batch."""
    import torch

    ids, mask = left_pad(prompt_ids, pad_id)
    ids, mask = ids.to(model.device), mask.to(model.device)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=int(max_new_tokens), do_sample=False,
                             eos_token_id=list(stop_ids), pad_token_id=pad_id)
    return cut_at_stop(out[:, ids.shape[1]:].tolist(), stop_ids)


class PolicyProbe:
    """Greedy replies and per-token distributions of a policy on fixed prompts, compared with the start."""

    def __init__(self, prompts: Sequence[Any], tokenizer: Any, max_new_tokens: int, stop_ids: Sequence[int]) -> None:
        self.prompts = list(prompts)
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.stop_ids = sorted({int(i) for i in stop_ids})
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0])
        self.prompt_ids = encode_prompts(tokenizer, self.prompts)
        self.start_replies: list[list[int]] | None = None
        self.start_logprobs: list[Any] = []
        self.start_decisions: list[Any] = []

    def greedy(self, model: Any) -> list[list[int]]:
        """Greedy reply token ids (stop token included when reached) for every probe prompt."""
        return self._by_length(lambda prompts: greedy_replies(model, prompts, self.pad_id, self.stop_ids, self.max_new_tokens))

    def logprobs(self, model: Any, replies: Sequence[Sequence[int]]) -> list[Any]:
        """Log-softmax over the vocabulary at each reply position, teacher-forced on ``replies``."""
        import torch

        with torch.no_grad():
            return self._by_length(lambda prompts, rs: [x.cpu() for x in reply_logprobs(model, prompts, rs, self.pad_id)],
                                   replies)

    def _by_length(self, batch: Callable[..., list[Any]], *columns: Sequence[Any]) -> list[Any]:
        """``batch`` over the prompts (and ``columns``' entries beside them) in batches of ``PROBE_BATCH`` prompts of
        similar length, as left padding to a batch's longest costs (an anchor's pool spans whole weeks); in order."""
        order = sorted(range(len(self.prompt_ids)), key=lambda i: len(self.prompt_ids[i]))
        out: list[Any] = [None] * len(order)
        for start in range(0, len(order), PROBE_BATCH):
            idx = order[start : start + PROBE_BATCH]
            results = batch([self.prompt_ids[i] for i in idx], *[[c[i] for i in idx] for c in columns])
            for i, result in zip(idx, results, strict=True):
                out[i] = result
        return out

    def _decisions(self, replies: Sequence[Sequence[int]]) -> list[Any]:
        return [parse_reply(self.tokenizer.decode(r, skip_special_tokens=True)) for r in replies]

    def start(self, model: Any) -> None:
        """Record the starting policy: its greedy replies, their per-token distributions and decisions."""
        was_training = model.training
        model.eval()
        try:
            self.start_replies = self.greedy(model)
            self.start_logprobs = self.logprobs(model, self.start_replies)
            self.start_decisions = self._decisions(self.start_replies)
        finally:
            model.train(was_training)

    def measure(self, model: Any) -> dict[str, float]:
        """``probe/kl``, ``probe/action_changed`` and ``probe/belief_shift`` of ``model`` against the start."""
        import torch

        if self.start_replies is None:
            raise RuntimeError("PolicyProbe.start must run before measure")
        was_training = model.training
        model.eval()
        try:
            now = self.logprobs(model, self.start_replies)
            decisions = self._decisions(self.greedy(model))
        finally:
            model.train(was_training)
        kls = [float((torch.exp(n) * (n - s)).sum(-1).mean()) for n, s in zip(now, self.start_logprobs, strict=True)]
        changed = [a.action != b.action for a, b in zip(decisions, self.start_decisions, strict=True)]
        shifts = [float(np.abs(np.array(a.belief) - np.array(b.belief)).mean())
                  for a, b in zip(decisions, self.start_decisions, strict=True) if a.belief is not None and b.belief is not None]
        out = {"probe/kl": float(np.mean(kls)), "probe/action_changed": float(np.mean(changed))}
        if shifts:  # no NaN in the log: trainer_state.json must stay JSON
            out["probe/belief_shift"] = float(np.mean(shifts))
        return out


def make_probe_callback(probe: PolicyProbe | None, extra: Callable[[], dict[str, float]] | None = None):
    """A ``TrainerCallback`` that records the start at train begin and adds the probe's figures (and
    ``extra()``'s) to each training log entry (``training_log.jsonl`` and the console)."""
    from transformers import TrainerCallback

    class ProbeCallback(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            if probe is not None and probe.start_replies is None and model is not None:
                probe.start(model)

        def on_log(self, args, state, control, logs=None, model=None, **kwargs):
            if logs is None or model is None or "loss" not in logs and "reward" not in logs:
                return
            figures = {k: round(v, 6) for k, v in ({**(extra() if extra else {}),
                                                    **(probe.measure(model) if probe else {})}).items()}
            logs.update(figures)  # what the console shows
            if state.log_history:
                state.log_history[-1].update(figures)  # what training_log.jsonl and the plots read

    return ProbeCallback()
