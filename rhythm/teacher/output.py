"""What every ``rhythm generate`` run shares, whoever teaches: its config, its summary, and the output
it writes to (resume, the config sidecar)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rhythm.agents.teachers import TeacherConfig
from rhythm.config import change_since, config_dict, config_hash, write_config
from rhythm.errors import RhythmError
from rhythm.model.llm_client import PROVIDERS, SENDING, LLMConfig
from rhythm.provenance import made_by
from rhythm.records import JsonlWriter, done_keys, sidecar_path


@dataclass(frozen=True)
class GenerateConfig:
    """``rhythm generate``: who teaches, which episodes, where they go."""

    teacher: str = "bayes"
    """bayes (default, offline) | oracle | planner | heuristic | random | openai | azure | NAME[:ARG] of an installed
    ``rhythm.agents`` entry point"""
    seeds: str = "0-29"
    """Train-split seeds to play, e.g. 0-29 or 0,5,9."""
    condition: str = "in-dist"
    """in-dist | ood | discrete"""
    split: str = "train"
    """train (default; eval seeds are for rhythm eval) or eval."""
    output: str = "data/teacher_30ep.jsonl"
    """JSONL file, or - for stdout."""
    concurrency: int = 1
    """Worker processes for CPU teachers; episodes in flight for openai / azure teachers."""
    chunk: int = 16
    """Episodes a CPU worker plays in lockstep per task (numpy batches them)."""
    resume: bool = False
    """Skip seeds already in the output and repair a torn last line."""
    teacher_options: TeacherConfig = field(default_factory=TeacherConfig)
    """Particle filter and planner settings of bayes / oracle / planner."""
    llm: LLMConfig = field(default_factory=LLMConfig)
    """Endpoint, model, retries, request fields, prices and budget of openai / azure teachers."""


@dataclass
class GenerateSummary:
    episodes: int = 0
    skipped: int = 0
    repaired_bytes: int = 0
    parse_failures: int = 0
    steps: int = 0
    mean_final_score: float | None = None
    seconds: float = 0.0
    output: str = ""
    failed: int = 0
    """Episodes that could not finish (API teachers); they are not in the output."""
    stopped: str | None = None
    """Why the run stopped before playing every seed (API teachers: budget, endpoint down)."""
    extra: dict[str, Any] = field(default_factory=dict)


HOW_NOT_WHAT = ("seeds", "condition", "split", "output", "concurrency", "chunk", "resume", *(f"llm.{key}" for key in SENDING))
"""Settings that do not change a week: which people (each record names its own), where they go, which server
answers for the model (the sidecar records it), how many at once, retries and budget. The records' ``config_hash``
leaves them out, so a resumed or a parallel run matches."""


def chat_teacher(teacher: str) -> bool:
    """Whether ``--teacher`` names a chat model (``openai``, ``azure``, with or without ``:NAME``, in any case)."""
    return teacher.partition(":")[0].strip().lower() in PROVIDERS


def canonical(cfg: GenerateConfig) -> GenerateConfig:
    """``cfg`` with a chat-model teacher spelt one way: ``--teacher openai:NAME`` as ``--teacher openai --model NAME``,
    ``azure:NAME`` as ``--teacher azure --deployment NAME`` (the provider in lower case). Both spellings make the same
    weeks, so they hash and record alike and either resumes the other's file; the long form is kept as it was, and a
    file written before in the short form resumes through :func:`typed_hash`. Other teachers are named as the registry
    reads them (``Bayes``, `` bayes`` and ``bayes:`` are ``bayes``; an argument is kept as typed)."""
    kind, _, arg = cfg.teacher.partition(":")
    provider, name = kind.strip().lower(), arg.strip()
    if provider not in PROVIDERS:
        return replace(cfg, teacher=f"{provider}:{name}" if name else provider)
    llm = replace(cfg.llm, **{"model" if provider == "openai" else "deployment": name}) if name else cfg.llm
    return replace(cfg, teacher=provider, llm=llm)


def data_hash(recorded: GenerateConfig) -> str:
    """The ``config_hash`` every record of a generate run carries: the teacher and the settings it reads, spelt
    :func:`canonical` (:func:`teacher_settings`)."""
    return config_hash(teacher_settings(canonical(recorded)), ignore=HOW_NOT_WHAT)


def teacher_settings(cfg: GenerateConfig) -> GenerateConfig:
    """``cfg`` with the section its teacher does not read at its defaults: ``llm`` for a CPU teacher (an installed
    one too: it is given ``teacher_options``), ``teacher_options`` for a chat model. Such a setting makes the same
    weeks, so it leaves the hash alone; at its defaults the hash is the one every earlier file carries."""
    if chat_teacher(cfg.teacher):
        return replace(cfg, teacher_options=TeacherConfig())
    return replace(cfg, llm=LLMConfig())


def full_hash(recorded: Any) -> str:
    """The hash files written before :func:`teacher_settings` carry: every section, read or not, so such a file
    with a setting its teacher ignores still resumes."""
    return config_hash(canonical(recorded), ignore=HOW_NOT_WHAT) if isinstance(recorded, GenerateConfig) else ""


def typed_hash(cfg: GenerateConfig, recorded: Any) -> str:
    """The ``config_hash`` of ``recorded`` with the teacher spelt as ``cfg`` typed it: what weeks written before
    :func:`canonical` carry (``--teacher openai:NAME``), so they resume as they did."""
    if not isinstance(recorded, GenerateConfig):
        return ""
    typed = replace(recorded, teacher=cfg.teacher, llm=replace(recorded.llm, model=cfg.llm.model, deployment=cfg.llm.deployment))
    return config_hash(typed, ignore=HOW_NOT_WHAT)


@contextmanager
def open_output(
    cfg: GenerateConfig,
    seeds: list[int],
    recorded: Any,
    chash: str,
    on_total: Callable[[int], None] | None = None,
    extra: dict[str, Any] | None = None,
) -> Iterator[tuple[JsonlWriter, list[int], GenerateSummary]]:
    """Open the output for a generate run (every teacher): skip seeds already there on ``--resume``,
    write the effective config ``recorded`` beside a file output, and yield the writer, the seeds still
    to play and the summary to fill."""
    out_path = None if cfg.output == "-" else Path(cfg.output)
    done = done_keys(out_path) if (cfg.resume and out_path is not None) else {}
    ours = (chash, typed_hash(cfg, recorded), full_hash(recorded))
    other = sorted({h for h in done.values() if h not in ours}, key=str)
    if other:
        differs = "" if out_path is None else change_since(sidecar_path(out_path), other, config_dict(recorded), HOW_NOT_WHAT)
        raise RhythmError(f"{cfg.output} holds weeks made with other settings (config_hash {', '.join(map(str, other))}; "
                          f"these are {chash}{': ' + differs if differs else ''}): --resume would mix them; give "
                          "another --output, or drop --resume")
    splits = sorted({key[1] for key in done} - {cfg.split})
    if splits:  # training data that held eval people would be graded on people it learned
        raise RhythmError(f"{cfg.output} holds {' and '.join(splits)}-split weeks; this run plays the {cfg.split} "
                          "split: --resume would mix the splits in one file; give another --output")
    todo = [s for s in seeds if (cfg.condition, cfg.split, s) not in done]
    summary = GenerateSummary(skipped=len(seeds) - len(todo), output=cfg.output)
    if on_total:
        on_total(len(todo))
    with JsonlWriter(cfg.output, resume=cfg.resume) as writer:
        summary.repaired_bytes = writer.repaired
        if out_path is not None:
            write_config(recorded, sidecar_path(out_path), made_by(config_hash=chash, **(extra or {})))
        yield writer, todo, summary

