"""GRPO refinement of the SFT student with rewards from the benchmark itself: TRL ``GRPOTrainer``.

    rhythm grpo --config configs/grpo-tiny.yaml --adapter runs/sft-tiny --data data/teacher_30ep.jsonl  # CPU, minutes
    rhythm grpo --config configs/grpo.yaml --adapter runs/sft-qwen2.5-3b                                 # Qwen2.5-3B, one GPU
    rhythm grpo --config configs/grpo-tiny-episode.yaml --model runs/sft-tiny                            # whole weeks
    rhythm grpo --config configs/grpo.yaml --flavor a10g-large --set adapter=me/rhythm-sft \\
        --set hub_model_id=me/rhythm-grpo --set jobs.data_repo=me/rhythm-teacher                              # Hugging Face Jobs
    accelerate launch -m rhythm.train.grpo --config configs/grpo.yaml --set adapter=runs/sft-qwen2.5-3b --set data=...           # several GPUs

The policy is the SFT LoRA adapter loaded onto its base with ``is_trainable=True`` (without an adapter, a
fresh LoRA on ``model_name_or_path``; with ``use_peft: false``, every weight of a full model, as the tiny student
trains). Three modes:

``step`` (default): each prompt is one recorded state (:mod:`rhythm.train.grpo.data`); TRL samples
``num_generations`` replies to it and the reward functions of :mod:`rhythm.train.grpo.rewards`, found by
name (``reward_funcs``) and weighted (``reward_weights``), score every reply of the group in that
exact state (the columns condition/split/seed/t/prefix replay it).

``branch`` (the quickstart's): step mode's states, usually of the student's own greedy weeks
(``rollout_seeds``), each sampled reply rewarded with the final score of the week it leads to, the student
greedy after it (:mod:`rhythm.train.grpo.branch`; pairs and the restore challenger: :mod:`rhythm.train.grpo.pairs`).

``episode``: the student plays whole weeks and each reply is rewarded with the final score of its
week (``rhythm.grader.score_episode``, via :func:`rhythm.agents.episodes.play_batch`, exactly as eval plays
and grades). It runs through TRL's ``rollout_func``: for each person in the batch the student plays
``num_generations`` weeks in lockstep, one sampled reply per turn to the conversation eval shows (the system
prompt and the week so far); every ``episode.every_k_turns``-th turn becomes one GRPO sample whose prompt is
exactly what the student saw, and the group of a turn holds the ``num_generations`` weeks of that person, so
each reply's advantage is its week's score against the person's other weeks.
Nothing the environment wrote is inside a completion, so no ``env_mask`` is needed. Why not TRL's
``environment_factory``: see ``docs/grpo.md``.

``output_dir`` receives the adapter and tokenizer, ``checkpoint-N/``, ``training_log.jsonl`` (TRL's
``log_history`` plus ``"stage": "grpo"``: loss, ``reward``, ``rewards/<name>/mean`` and ``/std`` per
reward function, completion lengths, KL when ``beta > 0``), ``reward_log.jsonl`` (one line per scored
reply: state, action, belief, every reward, the weighted total), ``grpo_config.yaml`` (effective config
with versions), ``prompts_report.json``, ``grpo_summary.json``, in episode mode ``episode_rollouts.jsonl``
(every week played, as episode records), and with ``rollout_seeds`` ``student_rollouts.jsonl`` (the student's own
weeks whose states are the prompts). Heavy imports happen inside functions.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rhythm.agents.tiny import resolve_base
from rhythm.env.constants import EPISODE_STEPS
from rhythm.errors import RhythmError
from rhythm.model.load import (
    ModelOptions,
    adapter_config,
    check_model_exists,
    finish_tokenizer,
    load_adapter,
    looks_local,
    means_local,
    under_local_folder,
)
from rhythm.records import write_atomic, write_episodes
from rhythm.train.common import (
    batch_sizes,
    check_lora_targets,
    make_log_callback,
    peft_config,
    prepare_run,
    quiet_trainer,
    series,
    trainer_args,
    write_run_start,
    write_summary,
)
from rhythm.train.grpo.anchor import Anchor, anchored
from rhythm.train.grpo.branch import make_branch_rollout, prompt_key, restore_challengers
from rhythm.train.grpo.config import GRPORunConfig, episode_batch, has_rollouts, step_generation_batch, validate
from rhythm.train.grpo.data import (
    PromptOptions,
    Read,
    build_prompts,
    build_rows,
    read_data,
    rollout_specs,
    student_rollouts,
)
from rhythm.train.grpo.probe import PolicyProbe, make_probe_callback
from rhythm.train.grpo.rewards import RewardLog
from rhythm.train.grpo.rollout import make_week_rollout
from rhythm.train.grpo.shared_prompts import sharing_prompts
from rhythm.train.processes import is_main_process, world_size
from rhythm.train.run_folder import LOG_NAME, checkpoint_step, cleaned_on_failure, data_paths, train_or_finish

REWARD_LOG_NAME = "reward_log.jsonl"
ANCHOR_POOL = 256  # states the anchor draws from (its starting replies are computed once)
ROLLOUTS_NAME = "episode_rollouts.jsonl"
STUDENT_ROLLOUTS_NAME = "student_rollouts.jsonl"
REPORT_NAME = "prompts_report.json"


# -------------------------------------------------------------------------------------- model


def start_from_full_weights(cfg: GRPORunConfig, say: Callable[[str], None]) -> GRPORunConfig:
    """``--adapter DIR`` where DIR holds a full model (what ``rhythm sft`` writes with ``use_peft: false``,
    the tiny student's default) is read as ``--model DIR`` with every weight trained, as the quickstart
    starts GRPO (a ``model_name_or_path`` beside it, which would name a LoRA adapter's base, is not used);
    any other config is returned as it is."""
    folder = Path(cfg.adapter).expanduser() if cfg.adapter else None
    if folder is None or not folder.is_dir() or (folder / "adapter_config.json").is_file():
        return cfg
    if not (folder / "config.json").is_file():
        raise RhythmError(f"{cfg.adapter} is neither a LoRA adapter (no adapter_config.json) nor a model (no config.json); "
                          "pass rhythm sft's output_dir")
    unused = ""  # a base model means nothing for full weights (a config file may name one for its own start)
    if cfg.model_name_or_path and Path(cfg.model_name_or_path).expanduser() != folder:
        unused = f"; model_name_or_path {cfg.model_name_or_path} is not used"
    say(f"{cfg.adapter} holds full weights, not a LoRA adapter: refining all of them "
        f"(as --model {cfg.adapter} --set adapter=null --set use_peft=false){unused}")
    return replace(cfg, adapter=None, model_name_or_path=cfg.adapter, use_peft=False)


def load_policy(cfg: GRPORunConfig, resolved: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """``(model, tokenizer, source)``: the SFT adapter on its base, trainable; or the bare base model."""
    import torch
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source: dict[str, Any] = {"adapter": cfg.adapter}
    hint = ""
    if cfg.adapter:
        adapter_cfg = adapter_config(cfg.adapter)
        if adapter_cfg is None:
            raise RhythmError(f"{cfg.adapter} is not a LoRA adapter (no adapter_config.json); pass the SFT output_dir, "
                              "or a full model as --model NAME")
        base_name = cfg.model_name_or_path or adapter_cfg.get("base_model_name_or_path")
        if cfg.model_name_or_path:  # a config's own start (grpo-tiny's runs/sft-tiny) beside a LoRA adapter
            hint = (f" (model_name_or_path={cfg.model_name_or_path} stands in for the adapter's own base "
                    f"{adapter_cfg.get('base_model_name_or_path')}; --set model_name_or_path=null uses that)")
        if not base_name:
            raise RhythmError(f"{cfg.adapter}: adapter names no base model; pass --model NAME")
    else:
        base_name = cfg.model_name_or_path
    base = resolve_base(str(base_name))
    check_model_exists(base)
    source["base"] = base
    local_adapter = cfg.adapter is not None and Path(cfg.adapter).expanduser().is_dir()
    tok_source = cfg.adapter if local_adapter and (Path(cfg.adapter) / "tokenizer_config.json").is_file() else base
    kwargs: dict[str, Any] = {"dtype": getattr(torch, resolved["dtype"])}
    if cfg.attn_implementation:
        kwargs["attn_implementation"] = cfg.attn_implementation
    try:
        tokenizer = AutoTokenizer.from_pretrained(tok_source)
        model = AutoModelForCausalLM.from_pretrained(base, **kwargs)
    except (OSError, ValueError, ImportError, SafetensorError) as err:  # a weights file cut short, an attention not installed
        raise RhythmError(f"cannot load model {base!r}: {str(err).strip().splitlines()[0]}{hint}") from None
    source["tokenizer"] = str(tok_source)
    if cfg.adapter:
        model = load_adapter(model, cfg.adapter, name=cfg.adapter, base=base, trainable=True)
        for adapter in model.peft_config.values():  # every save (checkpoints too) names the base it is refined on:
            adapter.base_model_name_or_path = base  # PEFT kept the name it was trained on, another student in eval
    finish_tokenizer(tokenizer, tok_source)  # left padding: GRPOTrainer requires it
    return model, tokenizer, source


def grpo_config(cfg: GRPORunConfig, resolved: dict[str, Any], quiet: bool = False):
    """The TRL ``GRPOConfig`` of a run (episode mode: batch sizes derived, no dataset shuffle)."""
    from trl import GRPOConfig

    generation_batch_size = cfg.step.generation_batch_size
    accumulation = cfg.step.gradient_accumulation_steps
    if cfg.mode == "episode":
        generation_batch_size = episode_batch(cfg)
        # one generation batch of whole weeks per optimizer step: on-policy, and no week is split; TRL deals each
        # process a consecutive share of it, whole people (validate), so no group is split across processes
        accumulation = generation_batch_size // (cfg.per_device_train_batch_size * world_size())
    kwargs: dict[str, Any] = {}
    if cfg.mode == "step" and cfg.step.use_vllm:
        kwargs.update(use_vllm=True, vllm_mode=cfg.step.vllm_mode, vllm_gpu_memory_utilization=cfg.step.vllm_gpu_memory_utilization)
    try:
        return GRPOConfig(
            **trainer_args(cfg, resolved, quiet),
            # no dropout (a LoRA adapter's): the greedy continuations, the pairs' ranking, the probe and the anchor's
            # KL read the policy as eval plays it, and the loss's log-probabilities are the ones that were sampled
            disable_dropout=True,
            gradient_accumulation_steps=accumulation,
            generation_batch_size=generation_batch_size,
            num_generations=cfg.num_generations,
            max_completion_length=cfg.max_completion_length,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            beta=cfg.beta,
            loss_type=cfg.loss_type,
            epsilon=cfg.epsilon,
            scale_rewards=cfg.scale_rewards,
            num_iterations=cfg.num_iterations,
            mask_truncated_completions=cfg.mask_truncated_completions,
            reward_weights=cfg.reward_weights,
            shuffle_dataset=cfg.mode != "episode",  # episode mode: rows of one person stay together
            **kwargs,
        )
    except ValueError as err:
        raise RhythmError(f"invalid GRPO settings: {' '.join(str(err).split())}") from None


# ------------------------------------------------------------------------------------------- run


@dataclass
class GRPORun:
    """What :func:`build_trainer` prepared (nothing trained yet)."""

    trainer: Any
    cfg: GRPORunConfig
    resolved: dict[str, Any]
    report: Any
    rewards: RewardLog
    resume: str | None
    source: dict[str, Any]


def check_adapter_base(cfg: GRPORunConfig, say: Callable[[str], None]) -> None:
    """A LoRA adapter here loads onto ``model_name_or_path`` where one is set (a config's own start, as the tiny
    configs' ``runs/sft-tiny``), not onto the base it was trained on: a base that differs from the adapter's is said
    (an adapter on another base plays another student), and a local one that does not exist is refused at once, with
    the way to the adapter's own base (not after the Hub was tried for a path)."""
    folder = Path(cfg.adapter).expanduser() if cfg.adapter else None
    if folder is None or not cfg.model_name_or_path or not (folder / "adapter_config.json").is_file():
        return
    own = (adapter_config(str(folder)) or {}).get("base_model_name_or_path")
    given = Path(cfg.model_name_or_path).expanduser()
    use_own = f"--set model_name_or_path=null loads it onto its own base {own}" if own else "pass --model BASE"
    own_here = bool(own) and Path(own).expanduser().exists()
    # runs/sft-tiny reads as a Hub id: a name under a folder here, or under runs/ (where rhythm's configs write), is
    # taken as a path; another Hub-shaped name (the Hub copy of a base the adapter saw locally) is only said below
    local = means_local(cfg.model_name_or_path) or under_local_folder(cfg.model_name_or_path)
    if not given.exists() and local and (own_here or looks_local(cfg.model_name_or_path)):
        raise RhythmError(f"model_name_or_path {cfg.model_name_or_path} not found (the base the adapter {cfg.adapter} "
                          f"would load onto); {use_own}")
    if own and cfg.model_name_or_path != own and not (own_here and given.resolve() == Path(own).expanduser().resolve()):
        say(f"note: the adapter {cfg.adapter} was trained on {own}; it loads onto model_name_or_path "
            f"{cfg.model_name_or_path} instead ({use_own})")


def build_trainer(cfg: GRPORunConfig, *, quiet: bool = False, callbacks: list | None = None,
                  say: Callable[[str], None] | None = None) -> GRPORun:
    """Prompts, policy, reward functions and ``GRPOTrainer``, ready to ``train``."""
    say = say or (lambda msg: None)
    validate(cfg)
    read = read_data(data_paths(cfg))  # the data first: a bad record fails in a second, before torch is imported
    students: list[dict[str, Any]] = []
    if not has_rollouts(cfg):
        rows, report = build_rows(cfg, read=read)
    cfg = start_from_full_weights(cfg, say)
    check_adapter_base(cfg, say)
    out, resume, resolved = prepare_run(cfg, "grpo", quiet)

    from datasets import Dataset
    from trl import GRPOTrainer

    if has_rollouts(cfg):
        students = _student_rollouts(cfg, out, say)
        rows, report = build_rows(cfg, students, read=read)
    if cfg.mode == "branch" and cfg.branch.group == "pair":  # at the last step a pair shares what is judged
        rows = [r for r in rows if int(r["t"]) < EPISODE_STEPS - 1]
        say(f"branch.group=pair: {len(rows)} prompts before the last step")
        if not rows:
            raise RhythmError("branch.group=pair needs states before the last step; the prompts hold none")
    if cfg.mode == "branch":  # TRL hands the rollout prompts alone: two people whose prompts read alike (at t=0, the
        rows = _unique_prompts(rows, say)  # start meters to two decimals) would both be played as one of them
    train_rows, named = rows, None
    if cfg.mode == "branch" and cfg.branch.challenger == "restore":
        named = restore_challengers(rows, cfg.branch.restore_below)
    if cfg.mode == "branch" and cfg.branch.restore_only:  # the anchor and the probe still draw from every state
        train_rows = [r for r, c in zip(rows, named, strict=True) if c is not None]
        say(f"branch.restore_only: {len(train_rows)} of {len(rows)} prompts have a meter to keep off the crash line")
        if not train_rows:
            raise RhythmError(f"branch.restore_only: no prompt has a meter below restore_below={cfg.branch.restore_below} "
                              "that one action can keep off the crash line")
    report.trained = len(train_rows)
    _check_enough(cfg, train_rows)
    model, tokenizer, source = load_policy(cfg, resolved)
    resolved["model_path"] = source["base"]
    rewards = RewardLog(out / REWARD_LOG_NAME, cfg.reward_funcs, cfg.reward_weights, cfg.num_generations, cfg.log_replies)
    rewards.batches = _trim_logs(out, resume)  # a resumed run numbers its batches on
    args = grpo_config(cfg, resolved, quiet)
    rollout = None
    if cfg.mode == "episode":
        rollout = make_week_rollout(f"grpo:{cfg.adapter or cfg.model_name_or_path}", out / ROLLOUTS_NAME)
    elif cfg.mode == "branch":
        rollout = make_branch_rollout(rows, f"grpo:{cfg.adapter or cfg.model_name_or_path}", cfg.branch, named)
    if rollout is not None:
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.16 (pinned)
    probe = _probe(cfg, rows, tokenizer, read, students)
    trainer_cls, anchor = sharing_prompts(GRPOTrainer), None
    if cfg.anchor_weight > 0:
        pool = [rows[int(i)]["prompt"] for i in np.random.default_rng(cfg.seed).permutation(len(rows))[:ANCHOR_POOL]]
        anchor = Anchor(pool, tokenizer, cfg.max_completion_length, _stop_ids(tokenizer), cfg.anchor_states, cfg.seed)
        trainer_cls = anchored(trainer_cls, anchor, cfg.anchor_weight)
    try:
        trainer = trainer_cls(
            model=model,
            reward_funcs=rewards.wrapped(),
            args=args,
            train_dataset=Dataset.from_list(train_rows),
            processing_class=tokenizer,
            peft_config=peft_config(cfg) if (cfg.use_peft and not cfg.adapter) else None,
            callbacks=[make_probe_callback(probe, rewards.pop_metrics), make_log_callback(out / LOG_NAME, stage="grpo"),
                       *(callbacks or [])],
            rollout_func=rollout,
        )
    except ValueError as err:  # a setting the libraries refuse once the model is there (a LoRA target it lacks)
        raise RhythmError(f"cannot build the trainer with these settings: {' '.join(str(err).split())}") from None
    if not cfg.adapter:  # a fresh adapter (a loaded one keeps its own targets)
        check_lora_targets(trainer.model, cfg)
    resolved.update(batch_sizes(trainer.args))
    # The starting policy, recorded before train() loads a checkpoint: a resumed run's probe and anchor measure
    # against the model the run started from, as an uninterrupted run's do, and its anchor draws the states next.
    for start in (probe, anchor.pool if anchor else None):
        if start is not None:
            start.start(trainer.model)
    if anchor is not None and resume is not None:
        anchor.skip(checkpoint_step(resume) * trainer.args.gradient_accumulation_steps)
    return GRPORun(quiet_trainer(trainer) if quiet else trainer, cfg, resolved, report, rewards, resume, source)


def _unique_prompts(rows: list[dict[str, Any]], say: Callable[[str], None]) -> list[dict[str, Any]]:
    """``rows`` less those whose prompt another row has already (branch mode finds a state by its prompt), counted."""
    by_prompt: dict[bytes, dict[str, Any]] = {}
    for row in rows:
        by_prompt.setdefault(prompt_key(row["prompt"]), row)  # the first row of each prompt, in the rows' order
    unique = list(by_prompt.values())
    if len(unique) < len(rows):
        say(f"branch mode: {len(rows) - len(unique)} prompts left out: each reads exactly as another person's, and a "
            "branch is played for the person its prompt names")
    return unique


def _check_enough(cfg: GRPORunConfig, train_rows: list[dict[str, Any]]) -> None:
    """Refuse a run whose states cannot fill one generation batch: TRL would train 0 steps and the run would save
    the starting model as if refined."""
    if cfg.mode == "episode":
        return  # its rows are placeholders, checked against episodes_per_step when built
    generation = step_generation_batch(cfg) * world_size()
    needed = generation // cfg.num_generations
    if len(train_rows) < needed:
        raise RhythmError(f"{len(train_rows)} training states, fewer than the {needed} one generation batch needs "
                          f"({generation} completions / num_generations {cfg.num_generations}); give more data or "
                          "rollout_seeds, or a smaller batch")


def _probe(cfg: GRPORunConfig, rows: list[dict[str, Any]], tokenizer: Any, read: Read,
           students: list[dict[str, Any]]) -> PolicyProbe | None:
    """The fixed probe states: evenly spaced training prompts (step mode), or states of the data's and the
    student's episodes (episode mode, whose rows are placeholders), the same for every run on the same data."""
    if cfg.probe_states <= 0:
        return None
    if cfg.mode == "episode":
        rows, _ = build_prompts(data_paths(cfg), PromptOptions(every_k_steps=7, max_prompts=cfg.probe_states, seed=cfg.seed,
                                                              strip_reasoning=cfg.step.strip_reasoning), students, read)
    picked = [rows[int(i)] for i in np.linspace(0, len(rows) - 1, min(cfg.probe_states, len(rows)))]
    return PolicyProbe([r["prompt"] for r in picked], tokenizer, cfg.max_completion_length, _stop_ids(tokenizer))


def _stop_ids(tokenizer: Any) -> list[int]:
    """Where the probe's and the anchor's greedy replies end: the tokenizer's end-of-turn token."""
    return [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []


def _trim_logs(out: Path, resume: str | None) -> int:
    """A fresh run starts the reward and rollout logs afresh; a resumed one keeps what the checkpoint covers (the
    launch's first process rewrites them, the others only count). Returns the reward batches kept (the last kept
    line's ``batch``)."""
    keep_until = 0 if resume is None else checkpoint_step(resume)
    batches = 0
    for name, key in ((REWARD_LOG_NAME, "step"), (ROLLOUTS_NAME, "grpo_step")):
        path = out / name
        try:
            lines = path.read_bytes().splitlines(keepends=True)
        except FileNotFoundError:  # none yet, or emptied by overwrite_output_dir
            continue
        kept = [line for line in lines
                if line.strip() and line.endswith(b"\n") and int(orjson.loads(line).get(key) or 0) <= keep_until]
        if is_main_process():
            write_atomic(path, b"".join(kept))
        if name == REWARD_LOG_NAME and kept:
            batches = int(orjson.loads(kept[-1]).get("batch") or 0)
    return batches


def _student_rollouts(cfg: GRPORunConfig, out: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The starting student plays ``rollout_seeds`` (greedy, as eval plays); records kept in output_dir."""
    specs = rollout_specs(cfg)
    model = cfg.adapter or cfg.model_name_or_path
    options = ModelOptions(max_new_tokens=cfg.max_completion_length, base_model=cfg.model_name_or_path if cfg.adapter else None,
                           dtype="auto", seed=cfg.seed)
    started = time.perf_counter()
    records = student_rollouts(str(model), specs, options)  # every process plays them: each needs the prompts
    if not is_main_process():  # one process writes the file (two used to write it at once) and says so
        return records
    path = out / STUDENT_ROLLOUTS_NAME
    write_episodes(path, records)
    mean = sum(r["score"]["final_score"] for r in records) / len(records)
    say(f"student rollouts: {len(records)} episodes played in {time.perf_counter() - started:.0f} s "
        f"(mean final score {mean:.3f}) -> {path}")
    return records


def run_grpo(cfg: GRPORunConfig, *, quiet: bool = False, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train, save (and optionally push); returns the run summary (also in ``grpo_summary.json``)."""
    say = log or (lambda msg: print(msg, file=sys.stderr))
    say = say if is_main_process() else (lambda msg: None)  # under a launcher, one process speaks (errors: each)
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr), cleaned_on_failure(cfg.output_dir):  # stdout: results only
        run = build_trainer(cfg, quiet=quiet, say=say)
        return _train(run, started, say)


def _train(run: GRPORun, started: float, say: Callable[[str], None]) -> dict[str, Any]:
    trainer, cfg, out = run.trainer, run.cfg, Path(run.cfg.output_dir)
    main = trainer.is_world_process_zero()
    generation = {"generation_batch_size": trainer.args.generation_batch_size,
                  "steps_per_generation": trainer.args.steps_per_generation,
                  "gradient_accumulation_steps": trainer.args.gradient_accumulation_steps}
    if main:
        write_run_start(run, "grpo", REPORT_NAME, "prompts", say, source=run.source, trl=generation)
    train_or_finish(trainer, run.resume)
    model = trainer.accelerator.unwrap_model(trainer.model)
    if "ref" in getattr(model, "peft_config", {}):  # TRL's frozen copy of the starting adapter (beta > 0)
        model.delete_adapter("ref")
    trainer.save_model(cfg.output_dir)
    history = trainer.state.log_history
    per_func = {}
    for name in cfg.reward_funcs:
        values = series(history, f"rewards/{name}/mean")
        per_func[name] = {"first": values[0] if values else None, "last": values[-1] if values else None}
    reward = series(history, "reward")
    summary: dict[str, Any] = {
        "stage": "grpo",
        "mode": cfg.mode,
        "output_dir": str(out),
        "adapter_in": cfg.adapter,
        "base": run.source.get("base"),
        "global_step": trainer.state.global_step,
        "reward_first": reward[0] if reward else None,
        "reward_last": reward[-1] if reward else None,
        "rewards": per_func,
        "reward_batches": run.rewards.batches,
        "resumed_from_step": None if run.resume is None else checkpoint_step(run.resume),
        "prompts": run.report.prompts,
        "prompts_trained": run.report.trained,
        "trl": generation,
        "seconds": round(time.perf_counter() - started, 2),  # this run's: after a resume, from resumed_from_step on
        "resolved": run.resolved,
        "hub_url": None,
    }
    if main:
        write_summary(cfg, "grpo", summary, f"rhythm grpo ({cfg.mode}): {summary['global_step']} steps", say)
    return summary
