"""The observations in the SFT loss, at a weight: ``observation_loss`` of ``rhythm sft``.

Assistant-only loss teaches the student what to *say*; nothing in it makes the student *look*. Measured on
the quickstart's 2-layer student (docs/student.md): at the position where it names its action, a linear
read-out of its state misses the serenity meter entirely in the crash-prone zone (error 0.28 where the
meter is below 0.2), so it never meditates where the teacher does, and an extreme person's serenity
crashes. With the week's observations in the loss as well, the student must predict each next observation
(the meters after its action, the change, the anomaly): a model of the person's dynamics, which cannot be
learned without reading the meters. At 0.1 in the quickstart's stage 1 its serenity read-out goes from
R^2 0.32 to 0.52-0.58 and it scores better in-dist and discrete; ood is unchanged (train split, two seeds).
The replies keep weight 1; every other token of the week (the system
prompt, the observations, the chat markup) gets ``observation_loss``: 0 is TRL's assistant-only loss, 1
the plain language-model loss over the whole week. The loss is still divided by the number of labelled
tokens (TRL's normalisation), now the week's.

``echo_loss`` treats one part of each observation apart: the action name it echoes (``After DEEP_WORK:``,
the reply before it). At 1 (labelled as a reply) the quickstart's student reads the serenity meter at R^2
0.78-0.80 instead of 0.52-0.58, meditates where the teacher does, and scores better ood at two train-split
seeds (docs/student.md, rows EC and ECs1); why is not measured. Those tokens are found on the rendered
text through the tokenizer's character offsets (:func:`echo_tokens`).

A weight between 0 and 1 travels in the labels: an observation token's label is written as
``OFFSET - id`` (always below -100, TRL's ignore index) and :func:`weight_observation_losses` decodes it
inside the forward that TRL patches for its fused LM head, scaling that token's log-probability. Every
count TRL takes of labelled tokens (``labels != -100``) includes it. A model without the wrapper fails
loudly on such a label instead of ignoring it.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Sequence
from typing import Any

from rhythm.env.render import ECHOED_ACTION
from rhythm.errors import RhythmError
from rhythm.train.lm_head import trl_patched_model

OFFSET = -1000
"""An observation token ``id`` is labelled ``OFFSET - id``: below -100 whatever the vocabulary."""


def week_labels(
    ids: Sequence[int], assistant_mask: Sequence[int], weight: float,
    echo_mask: Sequence[int] | None = None, echo_weight: float | None = None,
) -> list[int]:
    """Labels for one tokenized week: replies as their ids; every other token ignored (-100) at weight 0,
    its id at weight 1, and ``OFFSET - id`` in between (see the module doc). Tokens in ``echo_mask`` (an
    observation's echo of the action before it, :func:`echo_tokens`) get ``echo_weight`` instead, which is
    0, 1 or ``weight`` (None: ``weight``)."""
    if not 0.0 <= weight <= 1.0:
        raise RhythmError(f"observation_loss must be in [0, 1], got {weight}")
    if echo_weight is not None and echo_weight not in (0.0, 1.0, weight):
        raise RhythmError(f"echo_loss must be 0, 1 or observation_loss ({weight}), got {echo_weight}")
    echo_mask = echo_mask if echo_weight is not None and echo_mask is not None else [0] * len(ids)

    def label(token: int, w: float) -> int:
        return -100 if w == 0.0 else token if w == 1.0 else OFFSET - token

    return [t if m else label(t, echo_weight if e else weight)
            for t, m, e in zip(ids, assistant_mask, echo_mask, strict=True)]


def echo_tokens(text: str, offsets: Sequence[tuple[int, int]]) -> list[int]:
    """1 for each token (given by its character ``offsets`` in ``text``) that overlaps the action name an
    observation echoes (``After DEEP_WORK:``), else 0."""
    import numpy as np

    starts, ends = np.asarray(offsets, dtype=np.int64).reshape(-1, 2).T
    mask = np.zeros(len(starts), dtype=bool)
    for m in ECHOED_ACTION.finditer(text):
        s, e = m.span(1)
        mask |= (starts < e) & (s < ends)
    return mask.astype(int).tolist()


def weight_observation_losses(model: Any, weight: float) -> bool:
    """Decode :func:`week_labels`' observation labels in the fused-head forward and scale their
    log-probabilities by ``weight``; returns whether a wrapper was installed (only for 0 < weight < 1).
    Install it after every other wrapper of the forward (it must see the labels first); a model without
    TRL's patch raises."""
    import torch

    if not 0.0 < weight < 1.0:
        return False
    model = trl_patched_model(model)
    if model is None:
        raise RhythmError("observation_loss between 0 and 1 needs TRL's fused LM head on the model (SFTTrainer adds it)")
    inner = model.forward

    def decode(labels: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if labels is None:
            return None, None
        observed = labels <= OFFSET
        return torch.where(observed, OFFSET - labels, labels), observed

    @functools.wraps(inner)
    def forward(self, *args, fused_lm_head=False, labels=None, shift_labels=None, **kwargs):
        labels, observed = decode(labels)
        shift_labels, shift_observed = decode(shift_labels)
        out = inner(*args, fused_lm_head=fused_lm_head, labels=labels, shift_labels=shift_labels, **kwargs)
        if not fused_lm_head or (observed is None and shift_observed is None):
            return out
        mask = shift_observed if shift_observed is not None else observed[:, 1:]
        scale = torch.where(mask.to(out.log_probs.device), weight, 1.0).to(out.log_probs.dtype)
        out.log_probs = out.log_probs * scale
        return out

    model.forward = types.MethodType(forward, model)
    return True
