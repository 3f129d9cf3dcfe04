"""Class-balanced loss on the action a reply names: ``action_balance`` of ``rhythm sft``.

The bayes teacher plays four actions most of the time and a few others (MEDITATE on ~5% of its in-dist
steps, LEARN and EXERCISE on under 1%) where the person needs them. Plain cross-entropy lets a small
student put ~8% on MEDITATE where the teacher meditates and never pick it (teacher-forced recall 0.00:
``python -m rhythm.eval.teacher_forced MODEL WEEKS --actions``, docs/student.md). Here the loss on the
token that names a reply's action is weighted by ``min(cap, (n_max / n_a) ** balance)``, where ``n_a`` is
how often the training replies name action ``a`` and ``n_max`` the most common action's count: 0 is plain
cross-entropy, 1 weighs every action as much as the most common one in total. Every other token keeps
weight 1, and the loss is still divided by the number of labelled tokens (TRL's normalisation).

It wraps the forward TRL patches for its fused LM head (:func:`weight_action_losses`), so it works with
TRL's own head and with :mod:`rhythm.train.lm_head` alike, on any device; the fused head's entropy and
token accuracy are left as they are. The validation loss is weighted the same way.
"""

from __future__ import annotations

import functools
import re
import types
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rhythm.env.constants import ACTIONS
from rhythm.errors import RhythmError
from rhythm.train.lm_head import trl_patched_model

_LEARNED_ACTION = re.compile(r"ACTION:\s*(" + "|".join(sorted(ACTIONS, key=len, reverse=True)) + r")\b")


def learned_action_counts(rows: Sequence[dict[str, Any]]) -> Counter[str]:
    """How often the learned part (``content``) of the assistant turns of ``rows`` names each action."""
    counts: Counter[str] = Counter()
    for row in rows:
        for m in row["messages"]:
            if m["role"] == "assistant":
                counts.update(_LEARNED_ACTION.findall(m.get("content") or ""))
    return counts


def action_weights(counts: Counter[str], balance: float, cap: float) -> dict[str, float]:
    """``min(cap, (n_max / n_a) ** balance)`` for every action the replies name (see the module doc)."""
    if balance < 0 or cap < 1:
        raise RhythmError(f"action_balance must be >= 0 and action_weight_cap >= 1, got {balance} and {cap}")
    if not counts:
        return {}
    most = max(counts.values())
    return {a: min(cap, (most / n) ** balance) for a, n in sorted(counts.items()) if n > 0}


def action_token_ids(tokenizer: Any) -> dict[str, int]:
    """The token that decides each action name after ``ACTION:``: the first token of `` NAME``.

    Raises when two actions share that token (their losses could not be told apart).
    """
    first = {a: tokenizer(" " + a, add_special_tokens=False)["input_ids"][0] for a in ACTIONS}
    shared = [a for a in ACTIONS if list(first.values()).count(first[a]) > 1]
    if shared:
        raise RhythmError(f"action_balance needs a distinct first token per action name; {', '.join(shared)} share one")
    return first


def weight_action_losses(model: Any, weights: dict[str, float], tokenizer: Any) -> dict[int, float]:
    """Scale the fused head's per-token log-probabilities of action tokens by ``weights``; returns
    ``{token id: weight}``. Call after the trainer is built (and after
    :func:`rhythm.train.lm_head.score_labelled_positions_only`); a model without TRL's patch raises.
    """
    import torch

    ids = action_token_ids(tokenizer)
    by_token = {ids[a]: w for a, w in weights.items() if w != 1.0}
    patched = trl_patched_model(model)
    if patched is None:
        raise RhythmError("action_balance needs TRL's fused LM head on the model (SFTTrainer adds it)")
    if not by_token:
        return by_token
    table = torch.ones(patched.get_output_embeddings().weight.shape[0])
    for token, w in by_token.items():
        table[token] = w
    weight_target_tokens(patched, table)
    return by_token


def weight_target_tokens(model: Any, table: Any) -> None:
    """Scale the fused head's per-token log-probability of every labelled position by ``table[target id]``
    (a vocabulary-sized tensor). ``model`` is the one TRL patched (:func:`rhythm.train.lm_head.trl_patched_model`)."""
    inner = model.forward

    @functools.wraps(inner)
    def forward(self, *args, fused_lm_head=False, labels=None, shift_labels=None, **kwargs):
        out = inner(*args, fused_lm_head=fused_lm_head, labels=labels, shift_labels=shift_labels, **kwargs)
        if not fused_lm_head or (labels is None and shift_labels is None):
            return out
        target = shift_labels if shift_labels is not None else labels[:, 1:]
        w = table.to(out.log_probs.device)[target.clamp(min=0)].to(out.log_probs.dtype)
        out.log_probs = out.log_probs * w  # zero stays zero on positions without a label
        return out

    model.forward = types.MethodType(forward, model)
