"""The tiny student's build: number tokens start with their value in their embedding; named variants; its
cache key covers everything it is built from."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rhythm.agents.teachers as teachers
import rhythm.model.tiny as tiny
from rhythm.agents.tiny import _corpus, protocol_corpus, resolve_model
from rhythm.model.tiny import TINY_MODELS, TINY_NAME, TinySpec, number_value, tiny_cache_path


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
    corpus = protocol_corpus(TinySpec())
    build_tiny_student(plain, corpus, TinySpec(numeric_init=False))
    build_tiny_student(numeric, corpus, TinySpec(numeric_init=True))
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


@pytest.fixture
def fresh_corpus():
    """The corpus is memoised per process; a test that changes what the agents write starts and ends clean."""
    _corpus.cache_clear()
    yield
    _corpus.cache_clear()


def _key() -> str:
    return tiny_cache_path(TinySpec(), protocol_corpus(TinySpec())).name


def test_a_changed_teacher_sentence_builds_a_fresh_tiny_student(monkeypatch, fresh_corpus, rhythm_cache):
    before = _key()
    plan = teachers._plan_sentence
    monkeypatch.setattr(teachers, "_plan_sentence", lambda *args: plan(*args).replace("Plan:", "Planned:"))
    _corpus.cache_clear()
    assert any("Planned:" in text for text in protocol_corpus(TinySpec()))
    assert _key() != before


@pytest.mark.parametrize("name, value", [("ENV_VERSION", "rhythm-v999"), ("PROTOCOL_VERSION", 999), ("package_version", lambda: "9.9.9"),
                                         ("build_code_digest", lambda: "an edited build")])
def test_env_protocol_and_code_versions_are_in_the_tiny_cache_key(monkeypatch, rhythm_cache, name, value):
    before = _key()
    monkeypatch.setattr(tiny, name, value)
    assert _key() != before


@pytest.mark.slow  # > 3 s on 2 cores: two fresh interpreters build the corpus
def test_the_tiny_cache_key_is_stable_and_follows_the_spec(rhythm_cache):
    """The key a later process computes is this one (whatever its hash seed: sets and dicts may iterate otherwise),
    so a cached student is found again; another spec is another key."""
    code = ("from rhythm.agents.tiny import protocol_corpus; from rhythm.model.tiny import TinySpec, tiny_cache_path; "
            "print(tiny_cache_path(TinySpec(), protocol_corpus(TinySpec())).name)")
    keys = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed}, check=True,
                           capture_output=True, text=True).stdout.strip() for seed in ("1", "2")}
    assert keys == {_key()}
    assert tiny_cache_path(TinySpec(seed=1), protocol_corpus(TinySpec())).name != _key()


def test_the_libraries_that_build_the_student_are_in_the_tiny_cache_key(monkeypatch, rhythm_cache):
    before = _key()
    real = tiny.versions
    monkeypatch.setattr(tiny, "versions", lambda names=(): {**real(names), "transformers": "0.0.1"})
    assert _key() != before


SMALL_CORPUS = ["Mon morning. Meters V C P S N: 0.50 0.40 0.30 0.60 0.70", "BELIEF: S=0.50 M=0.50 W=0.50\nACTION: REST"]


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """An empty cache of this test's own, and a build of a tiny corpus in it (seconds, not the shipped corpus's)."""
    monkeypatch.setenv("RHYTHM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("damage", ["truncate", "remove", "no mark"])
def test_a_damaged_cached_student_is_built_again(own_cache, damage):
    from transformers import AutoModelForCausalLM

    first = tiny.cached_tiny_student(TinySpec(), SMALL_CORPUS)
    weights = first / "model.safetensors"
    intact = weights.read_bytes()
    if damage == "truncate":
        weights.write_bytes(intact[: len(intact) // 2])
    elif damage == "remove":
        weights.unlink()
    else:
        (first / tiny.MARK).unlink()
    assert not tiny.is_whole(first)
    again = tiny.cached_tiny_student(TinySpec(), SMALL_CORPUS)
    assert again == first and tiny.is_whole(again) and weights.read_bytes() == intact  # the same build, whole
    AutoModelForCausalLM.from_pretrained(again)
    assert [p.name for p in own_cache.iterdir()] == [first.name]  # no temporary or set-aside folder left


def test_the_cached_student_is_readable_by_others_as_the_umask_allows(own_cache):
    import os
    import stat

    old = os.umask(0o022)
    try:
        built = tiny.cached_tiny_student(TinySpec(), SMALL_CORPUS)
    finally:
        os.umask(old)
    assert stat.S_IMODE(built.stat().st_mode) == 0o755
    assert {stat.S_IMODE(f.stat().st_mode) for f in built.iterdir()} == {0o644}


def test_a_cache_that_cannot_be_written_is_one_line_naming_rhythm_cache(tmp_path, monkeypatch):
    from rhythm.errors import RhythmError

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("RHYTHM_CACHE", str(tmp_path / "file" / "cache"))  # under a file: not even root can write it
    with pytest.raises(RhythmError, match=r"cannot build the tiny student in .*file/cache .*set RHYTHM_CACHE"):
        tiny.cached_tiny_student(TinySpec(), SMALL_CORPUS)
