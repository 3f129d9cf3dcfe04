"""Helpers of the training tests: real bayes episodes written as the generate stage writes them, shared
tiny SFT runs, ``rhythm`` run in a subprocess against the fake Hub, and readers of what a run wrote."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.records import JsonlWriter
from tests.fakehub import FakeHub
from tests.shared import locked, shared_dir

REPO = Path(__file__).resolve().parents[2]
TINY_CONFIG = str(REPO / "rhythm" / "configs" / "grpo-tiny.yaml")


def load_model(path: Any) -> tuple[Any, Any]:
    """A saved student and its tokenizer, in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def load_benchmark(name: str) -> Any:
    """The module of ``benchmarks/NAME.py`` (the benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rhythm(hub: FakeHub, tmp_path: Path, *args: str, token: bool = True, extra_env: dict | None = None):
    """``rhythm ARGS...`` in a subprocess that talks to the fake Hub; returns (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(hub.env(tmp_path / "hf-home", token=token), **(extra_env or {}))
    proc = subprocess.run([sys.executable, "-m", "rhythm.cli.main", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def write_episodes(path: Path, seeds, *, condition: str = "in-dist", agent: str = "bayes") -> list[dict]:
    records = [r.to_dict() for r in play(make_agent(agent), [EpisodeSpec(condition, "train", s) for s in seeds])]
    with JsonlWriter(path) as w:
        for r in records:
            w.write(r)
    return records


def own_and_teacher_weeks(tmp_path: Path) -> tuple[Path, list[dict]]:
    """Three bayes weeks in one file, seeds 0 and 1 relabelled as a student's own (``agent: model:...``), seed 2
    left the teacher's: the mix the probes that treat the two apart read."""
    records = write_episodes(tmp_path / "bayes.jsonl", range(3))
    for r in records[:2]:
        r["agent"] = "model:runs/student"
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path, records


def shared_sft_run(tmp_path_factory, name: str, episodes: int, **config) -> Path:
    """A tiny SFT run on ``episodes`` bayes episodes, built once per session under a file lock and
    shared by every worker (read-only); ``config`` are SFTRunConfig fields. Returns its output_dir."""
    import shutil

    from rhythm.train.sft import SFTRunConfig, run_sft

    with locked(shared_dir(tmp_path_factory) / name) as shared:
        out = shared / "run"
        if not (out / "sft_summary.json").exists():
            data = shared / "teacher.jsonl"
            if not data.exists():
                write_episodes(data, range(episodes))
            if out.exists():
                shutil.rmtree(out)
            run_sft(SFTRunConfig(**config, data=str(data), output_dir=str(out)), quiet=True, log=lambda msg: None)
    return out


def as_v1(record: dict) -> dict:
    """A record as protocol v1 wrote it: schema 1, no ``protocol`` key, each observation with its
    own short history (the text v1 showed; replays and scores are the same)."""
    old = {k: v for k, v in record.items() if k != "protocol"}
    old["schema"] = 1
    old["steps"] = [{**s, "observation": f"Day {s['t'] // 4 + 1}, step {s['t'] + 1} of 28.\n" + s["observation"]}
                    for s in record["steps"]]
    return old


def write_v1_episodes(path: Path, records: list[dict]) -> Path:
    """``records`` written as a protocol v1 file (see :func:`as_v1`)."""
    with JsonlWriter(path) as w:
        for r in records:
            w.write(as_v1(r))
    return path


def masked_runs(ids: list[int], mask: list[int]) -> list[list[int]]:
    """Maximal runs of consecutive tokens marked for loss."""
    runs: list[list[int]] = []
    current: list[int] | None = None
    for i, m in zip(ids, mask, strict=True):
        if m:
            current = [] if current is None else current
            current.append(i)
        elif current is not None:
            runs.append(current)
            current = None
    if current is not None:
        runs.append(current)
    return runs


def read_training_log(path: str | Path) -> list[dict[str, Any]]:
    """The entries of a ``training_log.jsonl`` (any stage)."""
    return [orjson.loads(line) for line in Path(path).read_bytes().splitlines() if line.strip()]
