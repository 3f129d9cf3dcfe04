"""The loss's forward pass with each prompt encoded once equals TRL's pass over every row whole."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.train.grpo.shared_prompts import prompt_groups, shared_prompt_logps


@pytest.fixture(scope="module")
def fused_model(sft_model):
    """The SFT student with TRL's fused LM head, as ``GRPOTrainer`` patches it (at temperature 0.7: TRL divides by it)."""
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    model = AutoModelForCausalLM.from_pretrained(sft_model)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    return model.train()


def batch(vocab: int, prompt_lengths: list[int], replies: int, reply_length: int, seed: int):
    """TRL's layout: each prompt left-padded to the longest and repeated ``replies`` times, then the replies, right-padded
    (a reply that ended early has pads after its end); the rows shuffled, as TRL shuffles a generation batch."""
    import torch

    g = torch.Generator().manual_seed(seed)
    width, rows = max(prompt_lengths), len(prompt_lengths) * replies
    ids = torch.zeros((rows, width + reply_length), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for p, n in enumerate(prompt_lengths):
        prompt = torch.randint(5, vocab, (n,), generator=g)
        for r in range(p * replies, (p + 1) * replies):
            ids[r, width - n : width], mask[r, width - n :] = prompt, 1
            ids[r, width:] = torch.randint(5, vocab, (reply_length,), generator=g)
            ended = int(torch.randint(1, reply_length + 1, (1,), generator=g))
            mask[r, width + ended :] = 0
    order = torch.randperm(rows, generator=g)
    return ids[order], mask[order]


def trl_pass(model, ids, mask, keep, entropy=True):
    """TRL's own ``_get_per_token_logps_and_entropies`` (its ``self`` needs only ``accelerator.autocast`` and, for
    its profiling wrapper, ``accelerator.is_main_process``)."""
    from trl import GRPOTrainer

    me = SimpleNamespace(accelerator=SimpleNamespace(autocast=contextlib.nullcontext, is_main_process=True))
    logps, entropies, _ = GRPOTrainer._get_per_token_logps_and_entropies(me, model, ids, mask, keep, compute_entropy=entropy)
    return logps, entropies


def gradients(model) -> list:
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    return grads


@pytest.mark.parametrize("max_rows", [None, 5])
def test_shared_prompts_give_trls_logprobs_entropies_and_gradients(fused_model, max_rows):
    import torch

    model = fused_model
    ids, mask = batch(model.config.vocab_size, [37, 120, 64, 120], replies=4, reply_length=6, seed=0)
    ids[:, -1] = ids[0, -1]  # two different prompts of one length stay apart
    model.zero_grad()
    theirs, their_entropy = trl_pass(model, ids, mask, 6)
    ((theirs * mask[:, -6:]).sum() + their_entropy.sum()).backward()
    their_grads = gradients(model)
    ours, our_entropy = shared_prompt_logps(model, ids, mask, 6, compute_entropy=True, max_rows=max_rows)
    ((ours * mask[:, -6:]).sum() + our_entropy.sum()).backward()
    our_grads = gradients(model)
    real = mask[:, -6:].bool()
    assert torch.allclose(ours[real], theirs[real], atol=1e-4)
    assert torch.allclose(our_entropy[real], their_entropy[real], atol=1e-4)
    assert (ours[~real] == 0).all() and ours.shape == theirs.shape  # a reply's pads score nothing, as in TRL's pass
    assert len(our_grads) == len(their_grads)
    for a, b in zip(our_grads, their_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-5)


def test_a_one_token_prompt_is_scored_without_a_cache(fused_model):
    import torch

    ids, mask = batch(fused_model.config.vocab_size, [1, 1], replies=3, reply_length=4, seed=1)
    with torch.no_grad():
        theirs, _ = trl_pass(fused_model, ids, mask, 4, entropy=False)
        ours, entropy = shared_prompt_logps(fused_model, ids, mask, 4)
    assert entropy is None and torch.allclose(ours, theirs, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=12), st.lists(st.integers(0, 1), min_size=12, max_size=12))
def test_prompt_groups_number_prompts_by_first_appearance(labels, pads):
    import torch

    prompts = torch.tensor([[label, label + 1] for label in labels])
    masks = torch.tensor([[pads[label], 1] for label in labels])  # a prompt's mask is its own: equal prompts, equal masks
    first, inverse = prompt_groups(prompts, masks)
    seen = list(dict.fromkeys(labels))
    assert [labels[i] for i in first.tolist()] == seen
    assert inverse.tolist() == [seen.index(label) for label in labels]
    assert (prompts[first[inverse]] == prompts).all()
