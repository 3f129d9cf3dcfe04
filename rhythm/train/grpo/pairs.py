"""Branch mode's ``group: pair``: each state's group is the policy's own choice and its runner-up.

A greedy policy's scores change only where its argmax changes, so the comparison that can move eval is
between the action it plays and the one it would play next: what the policy's greedy reply says before its
action (the belief line; a reasoning student's reasoning too) followed by its most likely and its second most
likely action (each action's log-probability summed over its tokens after that). Both replies share it, the
person and the futures they are played under, so their score difference is what the action did. Sampled groups
(``group: sampled``) mostly hold one action at a peaked student and compare it with actions it never plays
(docs/grpo-ablation.md, fourth round).

``agreed`` keeps a pair's two rewards only where its futures agree on the sign of the difference (the
runner-up's gain at least ``z`` standard errors from 0); elsewhere the two get their mean, no gradient.
One future's difference is mostly luck, and a pair's update is not symmetric in effect: an update in
the runner-up's favour flips the greedy action at that state and at states like it.

``challenger: restore`` replaces the runner-up where a meter runs low: a student that never plays an action
(the few-teacher-weeks student never meditates, and lets serenity crash; docs/grpo-ablation.md, seventh round) never
has it as its runner-up either, so the pair never asks whether it pays. :func:`rhythm.agents.restore.restoring_action` names, for
the lowest low meter that one action can keep off the crash line, the action that raises it most by the env's
published neutral effects (at night only SLEEP), read off the state the student sees; the futures, not the
rule, decide whether it wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rhythm.env.constants import ACTION_INDEX, ACTIONS
from rhythm.protocol import before_action
from rhythm.train.grpo.probe import greedy_replies, reply_logprobs


def action_candidates(tokenizer: Any, greedy_text: str, stop_id: int) -> list[list[int]]:
    """Token ids of what the greedy reply says before its action (:func:`rhythm.protocol.before_action`: the belief
    line of a student that writes the protocol lines alone, the reasoning too of one that reasons) followed by each
    action's line, one per action (stop token last), in :data:`ACTIONS` order."""
    head = before_action(greedy_text)
    head = f"{head}\n" if head else ""
    return [tokenizer(f"{head}ACTION: {a}", add_special_tokens=False)["input_ids"] + [stop_id] for a in ACTIONS]


def shared_prefix(rows: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix every row starts with."""
    n = min(len(r) for r in rows)
    for k in range(n):
        if len({r[k] for r in rows}) > 1:
            return k
    return n


def action_logprobs(model: Any, prompt_ids: Sequence[int], candidates: Sequence[Sequence[int]], pad_id: int) -> np.ndarray:
    """Each candidate's log-probability after the prompt, summed over its tokens past the shared prefix
    (the action's own tokens; the stop token excluded)."""
    import torch

    start = shared_prefix(candidates)
    with torch.no_grad():
        lps = reply_logprobs(model, [prompt_ids] * len(candidates), candidates, pad_id)
    out = []
    for c, lp in zip(candidates, lps, strict=True):
        pos = torch.arange(start, len(c) - 1, device=lp.device)
        out.append(float(lp[pos, torch.tensor(c[start:-1], device=lp.device)].sum()))
    return np.asarray(out)


def pair_replies(model: Any, tokenizer: Any, prompt_ids: Sequence[Sequence[int]], pad_id: int, stop_ids: Sequence[int],
                 max_new_tokens: int, challengers: Sequence[str | None] | None = None) -> list[list[int]]:
    """Two replies per prompt, in order (prompt 0's pair, prompt 1's, ...): the greedy reply's part before its
    action with the policy's most likely action, then with ``challengers[n]`` where one is named and differs from
    it, else with the policy's runner-up."""
    greedy = greedy_replies(model, prompt_ids, pad_id, stop_ids, max_new_tokens)
    texts = tokenizer.batch_decode([[t for t in g if t not in stop_ids] for g in greedy], skip_special_tokens=True)
    out = []
    for n, (ids, text) in enumerate(zip(prompt_ids, texts, strict=True)):
        candidates = action_candidates(tokenizer, text, stop_ids[0])
        order = np.argsort(-action_logprobs(model, ids, candidates, pad_id), kind="stable")
        second = int(order[1])
        named = challengers[n] if challengers is not None else None
        if named is not None and ACTION_INDEX[named] != int(order[0]):
            second = ACTION_INDEX[named]
        out += [candidates[order[0]], candidates[second]]
    return out


def agreed(first: Sequence[float], second: Sequence[float], z: float) -> bool:
    """Whether two replies' scores under the same futures (``first[d]``, ``second[d]``: future ``d``) differ
    by at least ``z`` standard errors of their per-future difference. A difference that is the same under every
    future (its spread no more than rounding) is agreement when it is not 0, at any ``z``."""
    diff = np.asarray(second, dtype=float) - np.asarray(first, dtype=float)
    if len(diff) < 2:
        return False
    mean, se = float(diff.mean()), float(diff.std(ddof=1) / np.sqrt(len(diff)))
    if se <= 1e-9 * max(1.0, abs(mean)):  # every future moves both replies alike
        return abs(mean) > 1e-12
    return abs(mean) >= z * se


def agreed_rewards(rewards: Sequence[float], draws: Sequence[Sequence[float]], z: float) -> tuple[list[float], int]:
    """Rewards of consecutive pairs (0-1, 2-3, ...) with each pair whose futures do not agree (:func:`agreed`)
    set to its mean; returns the rewards and the number of pairs kept."""
    out = [float(r) for r in rewards]
    kept = 0
    for i in range(0, len(out) - 1, 2):
        if agreed(draws[i], draws[i + 1], z):
            kept += 1
        else:
            out[i] = out[i + 1] = (out[i] + out[i + 1]) / 2
    return out, kept
