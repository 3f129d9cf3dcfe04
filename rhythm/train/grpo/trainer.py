"""GRPO refinement of the SFT student with rewards from the benchmark itself: TRL ``GRPOTrainer``.

    rhythm grpo --config configs/grpo-tiny.yaml --adapter runs/sft-tiny --data data/teacher_30ep.jsonl  # CPU, minutes
    rhythm grpo --config configs/grpo.yaml --adapter runs/sft-qwen2.5-3b                                 # Qwen2.5-3B, one GPU
    rhythm grpo --config configs/grpo-tiny.yaml --adapter runs/sft-tiny --set mode=episode               # whole weeks
    rhythm grpo --config configs/grpo.yaml --flavor a10g-large --set adapter=me/rhythm-sft \\
        --set hub_model_id=me/rhythm-grpo --set data_repo=me/rhythm-teacher                              # Hugging Face Jobs
    accelerate launch -m rhythm.train.grpo --config configs/grpo.yaml adapter=runs/sft data=...           # several GPUs

The policy is the SFT LoRA adapter loaded onto its base with ``is_trainable=True`` (or, without an
adapter, a fresh LoRA on ``model_name_or_path``). Two modes:

``step`` (default): each prompt is one recorded state (:mod:`rhythm.train.grpo_data`); TRL samples
``num_generations`` replies to it and the reward functions of :mod:`rhythm.train.rewards`, found by
name (``reward_funcs``) and weighted (``reward_weights``), score every reply of the group in that
exact state (the columns condition/split/seed/t/prefix replay it).

``episode``: the student plays whole weeks and each reply is rewarded with the final score of its
week (``rhythm.grader.score_episode``, via :func:`rhythm.episodes.play_batch`, exactly as eval plays
and grades). It runs through TRL's ``rollout_func``: for each person in the batch the student plays
``num_generations`` weeks in lockstep, one sampled reply per turn to the same single-turn prompt eval
uses ([system, observation with its short history]); every played turn becomes one GRPO sample whose
prompt is exactly what the student saw, and the group of a turn holds the ``num_generations`` weeks
of that person, so each reply's advantage is its week's score against the person's other weeks.
Nothing the environment wrote is inside a completion, so no ``env_mask`` is needed. Why not TRL's
``environment_factory``: see ``docs/grpo.md``.

``output_dir`` receives the adapter and tokenizer, ``checkpoint-N/``, ``training_log.jsonl`` (TRL's
``log_history`` plus ``"stage": "grpo"``: loss, ``reward``, ``rewards/<name>/mean`` and ``/std`` per
reward function, completion lengths, KL when ``beta > 0``), ``reward_log.jsonl`` (one line per scored
reply: state, action, belief, every reward, the weighted total), ``grpo_config.yaml`` (effective config
with versions), ``prompts_report.json``, ``grpo_summary.json``, and in episode mode
``episode_rollouts.jsonl`` (every week played, as episode records). Heavy imports happen inside functions.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Union

import orjson

from rhythm.errors import RhythmError

LOG_NAME = "training_log.jsonl"
REWARD_LOG_NAME = "reward_log.jsonl"
ROLLOUTS_NAME = "episode_rollouts.jsonl"
STUDENT_ROLLOUTS_NAME = "student_rollouts.jsonl"
CONFIG_NAME = "grpo_config.yaml"
SUMMARY_NAME = "grpo_summary.json"
REPORT_NAME = "prompts_report.json"
MODES = ("step", "episode")
LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo", "cispo", "sapo", "vespo")
QWEN_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

Auto = Union[bool, Literal["auto"]]


@dataclass(frozen=True)
class GRPORunConfig:
    """``rhythm grpo``: field names follow TRL's ``GRPOConfig`` where one exists.

    The defaults are the real recipe (``configs/grpo.yaml``); ``configs/grpo-tiny.yaml`` is the CPU one.
    """

    # --- model
    adapter: str | None = "runs/sft-qwen2.5-3b"
    """SFT LoRA adapter to refine (a folder, or a Hub repo id); loaded onto its base with is_trainable=True.
    None = train a fresh LoRA on model_name_or_path."""
    model_name_or_path: str | None = None
    """Base model (Hub id, path or rhythm-tiny); None = the base recorded in the adapter's adapter_config.json."""
    dtype: str = "auto"
    """Weights dtype: auto (bfloat16 when bf16 is on, else float32) | bfloat16 | float16 | float32."""
    attn_implementation: str | None = None
    """eager | sdpa | flash_attention_2 (None: the transformers default)."""
    # --- prompts
    mode: str = "step"
    """step: one prompt per recorded state, rewards from reward_funcs; episode: the student plays whole
    weeks, each reply rewarded with its week's final score."""
    data: str = "data/teacher_30ep.jsonl"
    """Episodes JSONL (teacher episodes from rhythm generate); several comma-separated; - reads stdin.
    Step mode: their states are the prompts. Episode mode: their (condition, split, seed) are the people played."""
    every_k_steps: int = 1
    """Step mode: keep every k-th step of each episode (seeded offset per episode). Episode mode: train on
    every k-th turn of each week (every turn is still played)."""
    max_prompts: int | None = None
    """Step mode: at most this many prompts, a seeded random subset (None = all)."""
    max_episodes: int | None = None
    """Episode mode: at most this many people, in a seeded order (None = all in data)."""
    episodes_per_step: int = 1
    """Episode mode: people per generation batch (each plays num_generations weeks)."""
    rollout_seeds: Union[str, int, None] = None
    """Also use the student's own rollouts: train-split seeds it plays first (e.g. 1000-1029; None = none).
    Step mode: their states join the prompts; episode mode: those people join the ones played."""
    rollout_conditions: list[str] = field(default_factory=lambda: ["in-dist"])
    """Conditions of the student's rollouts."""
    strip_reasoning: bool = False
    """Step mode: earlier replies in each prompt cut to their BELIEF/ACTION lines (as in the SFT data)."""
    # --- GRPO
    num_generations: int = 8
    """Replies sampled per prompt (the group GRPO normalises rewards within); >= 2."""
    max_completion_length: int = 384
    """Reply budget in tokens (a Qwen2.5 teacher-style reply is ~150-250 tokens)."""
    temperature: float = 1.0
    """Sampling temperature of the replies (the loss uses the same one)."""
    top_p: float = 1.0
    reward_funcs: list[str] = field(default_factory=lambda: ["format", "belief", "action_value"])
    """Reward functions by name (rhythm.train.rewards.REWARD_FUNCS): format, belief, action_value, final_score."""
    reward_weights: list[float] | None = field(default_factory=lambda: [0.2, 0.25, 1.0])
    """One weight per reward function (None = all 1); the reward is their weighted sum."""
    beta: float = 0.0
    """KL coefficient against the starting adapter (TRL keeps a frozen copy named 'ref'); 0 = no KL term."""
    loss_type: str = "dapo"
    """grpo | dapo | dr_grpo | bnpo | cispo | sapo | vespo (TRL's; dapo normalises by the tokens in the batch)."""
    epsilon: float = 0.2
    """PPO-style clipping of the importance ratio."""
    scale_rewards: str = "group"
    """group | batch | none: divide advantages by the reward std of the group / the batch / not at all."""
    num_iterations: int = 1
    """Optimisation passes per generated batch (mu in the GRPO paper)."""
    mask_truncated_completions: bool = False
    """Leave replies cut off at max_completion_length out of the loss."""
    use_vllm: bool = False
    """Generate with vLLM (step mode; needs vllm installed and a GPU)."""
    vllm_mode: str = "colocate"
    """colocate (vLLM shares the training GPU) | server (trl vllm-serve elsewhere)."""
    vllm_gpu_memory_utilization: float = 0.3
    """Colocate: share of GPU memory vLLM may take."""
    # --- optimisation
    max_steps: int = 300
    """Optimizer steps; -1 = derive from num_train_epochs."""
    num_train_epochs: float = 1.0
    """Passes over the prompts (used only when max_steps is -1)."""
    learning_rate: float = 1e-5
    """Peak learning rate (LoRA: ~1e-5..5e-5; TRL's default 1e-6 is for full fine-tuning)."""
    lr_scheduler_type: str = "constant_with_warmup"
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    per_device_train_batch_size: int = 8
    """Completions (not prompts) per device per forward pass."""
    gradient_accumulation_steps: int = 2
    """Step mode: forward passes per optimizer step. Episode mode derives it (one batch of weeks per step)."""
    generation_batch_size: int | None = None
    """Step mode: completions generated at once (None = per_device_train_batch_size x gradient_accumulation_steps
    x devices); must be divisible by num_generations. Episode mode derives it."""
    bf16: Auto = "auto"
    """bfloat16 mixed precision; auto = on with CUDA (~5x slower on CPU)."""
    gradient_checkpointing: Auto = "auto"
    """auto = on with CUDA, off on CPU (~3x slower there)."""
    seed: int = 0
    """Seeds sampling, data order, prompt subsets and a fresh adapter's init."""
    # --- LoRA (a fresh adapter only; a loaded adapter keeps its own shape)
    use_peft: bool = True
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: list[str] = field(default_factory=lambda: list(QWEN_LINEAR))
    # --- logging, checkpoints
    logging_steps: int = 5
    """Loss, rewards per function, lengths every N steps."""
    save_steps: int = 50
    save_total_limit: int | None = 2
    output_dir: str = "runs/grpo"
    """Adapter, tokenizer, checkpoints, training_log.jsonl, reward_log.jsonl and the effective config."""
    overwrite_output_dir: bool = False
    resume_from_checkpoint: Union[bool, str, None] = None
    """latest (or true) = the newest checkpoint-N in output_dir; or a checkpoint path."""
    log_replies: bool = True
    """Write every reply's text into reward_log.jsonl (false: state, action and rewards only)."""
    report_to: str = "none"
    # --- Hub and Hugging Face Jobs
    push_to_hub: bool = False
    hub_model_id: str | None = None
    """Model repo for the result (user/name); required with push_to_hub and with a flavor."""
    hub_private: bool = True
    flavor: str | None = None
    """Run on Hugging Face Jobs on this hardware (a10g-large, l4x1, a100-large ...); None = run here."""
    timeout: str = "4h"
    data_repo: str | None = None
    """Jobs: dataset repo holding the data files (local files named in data are uploaded there first)."""
    namespace: str | None = None


def data_paths(cfg: GRPORunConfig) -> list[str]:
    from rhythm.train.sft import data_paths as sft_data_paths

    return sft_data_paths(cfg)  # the same comma-separated rule as SFT


def _looks_local(path: str) -> bool:
    """A name that means a folder here: it exists, starts like a path, or its first part is a folder here."""
    return (
        Path(path).expanduser().exists()
        or path.startswith((".", "/", "~"))
        or path.count("/") != 1
        or Path(path.split("/")[0]).is_dir()
    )


def validate(cfg: GRPORunConfig) -> None:
    """Cheap checks before anything heavy is imported or launched."""
    from rhythm.env.constants import CONDITIONS
    from rhythm.train.rewards import REWARD_FUNCS

    if cfg.mode not in MODES:
        raise RhythmError(f"mode must be step or episode, got {cfg.mode!r}")
    if not data_paths(cfg) and not _has_rollouts(cfg):
        raise RhythmError("no data given; pass --data FILE (teacher episodes JSONL) or rollout_seeds")
    if not cfg.adapter and not cfg.model_name_or_path:
        raise RhythmError("no model: pass --adapter DIR (the SFT adapter) or --model NAME")
    unknown = [n for n in cfg.reward_funcs if n not in REWARD_FUNCS]
    if unknown:
        raise RhythmError(f"unknown reward function(s) {', '.join(unknown)}; expected {', '.join(REWARD_FUNCS)}")
    if not cfg.reward_funcs:
        raise RhythmError("reward_funcs is empty; name at least one of " + ", ".join(REWARD_FUNCS))
    if "final_score" in cfg.reward_funcs and cfg.mode != "episode":
        raise RhythmError("reward final_score is the score of a played week: it needs mode=episode")
    if cfg.reward_weights is not None and len(cfg.reward_weights) != len(cfg.reward_funcs):
        raise RhythmError(f"reward_weights has {len(cfg.reward_weights)} values for {len(cfg.reward_funcs)} reward_funcs")
    if cfg.max_steps == 0 or cfg.max_steps < -1:
        raise RhythmError(f"max_steps must be positive or -1, got {cfg.max_steps}")
    if cfg.num_generations < 2:
        raise RhythmError(f"num_generations must be >= 2 (GRPO compares replies within a group), got {cfg.num_generations}")
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "max_completion_length", "logging_steps",
                 "save_steps", "every_k_steps", "episodes_per_step", "num_iterations", "lora_r", "lora_alpha"):
        if getattr(cfg, name) < 1:
            raise RhythmError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.temperature <= 0:
        raise RhythmError(f"temperature must be > 0, got {cfg.temperature}")
    if cfg.loss_type not in LOSS_TYPES:
        raise RhythmError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {cfg.loss_type!r}")
    if cfg.scale_rewards not in ("group", "batch", "none"):
        raise RhythmError(f"scale_rewards must be group, batch or none, got {cfg.scale_rewards!r}")
    if cfg.dtype not in ("auto", "bfloat16", "float16", "float32"):
        raise RhythmError(f"dtype must be auto, bfloat16, float16 or float32, got {cfg.dtype!r}")
    bad = [c for c in cfg.rollout_conditions if c not in CONDITIONS]
    if bad:
        raise RhythmError(f"unknown rollout condition(s) {', '.join(bad)}; expected {', '.join(CONDITIONS)}")
    if _has_rollouts(cfg):
        from rhythm.seeds import parse_seeds

        parse_seeds(str(cfg.rollout_seeds))
    if cfg.mode == "step" and cfg.max_episodes is not None:
        raise RhythmError("max_episodes applies to mode=episode; step mode subsamples with max_prompts")
    if cfg.mode == "episode" and cfg.max_prompts is not None:
        raise RhythmError("max_prompts applies to mode=step; episode mode takes max_episodes (people played)")
    if cfg.mode == "step":
        generation = cfg.generation_batch_size or cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps
        if generation % cfg.num_generations:
            raise RhythmError(
                f"the generation batch ({generation} completions) must be divisible by num_generations "
                f"({cfg.num_generations}); adjust per_device_train_batch_size, gradient_accumulation_steps or generation_batch_size"
            )
        if cfg.generation_batch_size is not None and cfg.generation_batch_size % cfg.per_device_train_batch_size:
            raise RhythmError(f"generation_batch_size ({cfg.generation_batch_size}) must be divisible by "
                              f"per_device_train_batch_size ({cfg.per_device_train_batch_size})")
    else:
        if cfg.generation_batch_size is not None:
            raise RhythmError("episode mode derives generation_batch_size (turns x num_generations x episodes_per_step); leave it null")
        if cfg.use_vllm:
            raise RhythmError("episode mode plays weeks with transformers generate; use_vllm applies to step mode only")
        if episode_batch(cfg) % cfg.per_device_train_batch_size:
            raise RhythmError(
                f"episode mode generates {episode_batch(cfg)} completions per step ({turns_per_week(cfg)} turns x "
                f"{cfg.num_generations} weeks x {cfg.episodes_per_step} people); per_device_train_batch_size "
                f"({cfg.per_device_train_batch_size}) must divide it"
            )
    if cfg.use_vllm and not cfg.flavor:
        from importlib.util import find_spec

        if find_spec("vllm") is None:
            raise RhythmError("use_vllm needs vllm installed (pip install 'rhythm[vllm]', on a CUDA machine)")
    if cfg.push_to_hub and not cfg.hub_model_id:
        raise RhythmError("push_to_hub needs hub_model_id (user/name)")
    if cfg.flavor is None:
        for path in data_paths(cfg):
            if path != "-" and not Path(path).is_file():
                raise RhythmError(f"file not found: {path}")
        if cfg.adapter and _looks_local(cfg.adapter) and not Path(cfg.adapter).expanduser().is_dir():
            raise RhythmError(f"adapter not found: {cfg.adapter} (the output_dir of rhythm sft, or a Hub repo id)")
    elif cfg.adapter and Path(cfg.adapter).expanduser().exists():
        raise RhythmError(
            f"a job cannot read the local adapter {cfg.adapter}; pass the Hub repo it was pushed to "
            "(rhythm sft --flavor pushes it to its hub_model_id), e.g. --set adapter=me/rhythm-sft"
        )


def _has_rollouts(cfg: GRPORunConfig) -> bool:
    return cfg.rollout_seeds is not None and str(cfg.rollout_seeds).strip() != ""


def turns_per_week(cfg: GRPORunConfig) -> int:
    from rhythm.env.constants import EPISODE_STEPS

    return len(range(0, EPISODE_STEPS, cfg.every_k_steps))


def episode_batch(cfg: GRPORunConfig) -> int:
    """Episode mode: completions per generation batch (trained turns x weeks per person x people)."""
    return turns_per_week(cfg) * cfg.num_generations * cfg.episodes_per_step


# ------------------------------------------------------------------------------------------ prompts


def _rollout_specs(cfg: GRPORunConfig) -> list[Any]:
    from rhythm.agents.base import EpisodeSpec
    from rhythm.seeds import parse_seeds

    if not _has_rollouts(cfg):
        return []
    seeds = parse_seeds(str(cfg.rollout_seeds))
    return [EpisodeSpec(c, "train", s) for c in cfg.rollout_conditions for s in seeds]


def build_rows(cfg: GRPORunConfig, student_records: Sequence[dict[str, Any]] = ()) -> tuple[list[dict[str, Any]], Any]:
    """The training rows of either mode and their report (pure Python, no torch)."""
    from rhythm.train.grpo_data import PromptOptions, build_prompts, episode_keys, episode_rows

    paths = data_paths(cfg)
    if cfg.mode == "step":
        return build_prompts(paths, PromptOptions(cfg.every_k_steps, cfg.max_prompts, cfg.seed, cfg.strip_reasoning), student_records)
    keys, report = episode_keys(paths, student_records)
    rows = episode_rows(keys, every_k_steps=cfg.every_k_steps, max_episodes=cfg.max_episodes, seed=cfg.seed, report=report)
    people = len(rows) // turns_per_week(cfg)
    if people < cfg.episodes_per_step:
        raise RhythmError(f"episodes_per_step is {cfg.episodes_per_step} but the data names only {people} people")
    return rows, report


# ---------------------------------------------------------------------------------- reward logging


class RewardLog:
    """Wraps the reward functions so every scored reply is logged (``reward_log.jsonl``).

    The wrappers keep the registry names (TRL logs ``rewards/<name>/mean``). TRL calls them in order
    on the same batch; when the last one has run, one line per reply is written: the optimizer step
    it trains (1-based, as in ``training_log.jsonl``), its group, the state, the parsed action and
    belief, each reward and the weighted total. With several processes each scores its own share of
    the batch, and rank 0 logs its share.
    """

    def __init__(self, path: Path | None, names: Sequence[str], weights: Sequence[float] | None,
                 num_generations: int, log_replies: bool = True) -> None:
        from rhythm.train.rewards import get_reward_funcs

        self.path = path
        self.names = list(names)
        self.funcs = get_reward_funcs(self.names)
        self.weights = list(weights) if weights is not None else [1.0] * len(self.names)
        self.num_generations = num_generations
        self.log_replies = log_replies
        self.batches = 0
        self._pending: dict[str, list[float]] = {}

    def wrapped(self) -> list[Callable[..., list[float]]]:
        out = []
        for name, func in zip(self.names, self.funcs, strict=True):
            def call(prompts, completions, _name=name, _func=func, **kwargs):
                values = [float(v) for v in _func(prompts, completions, **kwargs)]
                self._pending[_name] = values
                if _name == self.names[-1]:
                    self._flush(completions, kwargs)
                return values

            call.__name__ = name
            call.__qualname__ = name
            call.__doc__ = func.__doc__
            out.append(call)
        return out

    def _flush(self, completions: list[Any], kwargs: dict[str, Any]) -> None:
        from rhythm.protocol import parse_reply
        from rhythm.train.rewards import completion_text

        rewards = {n: self._pending.get(n, [math.nan] * len(completions)) for n in self.names}
        self._pending = {}
        state = kwargs.get("trainer_state")
        step = (state.global_step + 1) if state is not None else None
        totals = [sum(w * rewards[n][i] for n, w in zip(self.names, self.weights, strict=True)) for i in range(len(completions))]
        self.batches += 1
        if self.path is None or int(os.environ.get("RANK", "0")) != 0:
            return
        lines = []
        for i, c in enumerate(completions):
            text = completion_text(c)
            parsed = parse_reply(text)
            line: dict[str, Any] = {"step": step, "batch": self.batches, "group": i // self.num_generations}
            for key in ("condition", "split", "seed", "t", "prefix", "week", "final_score", "final_score_v2"):
                if key in kwargs:
                    line[key] = kwargs[key][i]
            line.update(action=parsed.action_name, parse_ok=parsed.ok,
                        belief=None if parsed.belief is None else [round(b, 4) for b in parsed.belief],
                        rewards={n: rewards[n][i] for n in self.names}, reward=totals[i])
            if self.log_replies:
                line["reply"] = text
            lines.append(orjson.dumps(line, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
        with self.path.open("ab") as fh:
            fh.write(b"".join(lines))
            fh.flush()


# ------------------------------------------------------------------------------------ episode mode


class PolicyAgent:
    """The policy being trained, as a rhythm agent: each week one conversation, every turn one sampled
    reply with the trainer's own generation settings (temperature, top_p, max_completion_length, eos
    tokens), through the same lockstep engine eval uses (:class:`rhythm.model.lockstep.LockstepChat`).

    For the GRPO loss, each turn keeps its prompt ids (the whole conversation so far, as the chat
    template renders it: what the policy saw) and its completion ids (up to and including the stop token).
    """

    def __init__(self, model: Any, tokenizer: Any, generation_config: Any, eos_token_ids: Sequence[int], name: str,
                 seed: int = 0) -> None:
        from rhythm.model.lockstep import LockstepChat

        g = generation_config
        self.engine = LockstepChat(model, tokenizer, stop_ids=list(eos_token_ids), max_new_tokens=int(g.max_new_tokens),
                                   do_sample=True, temperature=float(g.temperature or 1.0), top_p=float(g.top_p or 1.0))
        self.name = name
        self.seed = seed
        self.turns: list[dict[int, tuple[list[int], list[int]]]] = []

    def reset(self, episodes: list[Any]) -> None:
        self.turns = [{} for _ in episodes]
        self.engine.reset(len(episodes))

    def act(self, obs: Any) -> list[Any]:
        import torch

        from rhythm.agents.model import decision_of

        generator = torch.Generator(device="cpu").manual_seed(self.seed * 1000 + obs.t)
        turns = self.engine.step([obs.conversation(i) for i in range(len(obs.prompts))], generator=generator)
        for i, turn in enumerate(turns):
            self.turns[i][obs.t] = (turn.prompt_ids, turn.completion_ids)
        return [decision_of(turn) for turn in turns]


def assign_weeks(keys: Sequence[tuple[str, str, int, int]]) -> list[int]:
    """Which week of its person each row belongs to: the k-th copy of (person, turn) is week k."""
    seen: Counter = Counter()
    weeks = []
    for key in keys:
        weeks.append(seen[key])
        seen[key] += 1
    return weeks


def make_week_rollout(name: str, records_path: Path | None) -> Callable[[list[Any], Any], dict[str, Any]]:
    """TRL ``rollout_func`` for episode mode (see the module docstring)."""

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        import torch
        from trl.models import unwrap_model_for_generation

        from rhythm.episodes import play_batch
        from rhythm.records import JsonlWriter
        from rhythm.train.grpo_data import parse_placeholder

        keys = [parse_placeholder(p) for p in prompts]
        weeks = assign_weeks(keys)
        n_weeks: dict[tuple[str, str, int], int] = defaultdict(int)
        for (c, s, seed, _), k in zip(keys, weeks, strict=True):
            n_weeks[(c, s, seed)] = max(n_weeks[(c, s, seed)], k + 1)
        by_split: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
        for (c, s, seed), n in n_weeks.items():
            by_split[(c, s)].extend((seed, k) for k in range(n))
        played: dict[tuple[str, str, int, int], tuple[Any, dict[int, tuple[list[int], list[int]]]]] = {}
        step = trainer.state.global_step + 1
        with unwrap_model_for_generation(
            trainer.model_wrapped, trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            generation_kwargs=trainer.generation_kwargs,
        ) as model, torch.no_grad():
            agent = PolicyAgent(model, trainer.processing_class, trainer.generation_config, trainer.eos_token_ids, name,
                                seed=trainer.args.seed * 100_003 + step)
            for (c, s), weeks_here in by_split.items():
                records = play_batch(agent, c, s, [seed for seed, _ in weeks_here], model=name)
                for (seed, k), record, turns in zip(weeks_here, records, agent.turns, strict=True):
                    record.extra = {"grpo_step": step, "week": k}
                    played[(c, s, seed, k)] = (record, turns)
        if records_path is not None and int(os.environ.get("RANK", "0")) == 0:
            with JsonlWriter(records_path, resume=True) as w:
                for record, _ in played.values():
                    w.write(record)
        out: dict[str, list[Any]] = defaultdict(list)
        for (c, s, seed, t), k in zip(keys, weeks, strict=True):
            record, turns = played[(c, s, seed, k)]
            prompt_ids, completion_ids = turns[t]
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion_ids)
            out["final_score"].append(float(record.score["final_score"]))
            out["final_score_v2"].append(float(record.score["final_score_v2"]))
            out["prefix"].append([st.action for st in record.steps[:t]])
            out["week"].append(k)
        return {**out, "logprobs": None}  # sampling logprobs only matter for vLLM's importance correction

    return rollout


# -------------------------------------------------------------------------------------- model


def resolve_precision(cfg: GRPORunConfig, cuda: bool) -> dict[str, Any]:
    from rhythm.train.sft import resolve_precision as sft_precision

    return sft_precision(cfg, cuda)  # the same auto rules as SFT (bf16 and checkpointing on CUDA only)


def load_policy(cfg: GRPORunConfig, resolved: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """``(model, tokenizer, source)``: the SFT adapter on its base, trainable; or the bare base model."""
    import warnings

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rhythm.model.load import adapter_config, resolve_base

    source: dict[str, Any] = {"adapter": cfg.adapter}
    if cfg.adapter:
        adapter_cfg = adapter_config(cfg.adapter)
        if adapter_cfg is None:
            raise RhythmError(f"{cfg.adapter} is not a LoRA adapter (no adapter_config.json); pass the SFT output_dir")
        base_name = cfg.model_name_or_path or adapter_cfg.get("base_model_name_or_path")
        if not base_name:
            raise RhythmError(f"{cfg.adapter}: adapter names no base model; pass --model NAME")
    else:
        base_name = cfg.model_name_or_path
    base = resolve_base(str(base_name))
    source["base"] = base
    local_adapter = cfg.adapter is not None and Path(cfg.adapter).expanduser().is_dir()
    tok_source = cfg.adapter if local_adapter and (Path(cfg.adapter) / "tokenizer_config.json").is_file() else base
    kwargs: dict[str, Any] = {"dtype": getattr(torch, resolved["dtype"])}
    if cfg.attn_implementation:
        kwargs["attn_implementation"] = cfg.attn_implementation
    try:
        tokenizer = AutoTokenizer.from_pretrained(tok_source)
        model = AutoModelForCausalLM.from_pretrained(base, **kwargs)
    except (OSError, ValueError) as err:
        raise RhythmError(f"cannot load model {base!r}: {str(err).strip().splitlines()[0]}") from None
    source["tokenizer"] = str(tok_source)
    if cfg.adapter:
        from peft import PeftModel

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                model = PeftModel.from_pretrained(model, cfg.adapter, is_trainable=True)
        except (OSError, ValueError, RuntimeError, KeyError) as err:
            raise RhythmError(f"cannot load LoRA adapter {cfg.adapter!r} onto {base!r}: {str(err).splitlines()[0]}") from None
    tokenizer.padding_side = "left"  # GRPOTrainer requires it
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not getattr(tokenizer, "chat_template", None):
        raise RhythmError(f"tokenizer of {tok_source!r} has no chat template; the protocol needs one")
    return model, tokenizer, source


def _peft_config(cfg: GRPORunConfig):
    from rhythm.train.sft import _peft_config as sft_peft_config

    return sft_peft_config(cfg)  # a fresh adapter has the same shape rules as SFT's


def grpo_config(cfg: GRPORunConfig, resolved: dict[str, Any], quiet: bool = False):
    """The TRL ``GRPOConfig`` of a run (episode mode: batch sizes derived, no dataset shuffle)."""
    from trl import GRPOConfig

    generation_batch_size = cfg.generation_batch_size
    accumulation = cfg.gradient_accumulation_steps
    if cfg.mode == "episode":
        world = int(os.environ.get("WORLD_SIZE", "1"))
        generation_batch_size = episode_batch(cfg)
        # one generation batch of whole weeks per optimizer step: on-policy, and no week is split
        accumulation = max(1, generation_batch_size // (cfg.per_device_train_batch_size * world))
    kwargs: dict[str, Any] = {}
    if cfg.use_vllm:
        kwargs.update(use_vllm=True, vllm_mode=cfg.vllm_mode, vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization)
    try:
        return GRPOConfig(
            output_dir=cfg.output_dir,
            max_steps=cfg.max_steps,
            num_train_epochs=cfg.num_train_epochs,
            learning_rate=cfg.learning_rate,
            lr_scheduler_type=cfg.lr_scheduler_type,
            warmup_steps=cfg.warmup_ratio,
            weight_decay=cfg.weight_decay,
            max_grad_norm=cfg.max_grad_norm,
            per_device_train_batch_size=cfg.per_device_train_batch_size,
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
            shuffle_dataset=cfg.mode == "step",  # episode mode: rows of one person stay together
            bf16=resolved["bf16"],
            gradient_checkpointing=resolved["gradient_checkpointing"],
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
            use_cpu=resolved["device"] == "cpu",
            push_to_hub=False,  # pushed once at the end by rhythm.train.hub
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


def build_trainer(cfg: GRPORunConfig, *, quiet: bool = False, callbacks: list | None = None,
                  say: Callable[[str], None] | None = None) -> GRPORun:
    """Prompts, policy, reward functions and ``GRPOTrainer``, ready to ``train``."""
    from rhythm.train.sft import _prepare_output_dir, _resume_path, make_log_callback

    say = say or (lambda msg: None)
    validate(cfg)
    resume = _resume_path(cfg)
    if not _has_rollouts(cfg):  # the data first: a bad record fails in a second, before torch is imported
        rows, report = build_rows(cfg)
    out = _prepare_output_dir(cfg, resuming=resume is not None)

    import torch
    import transformers
    from datasets import Dataset
    from trl import GRPOTrainer

    transformers.logging.set_verbosity_warning()
    if quiet:
        import datasets

        datasets.disable_progress_bars()
    resolved = resolve_precision(cfg, torch.cuda.is_available())
    if _has_rollouts(cfg):
        rows, report = build_rows(cfg, _student_rollouts(cfg, out, say))
    model, tokenizer, source = load_policy(cfg, resolved)
    resolved["model_path"] = source["base"]
    _trim_logs(out, resume)
    rewards = RewardLog(out / REWARD_LOG_NAME, cfg.reward_funcs, cfg.reward_weights, cfg.num_generations, cfg.log_replies)
    args = grpo_config(cfg, resolved, quiet)
    rollout = None
    if cfg.mode == "episode":
        rollout = make_week_rollout(f"grpo:{cfg.adapter or cfg.model_name_or_path}", out / ROLLOUTS_NAME)
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.16 (pinned)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=rewards.wrapped(),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=_peft_config(cfg) if (cfg.use_peft and not cfg.adapter) else None,
        callbacks=[make_log_callback(out / LOG_NAME, stage="grpo"), *(callbacks or [])],
        rollout_func=rollout,
    )
    return GRPORun(trainer, cfg, resolved, report, rewards, resume, source)


def _trim_logs(out: Path, resume: str | None) -> None:
    """A fresh run starts the reward and rollout logs afresh; a resumed one keeps what the checkpoint covers."""
    keep_until = 0
    if resume is not None:
        keep_until = int(orjson.loads((Path(resume) / "trainer_state.json").read_bytes()).get("global_step", 0))
    for name, key in ((REWARD_LOG_NAME, "step"), (ROLLOUTS_NAME, "grpo_step")):
        path = out / name
        if not path.exists():
            continue
        kept = [line for line in path.read_bytes().splitlines(keepends=True)
                if line.strip() and line.endswith(b"\n") and int(orjson.loads(line).get(key) or 0) <= keep_until]
        path.write_bytes(b"".join(kept))


def _student_rollouts(cfg: GRPORunConfig, out: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The starting student plays ``rollout_seeds`` (greedy, as eval plays); records kept in output_dir."""
    from rhythm.model.load import ModelOptions
    from rhythm.records import JsonlWriter
    from rhythm.train.grpo_data import student_rollouts

    specs = _rollout_specs(cfg)
    model = cfg.adapter or cfg.model_name_or_path
    options = ModelOptions(max_new_tokens=cfg.max_completion_length, base_model=cfg.model_name_or_path if cfg.adapter else None,
                           dtype="auto", seed=cfg.seed)
    started = time.perf_counter()
    records = student_rollouts(str(model), specs, options)
    path = out / STUDENT_ROLLOUTS_NAME
    if path.exists():
        path.unlink()
    with JsonlWriter(path) as w:
        for r in records:
            w.write(r)
    mean = sum(r["score"]["final_score"] for r in records) / len(records)
    say(f"student rollouts: {len(records)} episodes played in {time.perf_counter() - started:.0f} s "
        f"(mean final score {mean:.3f}) -> {path}")
    return records


def _series(history: list[dict[str, Any]], key: str) -> list[float]:
    return [float(e[key]) for e in history if key in e and isinstance(e[key], (int, float)) and math.isfinite(e[key])]


def run_grpo(cfg: GRPORunConfig, *, quiet: bool = False, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train, save (and optionally push); returns the run summary (also in ``grpo_summary.json``)."""
    say = log or (lambda msg: print(msg, file=sys.stderr))
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # transformers prints log lines to stdout; stdout is for results
        run = build_trainer(cfg, quiet=quiet, say=say)
        return _train(run, started, say)


def _train(run: GRPORun, started: float, say: Callable[[str], None]) -> dict[str, Any]:
    from rhythm.config import write_config
    from rhythm.provenance import command_line, now_iso, versions

    trainer, cfg, out = run.trainer, run.cfg, Path(run.cfg.output_dir)
    main = trainer.is_world_process_zero()
    generation = {"generation_batch_size": trainer.args.generation_batch_size,
                  "steps_per_generation": trainer.args.steps_per_generation,
                  "gradient_accumulation_steps": trainer.args.gradient_accumulation_steps}
    if main:
        say(run.report.summary_line())
        (out / REPORT_NAME).write_bytes(orjson.dumps(run.report.to_dict(), option=orjson.OPT_INDENT_2) + b"\n")
        write_config(cfg, out / CONFIG_NAME, extra={
            "stage": "grpo", "created_at": now_iso(), "command": command_line(), "resolved": run.resolved,
            "source": run.source, "trl": generation, "versions": versions(), "prompts": run.report.to_dict(),
        })
    trainer.train(resume_from_checkpoint=run.resume)
    model = trainer.accelerator.unwrap_model(trainer.model)
    if "ref" in getattr(model, "peft_config", {}):  # TRL's frozen copy of the starting adapter (beta > 0)
        model.delete_adapter("ref")
    trainer.save_model(cfg.output_dir)
    history = trainer.state.log_history
    per_func = {}
    for name in cfg.reward_funcs:
        series = _series(history, f"rewards/{name}/mean")
        per_func[name] = {"first": series[0] if series else None, "last": series[-1] if series else None}
    reward = _series(history, "reward")
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
        "prompts": run.report.prompts,
        "trl": generation,
        "seconds": round(time.perf_counter() - started, 2),
        "resolved": run.resolved,
        "hub_url": None,
    }
    if main:
        (out / SUMMARY_NAME).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
        if cfg.push_to_hub:
            from rhythm.train.hub import push_folder

            summary["hub_url"] = push_folder(out, cfg.hub_model_id, private=cfg.hub_private,
                                             commit_message=f"rhythm grpo ({cfg.mode}): {summary['global_step']} steps")
            say(f"pushed {out} to {summary['hub_url']}")
            (out / SUMMARY_NAME).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
    return summary


# ----------------------------------------------------------------------------- accelerate entry


def main(argv: list[str] | None = None) -> int:
    """``python -m rhythm.train.grpo [--config FILE] [key=value ...]``: the entry ``accelerate launch`` and jobs run."""
    import argparse

    from rhythm.config import load_config

    parser = argparse.ArgumentParser(prog="python -m rhythm.train.grpo", description=main.__doc__)
    parser.add_argument("--config", "-c", default=None, help="YAML config (fields of GRPORunConfig)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    parser.add_argument("overrides", nargs="*", help="key=value overrides (the command line wins)")
    ns = parser.parse_args(argv)
    try:
        cfg = load_config(GRPORunConfig, ns.config, ns.overrides)
        if cfg.flavor:
            cfg = replace(cfg, flavor=None)  # already where it should run
        summary = run_grpo(cfg, quiet=ns.quiet)
    except RhythmError as err:
        print(f"rhythm grpo: error: {err}", file=sys.stderr)
        return 2
    if int(os.environ.get("RANK", "0")) == 0:
        sys.stdout.write(orjson.dumps(summary).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
