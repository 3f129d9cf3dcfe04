"""How tables and plots name an agent for a reader: ``student (SFT)``, ``student (SFT+GRPO)``,
``teacher (bayes)``. The agent string itself (``model:runs/quickstart/sft``) stays in every JSON; this
is only its display name, recorded beside it in ``eval_results_v2.json`` as ``display_name``.
"""

from __future__ import annotations

from pathlib import Path

import yaml

READER_NAMES = {"bayes": "teacher (bayes)", "oracle": "oracle (knows the person)", "planner": "planner (a neutral person)"}
"""Built-in agents whose bare name says too little; random and heuristic name themselves."""
SFT_CONFIG, GRPO_CONFIG = "sft_config.yaml", "grpo_config.yaml"
"""What ``rhythm sft`` and ``rhythm grpo`` write into their output folders (the effective configs)."""


def _start_of_grpo(folder: Path) -> Path | None:
    """The folder a GRPO run started from (its adapter, or its full-weight model), if it names one."""
    try:
        cfg = yaml.safe_load((folder / GRPO_CONFIG).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    start = cfg.get("adapter") or cfg.get("model_name_or_path")
    return Path(start) if isinstance(start, str) else None


def start_of_sft(folder: str | Path) -> Path | None:
    """The model an SFT run started from (``model_name_or_path`` in its effective config), if it names one."""
    try:
        cfg = yaml.safe_load((Path(folder) / SFT_CONFIG).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    start = cfg.get("model_name_or_path") if isinstance(cfg, dict) else None
    return Path(start) if isinstance(start, str) else None


def training_stage(folder: str | Path) -> str | None:
    """``SFT``, ``SFT+GRPO`` or ``GRPO`` for a folder ``rhythm sft`` / ``rhythm grpo`` wrote; None otherwise."""
    folder = Path(folder)
    if (folder / GRPO_CONFIG).is_file():
        start = _start_of_grpo(folder)
        return "SFT+GRPO" if start is not None and (start / SFT_CONFIG).is_file() else "GRPO"
    if (folder / SFT_CONFIG).is_file():
        return "SFT"
    return None


def display_name(agent: str) -> str:
    """A reader's name for an agent: ``model:runs/q/sft`` -> ``student (SFT)`` (read from the folder's
    config), ``model:Qwen/Qwen2.5-3B`` -> ``Qwen2.5-3B (model)``, ``openai:gpt-5.4`` -> ``gpt-5.4 (openai)``,
    ``bayes`` -> ``teacher (bayes)``."""
    kind, sep, arg = agent.partition(":")
    if not sep:
        return READER_NAMES.get(agent, agent)
    parts = [p for p in arg.replace("\\", "/").split("/") if p]
    if kind == "model":
        stage = training_stage(arg) if arg else None
        if stage is not None:
            return f"student ({stage})"
    return f"{parts[-1]} ({kind})" if parts else agent
