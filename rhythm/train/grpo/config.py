"""``rhythm grpo``'s settings (:class:`GRPORunConfig`) and the checks run before anything heavy starts."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Union

from annotated_types import Ge, Gt, Interval

from rhythm.config import NonNegative, Positive, check_bounds
from rhythm.env.constants import CONDITIONS, EPISODE_STEPS
from rhythm.errors import RhythmError
from rhythm.model.load import means_local, under_local_folder
from rhythm.seeds import parse_seeds
from rhythm.train.common import LearningRate, TrainRunConfig, check_shared
from rhythm.train.grpo.rewards import REWARD_FUNCS
from rhythm.train.jobs import JobsConfig, flavor_processes
from rhythm.train.processes import world_size
from rhythm.train.run_folder import data_paths

MODES = ("step", "branch", "episode")
LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo", "cispo", "sapo", "vespo")


@dataclass(frozen=True)
class StepMode:
    """``mode: step``: one prompt per recorded state of the data's weeks (the conversation up to it), each
    reply rewarded by ``reward_funcs``."""

    every_k_steps: Positive = 1
    """Keep every k-th step of each episode (seeded offset per episode)."""
    max_prompts: Positive | None = None
    """At most this many prompts, a seeded random subset (None = all)."""
    strip_reasoning: bool = False
    """Earlier replies in each prompt cut to their BELIEF/ACTION lines (as in the SFT data)."""
    gradient_accumulation_steps: Positive = 4
    """Forward passes per optimizer step."""
    generation_batch_size: Positive | None = None
    """Completions generated at once (None = per_device_train_batch_size x gradient_accumulation_steps x
    devices); must be divisible by num_generations."""
    use_vllm: bool = False
    """Generate with vLLM (needs vllm installed and a GPU)."""
    vllm_mode: str = "colocate"
    """colocate (vLLM shares the training GPU) | server (trl vllm-serve elsewhere)."""
    vllm_gpu_memory_utilization: float = 0.3
    """Colocate: share of GPU memory vLLM may take."""


@dataclass(frozen=True)
class BranchMode:
    """``mode: branch``: what a state's group is and how its replies are valued (the states themselves come
    from ``step:``); see :mod:`rhythm.train.grpo.branch`."""

    group: str = "sampled"
    """sampled: num_generations replies sampled per state; pair: the policy's greedy reply and the same belief
    line with its runner-up action (num_generations 2; the last step's states are left out, since there the
    score judges the belief, which the two replies share)."""
    futures: Positive = 1
    """Futures each branch is played under: the person's own noise, and futures - 1 redrawn from the branch
    step on (the env's ``future`` option); the reward is the mean of their final scores."""
    agree_z: NonNegative = 0.0
    """group pair: a pair moves the policy only where its futures agree, i.e. where the runner-up's gain over
    the greedy action (per future, the same noise for both) is at least agree_z standard errors from 0; the
    other pairs get equal rewards, so no gradient. 0 = every pair moves it."""
    challenger: str = "runner_up"
    """group pair: what the greedy action is compared with. runner_up: the policy's second most likely action;
    restore: where a meter (not progress) is below restore_below and one action can keep it off the crash line,
    that action (the one that raises it most by the env's neutral effects; at night only SLEEP:
    :func:`rhythm.agents.restore.restoring_action`), else the runner-up."""
    restore_below: Annotated[float, Interval(gt=0, le=1)] = 0.25
    """challenger restore: a meter below this counts as running low."""
    restore_only: bool = False
    """challenger restore: train only on the states where a restoring action is named (the KL anchor and the
    probe still draw from every state)."""


@dataclass(frozen=True)
class EpisodeMode:
    """``mode: episode``: the student plays whole weeks (people from the data), each reply rewarded with its
    week's final score; one generation batch of weeks per optimizer step (its size derived)."""

    every_k_turns: Positive = 1
    """Train on every k-th turn of each week (every turn is still played)."""
    max_episodes: int | None = None
    """At most this many people, in a seeded order (None = all in data)."""
    episodes_per_step: Positive = 1
    """People per generation batch (each plays num_generations weeks)."""


@dataclass(frozen=True)
class GRPORunConfig(TrainRunConfig):
    """``rhythm grpo``: field names follow TRL's ``GRPOConfig`` where one exists; the fields it shares with
    SFT come from :class:`rhythm.train.common.TrainRunConfig`. ``data``: step mode, its states are the
    prompts; episode mode, its (condition, split, seed) are the people played.

    The defaults are the real recipe (``configs/grpo.yaml``), but for ``model_name_or_path``: None reads the base
    from the adapter, where the file names Qwen2.5-3B-Instruct; ``configs/grpo-tiny.yaml`` is the CPU one.
    """

    # --- model
    adapter: str | None = "runs/sft-qwen2.5-3b"
    """SFT LoRA adapter to refine (a folder, or a Hub repo id); loaded onto its base with is_trainable=True.
    None = train a fresh LoRA on model_name_or_path."""
    model_name_or_path: str | None = None
    """Base model (Hub id, path or rhythm-tiny); None = the base recorded in the adapter's adapter_config.json."""
    # --- prompts
    mode: str = "step"
    """step: one prompt per recorded state, rewards from reward_funcs (settings under ``step:``); branch: step's
    states, each reply rewarded with the final score of the week it leads to, the policy playing on greedily
    (settings under ``step:``); episode: the student plays whole weeks, each reply rewarded
    with its week's final score (settings under ``episode:``)."""
    step: StepMode = field(default_factory=StepMode)
    """Settings step and branch modes read (episode mode ignores them)."""
    branch: BranchMode = field(default_factory=BranchMode)
    """Settings only branch mode reads (step and episode modes ignore them)."""
    episode: EpisodeMode = field(default_factory=EpisodeMode)
    """Settings only episode mode reads (step mode ignores them)."""
    rollout_seeds: Union[str, int, None] = None
    """Also use the student's own rollouts: train-split seeds it plays first (e.g. 1000-1029; None = none).
    Step mode: their states join the prompts; episode mode: those people join the ones played."""
    rollout_conditions: list[str] = field(default_factory=lambda: ["in-dist"])
    """Conditions of the student's rollouts."""
    # --- GRPO
    num_generations: Annotated[int, Ge(2)] = 8
    """Replies sampled per prompt (the group GRPO normalises rewards within); >= 2."""
    max_completion_length: Positive = 384
    """Reply budget in tokens (a Qwen2.5 teacher-style reply is ~150-250 tokens)."""
    temperature: Annotated[float, Gt(0)] = 1.0
    """Sampling temperature of the replies (the loss uses the same one)."""
    top_p: Annotated[float, Interval(gt=0, le=1)] = 1.0
    """Nucleus sampling of the replies: keep the most likely tokens up to this probability mass (1: all)."""
    reward_funcs: list[str] = field(default_factory=lambda: ["format", "belief", "action_value"])
    """Reward functions by name (rhythm.train.grpo.rewards.REWARD_FUNCS): format, belief, action_value, final_score,
    branch_score (branch mode)."""
    reward_weights: list[float] | None = field(default_factory=lambda: [0.2, 0.25, 1.0])
    """One weight per reward function (None = all 1); the reward is their weighted sum."""
    beta: NonNegative = 0.0
    """KL coefficient against the starting adapter (TRL keeps a frozen copy named 'ref'); 0 = no KL term."""
    loss_type: str = "dapo"
    """grpo | dapo | dr_grpo | bnpo | cispo | sapo | vespo (TRL's; dapo normalises by the tokens in the batch)."""
    epsilon: NonNegative = 0.2
    """PPO-style clipping of the importance ratio."""
    scale_rewards: str = "group"
    """group | batch | none: divide advantages by the reward std of the group / the batch / not at all."""
    num_iterations: Positive = 1
    """Optimisation passes per generated batch (mu in the GRPO paper)."""
    mask_truncated_completions: bool = True
    """Leave replies cut off at max_completion_length out of the loss."""
    anchor_weight: NonNegative = 0.0
    """Weight of the KL from the starting policy on states drawn from the run's prompts apart from the batch (rhythm.train.grpo.anchor); 0 = none."""
    anchor_states: Positive = 16
    """States the anchor's KL is measured on at each optimizer step (drawn from a fixed pool of the prompts)."""
    # --- optimisation
    max_steps: int = 210
    """Optimizer steps; -1 = derive from num_train_epochs."""
    num_train_epochs: float = 1.0
    """Passes over the prompts (used only when max_steps is -1)."""
    learning_rate: LearningRate = 1e-5
    """Peak learning rate (LoRA: ~1e-5..5e-5; TRL's default 1e-6 is for full fine-tuning)."""
    lr_scheduler_type: str = "constant_with_warmup"
    """transformers scheduler name: linear | cosine | constant | constant_with_warmup ..."""
    per_device_train_batch_size: Positive = 8
    """Completions (not prompts) per device per forward pass."""
    # --- logging, checkpoints
    logging_steps: Positive = 5
    """Loss, rewards per function, lengths every N steps."""
    save_steps: Positive = 50
    """Checkpoint every N steps (resume from the latest with resume_from_checkpoint=latest)."""
    output_dir: str = "runs/grpo-qwen2.5-3b"
    """Adapter, tokenizer, checkpoints, training_log.jsonl, reward_log.jsonl and the effective config."""
    log_replies: bool = True
    """Write every reply's text into reward_log.jsonl (false: state, action and rewards only)."""
    probe_states: Annotated[int, Ge(0)] = 32
    """Fixed states the policy is probed on at every logging step (probe/kl, probe/action_changed,
    probe/belief_shift in training_log.jsonl); 0 = no probe."""
    # --- Hugging Face Jobs
    jobs: JobsConfig = field(default_factory=lambda: JobsConfig(timeout="4h"))
    """Hugging Face Jobs settings; ``jobs.flavor`` set = the run is submitted there (4 h wall time by default)."""


def _adapter_looks_local(path: str) -> bool:
    """An adapter name that means a folder here: :func:`rhythm.model.load.means_local`, a name without an owner,
    something that exists, or a name whose first part is a folder here."""
    return means_local(path) or "/" not in path or Path(path).expanduser().exists() or under_local_folder(path)


def validate(cfg: GRPORunConfig) -> None:
    """Cheap checks before anything heavy is imported or launched."""
    if cfg.mode not in MODES:
        raise RhythmError(f"mode must be step, branch or episode, got {cfg.mode!r}")
    if not data_paths(cfg) and not has_rollouts(cfg):
        raise RhythmError("no data given; pass --data FILE (teacher episodes JSONL) or rollout_seeds")
    if not cfg.adapter and not cfg.model_name_or_path:
        raise RhythmError("no model: pass --adapter DIR (the SFT adapter) or --model NAME")
    unknown = [n for n in cfg.reward_funcs if n not in REWARD_FUNCS]
    if unknown:
        raise RhythmError(f"unknown reward function(s) {', '.join(unknown)}; expected {', '.join(REWARD_FUNCS)}")
    if not cfg.reward_funcs:
        raise RhythmError("reward_funcs is empty; name at least one of " + ", ".join(REWARD_FUNCS))
    if len(set(cfg.reward_funcs)) < len(cfg.reward_funcs):
        raise RhythmError(f"reward_funcs names one reward twice ({', '.join(cfg.reward_funcs)}); weigh it with reward_weights")
    needed = {"branch": "branch_score", "episode": "final_score"}.get(cfg.mode)
    if needed is not None and needed not in cfg.reward_funcs:
        raise RhythmError(f"mode={cfg.mode} rewards a reply with {needed}, which reward_funcs lacks "
                          f"({', '.join(cfg.reward_funcs)}); set reward_funcs (and reward_weights), as "
                          f"configs/grpo-tiny-{cfg.mode}.yaml does")
    if "final_score" in cfg.reward_funcs and cfg.mode != "episode":
        raise RhythmError("reward final_score is the score of a played week: it needs mode=episode")
    if "branch_score" in cfg.reward_funcs and cfg.mode != "branch":
        raise RhythmError("reward branch_score is the score of the week a reply leads to: it needs mode=branch")
    if cfg.reward_weights is not None and len(cfg.reward_weights) != len(cfg.reward_funcs):
        raise RhythmError(f"reward_weights has {len(cfg.reward_weights)} values for {len(cfg.reward_funcs)} reward_funcs")
    if cfg.reward_weights is not None and not all(math.isfinite(w) for w in cfg.reward_weights):
        raise RhythmError(f"reward_weights must be finite numbers, got {cfg.reward_weights}")
    check_shared(cfg)
    if cfg.loss_type not in LOSS_TYPES:
        raise RhythmError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {cfg.loss_type!r}")
    if cfg.scale_rewards not in ("group", "batch", "none"):
        raise RhythmError(f"scale_rewards must be group, batch or none, got {cfg.scale_rewards!r}")
    bad = [c for c in cfg.rollout_conditions if c not in CONDITIONS]
    if bad:
        raise RhythmError(f"unknown rollout condition(s) {', '.join(bad)}; expected {', '.join(CONDITIONS)}")
    if has_rollouts(cfg):
        parse_seeds(str(cfg.rollout_seeds))
        if not cfg.rollout_conditions:
            raise RhythmError("rollout_seeds plays people in rollout_conditions, which is empty; name one or more "
                              f"({', '.join(CONDITIONS)}), or set rollout_seeds=null")
    if cfg.mode in ("step", "branch"):
        step = cfg.step
        generation = step_generation_batch(cfg)
        if generation % cfg.num_generations:
            raise RhythmError(
                f"the generation batch ({generation} completions) must be divisible by num_generations "
                f"({cfg.num_generations}); adjust per_device_train_batch_size, step.gradient_accumulation_steps or "
                "step.generation_batch_size"
            )
        if step.generation_batch_size is not None and step.generation_batch_size % cfg.per_device_train_batch_size:
            raise RhythmError(f"step.generation_batch_size ({step.generation_batch_size}) must be divisible by "
                              f"per_device_train_batch_size ({cfg.per_device_train_batch_size})")
        one_step = cfg.per_device_train_batch_size * step.gradient_accumulation_steps * run_processes(cfg)
        if step.generation_batch_size is not None and step.generation_batch_size > one_step:
            raise RhythmError(f"step.generation_batch_size ({step.generation_batch_size}) spans more than one optimizer "
                              f"step ({one_step} completions: per_device_train_batch_size x step.gradient_accumulation_steps"
                              " x processes); the reward log, groups_without_spread and the probe are per step")
    elif cfg.episode.episodes_per_step % (processes := run_processes(cfg)):
        where = f"a job on {cfg.jobs.flavor}" if cfg.jobs.flavor else "a launcher"
        raise RhythmError(f"episode mode under {where} of {processes} processes: each process plays whole people, "
                          f"so episode.episodes_per_step ({cfg.episode.episodes_per_step}) must be a multiple of "
                          f"{processes}")
    elif (episode_batch(cfg) // processes) % cfg.per_device_train_batch_size:
        raise RhythmError(
            f"episode mode generates {episode_batch(cfg) // processes} completions per step and process "
            f"({turns_per_week(cfg)} turns x {cfg.num_generations} weeks x {cfg.episode.episodes_per_step} people"
            f"{f' / {processes} processes' if processes > 1 else ''}); per_device_train_batch_size "
            f"({cfg.per_device_train_batch_size}) must divide it"
        )
    if cfg.anchor_weight > 0 and cfg.mode == "episode":
        raise RhythmError("anchor_weight draws its states from the prompts of step or branch mode; episode mode has none")
    if cfg.mode == "branch":
        validate_branch(cfg.branch, cfg.num_generations)
    if cfg.mode == "branch" and cfg.step.use_vllm:
        raise RhythmError("branch mode plays weeks with the trained model itself; step.use_vllm applies to step mode only")
    if cfg.mode == "step" and cfg.step.use_vllm and not cfg.jobs.flavor:
        from importlib.util import find_spec

        if find_spec("vllm") is None:
            raise RhythmError("use_vllm needs vllm installed (pip install 'rhythm[vllm]', on a CUDA machine)")
    if cfg.jobs.flavor is None:
        if cfg.adapter and _adapter_looks_local(cfg.adapter) and not Path(cfg.adapter).expanduser().is_dir():
            raise RhythmError(f"adapter not found: {cfg.adapter} (the output_dir of rhythm sft, or a Hub repo id)")
    elif cfg.adapter and Path(cfg.adapter).expanduser().exists():
        raise RhythmError(
            f"a job cannot read the local adapter {cfg.adapter}; pass the Hub repo it was pushed to "
            "(rhythm sft --flavor pushes it to its hub_model_id), e.g. --set adapter=me/rhythm-sft"
        )


def validate_branch(branch: BranchMode, num_generations: int) -> None:
    """The ``branch:`` section's own rules."""
    check_bounds(branch, "branch.")
    if branch.group not in ("sampled", "pair"):
        raise RhythmError(f"branch.group must be sampled or pair, got {branch.group!r}")
    if branch.group == "pair" and num_generations != 2:
        raise RhythmError(f"branch.group=pair compares two replies per state: set num_generations=2 (got {num_generations})")
    if branch.challenger not in ("runner_up", "restore"):
        raise RhythmError(f"branch.challenger must be runner_up or restore, got {branch.challenger!r}")
    if branch.challenger == "restore" and branch.group != "pair":
        raise RhythmError("branch.challenger=restore picks the second reply of a pair: it needs branch.group=pair")
    if branch.restore_only and branch.challenger != "restore":
        raise RhythmError("branch.restore_only keeps the states a restoring action is named at: it needs branch.challenger=restore")
    if branch.agree_z > 0 and (branch.group != "pair" or branch.futures < 2):
        raise RhythmError("branch.agree_z compares a pair's replies future by future: it needs branch.group=pair "
                          "and branch.futures >= 2")


def run_processes(cfg: GRPORunConfig) -> int:
    """The processes the run will have: a job's (one per GPU of its flavor), or this launch's."""
    return flavor_processes(cfg.jobs.flavor) if cfg.jobs.flavor else world_size()


MODE_SECTIONS = {"step": ("step",), "branch": ("step", "branch"), "episode": ("episode",)}
"""The sections of mode-only settings each mode reads."""


def check_given_sections(cfg: GRPORunConfig, keys: Iterable[str]) -> None:
    """A setting given on the command line (``--set episode.every_k_turns=4``) in a section this mode does not read
    would be recorded and do nothing: refused. A config file's own sections (a base's ``step:`` under an episode
    config) are not: they are the base's, stated once."""
    sections = {"step", "branch", "episode"}
    unread = sorted(k for k in keys if k.split(".")[0] in sections - set(MODE_SECTIONS.get(cfg.mode, ())))
    if unread:
        readers = [m for m, read in MODE_SECTIONS.items() if unread[0].split(".")[0] in read]
        raise RhythmError(f"{unread[0]} is read by {' and '.join(readers)} mode only; mode={cfg.mode} would ignore it "
                          "(drop it, or set mode)")


def step_generation_batch(cfg: GRPORunConfig) -> int:
    """Step and branch modes: completions one process generates per generation batch (TRL's default:
    ``per_device_train_batch_size`` x ``gradient_accumulation_steps``)."""
    return cfg.step.generation_batch_size or cfg.per_device_train_batch_size * cfg.step.gradient_accumulation_steps


def has_rollouts(cfg: GRPORunConfig) -> bool:
    return cfg.rollout_seeds is not None and str(cfg.rollout_seeds).strip() != ""


def turns_per_week(cfg: GRPORunConfig) -> int:
    return len(range(0, EPISODE_STEPS, cfg.episode.every_k_turns))


def episode_batch(cfg: GRPORunConfig) -> int:
    """Episode mode: completions per generation batch, all processes together (trained turns x weeks per person x
    people)."""
    return turns_per_week(cfg) * cfg.num_generations * cfg.episode.episodes_per_step
