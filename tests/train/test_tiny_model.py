"""The tiny student's build: number tokens start with their value in their embedding; named variants."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.model.tiny import TINY_MODELS, TINY_NAME, TinySpec, number_value, resolve_model


@settings(deadline=None)
@given(st.integers(0, 100))
def test_number_value_reads_meters_and_beliefs(i):
    text = f"{i / 100:.2f}"
    assert number_value(text) == pytest.approx(i / 100) and number_value(" " + text) == pytest.approx(i / 100)


@settings(deadline=None)
@given(st.integers(0, 50), st.sampled_from("+-"))
def test_number_value_reads_signed_changes(i, sign):
    assert number_value(f"{sign}{i / 100:.2f}") == pytest.approx(i / 100 * (1 if sign == "+" else -1))


@pytest.mark.parametrize("token", ["SOCIALIZE", "BELIEF: S=", "0.5", "1.000", "2.00", "x0.50", "<|im_end|>", ""])
def test_number_value_is_none_for_anything_else(token):
    assert number_value(token) is None


def test_numeric_init_orders_number_tokens_and_leaves_the_rest(tmp_path, rhythm_cache):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rhythm.model.tiny import build_tiny_student

    plain, numeric = tmp_path / "plain", tmp_path / "numeric"
    build_tiny_student(plain, TinySpec(numeric_init=False))
    build_tiny_student(numeric, TinySpec(numeric_init=True))
    tok = AutoTokenizer.from_pretrained(numeric)
    emb = {name: AutoModelForCausalLM.from_pretrained(p).get_input_embeddings().weight.detach() for name, p in
           (("plain", plain), ("numeric", numeric))}
    ids = tok.convert_tokens_to_ids
    rows = emb["numeric"]
    # neighbours are nearer than far numbers, the spaced and bare forms of a number share their value
    near = torch.dist(rows[ids("0.50")], rows[ids("0.51")])
    far = torch.dist(rows[ids("0.50")], rows[ids("0.90")])
    assert near < far
    assert torch.equal(rows[ids("0.51"), :13], rows[ids(" 0.51"), :13])
    # every other token keeps its random row, identical to the plain build's (same seed)
    for token in ("SOCIALIZE", "BELIEF: S=", "<|im_end|>"):
        assert torch.equal(rows[ids(token)], emb["plain"][ids(token)])
    assert not torch.equal(rows[ids("0.50")], emb["plain"][ids("0.50")])


def test_named_tiny_students():
    assert TINY_MODELS[TINY_NAME].num_hidden_layers == 2 and TINY_MODELS[f"{TINY_NAME}-4l"].num_hidden_layers == 4
    assert resolve_model("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"
