"""Supervised distillation of the teacher into a student: TRL ``SFTTrainer`` with a PEFT LoRA adapter.

    rhythm sft --config configs/sft-tiny.yaml --data data/teacher_30ep.jsonl        # offline, CPU, minutes
    rhythm sft --config configs/sft.yaml --data data/teacher_30ep.jsonl             # Qwen2.5-3B, one GPU
    accelerate launch -m rhythm.train.sft --config configs/sft.yaml --set data=data/x.jsonl  # several GPUs
    torchrun --standalone --nproc_per_node 2 -m rhythm.train.sft --config configs/sft-tiny.yaml --set data=...  # CPU DDP
    rhythm sft --flavor a10g-large          # Hugging Face Jobs: model -> YOU/rhythm-sft, data -> YOU/rhythm-teacher

Each teacher episode is one example: the whole week as one conversation (protocol v2; see
:mod:`rhythm.train.data`), and the loss falls on every assistant turn (``assistant_only_loss``, which
needs ``{% generation %}`` markers: the tiny student's template has them, and for Qwen2.5 TRL swaps in its
own training template) and, at their weights, on the rest of the week (``observation_loss``, ``echo_loss``:
a weight per token, read by :func:`weighted_sft_trainer`'s ``compute_loss``). ``max_length`` must cover a whole week:
longer weeks are dropped and counted rather than truncated (truncation would silently drop the last
turns' loss), and the longest week's token count is logged. Validation loss is computed on held-out
*people*.

``output_dir`` receives: the adapter (or the full model with ``use_peft: false``) and the tokenizer,
``checkpoint-N/`` folders (resume with ``resume_from_checkpoint: latest``), ``training_log.jsonl`` (one
line per entry of ``trainer.state.log_history`` exactly as TRL logs it, plus ``"stage": "sft"``,
streamed as training goes so it survives a crash), ``sft_config.yaml`` (the effective config with
versions), ``data_report.json`` and ``sft_summary.json``.

Heavy imports (torch, transformers, TRL, PEFT, datasets) happen inside functions, so ``rhythm --help``
stays instant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from rhythm.agents.tiny import resolve_model
from rhythm.config import write_config
from rhythm.errors import RhythmError
from rhythm.provenance import command_line, now_iso, versions
from rhythm.train.common import (
    LOG_NAME,
    JobsConfig,
    TrainRunConfig,
    check_hub_and_data,
    data_paths,
    entry_main,
    make_log_callback,
    peft_config,
    prepare_output_dir,
    resolve_precision,
    resume_path,
    series,
    trainer_args,
    without,
)
from rhythm.train.data import DataOptions, build_examples, to_dataset_dict, tokenize_examples
from rhythm.train.hub import push_folder

CONFIG_NAME = "sft_config.yaml"
SUMMARY_NAME = "sft_summary.json"
REPORT_NAME = "data_report.json"


@dataclass(frozen=True)
class SFTRunConfig(TrainRunConfig):
    """``rhythm sft``: field names follow TRL's ``SFTConfig`` / ``ModelConfig`` where one exists; the fields
    it shares with GRPO come from :class:`rhythm.train.common.TrainRunConfig`.

    The defaults are the real recipe (``configs/sft.yaml``); ``configs/sft-tiny.yaml`` is the offline one.
    """

    # --- model
    model_name_or_path: str = "Qwen/Qwen2.5-3B-Instruct"
    """Hub id or local path of the student; ``rhythm-tiny`` = the offline tiny Qwen2 built locally."""
    # --- data
    val_fraction: float = 0.1
    """Share of episodes (never steps) held out for validation loss; 0 = no validation."""
    min_score: float | None = None
    """Keep only episodes whose score.final_score is at least this (None = all)."""
    strip_reasoning: bool = False
    """Train on the BELIEF/ACTION lines only instead of the full reasoning."""
    drop_parse_failures: bool = True
    """Leave out teacher steps whose reply has no valid ACTION."""
    observation_loss: float = 0.0
    """Weight of the rest of the week (observations, system prompt, chat markup) in the loss beside the
    replies' 1: 0 = assistant-only; 1 = every token. Predicting the next observation makes a from-scratch
    student read the meters it acts on better (0.1 in the tiny student's stage 1; docs/student.md)."""
    echo_loss: float | None = None
    """Weight of the action name each observation echoes (``After DEEP_WORK:``, the reply before it), in [0, 1];
    None = observation_loss. At 1 the quickstart's student reads the serenity meter far better and meditates
    where the teacher does (docs/student.md)."""
    first_turns: int | None = None
    """Train on each week's first N turns only (a cheap curriculum stage; None: whole weeks)."""
    max_length: int = 1024
    """Tokens per example; longer examples are dropped (and counted), never truncated."""
    # --- optimisation
    num_train_epochs: float = 3.0
    """Passes over the training examples (ignored when max_steps > 0)."""
    max_steps: int = -1
    """Optimizer steps; -1 = derive from num_train_epochs."""
    learning_rate: float = 2e-4
    """Peak learning rate (LoRA wants ~1e-4..3e-4, full fine-tuning ~1e-5)."""
    lr_scheduler_type: str = "cosine"
    """transformers scheduler name: linear | cosine | constant | constant_with_warmup ..."""
    per_device_train_batch_size: int = 4
    """Examples per device per forward pass."""
    per_device_eval_batch_size: int = 8
    """Examples per device per forward pass of the validation loss."""
    gradient_accumulation_steps: int = 4
    """Forward passes per optimizer step (effective batch = this x batch size x devices)."""
    # --- evaluation, logging, checkpoints
    eval_steps: int = 50
    """Validation loss every N optimizer steps (and once at the end)."""
    eval_on_start: bool = True
    """Validation loss before the first step: the baseline the curve starts from."""
    logging_steps: int = 10
    """Training loss (and learning rate, grad norm, tokens) every N steps."""
    save_steps: int = 100
    """Checkpoint every N steps (resume from the latest with resume_from_checkpoint=latest)."""
    output_dir: str = "runs/sft"
    """Adapter, tokenizer, checkpoints, training_log.jsonl and the effective config go here."""
    # --- Hugging Face Jobs
    jobs: JobsConfig = field(default_factory=lambda: JobsConfig(timeout="3h"))
    """Hugging Face Jobs settings; ``jobs.flavor`` set = the run is submitted there (3 h wall time by default)."""


def validate(cfg: SFTRunConfig) -> None:
    """Cheap checks before anything heavy is imported or launched."""
    if not data_paths(cfg):
        raise RhythmError("no data given; pass --data FILE (a teacher episodes JSONL)")
    if cfg.max_steps == 0 or cfg.max_steps < -1:
        raise RhythmError(f"max_steps must be positive or -1, got {cfg.max_steps}")
    if cfg.max_steps == -1 and cfg.num_train_epochs <= 0:
        raise RhythmError("num_train_epochs must be positive when max_steps is -1")
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
                 "eval_steps", "logging_steps", "save_steps", "lora_r", "lora_alpha", "max_length"):
        if getattr(cfg, name) < 1:
            raise RhythmError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    if not 0.0 <= cfg.val_fraction < 1.0:
        raise RhythmError(f"val_fraction must be in [0, 1), got {cfg.val_fraction}")
    if cfg.first_turns is not None and cfg.first_turns < 1:
        raise RhythmError(f"first_turns must be >= 1 or null, got {cfg.first_turns}")
    if not 0.0 <= cfg.observation_loss <= 1.0:
        raise RhythmError(f"observation_loss must be in [0, 1], got {cfg.observation_loss}")
    if cfg.echo_loss is not None and not 0.0 <= cfg.echo_loss <= 1.0:
        raise RhythmError(f"echo_loss must be in [0, 1] or null, got {cfg.echo_loss}")
    if not 0.0 <= cfg.lora_dropout < 1.0 or not 0.0 <= cfg.warmup_ratio < 1.0:
        raise RhythmError("lora_dropout and warmup_ratio must be in [0, 1)")
    if cfg.dtype not in ("auto", "bfloat16", "float16", "float32"):
        raise RhythmError(f"dtype must be auto, bfloat16, float16 or float32, got {cfg.dtype!r}")
    check_hub_and_data(cfg)


# ----------------------------------------------------------------------------------------- helpers


def load_tokenizer(model_path: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_path)
    except OSError as err:
        raise RhythmError(f"cannot load the tokenizer of {model_path!r} ({str(err).splitlines()[0]})") from None


def sft_config(cfg: SFTRunConfig, resolved: dict[str, Any], has_validation: bool, quiet: bool = False,
               resuming: bool = False):
    """The TRL ``SFTConfig`` for a run (CPU-safe settings resolved by :func:`resolve_precision`)."""
    from trl import SFTConfig

    model_init_kwargs: dict[str, Any] = {"dtype": resolved["dtype"]}
    if cfg.attn_implementation:
        model_init_kwargs["attn_implementation"] = cfg.attn_implementation
    return SFTConfig(
        **trainer_args(cfg, resolved, quiet),
        per_device_eval_batch_size=cfg.per_device_eval_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        max_length=None,  # the examples come tokenized, with weeks over cfg.max_length left out (never cut)
        assistant_only_loss=True,
        model_init_kwargs=model_init_kwargs,
        eval_strategy="steps" if has_validation else "no",
        eval_steps=cfg.eval_steps,
        eval_on_start=cfg.eval_on_start and has_validation and not resuming,  # a resumed history has it
        remove_unused_columns=False,  # the collator needs loss_weights, which no model's forward names
    )


def weighted_sft_trainer(tokenizer, **kwargs):
    """A TRL ``SFTTrainer`` whose loss weighs each labelled token by the example's ``loss_weights``
    (:func:`rhythm.train.data.week_weights`: replies 1, observations ``observation_loss``, echoed actions
    ``echo_loss``): ``-sum(w * log p) / (labelled tokens)``, TRL's own reduction with a weight per token. The
    per-token log-probabilities come from TRL's fused LM head, as in ``SFTTrainer.compute_loss``; the
    collator pads the weights beside the labels."""
    import torch
    from torch.nn.utils.rnn import pad_sequence
    from trl import SFTTrainer
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    class WeightsCollator(DataCollatorForLanguageModeling):
        def torch_call(self, examples):
            batch = super().torch_call(examples)
            weights = [torch.tensor(e["loss_weights"], dtype=torch.float32) for e in examples]
            batch["loss_weights"] = pad_sequence(weights, batch_first=True, padding_value=0.0)
            return batch

    class WeightedSFTTrainer(SFTTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            weights = inputs.pop("loss_weights")[:, 1:]
            outputs = model(**inputs, use_cache=False, fused_lm_head=True)  # per-token log-probs, zero where unlabelled
            tokens = outputs.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
            loss = -(outputs.log_probs * weights.to(outputs.log_probs)).sum() / torch.as_tensor(tokens).clamp(min=1)
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                loss = loss * self.accelerator.num_processes  # as SFTTrainer: DDP averages the gradients
            self.log_token_metrics(outputs, inputs)
            return (loss, outputs) if return_outputs else loss

        def log_token_metrics(self, outputs, inputs) -> None:
            """The metrics ``SFTTrainer.compute_loss`` logs: entropy, token accuracy, tokens seen."""
            mode, gather = "train" if self.model.training else "eval", self.accelerator.gather_for_metrics
            valid = gather(outputs.label_mask.sum()).sum().clamp(min=1)
            self._metrics[mode]["entropy"].append((gather(outputs.entropy.detach().sum()).sum() / valid).item())
            self._metrics[mode]["mean_token_accuracy"].append((gather(outputs.is_top1.sum()).sum() / valid).item())
            if mode == "train":
                self._total_train_tokens += gather(inputs["attention_mask"].sum()).sum().item()
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return WeightedSFTTrainer(processing_class=tokenizer, data_collator=WeightsCollator(pad_token_id=pad), **kwargs)


# ------------------------------------------------------------------------------------------- run


@dataclass
class SFTRun:
    """What :func:`build_trainer` prepared: the trainer and everything a caller may want to inspect."""

    trainer: Any
    cfg: SFTRunConfig
    model_path: str
    resolved: dict[str, Any]
    report: Any
    resume: str | None


def build_trainer(cfg: SFTRunConfig, *, quiet: bool = False, callbacks: list | None = None) -> SFTRun:
    """Data, tokenizer, model, LoRA and ``SFTTrainer``, ready to ``train`` (nothing trained yet)."""
    validate(cfg)

    # the data first: a bad record fails in a second, before torch is even imported
    options = DataOptions(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(DataOptions)})
    rows, report = build_examples(data_paths(cfg), options)
    resume = resume_path(cfg)
    out = prepare_output_dir(cfg, resuming=resume is not None)

    import torch
    import transformers

    transformers.logging.set_verbosity_warning()
    if quiet:
        import datasets

        datasets.disable_progress_bars()
    resolved = resolve_precision(cfg, torch.cuda.is_available())
    model_path = resolve_model(cfg.model_name_or_path)
    resolved["model_path"] = model_path
    tokenizer = load_tokenizer(model_path)
    dsd = to_dataset_dict(tokenize_examples(rows, tokenizer, cfg.max_length, report, observation_loss=cfg.observation_loss,
                                                  echo_loss=cfg.echo_loss))
    has_validation = "validation" in dsd

    args = sft_config(cfg, resolved, has_validation, quiet=quiet, resuming=resume is not None)
    try:
        trainer = weighted_sft_trainer(
            tokenizer,
            model=model_path,
            args=args,
            train_dataset=dsd["train"],
            eval_dataset=dsd["validation"] if has_validation else None,
            peft_config=peft_config(cfg) if cfg.use_peft else None,
            callbacks=[make_log_callback(out / LOG_NAME), *(callbacks or [])],
        )
    except OSError as err:
        raise RhythmError(f"cannot load model {cfg.model_name_or_path!r} ({str(err).splitlines()[0]})") from None
    return SFTRun(trainer, cfg, model_path, resolved, report, resume)


def run_sft(
    cfg: SFTRunConfig,
    *,
    quiet: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train, evaluate, save (and optionally push); returns the run summary (also in ``sft_summary.json``)."""
    say = log or (lambda msg: print(msg, file=sys.stderr))
    started = time.perf_counter()
    # transformers prints its log lines to stdout; stdout is for results, so they go to stderr
    with contextlib.redirect_stdout(sys.stderr):
        run = build_trainer(cfg, quiet=quiet)
        return _train(run, cfg, started, say)


def _train(run: SFTRun, cfg: SFTRunConfig, started: float, say: Callable[[str], None]) -> dict[str, Any]:
    trainer, out = run.trainer, Path(cfg.output_dir)
    main = trainer.is_world_process_zero()
    if main:
        say(run.report.summary_line())
        (out / REPORT_NAME).write_bytes(orjson.dumps(run.report.to_dict(), option=orjson.OPT_INDENT_2) + b"\n")
        write_config(cfg, out / CONFIG_NAME, extra={
            "stage": "sft", "created_at": now_iso(), "command": command_line(), "resolved": run.resolved,
            "versions": versions(), "data_report": run.report.to_dict(),
        })
    train_result = trainer.train(resume_from_checkpoint=run.resume)
    evaluated = any("eval_loss" in e and e.get("step") == trainer.state.global_step for e in trainer.state.log_history)
    if trainer.eval_dataset is not None and not evaluated:
        trainer.evaluate()
    trainer.save_model(cfg.output_dir)
    history = trainer.state.log_history
    train_losses, eval_losses = series(history, "loss"), series(history, "eval_loss")
    summary: dict[str, Any] = {
        "stage": "sft",
        "output_dir": str(out),
        "model": cfg.model_name_or_path,
        "adapter": cfg.use_peft,
        "global_step": trainer.state.global_step,
        "epochs": trainer.state.epoch,
        "train_loss_first": train_losses[0] if train_losses else None,
        "train_loss_last": train_losses[-1] if train_losses else None,
        "train_loss_mean": train_result.training_loss,
        "eval_loss_first": eval_losses[0] if eval_losses else None,
        "eval_loss_last": eval_losses[-1] if eval_losses else None,
        "train_tokens": max((int(e.get("num_tokens", 0)) for e in history), default=0),
        "seconds": round(time.perf_counter() - started, 2),
        "resolved": run.resolved,
        "data": run.report.to_dict(),
        "hub_url": None,
    }
    if main:
        (out / SUMMARY_NAME).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
        if cfg.push_to_hub:
            summary["hub_url"] = push_folder(
                out, cfg.hub_model_id, private=cfg.hub_private,
                commit_message=f"rhythm sft: {summary['global_step']} steps, eval loss {summary['eval_loss_last']}",
            )
            say(f"pushed {out} to {summary['hub_url']}")
            (out / SUMMARY_NAME).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
    return summary


# ----------------------------------------------------------------------------- accelerate entry


def main(argv: list[str] | None = None) -> int:
    """``python -m rhythm.train.sft [--config FILE] [--set key=value ...]``: the entry ``accelerate launch`` runs.

        accelerate launch --num_processes 4 -m rhythm.train.sft --config configs/sft.yaml --set data=data/x.jsonl
    """
    return entry_main("sft", SFTRunConfig, run_sft, argv, without({"data"}), main.__doc__)


if __name__ == "__main__":
    sys.exit(main())
