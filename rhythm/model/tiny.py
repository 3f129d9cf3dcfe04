"""The offline student: a tiny Qwen2-architecture model and a BPE tokenizer trained locally on protocol
text, built deterministically in code (no download), cached, and loadable with ``from_pretrained``.

This module builds it from a corpus of protocol text that the caller gives; the corpus the shipped
students use is written by the built-in agents, one layer up (:mod:`rhythm.agents.tiny`, which also
resolves the names ``rhythm-tiny`` and ``rhythm-tiny-4l``).

The real default student is ``Qwen/Qwen2.5-3B-Instruct``; this one exists so the whole recipe (SFT,
GRPO, eval) runs offline on a CPU in minutes, in tests and in the quickstart. Anywhere a model name
is accepted, ``rhythm-tiny`` means this model (built on first use under ``$RHYTHM_CACHE``, default
``~/.cache/rhythm``).

Protocol tokens: every number the protocol writes (meter values and beliefs ``0.00``-``1.00``, signed
changes and anomalies ``-0.50``-``+0.50``), every action name and the fixed scaffolding of a turn
(``Meters V C P S N:``, ``BELIEF: S=``, ``ACTION:``, ``Tue evening``...) is one added token, and so is
the system prompt, which never changes. A whole week of protocol v2 (system prompt, 28 observations
and replies) is ~1,040 tokens instead of ~5,000, while the text itself stays the readable protocol
every other model reads. (Measured: a from-scratch model of this
size learns the teacher's inference on whole weeks with one token per number, and nothing at all on
the same weeks cut into digits; ``docs/student.md``.)

Two traps, both handled here: for a folder whose config says ``qwen2``, ``AutoTokenizer`` builds
``Qwen2Tokenizer`` with its own NFC normaliser and digit-splitting regex, so the BPE is trained with
exactly that pipeline (ids then match however it is loaded); and the chat template wraps the
assistant's reply *and its* ``<|im_end|>`` in ``{% generation %}`` so assistant-only loss teaches the
model to stop.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from rhythm.env.constants import ACTIONS, ENV_VERSION, EPISODE_STEPS, PROTOCOL_VERSION
from rhythm.env.render import METER_HEADER, when
from rhythm.errors import RhythmError
from rhythm.protocol import SYSTEM_PROMPT
from rhythm.provenance import package_version, versions

TINY_NAME = "rhythm-tiny"
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{{- message.get('context') or '' }}"
    "{%- if message.get('after') %}"
    "{% generation %}{{- message['content'] }}{% endgeneration %}{{- message['after'] + '<|im_end|>' }}"
    "{%- else %}{% generation %}{{- message['content'] + '<|im_end|>' }}{% endgeneration %}{%- endif %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""ChatML, as Qwen2.5 writes it, with generation markers around the assistant's turn and its
``<|im_end|>``. An assistant message may carry ``context`` and ``after`` fields, text written before and
after its content and left out of the loss (``benchmarks/dagger_probe.py sft`` keeps an explored step's
ACTION line in ``after``; the ``<|im_end|>`` is learned only without ``after``); without them the template
is plain ChatML."""


@dataclass(frozen=True)
class TinySpec:
    """Shape of the tiny student; the cache key is a hash of this, the corpus and the code (``tiny_cache_path``)."""

    vocab_size: int = 512
    """BPE merges for free text (system prompt, reasoning); protocol tokens come on top."""
    protocol_tokens: bool = True
    """One token per number, action and turn scaffold (see the module docstring)."""
    hidden_size: int = 128
    intermediate_size: int = 512
    num_hidden_layers: int = 2
    """Two layers learn the quickstart's inference in CPU minutes (``rhythm-tiny``); four
    (``rhythm-tiny-4l``) reach further with an hour or two of training (docs/student.md)."""
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    initializer_range: float = 0.02
    """Qwen's default: right for training every weight. (0.2 only helps a frozen random model under LoRA.)"""
    numeric_init: bool = True
    """Number tokens start with their value written into their embedding (see ``numeric_embeddings``)."""
    seed: int = 0
    corpus_episodes: int = 8
    """Bayes, heuristic and random episodes per condition whose text trains the tokenizer (rhythm.agents.tiny)."""


def cache_dir() -> Path:
    return Path(os.environ.get("RHYTHM_CACHE", Path.home() / ".cache" / "rhythm"))


def protocol_tokens() -> list[str]:
    """The strings the tiny tokenizer keeps whole: numbers, actions and the scaffolding of a turn."""
    values = [f"{i / 100:.2f}" for i in range(101)]
    signed = [f"{s}{i / 100:.2f}" for i in range(51) for s in "+-"]
    words = [*values, *signed, *ACTIONS]
    scaffold = [f". {METER_HEADER}", "\nAfter", ": change", ", anomaly", "\nStart of the week.", "BELIEF: S=", " M=", " W=",
                "\nACTION:", "system\n", "user\n", "assistant\n", *(when(t) for t in range(EPISODE_STEPS))]
    # the system prompt never changes: one token carries it (a model this size could not read it anyway)
    return [SYSTEM_PROMPT, *words, *(" " + w for w in words), *scaffold]


def train_tokenizer(texts: list[str], vocab_size: int, extra_tokens: list[str] | None = None):
    """A byte-level BPE with Qwen2's own normaliser and pre-tokeniser, as a PreTrainedTokenizerFast."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok = Tokenizer(models.BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if extra_tokens:
        from tokenizers import AddedToken

        tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in extra_tokens])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=PAD_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def build_tiny_student(out_dir: str | Path, corpus: list[str], spec: TinySpec = TinySpec()) -> Path:
    """Build a tokenizer trained on ``corpus`` + a randomly initialised Qwen2ForCausalLM into ``out_dir``
    (deterministic: the same corpus and spec give the same files)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    tokenizer = train_tokenizer(corpus, spec.vocab_size, protocol_tokens() if spec.protocol_tokens else None)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        initializer_range=spec.initializer_range,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config)
        if spec.numeric_init:
            numeric_embeddings(model, tokenizer)
    model.generation_config = GenerationConfig(eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, do_sample=False)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    files = {f.name: f.stat().st_size for f in sorted(out.iterdir()) if f.is_file()}  # what a later use checks is whole
    (out / MARK).write_text(json.dumps({"name": TINY_NAME, "spec": asdict(spec), "versions": versions(), "files": files},
                                       indent=2))
    return out


NUMERIC_FREQUENCIES = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
NUMERIC_SCALE = 0.05


def number_value(token: str) -> float | None:
    """The value a protocol number token writes (``0.52``, `` +0.05``), or None for any other token."""
    text = token.strip()
    if not re.fullmatch(r"[+-]?[01]\.\d\d", text):
        return None
    return float(text)


def numeric_embeddings(model, tokenizer) -> int:
    """Write each number token's value into the first dimensions of its (tied) embedding row.

    A from-scratch model otherwise has to discover from data alone that ``0.51`` lies between ``0.50``
    and ``0.52``, hundreds of unrelated rows at once; with the value and a few sinusoids of it in the
    row, neighbouring numbers start out neighbours, as inputs and, through the tied LM head, as
    outputs. The other dimensions keep their random initialisation. Returns the rows written."""
    import math

    import torch

    weight = model.get_input_embeddings().weight
    written = 0
    with torch.no_grad():
        for token, idx in tokenizer.get_added_vocab().items():
            value = number_value(token)
            if value is None:
                continue
            feats = [value]
            for f in NUMERIC_FREQUENCIES:
                feats += [math.sin(math.pi * f * value), math.cos(math.pi * f * value)]
            weight[idx, : len(feats)] = NUMERIC_SCALE * torch.tensor(feats, dtype=weight.dtype)
            written += 1
    return written


def tiny_cache_path(spec: TinySpec, corpus: list[str]) -> Path:
    """Where the tiny student of ``spec`` and ``corpus`` is cached (built or not): a hash of everything it
    is built from (spec, corpus text, protocol tokens, chat template, env and protocol versions, code version,
    this module's source: the tokenizer's training, the architecture and the numeric embeddings; and the versions of
    the libraries that train the tokenizer and draw the initial weights, :data:`BUILT_WITH`)."""

    def digest(texts: list[str]) -> str:
        return hashlib.sha256("\x00".join(texts).encode()).hexdigest()

    payload = {"spec": asdict(spec), "corpus": digest(corpus), "tokens": digest(protocol_tokens()), "template": digest([CHAT_TEMPLATE]),
               "env": ENV_VERSION, "protocol": PROTOCOL_VERSION, "code": package_version(), "build": build_code_digest(),
               "libraries": {k: v.split("+")[0] for k, v in versions(BUILT_WITH).items() if k in BUILT_WITH}, "v": 3}
    key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:10]
    return cache_dir() / f"{TINY_NAME}-{key}"


def build_code_digest() -> str:
    """sha256 of this module's source, so an edit to how the student is built is a new student, not a stale one."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def cached_tiny_student(spec: TinySpec, corpus: list[str]) -> Path:
    """The cached tiny student of ``spec`` and ``corpus``, built on first use (atomically, so parallel callers are
    safe). A cached folder that is not whole (a file missing or cut short since it was built) is built again."""
    final = tiny_cache_path(spec, corpus)
    if is_whole(final):
        return final
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{TINY_NAME}-", dir=final.parent))
    except OSError as err:
        raise RhythmError(f"cannot build the tiny student in {final.parent} ({err.strerror or err}); set RHYTHM_CACHE "
                          "to a folder this user can write") from None
    try:
        build_tiny_student(tmp, corpus, spec)
        readable(tmp)
        if final.exists() and not is_whole(final):  # damaged: set aside, then removed (a reader of the old one keeps its open files)
            with contextlib.suppress(OSError):
                final.rename(stale := tmp.with_name(f"{tmp.name}-stale"))
                shutil.rmtree(stale, ignore_errors=True)
        try:
            tmp.rename(final)
        except OSError:  # another process won the race; theirs is identical
            pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


MARK = "rhythm_tiny.json"
"""Written last into a built student: its spec, versions and the size of every file beside it."""

BUILT_WITH = ("tokenizers", "torch", "transformers")
"""The libraries whose versions decide the built student (its tokenizer's merges, its initial weights); their public
versions (``2.13.0``, not ``2.13.0+cpu``): a CPU and a CUDA build of one torch draw the same weights on the CPU, where
the student is built, and an adapter trained on one machine finds its base on the other."""


def is_whole(folder: Path) -> bool:
    """Whether ``folder`` holds a finished build: its :data:`MARK`, and every file it lists at the size it had."""
    try:
        files = json.loads((folder / MARK).read_text())["files"]
        return all((folder / name).stat().st_size == size for name, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def readable(folder: Path) -> None:
    """Give a build the permissions the user's umask gives new files (``mkdtemp`` makes its folder private): a
    cache shared by several users, or read in a container under another uid, must be readable by them."""
    mask = current_umask()
    folder.chmod(0o777 & ~mask)
    for entry in folder.iterdir():
        entry.chmod((0o777 if entry.is_dir() else 0o666) & ~mask)


def current_umask() -> int:
    """The process's umask, read (Linux) rather than set and restored: another thread's file created meanwhile would
    get the wrong permissions."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


TINY_MODELS = {TINY_NAME: TinySpec(), f"{TINY_NAME}-4l": TinySpec(num_hidden_layers=4)}
"""The tiny students a model name may ask for: ``rhythm-tiny`` (2 layers, the quickstart's) and
``rhythm-tiny-4l`` (4 layers, ``configs/sft-small.yaml``)."""
