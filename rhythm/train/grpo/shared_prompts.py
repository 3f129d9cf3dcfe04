"""The loss's forward pass with each prompt encoded once for the replies that share it.

A GRPO batch holds ``num_generations`` replies to each prompt, and TRL's loss runs the model over every row whole:
prompt and reply. Here a prompt is a state's week so far (hundreds of tokens) and a reply a dozen, so nearly all of
that work encodes the same prompt ``num_generations`` times. :func:`shared_prompt_logps` runs each distinct prompt
once, keeps its keys and values (with their graph: the gradient reaches the prompt's positions, as in TRL's pass),
gives every row its prompt's cache, and runs the replies through TRL's fused LM head: the same log-probabilities
and entropies as TRL's ``_get_per_token_logps_and_entropies``, up to float rounding (a test holds them and their
gradients equal), on the quickstart's branch stage in about a tenth of the time (``benchmarks/bench_grpo.py``).

It applies where one process trains and no activation checkpointing recomputes the pass (both need the single
forward TRL runs); elsewhere, and for inputs it does not know (images, MoE auxiliary losses), TRL's own pass runs.
"""

from __future__ import annotations

from typing import Any


def prompt_groups(prompts: Any, masks: Any) -> tuple[Any, Any]:
    """``(first, inverse)``: the row of each distinct (prompt, mask) pair, in order of first appearance, and each
    row's index among them."""
    import torch

    rows = torch.cat([prompts, masks], dim=1)
    _, inverse = torch.unique(rows, dim=0, return_inverse=True)
    order: dict[int, int] = {}
    for i, u in enumerate(inverse.tolist()):
        order.setdefault(u, i)
    first = list(order.values())
    renumber = {u: k for k, u in enumerate(order)}
    return torch.tensor(first), torch.tensor([renumber[u] for u in inverse.tolist()])


def shared_prompt_logps(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int,
                        compute_entropy: bool = False, max_rows: int | None = None) -> tuple[Any, Any]:
    """Per-token log-probabilities (and entropies) of the last ``logits_to_keep`` tokens of each row, as TRL's
    ``_get_per_token_logps_and_entropies`` returns them: ``model`` carries TRL's fused LM head, the rows are TRL's
    left-padded prompts followed by the replies. Rows are taken a few prompts at a time, at most ``max_rows``
    rows each (a single prompt's rows at least)."""
    import torch
    from transformers import DynamicCache

    k = int(logits_to_keep)
    width = input_ids.size(1) - k  # the prompt columns; the last of them is a real token of every row
    first, inverse = prompt_groups(input_ids[:, :width], attention_mask[:, :width])
    chunks, rows_so_far = [[]], 0
    for u in range(len(first)):
        size = int((inverse == u).sum())
        if chunks[-1] and max_rows is not None and rows_so_far + size > max_rows:
            chunks.append([])
            rows_so_far = 0
        chunks[-1].append(u)
        rows_so_far += size
    logps, entropies, order = [], [], []
    for chunk in chunks:
        rows = torch.cat([torch.nonzero(inverse == u).flatten() for u in chunk])
        local = torch.tensor([chunk.index(int(inverse[r])) for r in rows])
        cache = DynamicCache(config=model.config)
        heads = first[chunk]
        if width > 1:  # the prompts less their last token, once each: it goes with the replies, to predict the first
            model(input_ids=input_ids[heads, : width - 1], attention_mask=attention_mask[heads, : width - 1],
                  past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache.batch_select_indices(local.to(input_ids.device))
        tail = input_ids[rows, width - 1 :]
        labels = tail.masked_fill(attention_mask[rows, width - 1 :] == 0, -100)
        out = model(input_ids=tail, attention_mask=attention_mask[rows], past_key_values=cache if width > 1 else None,
                    labels=labels, fused_lm_head=True)
        logps.append(out.log_probs[:, -k:])
        if compute_entropy:
            entropies.append(out.entropy[:, -k:])
        order.append(rows)
    back = torch.argsort(torch.cat(order)).to(input_ids.device)
    return torch.cat(logps)[back], (torch.cat(entropies)[back] if compute_entropy else None)


def sharing_prompts(trainer_cls: type) -> type:
    """``trainer_cls`` (TRL's ``GRPOTrainer`` or a subclass) whose loss encodes each prompt once
    (:func:`shared_prompt_logps`) where one process trains without activation checkpointing."""
    from accelerate.utils import DistributedType

    from rhythm.train.common import checkpointing_name

    class SharedPromptTrainer(trainer_cls):
        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                               compute_entropy=False, compute_aux_loss=False, **inputs):
            own = (not compute_aux_loss and all(v is None for v in inputs.values())
                   and self.accelerator.distributed_type == DistributedType.NO
                   and not getattr(self.args, checkpointing_name(), False))
            if not own:
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                    compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **inputs)
            with self.accelerator.autocast():
                logps, entropies = shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep,
                                                       compute_entropy=compute_entropy, max_rows=batch_size)
            return logps, entropies, None

    return SharedPromptTrainer
