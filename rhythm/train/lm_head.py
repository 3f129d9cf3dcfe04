"""TRL's fused LM head, scoring only the positions that have a label on devices without Triton.

``SFTTrainer`` patches the model so that ``model(..., labels=..., fused_lm_head=True)`` returns per-token
log-probabilities without materialising the logits (``trl.trainer.utils.add_fused_lm_head``). On a GPU
with Triton it projects only the positions whose label is not -100; elsewhere (the CPU) it projects
*every* position, to keep tile shapes fixed for compilers that recompile on a new shape. The tiny
student's loss falls on its replies, about a fifth of a week's tokens, so on the CPU that head did ~4.5x
the work it needs: the quickstart's stage-1 step went from 0.72 s to 0.53 s without it (docs/student.md).

:func:`score_labelled_positions_only` wraps the patched forward so that, on the CPU, the same TRL
kernel (``trl.kernels.ChunkedLogProbFunction``) runs on the labelled positions only, as TRL does on
Triton devices. Every other call (no fused head, pre-shifted labels, MoE router logits, a GPU, weights in
half precision) goes to TRL's forward unchanged. GRPO's trainer gets the same (it scores a reply of ~9
tokens after a prompt of up to a whole week).
"""

from __future__ import annotations

import functools
import types
from typing import Any

SFT_OUTPUTS = ("log_probs", "entropy", "is_top1")
"""The per-token fields ``SFTTrainer`` asks its fused head for (the loss, entropy and token accuracy)."""
_CHUNK = 32768  # vocabulary tile of the kernel, as TRL's own
_TRL_ONLY = ("final_logit_softcapping", "output_router_logits", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")
"""Config keys of models whose head TRL scales, caps or pairs with a router loss: those keep TRL's forward."""


def trl_patched_model(model: Any) -> Any | None:
    """The model whose forward TRL patched with its fused LM head (under a PEFT wrapper, the base model),
    or None when it has none."""
    from peft import PeftModel

    if isinstance(model, PeftModel):
        model = model.get_base_model()
    patched = getattr(model.forward, "__func__", None)
    return model if patched is not None and "fused_lm_head" in patched.__code__.co_varnames else None


def score_labelled_positions_only(model: Any, outputs: tuple[str, ...] = SFT_OUTPUTS, temperature: float = 1.0) -> None:
    """Make ``model``'s TRL fused head score only labelled positions on the CPU (see the module doc).

    ``model`` is the trainer's model (under a PEFT wrapper, the base model is the one TRL patched); ``outputs`` and
    ``temperature`` are what the trainer gave TRL's patch (``SFTTrainer``: :data:`SFT_OUTPUTS` at 1.0;
    ``GRPOTrainer``: log_probs and entropy at its sampling temperature). Call it after the trainer is
    built; a model without TRL's patch is left alone.
    """
    import torch
    from trl.kernels import ChunkedLogProbFunction
    from trl.trainer.utils import FusedCausalLMOutput

    model = trl_patched_model(model)
    if model is None:
        return
    fused_forward = model.forward
    text_config = model.config.get_text_config()
    if any(getattr(text_config, key, None) not in (None, False) for key in _TRL_ONLY):
        return  # TRL's forward handles those; the tiny student and Qwen2.5 have none

    @functools.wraps(type(model).forward)
    def forward(self, *args, fused_lm_head=False, labels=None, shift_labels=None, num_items_in_batch=None, **kwargs):
        head = self.get_output_embeddings()
        weight = head.weight
        if not fused_lm_head or labels is None or shift_labels is not None or weight.device.type != "cpu" or weight.dtype != torch.float32:
            return fused_forward(*args, fused_lm_head=fused_lm_head, labels=labels, shift_labels=shift_labels,
                                 num_items_in_batch=num_items_in_batch, **kwargs)
        kwargs["use_cache"] = False
        hidden = self.base_model(*args, **kwargs).last_hidden_state[:, :-1]
        labels = labels[:, 1:].to(hidden.device)
        mask = labels != -100
        per_token = ChunkedLogProbFunction.apply(hidden[mask], weight, head.bias, labels[mask], temperature, _CHUNK, None, 1.0, outputs)
        # masked_scatter keeps the output connected to the model when no label is valid (TRL does the same)
        log_probs, entropy, _, _, is_top1 = (None if x is None else x.new_zeros(mask.shape).masked_scatter(mask, x) for x in per_token)
        loss = -log_probs.sum() / (mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch)
        return FusedCausalLMOutput(loss=loss, log_probs=log_probs, entropy=entropy, is_top1=is_top1, label_mask=mask)

    model.forward = types.MethodType(forward, model)
