"""Teacher episodes on the train split as JSONL: ``rhythm generate --seeds 0-29 --output FILE``.

CPU-bound teachers (bayes, oracle, planner and the baselines) play chunks of episodes in lockstep,
spread over ``concurrency`` worker processes. Every finished episode is written as one whole line and
flushed; ``--resume`` skips seeds already in the file and cuts off a torn last line first. A run holds
the output's lock (:mod:`rhythm.locking`) from before it reads the file until it ends, so a second run
on the same file fails at once (or waits, ``--wait-lock``) instead of writing every episode again.
Workers exit when the parent dies, however it dies (:mod:`rhythm.workers`). The effective config and versions go to ``<output>.config.yaml`` beside the data, and each record carries
the config's hash. Chat-model teachers (``--teacher openai`` / ``azure``) run as async requests in one
process: see :mod:`rhythm.teacher.llm_generate`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import check_agent_spec, make_agent
from rhythm.agents.teachers import TeacherConfig
from rhythm.env.constants import CONDITIONS, SPLITS
from rhythm.errors import RhythmError
from rhythm.locking import output_lock
from rhythm.records import check_output, dumps
from rhythm.seeds import parse_seeds
from rhythm.teacher.llm_generate import generate_llm, target_of
from rhythm.teacher.output import GenerateConfig, GenerateSummary, canonical, chat_teacher, data_hash, open_output
from rhythm.workers import worker_pool

__all__ = ["GenerateConfig", "GenerateSummary", "generate", "summary_line", "validate"]


def validate(cfg: GenerateConfig) -> list[int]:
    """Check names and seeds before anything runs; returns the seeds."""
    if cfg.condition not in CONDITIONS:
        raise RhythmError(f"unknown condition {cfg.condition!r}; expected one of {', '.join(CONDITIONS)}")
    if cfg.split not in SPLITS:
        raise RhythmError(f"unknown split {cfg.split!r}; expected one of {', '.join(SPLITS)}")
    if cfg.concurrency < 1 or cfg.chunk < 1:
        raise RhythmError("--concurrency and chunk must be >= 1")
    if cfg.output == "-" and cfg.resume:
        raise RhythmError("--resume needs a file --output, not stdout")
    check_output(cfg.output)
    if chat_teacher(cfg.teacher):
        target_of(cfg)  # model, endpoint, key and budget settings, before anything is written
    elif check_agent_spec(cfg.teacher)[0] == "model":
        raise RhythmError("a model:PATH agent is a student, not a teacher; play it with rhythm eval --agent "
                          f"{cfg.teacher} (its weeks go to the .episodes.jsonl beside the results)")
    return parse_seeds(cfg.seeds)


def _play_chunk(teacher: str, options: TeacherConfig, condition: str, split: str, seeds: list[int], chash: str) -> list[bytes]:
    """Worker task: play ``seeds`` and return their JSONL lines."""
    agent = make_agent(teacher, options)
    specs = [EpisodeSpec(condition, split, s) for s in seeds]
    return [dumps(r) for r in play(agent, specs, config_hash=chash)]


def generate(
    cfg: GenerateConfig,
    *,
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    wait_lock: bool = False,
    say: Callable[[str], None] | None = None,
) -> GenerateSummary:
    """Play the teacher on every requested seed not yet in the output; write whole lines as they finish.

    The output's lock is held throughout: a second run on the same file raises
    :class:`rhythm.locking.OutputLocked` before reading it, or, with ``wait_lock``, waits for the first.
    """
    seeds = validate(cfg)
    with output_lock(cfg.output, wait=wait_lock, say=say):
        return _generate(cfg, seeds, progress, on_total)


def _generate(
    cfg: GenerateConfig,
    seeds: list[int],
    progress: Callable[[int], None] | None,
    on_total: Callable[[int], None] | None,
) -> GenerateSummary:
    if chat_teacher(cfg.teacher):
        # API teachers: async, in one process
        return generate_llm(cfg, seeds, progress=progress, on_total=on_total)
    cfg = canonical(cfg)  # the teacher as the registry names it, in the hash and the recorded config alike
    chash = data_hash(cfg)
    started = time.perf_counter()
    scores: list[float] = []
    with open_output(cfg, seeds, cfg, chash, on_total) as (writer, todo, summary):
        def emit(lines: list[bytes]) -> None:
            for line in lines:
                writer.write_line(line)
                rec = orjson.loads(line)
                summary.episodes += 1
                summary.steps += len(rec["steps"])
                summary.parse_failures += sum(not s["parse_ok"] for s in rec["steps"])
                scores.append(rec["score"]["final_score"])
                if progress:
                    progress(1)

        chunks = [todo[i : i + cfg.chunk] for i in range(0, len(todo), cfg.chunk)]
        args = (cfg.teacher, cfg.teacher_options, cfg.condition, cfg.split)
        if cfg.concurrency == 1 or len(chunks) <= 1:
            for chunk in chunks:
                emit(_play_chunk(*args, chunk, chash))
        else:
            pool = worker_pool(cfg.concurrency)
            try:
                futures = [pool.submit(_play_chunk, *args, chunk, chash) for chunk in chunks]
                for fut in futures:  # written in seed order, as one process would: the file does not depend on timing
                    emit(fut.result())
            finally:  # on an error or Ctrl-C, chunks not started are dropped rather than played unseen
                pool.shutdown(wait=True, cancel_futures=True)
    summary.seconds = time.perf_counter() - started
    summary.mean_final_score = sum(scores) / len(scores) if scores else None
    return summary


def summary_line(summary: GenerateSummary) -> str:
    parts = [
        f"{summary.episodes} episodes written",
        f"{summary.skipped} already there",
        f"{summary.steps} steps",
        f"{summary.parse_failures} parse failures",
        f"{summary.seconds:.1f} s",
    ]
    if summary.mean_final_score is not None:
        parts.append(f"mean final score {summary.mean_final_score:.3f}")
    if summary.repaired_bytes:
        parts.append(f"cut a torn last line ({summary.repaired_bytes} bytes)")
    parts.extend(f"{k} {v}" for k, v in summary.extra.items())
    return "generate: " + ", ".join(parts) + f" -> {summary.output}"

