"""GRPO refinement of the SFT student with rewards from the benchmark itself (``rhythm grpo``): a small
package, read top to bottom as :mod:`~rhythm.train.grpo.config` (settings and checks),
:mod:`~rhythm.train.grpo.data` (prompts and the people played), :mod:`~rhythm.train.grpo.rewards`
(reward functions by name, reward log), :mod:`~rhythm.train.grpo.rollout` (episode mode's weeks),
:mod:`~rhythm.train.grpo.branch` and :mod:`~rhythm.train.grpo.pairs` (branch mode's scored replies and pairs),
:mod:`~rhythm.train.grpo.anchor` (the KL anchor), :mod:`~rhythm.train.grpo.probe` (what shows whether a run can
learn), :mod:`~rhythm.train.grpo.shared_prompts` (the loss's pass, each prompt encoded once) and
:mod:`~rhythm.train.grpo.trainer` (policy, TRL ``GRPOTrainer``, the run; its docstring tells the
recipe). ``python -m rhythm.train.grpo`` is the entry ``accelerate launch`` and Hugging Face Jobs run.
"""

from rhythm.train.common import resolve_precision
from rhythm.train.grpo.config import (
    GRPORunConfig,
    check_given_sections,
    data_paths,
    episode_batch,
    turns_per_week,
    validate,
)
from rhythm.train.grpo.rollout import assign_weeks
from rhythm.train.grpo.trainer import build_trainer, grpo_config, load_policy, run_grpo

__all__ = [
    "GRPORunConfig", "assign_weeks", "build_trainer", "check_given_sections", "data_paths", "episode_batch", "grpo_config", "load_policy",
    "resolve_precision", "run_grpo", "turns_per_week", "validate",
]
