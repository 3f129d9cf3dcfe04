"""Load a causal LM for the protocol: ``load_model(path, options)`` is the one loader behind ``model:PATH``
agents and GRPO's policy.

PATH is a local directory or a Hub id; names that stand for a folder built on demand (``rhythm-tiny``, the
offline tiny student) go through the ``resolve`` the caller passes (:func:`rhythm.agents.tiny.resolve_base`).
A directory (or Hub repo) holding ``adapter_config.json`` is a PEFT LoRA adapter: it is loaded onto its
base model (``ModelOptions.base_model``, else the adapter's own ``base_model_name_or_path``) and merged
for inference. The tokenizer comes from the adapter when it ships one, else from the base. bf16 on a
CUDA GPU, fp16 on Apple MPS, fp32 on CPU; the device is picked automatically (cuda > mps > cpu) unless
``ModelOptions.device`` names one.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from annotated_types import Gt, Interval

from rhythm.errors import RhythmError
from rhythm.provenance import file_digest

if TYPE_CHECKING:  # pragma: no cover
    import torch

ADAPTER_CONFIG = "adapter_config.json"
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")
"""End-of-turn markers of common chat templates; any that the tokenizer knows also stops generation."""


@dataclass(frozen=True)
class ModelOptions:
    """How ``model:PATH`` agents generate (see :mod:`rhythm.agents.model`)."""

    batch_size: int = 64
    """Episodes per lockstep batch (one key/value cache each, kept for the whole week)."""
    max_new_tokens: int = 160
    """Reply budget per step (the protocol lines alone are ~12 tokens of the tiny tokenizer)."""
    do_sample: bool = False
    """Greedy by default; set true (with temperature/top_p) to sample. Sampled weeks repeat for the same seeds and
    ``batch_size``, not across them: one generator draws for a whole batch, so which weeks share it matters."""
    temperature: Annotated[float, Gt(0)] = 1.0
    """Sampling temperature (do_sample)."""
    top_p: Annotated[float, Interval(gt=0, le=1)] = 1.0
    """Nucleus sampling: the smallest set of tokens holding this much probability (do_sample)."""
    device: str = "auto"
    """auto: cuda if available, else mps, else cpu."""
    dtype: str = "auto"
    """auto: bfloat16 on GPU, float32 on CPU."""
    base_model: str | None = None
    """Base model of a LoRA adapter; default: the adapter's own ``base_model_name_or_path``."""
    seed: int = 0
    """Sampling seed (only used with do_sample); each step's generate is seeded from it and the episodes."""


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
    if kind == "xpu" and not (getattr(torch, "xpu", None) and torch.xpu.is_available()):
        raise RhythmError(f"device {requested!r} requested but no Intel XPU is available; use --set model.device=cpu")
    if kind not in ("cpu", "cuda", "mps", "xpu"):
        raise RhythmError(f"unknown device {requested!r}; expected auto, cpu, cuda, cuda:N, mps or xpu")
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


HUB_HINT = "a Hub id needs the network or a copy in the HF cache, which HF_HUB_OFFLINE=1 reads without retrying"
"""What a load that failed on a Hub id says (huggingface_hub retries an unreachable Hub for about a minute first)."""

MODEL_FILES = ("config.json", "generation_config.json", ADAPTER_CONFIG, *TOKENIZER_FILES, "special_tokens_map.json",
               "added_tokens.json", "vocab.json", "merges.txt", "chat_template.jinja")
"""What a model folder's replies depend on besides its weights (``*.safetensors``, ``*.bin`` but the trainer's
``training_args.bin``); checkpoints, logs and summaries are not among them."""


def is_model_file(rel: Path) -> bool:
    """Whether a file of a model folder (``rel``, relative to it) is part of the model a ``model:PATH`` agent plays."""
    if len(rel.parts) != 1:
        return False
    return rel.name in MODEL_FILES or (rel.suffix in (".safetensors", ".bin") and rel.name != "training_args.bin")


def weights_digest(path: str) -> str | None:
    """sha256 (16 hex) of a local model folder's weights, configs and tokenizer (:func:`is_model_file`), so an eval
    records which weights it played; None for a Hub id, which the eval records by name."""
    local = Path(path).expanduser()
    return file_digest(local, keep=is_model_file) if local.is_dir() else None


def looks_local(path: str) -> bool:
    """A path that cannot be a Hub id (``org/name`` or ``name``)."""
    return path.startswith((".", "/", "~")) or path.count("/") > 1 or "\\" in path


def means_local(path: str) -> bool:
    """A name meant as a folder here, though it may read as a Hub id: a path (:func:`looks_local`) or one under
    ``runs/``, where rhythm's configs write. A missing one is a typo to report at once: asked of the Hub, offline, it
    fails only after a minute of retries."""
    return looks_local(path) or path.startswith("runs/")


def under_local_folder(path: str) -> bool:
    """A Hub-shaped name whose owner is a folder here (``out/sft`` beside ``./out/``): taken for a path where the
    name may be either, never refused as a missing one (:func:`means_local`), since ``hf download --local-dir Qwen/...``
    makes such folders too."""
    return "/" in path and Path(path.split("/")[0]).expanduser().is_dir()


def check_model_exists(path: str, what: str = "model path") -> None:
    """Refuse a missing folder :func:`means_local` (one line) before anything asks the Hub for it."""
    if means_local(path) and not Path(path).expanduser().exists():
        raise RhythmError(f"{what} not found: {path}")


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


def _has_tokenizer(path: str) -> bool:
    local = Path(path).expanduser()
    return local.is_dir() and any((local / f).is_file() for f in TOKENIZER_FILES)


@contextlib.contextmanager
def no_loading_bars() -> Iterator[None]:
    """transformers' own tqdm bars ("Loading weights") off while a model loads, beside rich's bars; then
    as they were. Downloads from the Hub keep their bars (huggingface_hub draws those)."""
    from transformers.utils import logging as hf_logging

    if not hasattr(hf_logging, "set_tqdm_hook"):  # older transformers: every transformers bar off for the load
        was = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            yield
        finally:
            if was:
                hf_logging.enable_progress_bar()
        return
    previous = hf_logging.set_tqdm_hook(lambda factory, args, kwargs: hf_logging.EmptyTqdm(*args, **kwargs))
    try:
        yield
    finally:
        hf_logging.set_tqdm_hook(previous)


def _home(name: str) -> str:
    """``~/...`` as the folder it names (a shell leaves ``model:~/x`` as it is, YAML too); anything else as it is."""
    return str(Path(name).expanduser()) if name.startswith("~") else name


def load_model(path: str, options: ModelOptions, resolve: Callable[[str], str] = str) -> tuple[Any, Any, ModelSource]:
    """Load ``(model, tokenizer, source)`` for ``model:PATH``: full model or LoRA adapter on its base.
    ``resolve`` maps a model name (PATH, an adapter's base) to what ``from_pretrained`` loads."""
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not path:
        raise RhythmError("model agent needs a path or Hub id, e.g. model:runs/sft/adapter or model:rhythm-tiny")
    resolved = _home(resolve(path))
    check_model_exists(resolved)
    device = pick_device(options.device)
    dtype = pick_dtype(options.dtype, device)
    adapter = adapter_config(resolved)
    base = resolved
    if adapter is not None:
        named = options.base_model or adapter.get("base_model_name_or_path")
        if not named:
            raise RhythmError(f"{path}: adapter names no base model; pass --set model.base_model=NAME")
        base = _home(resolve(named))
        check_model_exists(base, f"base model of the adapter {path}")
    elif options.base_model:
        raise RhythmError(f"{path} is not a LoRA adapter (no {ADAPTER_CONFIG}), so model.base_model does not apply")
    tok_source = resolved if adapter is not None and _has_tokenizer(resolved) else base
    if Path(tok_source).expanduser().is_dir() and not _has_tokenizer(tok_source):  # transformers would build an empty one
        raise RhythmError(f"{tok_source} holds no tokenizer ({' or '.join(TOKENIZER_FILES)}); save the model's tokenizer "
                          "beside its weights (rhythm sft and grpo do)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(Path(tok_source).expanduser()) if _has_tokenizer(tok_source) else tok_source)
        with no_loading_bars():
            model, info = AutoModelForCausalLM.from_pretrained(base, dtype=dtype, output_loading_info=True)
    # SafetensorError: a weights file cut short; RuntimeError and UnpicklingError: a .bin cut short or not torch's,
    # or a config whose sizes the weights do not have
    except (OSError, ValueError, RuntimeError, SafetensorError, pickle.UnpicklingError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RhythmError(
            f"cannot load model {base!r} (from model:{path}): {first} "
            f"({HUB_HINT}; a local path must exist)"
        ) from None
    check_loaded(model, tokenizer, info, f"model:{path}")
    if adapter is not None:
        model = load_adapter(model, resolved, name=path, base=base, trainable=False)
    finish_tokenizer(tokenizer, tok_source)
    model.to(device)
    model.eval()
    source = ModelSource(
        path=path, base=base, adapter=resolved if adapter is not None else None,
        tokenizer=tok_source, device=device, dtype=str(dtype).removeprefix("torch."),
    )
    return model, tokenizer, source


def check_loaded(model: Any, tokenizer: Any, info: dict[str, Any], name: str) -> None:
    """Refuse, in one line, a model that would play as something else than its checkpoint: weights the config names
    and the files lack (left random by transformers, with only a warning), a tokenizer with ids past the model's
    embedding table (an IndexError mid-week), sliding-window attention (the lockstep player's cache cannot crop it:
    a traceback some steps into the week)."""
    missing = sorted(info.get("missing_keys", ()))  # weights of another size raise while loading (not ignored)
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise RhythmError(f"{name}: its weights lack {', '.join(missing[:3])}{more} (the config names more than the "
                          "files hold); it would play with those left random")
    rows = model.get_input_embeddings().num_embeddings
    top = max(tokenizer.get_vocab().values(), default=-1)
    if top >= rows:
        raise RhythmError(f"{name}: its tokenizer has ids up to {top}, its embedding table {rows} rows; a tokenizer "
                          "of another model?")
    if getattr(model.config, "use_sliding_window", False) or "sliding_attention" in (getattr(model.config, "layer_types", None) or []):
        raise RhythmError(f"{name} uses sliding-window attention, which rhythm's lockstep player does not support yet")


def load_adapter(model: Any, adapter: str, *, name: str, base: str, trainable: bool) -> Any:
    """A PEFT LoRA adapter onto its loaded base: trainable (GRPO), or merged into it for inference."""
    from peft import PeftModel
    from safetensors import SafetensorError

    try:
        with warnings.catch_warnings():  # peft calls a transformers method deprecated in v5
            warnings.simplefilter("ignore", FutureWarning)
            # an adapter of another base: the layers it does not reach would stay the base's, with only this warning
            warnings.filterwarnings("error", message="Found missing adapter keys", category=UserWarning)
            loaded = PeftModel.from_pretrained(model, adapter, is_trainable=trainable)
    except UserWarning as err:
        what = str(err).splitlines()[0]
        what = what if len(what) <= 160 else what[:157] + "..."
        raise RhythmError(f"cannot load LoRA adapter {name!r} onto {base!r} (is it that base's adapter?): {what}") from None
    except (OSError, ValueError, RuntimeError, KeyError, SafetensorError) as err:
        raise RhythmError(f"cannot load LoRA adapter {name!r} onto {base!r}: {str(err).splitlines()[0]}") from None
    return loaded if trainable else loaded.merge_and_unload()


def finish_tokenizer(tokenizer: Any, source: str) -> Any:
    """What the protocol needs of a tokenizer: a chat template, left padding (batched generation and
    GRPOTrainer) and a pad token (the eos token when it has none)."""
    if not getattr(tokenizer, "chat_template", None):
        raise RhythmError(f"tokenizer of {source!r} has no chat template; the protocol needs one")
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


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
