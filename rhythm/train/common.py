"""What SFT and GRPO share: the config fields both runs have (:class:`TrainRunConfig`) and the steps of a TRL run
built from them, in the order a run takes them (checks, output folder: :mod:`rhythm.train.run_folder`, precision,
LoRA, trainer arguments, log, the files written before and after training), then the ``python -m`` entry that
``accelerate launch`` and Hugging Face Jobs run.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union

import orjson
from annotated_types import Ge, Gt

from rhythm.config import NonNegative, Positive, Share, check_bounds, load_config, parse_overrides, write_config
from rhythm.errors import RhythmError
from rhythm.locking import output_lock
from rhythm.provenance import made_by
from rhythm.records import check_output
from rhythm.train.hub import check_repo_id, model_card, push_folder
from rhythm.train.jobs import JobsConfig, resumes
from rhythm.train.processes import end_distributed, is_main_process, world_size
from rhythm.train.run_folder import check_inputs_outside, claim_output_dir, data_digest, data_paths, model_digests

QWEN_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

Auto = Union[bool, Literal["auto"]]
C = TypeVar("C", bound="TrainRunConfig")
LearningRate = Annotated[float, Gt(0)]


@dataclass(frozen=True)
class TrainRunConfig:
    """The fields ``rhythm sft`` and ``rhythm grpo`` share (TRL's names); each stage adds its own and its defaults."""

    # --- model
    dtype: str = "auto"
    """Weights dtype when loading: auto (bfloat16 when bf16 is on, else float32) | bfloat16 | float16 | float32."""
    attn_implementation: str | None = None
    """eager | sdpa | flash_attention_2 (None: the transformers default, sdpa)."""
    # --- data
    data: str = "data/teacher_30ep.jsonl"
    """Teacher episodes JSONL; several files separated by commas; - reads stdin."""
    # --- optimisation
    warmup_ratio: Share = 0.03
    """Share of the steps spent warming the learning rate up from 0."""
    weight_decay: NonNegative = 0.0
    """AdamW weight decay."""
    max_grad_norm: NonNegative = 1.0
    """Gradients are clipped to this global norm."""
    bf16: Auto = "auto"
    """bfloat16 mixed precision; auto = on when CUDA is available (it is ~5x slower on CPU)."""
    gradient_checkpointing: Auto = "auto"
    """Recompute activations to save memory; auto = on with CUDA, off on CPU (~3x slower there)."""
    seed: Annotated[int, Ge(0)] = 0
    """Seeds the adapter init, the data order and every seeded subset or split."""
    # --- LoRA (PEFT; GRPO: a fresh adapter only, a loaded adapter keeps its own shape)
    use_peft: bool = True
    """Train a LoRA adapter; false = full fine-tuning (saves the whole model)."""
    lora_r: Positive = 16
    """LoRA rank."""
    lora_alpha: Positive = 32
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    lora_dropout: Share = 0.05
    """Dropout on the LoRA path during training."""
    lora_target_modules: list[str] = field(default_factory=lambda: list(QWEN_LINEAR))
    """Modules that get adapters (names inside the model); [all-linear] = every linear layer but the LM head."""
    # --- logging, checkpoints
    save_total_limit: Positive | None = 2
    """Checkpoints kept on disk (oldest deleted)."""
    overwrite_output_dir: bool = False
    """Start afresh in an output_dir that already holds a run (everything in it is deleted first)."""
    resume_from_checkpoint: Union[bool, str, None] = None
    """latest (or true) = the newest checkpoint-N in output_dir; or a checkpoint path."""
    report_to: str = "none"
    """Trackers for transformers (none | trackio | wandb | tensorboard ...)."""
    # --- Hub and Hugging Face Jobs
    push_to_hub: bool = False
    """Upload the trained result, tokenizer, config and log to hub_model_id at the end."""
    hub_model_id: str | None = None
    """Model repo for the result (user/name); with push_to_hub or a flavor it defaults to YOU/rhythm-STAGE (whoami)."""
    hub_private: bool = True
    """Create hub_model_id as a private repo when it does not exist (a Jobs run's data repo is created private either way)."""
    jobs: JobsConfig = field(default_factory=JobsConfig)
    """Hugging Face Jobs settings (``jobs.flavor`` set: the stage runs there)."""


FINITE = ("num_train_epochs", "learning_rate", "min_score", "warmup_ratio", "weight_decay")
"""Float settings that take no infinity (``max_grad_norm: inf`` is no clipping: it may)."""


def check_shared(cfg: Any) -> None:
    """The checks of what both stages have: the bounds their fields declare, steps, dtype, a push's repo, a resume
    (not from stdin: the piped weeks cannot be compared with the run's) and, for a local run, the data files."""
    check_bounds(cfg)
    for f in dataclasses.fields(cfg):  # NaN passes every bound (each comparison is false): min_score=nan kept all
        value = getattr(cfg, f.name)
        if isinstance(value, float) and (math.isnan(value) or (math.isinf(value) and f.name in FINITE)):
            raise RhythmError(f"{f.name} must be a finite number, got {value}")
    if cfg.max_steps == 0 or cfg.max_steps < -1:
        raise RhythmError(f"max_steps must be positive or -1, got {cfg.max_steps}")
    if cfg.dtype not in ("auto", "bfloat16", "float16", "float32"):
        raise RhythmError(f"dtype must be auto, bfloat16, float16 or float32, got {cfg.dtype!r}")
    if cfg.push_to_hub and not cfg.hub_model_id:
        raise RhythmError("push_to_hub needs hub_model_id (user/name)")
    if cfg.hub_model_id:
        check_repo_id(cfg.hub_model_id, "hub_model_id")
    if cfg.overwrite_output_dir and resumes(cfg):
        raise RhythmError("resume_from_checkpoint and overwrite_output_dir contradict each other (resume keeps the "
                          "run, overwrite deletes it); give one")
    if resumes(cfg) and "-" in data_paths(cfg):  # before stdin is read
        raise RhythmError("a run reading its data from stdin (data=-) cannot be resumed: nothing tells whether the "
                          "weeks piped now are the ones it trained on; write them to a file and start from that")
    if cfg.jobs.flavor is None:
        models = [m for m in (cfg.model_name_or_path, getattr(cfg, "adapter", None)) if m]  # trained in place: gone
        check_output(cfg.output_dir, inputs=[*data_paths(cfg), *models], folder=True, what="output_dir")
        for path in data_paths(cfg):  # a file named twice is read twice: its weeks weigh double (the DAgger stage's copies)
            if path != "-" and not Path(path).is_file():
                raise RhythmError(f"{path} is a folder; give its JSONL files" if Path(path).is_dir() else f"file not found: {path}")
        if "-" in data_paths(cfg) and world_size() > 1:
            raise RhythmError(f"data=- (stdin) under a launcher of {world_size()} processes: each would read part of "
                              "the stream; give a file")
        if cfg.overwrite_output_dir:
            check_inputs_outside(cfg.output_dir, [*data_paths(cfg), cfg.model_name_or_path, getattr(cfg, "adapter", None)])


def prepare_run(cfg: Any, stage: str, quiet: bool) -> tuple[Path, str | None, dict[str, Any]]:
    """What both stages do once their data is read: claim ``output_dir`` (:func:`rhythm.train.run_folder.claim_output_dir`:
    the checkpoint to resume from, or an empty folder), quiet the libraries and resolve the ``auto`` settings for this
    machine. Returns ``(output_dir, resume, resolved)``."""
    out, resume = claim_output_dir(cfg, stage)

    import torch
    import transformers

    check_report_to(cfg.report_to)
    transformers.logging.set_verbosity_warning()
    if quiet:
        import warnings

        import datasets

        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()  # "Loading weights", "Writing model shards"
        # TRL reads transformers' old name (trl.models.utils): a warning only TRL can act on
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
    return out, resume, resolve_precision(cfg, torch.cuda.is_available())


def check_report_to(report_to: str) -> None:
    """``report_to`` names trackers transformers knows and this machine has: a typo or a tracker not installed is
    one line here, not a traceback when the trainer is built."""
    from transformers.integrations.integration_utils import get_reporting_integration_callbacks

    names = [n.strip() for n in str(report_to).split(",") if n.strip()]
    if names in ([], ["none"], ["all"]):
        return
    try:
        for callback in get_reporting_integration_callbacks(names):
            callback()  # its constructor checks that the tracker's package is installed (and starts nothing)
    except (ValueError, RuntimeError, ImportError) as err:
        raise RhythmError(f"report_to={report_to}: {' '.join(str(err).split())}") from None


def resolve_precision(cfg: TrainRunConfig, cuda: bool) -> dict[str, Any]:
    """Turn the ``auto`` settings into concrete ones for this machine."""
    bf16 = cuda if cfg.bf16 == "auto" else bool(cfg.bf16)
    gc = cuda if cfg.gradient_checkpointing == "auto" else bool(cfg.gradient_checkpointing)
    dtype = cfg.dtype if cfg.dtype != "auto" else ("bfloat16" if bf16 else "float32")
    return {"bf16": bf16, "gradient_checkpointing": gc, "dtype": dtype, "device": "cuda" if cuda else "cpu"}


def peft_config(cfg: TrainRunConfig):
    """A fresh LoRA adapter's ``LoraConfig``."""
    from peft import LoraConfig

    targets = "all-linear" if cfg.lora_target_modules == ["all-linear"] else cfg.lora_target_modules
    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, target_modules=targets,
                      bias="none", task_type="CAUSAL_LM")


def check_lora_targets(model: Any, cfg: TrainRunConfig) -> None:
    """Each of ``lora_target_modules`` names a module of the model: PEFT refuses a list that matches none, and takes
    one of several typos in silence (an adapter on fewer layers than the config records)."""
    if not cfg.use_peft or cfg.lora_target_modules == ["all-linear"]:
        return
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [t for t in cfg.lora_target_modules if t not in names]
    if missing:
        raise RhythmError(f"lora_target_modules names {', '.join(missing)}, which the model has no module of "
                          f"(its linear layers: {', '.join(sorted(n for n in names if n.endswith('_proj')))})")


def trainer_args(cfg: Any, resolved: dict[str, Any], quiet: bool) -> dict[str, Any]:
    """The ``TrainingArguments`` both stages set alike (TRL's ``SFTConfig`` and ``GRPOConfig`` add their own)."""
    return dict(
        output_dir=cfg.output_dir,
        num_train_epochs=cfg.num_train_epochs,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler_type,
        warmup_steps=cfg.warmup_ratio,  # transformers 5 reads warmup_steps < 1 as a share of the steps (no warmup_ratio)
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        bf16=resolved["bf16"],
        **{checkpointing_name(): resolved["gradient_checkpointing"]},
        logging_steps=cfg.logging_steps,
        logging_first_step=True,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        seed=cfg.seed,
        data_seed=cfg.seed,
        report_to=cfg.report_to,
        disable_tqdm=quiet,
        dataloader_pin_memory=resolved["device"] == "cuda",
        use_cpu=resolved["device"] == "cpu",  # also what makes torchrun/accelerate on CPU run DDP over gloo
        # a text student uses every trainable parameter in each forward pass (LoRA or full): DDP need not walk the
        # graph for unused ones every step, which transformers' default (True without checkpointing) does, and warns
        ddp_find_unused_parameters=False,
        push_to_hub=False,  # pushed once at the end by rhythm.train.hub, never from inside the loop
    )


def checkpointing_name() -> str:
    """The ``TrainingArguments`` name of gradient checkpointing: ``activation_checkpointing`` where transformers has
    it (its old name then warns a FutureWarning through ``--quiet``), ``gradient_checkpointing`` before."""
    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def batch_sizes(args: Any) -> dict[str, int]:
    """For the record: the processes of a run, and what one optimizer step takes from all of them (SFT examples,
    GRPO completions): its per-device batch x accumulation steps x processes."""
    return {"world_size": args.world_size,
            "effective_batch_size": args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size}


def make_log_callback(path: Path, stage: str):
    """A ``TrainerCallback`` that streams ``state.log_history`` to JSONL, one flushed line per entry. At train begin
    the file is rewritten from the (possibly resumed) history: the checkpoint's history, then the new entries."""
    from transformers import TrainerCallback

    class JsonlLogCallback(TrainerCallback):
        written = 0

        def write(self, entries: list[dict[str, Any]], mode: str) -> None:
            with path.open(mode + "b") as fh:
                for entry in entries:
                    fh.write(orjson.dumps({**entry, "stage": stage}, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
                fh.flush()
                os.fsync(fh.fileno())

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self.write(list(state.log_history), "w")
                self.written = len(state.log_history)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and len(state.log_history) > self.written:
                self.write(state.log_history[self.written :], "a")
                self.written = len(state.log_history)

    return JsonlLogCallback()


def quiet_trainer(trainer: Any) -> Any:
    """``trainer`` without the callback that prints each log entry when progress bars are off (``--quiet``): the
    entries still stream to ``training_log.jsonl``."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return trainer


def series(history: list[dict[str, Any]], key: str) -> list[float]:
    """The finite values of ``key`` in a TRL log history, in order."""
    return [float(e[key]) for e in history if _logs(e, key)]


def series_steps(history: list[dict[str, Any]], key: str) -> list[int]:
    """The steps at which :func:`series` found its values."""
    return [int(e.get("step", 0)) for e in history if _logs(e, key)]


def _logs(entry: dict[str, Any], key: str) -> bool:
    return key in entry and isinstance(entry[key], (int, float)) and math.isfinite(entry[key])


def write_json(path: Path, obj: Any) -> None:
    path.write_bytes(orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")


def write_run_start(run: Any, stage: str, report_name: str, report_key: str, say: Callable[[str], None],
                    **provenance: Any) -> None:
    """Before training (rank 0): the data report as a line and as ``report_name``, and the effective config as
    ``STAGE_config.yaml`` with its provenance (``provenance``: the stage's own keys, written before the versions;
    a resumed run names its checkpoint)."""
    out = Path(run.cfg.output_dir)
    say(run.report.summary_line())
    write_json(out / report_name, run.report.to_dict())
    resumed = {} if run.resume is None else {"resumed_from": str(run.resume)}
    resumed["data_digest"] = data_digest(run.cfg)  # what a resume checks the files against
    resumed["model_digests"] = model_digests(run.cfg)  # and the local model it starts from, if the run moves
    write_config(run.cfg, out / f"{stage}_config.yaml", extra={
        **made_by(stage=stage, resolved=run.resolved, **resumed, **provenance), report_key: run.report.to_dict(),
    })


def write_summary(cfg: Any, stage: str, summary: dict[str, Any], commit_message: str, say: Callable[[str], None]) -> None:
    """After training (rank 0): ``STAGE_summary.json``; with ``push_to_hub`` the output folder goes to
    ``hub_model_id`` and the summary, written again, holds its URL."""
    out = Path(cfg.output_dir)
    write_json(out / f"{stage}_summary.json", summary)
    card = model_card(cfg.hub_model_id or str(out), out)
    if card is not None:  # in place of TRL's card, which names no local base model
        (out / "README.md").write_text(card)
    if cfg.push_to_hub:
        summary["hub_url"] = push_folder(out, cfg.hub_model_id, private=cfg.hub_private, commit_message=commit_message,
                                         say=say)
        say(f"pushed {out} to {summary['hub_url']}")
        write_json(out / f"{stage}_summary.json", summary)


def entry_main(stage: str, cls: type[C], run: Callable[..., dict[str, Any]], argv: list[str] | None,
               validate: Callable[[C], None], omit: Collection[str] = (), doc: str | None = None,
               prog: str | None = None, check_given: Callable[[C, Collection[str]], None] | None = None) -> int:
    """``python -m rhythm.train.STAGE [--config FILE] [--set key=value ...]``: the entry ``accelerate launch`` and
    Hugging Face Jobs run, with ``rhythm STAGE``'s ``--config`` / ``--set`` syntax. Prints the summary less ``omit``
    as one JSON line (rank 0 only); ``prog`` names the program in its help (default ``python -m rhythm.train.STAGE``).
    A config that loads or ``validate``s badly is the same in every process of a launch: rank 0 alone says so."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog or f"python -m rhythm.train.{stage}", description=doc)
    parser.add_argument("--config", "-c", default=None, help=f"YAML config (fields of {cls.__name__})")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override any config key (repeatable; dotted keys for sections), as rhythm STAGE --set")
    ns = parser.parse_args(argv)
    try:
        cfg = load_config(cls, ns.config, ns.overrides)
        if check_given is not None:
            check_given(cfg, list(parse_overrides(ns.overrides)))
        if cfg.jobs.flavor:
            cfg = replace(cfg, jobs=replace(cfg.jobs, flavor=None))  # already where it should run
        validate(cfg)
    except RhythmError as err:  # the same in every process of a launch: said once
        if is_main_process():
            print(f"rhythm {stage}: error: {err}", file=sys.stderr)
        return 2
    try:  # a run's error may be one process's own (its device, its share of the data): each says its own
        # one run per output folder, as rhythm STAGE: the launch's first process holds the lock for all of them
        with output_lock(cfg.output_dir if is_main_process() else None):
            summary = run(cfg, quiet=ns.quiet)
    except RhythmError as err:
        print(f"rhythm {stage}: error: {err}", file=sys.stderr)
        return 2
    if is_main_process():  # one summary line, not one per process
        sys.stdout.write(orjson.dumps({k: v for k, v in summary.items() if k not in omit}).decode() + "\n")
    end_distributed()
    return 0
