"""The student as an agent: a causal LM that plays the benchmark through the text protocol.

Run it with ``rhythm eval --agent model:PATH``. PATH is a local directory, a Hub id, or ``rhythm-tiny``
(the offline tiny student). A directory (or Hub repo) holding ``adapter_config.json`` is a PEFT LoRA
adapter: it is loaded onto its base model (``ModelOptions.base_model``, else the adapter's own
``base_model_name_or_path``) and merged for inference. The tokenizer comes from the adapter when it
ships one, else from the base.

All live episodes advance in lockstep: every step is one batched ``generate`` over every live
episode's prompt (in chunks of ``ModelOptions.batch_size``), left-padded, greedy unless
``do_sample`` is set (then seeded per step, so a run is reproducible). The system prompt is the same
in every prompt, so its key/value cache is computed once and shared by every call; the rest of each
prompt is padded between that prefix and itself, and position ids follow the attention mask, so
each episode sees exactly the tokens it would see alone (a test holds batched replies equal to
one-at-a-time replies). Batches decode into a preallocated (static) cache where the model supports
one. Decoding settings come from ``ModelOptions`` alone (no repetition penalty or sampling defaults
from a model card). Replies go through
:func:`rhythm.protocol.parse_reply`; a reply that never parses gets the fallback action and counts
as a parse failure, never an error. bf16 on a CUDA GPU, fp16 on Apple MPS, fp32 on CPU; the device is
picked automatically (cuda > mps > cpu) unless ``ModelOptions.device`` names one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rhythm.agents.base import BatchObservation, Decision, EpisodeSpec
from rhythm.errors import RhythmError
from rhythm.protocol import SYSTEM_PROMPT, chat_messages, parse_reply

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from rhythm.eval.evaluate import ModelOptions

ADAPTER_CONFIG = "adapter_config.json"
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")
"""End-of-turn markers of common chat templates; any that the tokenizer knows also stops generation."""


@dataclass
class ModelSource:
    """Where the weights came from (``agent.source``): what was loaded, from where, on which device."""

    path: str
    base: str
    adapter: str | None = None
    tokenizer: str = ""
    device: str = "cpu"
    dtype: str = "float32"


def pick_device(requested: str = "auto") -> str:
    """``auto`` -> cuda if available, else mps, else cpu; anything else is checked and returned."""
    import torch

    if requested == "auto":
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return "mps"
        return "cpu"
    kind = requested.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise RhythmError(f"device {requested!r} requested but CUDA is not available; use --set model.device=cpu")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise RhythmError(f"device {requested!r} requested but MPS is not available; use --set model.device=cpu")
    if kind not in ("cpu", "cuda", "mps", "xpu"):
        raise RhythmError(f"unknown device {requested!r}; expected auto, cpu, cuda, cuda:N or mps")
    return requested


def pick_dtype(requested: str, device: str) -> torch.dtype:
    """``auto`` -> bfloat16 on CUDA (float16 where bf16 is unsupported), float16 on MPS, float32 on CPU."""
    import torch

    if requested == "auto":
        kind = device.split(":")[0]
        if kind == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if kind == "mps":
            return torch.float16
        return torch.float32
    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if requested not in names:
        raise RhythmError(f"unknown dtype {requested!r}; expected auto, float32, bfloat16 or float16")
    return names[requested]


def _looks_local(path: str) -> bool:
    """A path that cannot be a Hub id (``org/name`` or ``name``)."""
    return path.startswith((".", "/", "~")) or path.count("/") > 1 or "\\" in path


def adapter_config(path: str) -> dict[str, Any] | None:
    """The PEFT adapter config of ``path`` (local dir or Hub id), or None if it is a full model."""
    local = Path(path).expanduser()
    if local.is_dir():
        cfg = local / ADAPTER_CONFIG
        return _read_json(cfg) if cfg.is_file() else None
    from transformers.utils.peft_utils import find_adapter_config_file

    try:
        found = find_adapter_config_file(path)
    except Exception:  # noqa: BLE001 - unreachable Hub: treat as a full model; loading it says why
        return None
    return _read_json(Path(found)) if found else None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise RhythmError(f"{path}: cannot read adapter config ({err})") from None
    if not isinstance(data, dict):
        raise RhythmError(f"{path}: adapter config is not a JSON object")
    return data


def resolve_base(name: str) -> str:
    """A base model name as the user or an adapter wrote it -> something ``from_pretrained`` can load.

    ``rhythm-tiny`` is the cached tiny student; so is a missing path whose folder name is the tiny
    student's (an adapter trained on another machine or in another cache records that machine's path).
    """
    from rhythm.train.tiny_model import TINY_NAME, resolve_model, tiny_student_path

    if name == TINY_NAME:
        return resolve_model(name)
    local = Path(name).expanduser()
    if not local.exists() and local.name.startswith(TINY_NAME + "-"):
        tiny = tiny_student_path()
        if tiny.name == local.name:
            return str(tiny)
    return name


def _has_tokenizer(path: str) -> bool:
    local = Path(path).expanduser()
    return local.is_dir() and any((local / f).is_file() for f in TOKENIZER_FILES)


def load_model(path: str, options: ModelOptions) -> tuple[Any, Any, ModelSource]:
    """Load ``(model, tokenizer, source)`` for ``model:PATH``: full model or LoRA adapter on its base."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not path:
        raise RhythmError("model agent needs a path or Hub id, e.g. model:runs/sft/adapter or model:rhythm-tiny")
    resolved = resolve_base(path)
    if _looks_local(resolved) and not Path(resolved).expanduser().exists():
        raise RhythmError(f"model path not found: {path}")
    device = pick_device(options.device)
    dtype = pick_dtype(options.dtype, device)
    adapter = adapter_config(resolved)
    base = resolved
    if adapter is not None:
        named = options.base_model or adapter.get("base_model_name_or_path")
        if not named:
            raise RhythmError(f"{path}: adapter names no base model; pass --set model.base_model=NAME")
        base = resolve_base(named)
    elif options.base_model:
        raise RhythmError(f"{path} is not a LoRA adapter (no {ADAPTER_CONFIG}), so model.base_model does not apply")
    tok_source = resolved if adapter is not None and _has_tokenizer(resolved) else base
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(Path(tok_source).expanduser()) if _has_tokenizer(tok_source) else tok_source)
        model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RhythmError(
            f"cannot load model {base!r} (from model:{path}): {first} "
            "(a Hub id needs the network or a copy in the HF cache; a local path must exist)"
        ) from None
    if adapter is not None:
        import warnings

        from peft import PeftModel

        try:
            with warnings.catch_warnings():  # peft calls a transformers method deprecated in v5
                warnings.simplefilter("ignore", FutureWarning)
                model = PeftModel.from_pretrained(model, resolved).merge_and_unload()
        except (OSError, ValueError, RuntimeError, KeyError) as err:
            raise RhythmError(f"cannot load LoRA adapter {path!r} onto {base!r}: {str(err).splitlines()[0]}") from None
    if not getattr(tokenizer, "chat_template", None):
        raise RhythmError(f"tokenizer of {tok_source!r} has no chat template; the protocol needs one")
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)
    model.eval()
    source = ModelSource(
        path=path, base=base, adapter=resolved if adapter is not None else None,
        tokenizer=tok_source, device=device, dtype=str(dtype).removeprefix("torch."),
    )
    return model, tokenizer, source


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """Every id that ends a reply: the generation config's eos, the tokenizer's eos, end-of-turn markers."""
    ids: list[int] = []
    configured = getattr(model.generation_config, "eos_token_id", None)
    for i in configured if isinstance(configured, (list, tuple)) else [configured]:
        if i is not None:
            ids.append(int(i))
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    ids.extend(int(vocab[t]) for t in END_OF_TURN_TOKENS if t in vocab)
    return sorted(set(ids))


def _step_seed(seed: int, episodes: list[EpisodeSpec], t: int, chunk: int) -> int:
    key = f"{seed}|{t}|{chunk}|" + ",".join(f"{e.condition}/{e.split}/{e.seed}" for e in episodes)
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


class ModelAgent:
    """``model:PATH``: a causal LM answering every live episode with one batched ``generate`` per step."""

    def __init__(self, path: str, options: ModelOptions | None = None) -> None:
        from rhythm.eval.evaluate import ModelOptions

        self.options = options or ModelOptions()
        if self.options.batch_size < 1:
            raise RhythmError(f"model.batch_size must be >= 1, got {self.options.batch_size}")
        if self.options.max_new_tokens < 1:
            raise RhythmError(f"model.max_new_tokens must be >= 1, got {self.options.max_new_tokens}")
        self.name = f"model:{path}"
        self.model, self.tokenizer, self.source = load_model(path, self.options)
        self.stop_ids = stop_token_ids(self.model, self.tokenizer)
        self.pad_id = int(self.tokenizer.pad_token_id)
        self._prefix: tuple[list[int], Any] | None = None
        self._prefix_checked = False
        self._static: bool | None = None
        self.episodes: list[EpisodeSpec] = []
        self.calls = 0
        """Batched ``generate`` calls so far (for tests and benchmarks)."""

    def reset(self, episodes: list[EpisodeSpec]) -> None:
        self.episodes = list(episodes)

    # -- prompts ---------------------------------------------------------------------------------

    def prompt_text(self, observation: str) -> str:
        return self.tokenizer.apply_chat_template(chat_messages(observation), add_generation_prompt=True, tokenize=False)

    def _shared_prefix(self) -> tuple[list[int], Any] | None:
        """Token ids and key/value cache of the system turn, shared by every prompt (None if unusable)."""
        if self._prefix_checked:
            return self._prefix
        self._prefix_checked = True
        if not self.options.prefix_cache:
            return None
        import torch

        try:
            text = self.tokenizer.apply_chat_template(
                [{"role": "system", "content": SYSTEM_PROMPT}], add_generation_prompt=False, tokenize=False
            )
        except Exception:  # noqa: BLE001 - a template that refuses a lone system turn: no shared prefix
            return None
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) < 2:
            return None
        ids = ids[:-1]  # leave the boundary token to each prompt, so merges across it cannot differ
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids], device=self.model.device), use_cache=True)
        self._prefix = (ids, out.past_key_values)
        return self._prefix

    # -- generation ------------------------------------------------------------------------------

    def _static_cache_ok(self) -> bool:
        """A static (preallocated) cache is used where the model supports one and every layer is plain attention."""
        if self._static is None:
            from transformers import StaticCache
            from transformers.cache_utils import StaticLayer

            ok = bool(getattr(self.model, "_can_compile_fullgraph", False))
            if ok:
                try:
                    probe = StaticCache(config=self.model.config, max_cache_len=8)
                    ok = all(type(layer) is StaticLayer for layer in probe.layers)
                except Exception:  # noqa: BLE001 - an architecture StaticCache cannot describe: use the dynamic one
                    ok = False
            self._static = ok
        return self._static

    def _cache(self, batch: int, prefix: tuple[list[int], Any] | None, max_len: int) -> Any:
        """A key/value cache for ``batch`` prompts, holding the shared prefix when there is one.

        A batch gets a static cache (preallocated, written in place) where the model supports one: a
        growing cache copies itself at every token, which for 64 prompts on a CPU costs ~20% of the
        time. A lone prompt keeps the growing cache: it has no padding, so attention runs without a
        mask, which a static cache (empty slots) would need.
        """
        import copy

        if batch > 1 and self._static_cache_ok():
            from transformers import StaticCache

            cache = StaticCache(config=self.model.config, max_cache_len=max_len)
            if prefix is not None:
                for i, layer in enumerate(prefix[1].layers):
                    keys = layer.keys.expand(batch, -1, -1, -1).contiguous()
                    values = layer.values.expand(batch, -1, -1, -1).contiguous()
                    cache.update(keys, values, i)
            return cache
        if prefix is None:
            return None
        cache = copy.deepcopy(prefix[1])
        cache.batch_repeat_interleave(batch)
        return cache

    def generate(self, prompts: list[str], *, seed: int | None = None) -> list[tuple[str, int, int]]:
        """Replies to ``prompts`` (already chat-formatted): ``(text, prompt_tokens, completion_tokens)``.

        One ``generate`` call for all prompts. Each prompt is laid out as [shared prefix][padding][rest],
        the padding masked out and position ids taken from the mask, so a prompt's reply does not depend
        on the others in its batch.
        """
        import torch

        o = self.options
        encoded = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        prefix = self._shared_prefix()
        if prefix is not None and not all(len(e) > len(prefix[0]) and e[: len(prefix[0])] == prefix[0] for e in encoded):
            prefix = None
        n_prefix = len(prefix[0]) if prefix is not None else 0
        width = max(len(e) - n_prefix for e in encoded)
        ids = torch.full((len(prompts), n_prefix + width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, e in enumerate(encoded):
            ids[i, :n_prefix] = torch.tensor(e[:n_prefix], dtype=torch.long)
            mask[i, :n_prefix] = 1
            rest = e[n_prefix:]
            ids[i, ids.shape[1] - len(rest) :] = torch.tensor(rest, dtype=torch.long)
            mask[i, ids.shape[1] - len(rest) :] = 1
        device = self.model.device
        kwargs: dict[str, Any] = dict(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=o.max_new_tokens,
            do_sample=o.do_sample,
            eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id,
            repetition_penalty=1.0,  # decoding is what ModelOptions says, not a model card's defaults
        )
        if o.do_sample:
            kwargs.update(temperature=o.temperature, top_p=o.top_p, top_k=0)
        past = self._cache(len(prompts), prefix, ids.shape[1] + o.max_new_tokens)
        if past is not None:
            kwargs["past_key_values"] = past
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, enabled=o.do_sample), torch.inference_mode():
            if o.do_sample:
                torch.manual_seed(seed if seed is not None else o.seed)
            out = self.model.generate(**kwargs)
        self.calls += 1
        new = out[:, ids.shape[1] :].tolist()
        stops = set(self.stop_ids)
        replies = []
        for e, tokens in zip(encoded, new, strict=True):
            n = next((k + 1 for k, tok in enumerate(tokens) if tok in stops), len(tokens))
            text = self.tokenizer.decode(tokens[:n], skip_special_tokens=True).strip()
            replies.append((text, len(e), n))
        return replies

    def act(self, obs: BatchObservation) -> list[Decision]:
        prompts = [self.prompt_text(p) for p in obs.prompts]
        size = self.options.batch_size
        decisions: list[Decision] = []
        for chunk, start in enumerate(range(0, len(prompts), size)):
            episodes = self.episodes[start : start + size]
            seed = _step_seed(self.options.seed, episodes, obs.t, chunk)
            for text, n_prompt, n_completion in self.generate(prompts[start : start + size], seed=seed):
                parsed = parse_reply(text)
                decisions.append(
                    Decision(
                        action=parsed.action,
                        belief=parsed.belief,
                        text=text,
                        parse_ok=parsed.ok,
                        usage={"prompt_tokens": n_prompt, "completion_tokens": n_completion},
                    )
                )
        return decisions
