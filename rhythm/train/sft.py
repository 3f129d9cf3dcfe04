"""``rhythm sft``: distil the teacher into a student with TRL's ``SFTTrainer`` (and a PEFT LoRA adapter).

    rhythm sft --config configs/sft-tiny.yaml --data data/teacher_30ep.jsonl        # offline, CPU, minutes
    rhythm sft --config configs/sft.yaml --data data/teacher_30ep.jsonl             # Qwen2.5-3B, one GPU
    accelerate launch -m rhythm.train.sft --config configs/sft.yaml --set data=data/x.jsonl  # several GPUs
    torchrun --standalone --nproc_per_node 2 -m rhythm.train.sft --config configs/sft-tiny.yaml --set data=...  # CPU DDP
    rhythm sft --flavor a10g-large          # Hugging Face Jobs: model -> YOU/rhythm-sft, data -> YOU/rhythm-teacher

Each teacher week is one example (:mod:`rhythm.train.data`: whole weeks, never truncated, validation on held-out
people), and each of its tokens weighs in the loss at its ``loss_weights`` (:func:`weighted_sft_trainer`).
``output_dir`` receives the model or adapter and its tokenizer, ``checkpoint-N/``, ``training_log.jsonl`` (TRL's
log history as it streams, plus ``"stage": "sft"``), ``sft_config.yaml`` (the effective config with versions),
``data_report.json`` and ``sft_summary.json``. docs/sft.md tells the recipe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson

from rhythm.agents.tiny import resolve_model
from rhythm.config import Positive, Share, Unit
from rhythm.errors import RhythmError
from rhythm.model.load import HUB_HINT, check_model_exists, means_local
from rhythm.train.common import (
    LearningRate,
    TrainRunConfig,
    batch_sizes,
    check_lora_targets,
    check_shared,
    entry_main,
    make_log_callback,
    peft_config,
    prepare_run,
    quiet_trainer,
    series,
    series_steps,
    trainer_args,
    write_run_start,
    write_summary,
)
from rhythm.train.data import DataOptions, DataReport, build_examples, tokenize_examples
from rhythm.train.jobs import JobsConfig
from rhythm.train.processes import is_main_process
from rhythm.train.run_folder import LOG_NAME, cleaned_on_failure, data_paths, train_or_finish

REPORT_NAME = "data_report.json"


@dataclass(frozen=True)
class SFTRunConfig(TrainRunConfig):
    """``rhythm sft``: names follow TRL's ``SFTConfig`` / ``ModelConfig``; the defaults are ``configs/sft.yaml``'s."""

    # Knobs that measured no help and left; a config that sets one is told where. Not annotated, so never a field
    # (a string ``ClassVar`` annotation is not recognised where the module runs under another ``__main__``, cProfile's).
    RETIRED = MappingProxyType({
        "best_week_per_person": "expert iteration is python benchmarks/own_weeks.py best (docs/sft.md)",
        "filter_beliefs": "DAgger for the belief is python benchmarks/own_weeks.py filter (docs/sft.md)",
        "action_balance": "it measured no help and was removed (docs/student.md; commit 2630816 is the last with it)",
        "context_noise": "it measured no help and was removed (docs/student.md; commit 6d1824e is the last with it)",
    })

    # --- model
    model_name_or_path: str = "Qwen/Qwen2.5-3B-Instruct"
    """Hub id or local path of the student; ``rhythm-tiny`` = the offline tiny Qwen2 built locally."""
    # --- data
    val_fraction: Share = 0.1
    """Share of episodes (never steps) held out for validation loss; 0 = no validation."""
    min_score: float | None = None
    """Keep only episodes whose score.final_score is at least this (None = all)."""
    strip_reasoning: bool = False
    """Train on the BELIEF/ACTION lines only instead of the full reasoning."""
    drop_parse_failures: bool = True
    """Leave out weeks with a teacher reply that names no valid ACTION."""
    observation_loss: Unit = 0.0
    """Loss weight of the rest of the week (observations, prompt, markup) beside the replies' 1; 0 = assistant-only."""
    echo_loss: Unit | None = None
    """Loss weight of the action name each observation echoes (``After DEEP_WORK:``); None = observation_loss."""
    first_turns: Positive | None = None
    """Train on each week's first N turns only, a curriculum stage (None: whole weeks)."""
    max_length: Positive = 10240
    """Tokens per example; longer examples are dropped (and counted), never truncated (a Qwen2.5 week with its
    reasoning is ~8,500)."""
    # --- optimisation
    num_train_epochs: float = 3.0
    """Passes over the training examples (ignored when max_steps > 0)."""
    max_steps: int = -1
    """Optimizer steps; -1 = derive from num_train_epochs."""
    learning_rate: LearningRate = 2e-4
    """Peak learning rate (LoRA wants ~1e-4..3e-4, full fine-tuning ~1e-5)."""
    lr_scheduler_type: str = "cosine"
    """transformers scheduler name: linear | cosine | constant | constant_with_warmup ..."""
    per_device_train_batch_size: Positive = 1
    """Examples per device per forward pass."""
    per_device_eval_batch_size: Positive = 1
    """Examples per device per forward pass of the validation loss."""
    gradient_accumulation_steps: Positive = 16
    """Forward passes per optimizer step (effective batch = this x batch size x devices)."""
    # --- evaluation, logging, checkpoints
    eval_steps: Positive = 25
    """Validation loss every N optimizer steps (and once at the end)."""
    eval_on_start: bool = True
    """Validation loss before the first step: the baseline the curve starts from."""
    logging_steps: Positive = 5
    """Training loss (and learning rate, grad norm, tokens) every N steps."""
    save_steps: Positive = 50
    """Checkpoint every N steps (resume from the latest with resume_from_checkpoint=latest)."""
    output_dir: str = "runs/sft-qwen2.5-3b"
    """Adapter, tokenizer, checkpoints, training_log.jsonl and the effective config go here."""
    # --- Hugging Face Jobs
    jobs: JobsConfig = field(default_factory=lambda: JobsConfig(timeout="3h"))
    """Hugging Face Jobs settings; ``jobs.flavor`` set = the run is submitted there (3 h wall time by default)."""


def validate(cfg: SFTRunConfig) -> None:
    """Cheap checks before anything heavy is imported or launched."""
    if not data_paths(cfg):
        raise RhythmError("no data given; pass --data FILE (a teacher episodes JSONL)")
    if cfg.max_steps == -1 and cfg.num_train_epochs <= 0:
        raise RhythmError("num_train_epochs must be positive when max_steps is -1")
    check_shared(cfg)


def sft_config(cfg: SFTRunConfig, resolved: dict[str, Any], has_validation: bool, quiet: bool = False,
               resuming: bool = False):
    """The TRL ``SFTConfig`` for a run (CPU-safe settings resolved by :func:`rhythm.train.common.prepare_run`)."""
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
    (:func:`rhythm.train.data.week_weights`): ``-sum(w * log p) / (labelled tokens)``, TRL's own reduction with a
    weight per token, on the per-token log-probabilities of TRL's fused LM head. The collator pads the weights.
    Beside TRL's metrics it logs ``reply_loss`` and ``reply_token_accuracy`` (``eval_`` ones on validation): over the
    replies alone, so runs with another ``observation_loss`` (whose loss also averages the observations) compare."""
    import torch
    from torch.nn.utils.rnn import pad_sequence
    from trl import SFTTrainer
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    class WeightsCollator(DataCollatorForLanguageModeling):
        def torch_call(self, examples):
            batch = super().torch_call(examples)
            for key, dtype in (("loss_weights", torch.float32), ("reply_mask", torch.bool)):
                if key in examples[0]:
                    values = [torch.tensor(e[key], dtype=dtype) for e in examples]
                    batch[key] = pad_sequence(values, batch_first=True, padding_value=0)
            return batch

    class WeightedSFTTrainer(SFTTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            weights = inputs.pop("loss_weights")[:, 1:]
            replies = inputs.pop("reply_mask", None)
            outputs = model(**inputs, use_cache=False, fused_lm_head=True)  # per-token log-probs, zero where unlabelled
            tokens = outputs.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
            nll = -(outputs.log_probs * weights.to(outputs.log_probs)).sum(dim=-1)  # per week
            loss = nll.sum() / torch.as_tensor(tokens).clamp(min=1)
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                loss = loss * self.accelerator.num_processes  # as SFTTrainer: DDP averages the gradients
            self.log_token_metrics(outputs, inputs, None if replies is None else replies[:, 1:], nll)
            return (loss, outputs) if return_outputs else loss

        def log_token_metrics(self, outputs, inputs, replies, nll) -> None:
            """The metrics ``SFTTrainer.compute_loss`` logs (entropy, token accuracy, tokens seen), and the replies'
            own loss and accuracy. On validation each is the ratio of sums over every batch so far: a mean of the
            batches' means (transformers' and TRL's) would move with ``per_device_eval_batch_size``."""
            gather = self.accelerator.gather_for_metrics

            def total(per_token):  # gathered week by week: the last batch's padding weeks are dropped, as transformers does
                return gather(per_token.detach().flatten(1).sum(dim=1)).sum().item()

            sums = {"tokens": total(outputs.label_mask), "nll": total(nll[:, None]), "entropy": total(outputs.entropy),
                    "top1": total(outputs.is_top1)}
            if replies is not None:
                replies = replies.to(outputs.log_probs.device)
                sums.update(replies=total(replies), reply_nll=total(-outputs.log_probs * replies),
                            reply_top1=total(outputs.is_top1 & replies))
            mode = "train" if self.model.training else "eval"
            if mode == "eval":
                store = self.__dict__.setdefault("eval_sums", {})  # emptied as each validation starts
                for key, value in sums.items():
                    store[key] = store.get(key, 0.0) + value
                sums = store
            ratios = {"entropy": ("entropy", "tokens"), "mean_token_accuracy": ("top1", "tokens"),
                      "reply_loss": ("reply_nll", "replies"), "reply_token_accuracy": ("reply_top1", "replies")}
            for name, (num, den) in ratios.items():
                if den in sums:
                    value = sums[num] / max(sums[den], 1)
                    if mode == "eval":
                        self._metrics[mode][name] = [value]  # the running ratio: TRL logs the mean of this list
                    else:
                        self._metrics[mode][name].append(value)
            if mode == "train":
                self._total_train_tokens += total(inputs["attention_mask"])
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]

        def evaluation_loop(self, *args, **kwargs):
            """Validation loss over every weighted token of the split (transformers averages the batches' means)."""
            self.eval_sums: dict[str, float] = {}
            output = super().evaluation_loop(*args, **kwargs)
            if self.eval_sums.get("tokens"):
                output.metrics[f"{kwargs.get('metric_key_prefix', 'eval')}_loss"] = self.eval_sums["nll"] / self.eval_sums["tokens"]
            return output

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return WeightedSFTTrainer(processing_class=tokenizer, data_collator=WeightsCollator(pad_token_id=pad), **kwargs)


@dataclass
class SFTRun:
    """What :func:`build_trainer` prepared: the trainer and what the run records beside it."""

    trainer: Any
    cfg: SFTRunConfig
    resolved: dict[str, Any]
    report: DataReport
    resume: str | None


def build_trainer(cfg: SFTRunConfig, *, quiet: bool = False, callbacks: list | None = None,
                  examples: Callable[..., tuple[dict, DataReport]] = build_examples,
                  tokenize: Callable[..., dict] = tokenize_examples) -> SFTRun:
    """Data, tokenizer, model, LoRA and ``SFTTrainer``, ready to ``train`` (nothing trained yet). ``examples`` turns
    ``cfg.data`` into rows and ``tokenize`` rows into tokens with loss weights: :func:`build_examples` and
    :func:`tokenize_examples`, unless a probe brings its own (benchmarks/dagger_probe.py, own_weeks.py)."""
    validate(cfg)
    check_model_exists(cfg.model_name_or_path)
    options = DataOptions(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(DataOptions)})
    rows, report = examples(data_paths(cfg), options)  # before torch is imported: a bad record fails at once
    out, resume, resolved = prepare_run(cfg, "sft", quiet)
    model_path = resolved["model_path"] = resolve_model(cfg.model_name_or_path)

    from datasets import Dataset
    from safetensors import SafetensorError
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
    except (OSError, ValueError) as err:  # ValueError: a folder that holds no model or tokenizer
        hint = "" if means_local(model_path) else f"; {HUB_HINT}"
        raise RhythmError(f"cannot load the tokenizer of {model_path!r} ({str(err).splitlines()[0]}{hint})") from None
    tokenized = tokenize(rows, tokenizer, cfg.max_length, report, observation_loss=cfg.observation_loss,
                         echo_loss=cfg.echo_loss)
    data = {name: Dataset.from_list(split) for name, split in tokenized.items() if split}
    try:
        trainer = weighted_sft_trainer(
            tokenizer,
            model=model_path,
            args=sft_config(cfg, resolved, "validation" in data, quiet=quiet, resuming=resume is not None),
            train_dataset=data["train"],
            eval_dataset=data.get("validation"),
            peft_config=peft_config(cfg) if cfg.use_peft else None,
            callbacks=[make_log_callback(out / LOG_NAME, "sft"), *(callbacks or [])],
        )
    except (OSError, SafetensorError) as err:  # SafetensorError: a weights file cut short
        raise RhythmError(f"cannot load model {cfg.model_name_or_path!r} ({str(err).splitlines()[0]})") from None
    except (ValueError, ImportError) as err:  # a setting the libraries refuse: a scheduler, attention or LoRA target
        raise RhythmError(f"cannot build the trainer with these settings: {' '.join(str(err).split())}") from None
    check_lora_targets(trainer.model, cfg)
    resolved.update(batch_sizes(trainer.args))
    return SFTRun(quiet_trainer(trainer) if quiet else trainer, cfg, resolved, report, resume)


def run_sft(cfg: SFTRunConfig, *, quiet: bool = False, log: Callable[[str], None] | None = None,
            **hooks: Callable[..., Any]) -> dict[str, Any]:
    """Train, evaluate, save (and optionally push); returns the run summary (also in ``sft_summary.json``).
    ``hooks``: :func:`build_trainer`'s ``examples`` / ``tokenize``."""
    say = log or (lambda msg: print(msg, file=sys.stderr))
    say = say if is_main_process() else (lambda msg: None)  # under a launcher, one process speaks (errors: each)
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr), cleaned_on_failure(cfg.output_dir):  # stdout: results only
        return _train(build_trainer(cfg, quiet=quiet, **hooks), started, say)


def _train(run: SFTRun, started: float, say: Callable[[str], None]) -> dict[str, Any]:
    trainer, cfg = run.trainer, run.cfg
    main = trainer.is_world_process_zero()
    if main:
        write_run_start(run, "sft", REPORT_NAME, "data_report", say)
    resumed_at = _restore_token_count(trainer, run.resume)
    train_result = train_or_finish(trainer, run.resume)
    evaluated = any("eval_loss" in e and e.get("step") == trainer.state.global_step for e in trainer.state.log_history)
    if trainer.eval_dataset is not None and not evaluated:  # the final validation loss
        trainer.evaluate()
    trainer.save_model(cfg.output_dir)
    history = trainer.state.log_history
    train_losses, eval_losses = series(history, "loss"), series(history, "eval_loss")
    loss_steps, eval_steps = series_steps(history, "loss"), series_steps(history, "eval_loss")
    summary: dict[str, Any] = {
        "stage": "sft",
        "output_dir": str(Path(cfg.output_dir)),
        "model": cfg.model_name_or_path,
        "adapter": cfg.use_peft,
        "global_step": trainer.state.global_step,
        "epochs": trainer.state.epoch,
        "train_loss_first": train_losses[0] if train_losses else None,
        "train_loss_last": train_losses[-1] if train_losses else None,
        "train_loss_steps": [loss_steps[0], loss_steps[-1]] if loss_steps else None,  # where first and last were logged
        # over the steps this run trained (after resumed_from_step; None when it trained none)
        "train_loss_mean": None if train_result is None else train_result.training_loss,
        "resumed_from_step": resumed_at,
        "eval_loss_first": eval_losses[0] if eval_losses else None,
        "eval_loss_last": eval_losses[-1] if eval_losses else None,
        "eval_loss_steps": [eval_steps[0], eval_steps[-1]] if eval_steps else None,
        "eval_reply_loss_last": (series(history, "eval_reply_loss") or [None])[-1],
        "train_tokens": max((int(e.get("num_tokens", 0)) for e in history), default=0),
        "seconds": round(time.perf_counter() - started, 2),
        "resolved": run.resolved,
        "data": run.report.to_dict(),
        "hub_url": None,
    }
    if main:
        write_summary(cfg, "sft", summary, f"rhythm sft: {summary['global_step']} steps, eval loss {summary['eval_loss_last']}", say)
    return summary


def _restore_token_count(trainer: Any, checkpoint: str | None) -> int | None:
    """On resume, the tokens seen before the checkpoint (its last logged ``num_tokens``), so the count goes on
    rather than restarting; returns the checkpoint's step (None for a fresh run)."""
    if checkpoint is None:
        return None
    state = orjson.loads((Path(checkpoint) / "trainer_state.json").read_bytes())
    seen = [e["num_tokens"] for e in state.get("log_history", []) if isinstance(e.get("num_tokens"), (int, float))]
    trainer._total_train_tokens = int(max(seen, default=0))
    return int(state.get("global_step", 0))


def main(argv: list[str] | None = None) -> int:
    """``python -m rhythm.train.sft [--config FILE] [--set key=value ...]``: the entry ``accelerate launch`` and jobs run."""
    return entry_main("sft", SFTRunConfig, run_sft, argv, validate, omit=("data",), doc=main.__doc__)


if __name__ == "__main__":  # through the module as imported: its config's annotations resolve under any __main__ (cProfile's)
    from rhythm.train.sft import main as entry

    sys.exit(entry())
