"""Chat models as teachers: ``rhythm generate --teacher openai --model NAME [--base-url URL]`` or
``rhythm generate --teacher azure --endpoint URL --deployment NAME --api-version V``.

``concurrency`` episodes are in flight at once (asyncio workers over one async client); the steps of an
episode go in order, one request each carrying the episode's conversation so far (protocol v2: the
system prompt, every earlier observation and reply, this step's observation; ``llm.history_turns``
keeps the last K steps for cost), as :mod:`rhythm.protocol` builds it, observations rendered by the scalar :class:`rhythm.env.RhythmEnv` exactly as
the batch runner renders it. A reply with no valid action gets one re-ask with the format reminder;
if that fails too the fallback action is played and the step counts as a parse failure.

Records have the bayes schema (:mod:`rhythm.records`), graded by :func:`rhythm.grader.score_episode`;
each step also carries its ``usage`` and each episode its totals (tokens, ``cost_usd`` from
``llm.prices``, requests, re-asks, retries, replies without usage, seconds): the fields and sums an API agent's
week in ``rhythm eval`` records (:meth:`rhythm.model.llm_client.StepReply.usage`,
:func:`rhythm.agents.episodes.episode_usage`). An episode is written as one whole, flushed line
when it finishes, so Ctrl-C or a crash never leaves half a record and ``--resume`` sends no request for
an episode already in the file.

Failures: an episode whose request fails for good (retries exhausted, a refused request, a 200 that is
not a chat completion) goes to ``<output>.errors.jsonl`` with the reason, and the others go on;
``--resume`` plays it again, and the errors file then keeps only the episodes still missing from the
output, each with its latest failure. An error
every request would repeat (wrong key: 401; 403; unknown model or deployment: 404; rejected
parameters: 400) stops the run at once with one line. ``llm.max_consecutive_failures`` episodes
failing in a row stop it too (the endpoint looks down).

Budget: with ``--max-cost-usd`` no request is sent once the spend has reached the cap. Episodes in
flight at that moment are abandoned, not written (their tokens are counted in the summary; ``--resume``
plays them again), so the spend can pass the cap by at most the requests already in flight. A reply
without ``usage`` has an unknown cost (``cost_usd`` null in its step and episode, counted in their
``usage_missing``, "unknown" in the summary); with a cap set the run stops there, since the spend could no longer be held to it.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from rhythm.agents.episodes import episode_usage, finish_episode, make_step
from rhythm.env.constants import EPISODE_STEPS
from rhythm.env.rhythm_env import RhythmEnv
from rhythm.model.llm_client import (
    BudgetReached,
    ChatClient,
    CostMeter,
    EpisodeAPIError,
    RequestStats,
    SpendUnknown,
    StepReply,
    Target,
    ask,
    redacted,
    resolve_target,
)
from rhythm.protocol import conversation, parse_reply
from rhythm.provenance import now_iso
from rhythm.records import EpisodeRecord, JsonlWriter, StepRecord, dumps, episode_key, iter_jsonl, write_atomic
from rhythm.teacher.output import GenerateConfig, GenerateSummary, canonical, data_hash, open_output


@dataclass
class LLMStepRecord(StepRecord):
    """A step of an LLM teacher: the bayes step fields plus this step's ``usage``."""

    usage: dict[str, Any] = field(default_factory=dict)


NO_STEP = StepReply("", parse_reply(""), 0, 0, 0.0, 0, 0)
"""A step that spent nothing: its ``usage()`` names the keys a step's usage has."""


class EpisodeFailed(Exception):
    """An episode that could not finish: which step, why, and what it had spent."""

    def __init__(self, error: EpisodeAPIError, step: int, usage: dict[str, Any]) -> None:
        super().__init__(error.reason)
        self.error = error
        self.step = step
        self.usage = usage


def target_of(cfg: GenerateConfig) -> Target:
    """The endpoint and model a config names (raises RhythmError when something is missing)."""
    kind, _, arg = cfg.teacher.partition(":")
    return resolve_target(kind.strip().lower(), arg.strip(), cfg.llm)


def errors_path(output: str | Path) -> Path:
    return Path(str(output) + ".errors.jsonl")


async def play_episode(
    client: ChatClient,
    condition: str,
    split: str,
    seed: int,
    *,
    agent: str,
    config_hash: str = "",
) -> EpisodeRecord:
    """Play one episode against the endpoint, step by step; raises EpisodeFailed or BudgetReached."""
    env = RhythmEnv(condition, split)
    env.reset(seed=seed)
    started = time.perf_counter()
    steps: list[StepRecord] = []
    episode_return = 0.0
    crashes = 0
    belief = None
    history_turns = client.llm.history_turns
    for t in range(EPISODE_STEPS):
        observation = env.text
        messages = conversation([s.observation for s in steps] + [observation], [s.response for s in steps],
                                max_turns=history_turns)
        try:
            reply = await ask(client, messages)
        except EpisodeAPIError as err:
            # what the steps before it spent, with every key of a step's usage (at step 0 all of them 0)
            spent = [NO_STEP.usage(), *(s.usage for s in steps), *([err.spent] if err.spent else [])]
            raise EpisodeFailed(err, t, episode_usage(spent)) from None
        _, reward, _, _, info = env.step(reply.parsed.action)
        episode_return += reward
        crashes += info["crashes"]
        belief = reply.parsed.belief
        steps.append(make_step(t, observation, reply.text, belief, reply.parsed.action_name, reply.parsed.ok, reward,
                               info["meters"], cls=LLMStepRecord, usage=reply.usage()))
    total = {**episode_usage([s.usage for s in steps]), "seconds": round(time.perf_counter() - started, 4)}
    return finish_episode(
        condition=condition, split=split, seed=seed, agent=agent, model=client.target.name, config_hash=config_hash,
        created_at=now_iso(), steps=steps, episode_return=episode_return, crashes=crashes, belief=belief,
        truth=env.belief_target, usage=total,
    )


class _Run:
    """The state of one ``generate_llm`` run: workers, writers, counters, the stop flag."""

    def __init__(self, cfg: GenerateConfig, target: Target, chash: str, writer: JsonlWriter, credential: Any,
                 progress: Callable[[int], None] | None) -> None:
        self.cfg = cfg
        self.target = target
        self.chash = chash
        self.writer = writer
        self.credential = credential
        self.progress = progress
        self.meter = CostMeter(target.name, cfg.llm.prices, cfg.llm.max_cost_usd)
        self.stats = RequestStats()
        self.errors_file = None if cfg.output == "-" else errors_path(cfg.output)
        self.errors_writer: JsonlWriter | None = None
        self.stopped: str | None = None
        self.failed = 0
        self.consecutive_failures = 0
        self.records: list[dict[str, Any]] = []

    async def main(self, todo: list[int]) -> None:
        queue = deque(todo)
        client = ChatClient(self.target, self.cfg.llm, credential=self.credential, meter=self.meter, stats=self.stats)
        workers = [asyncio.ensure_future(self.worker(client, queue)) for _ in range(min(self.cfg.concurrency, len(todo)))]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            await client.aclose()

    async def worker(self, client: ChatClient, queue: deque[int]) -> None:
        while queue and self.stopped is None:
            seed = queue.popleft()
            try:
                record = await play_episode(
                    client, self.cfg.condition, self.cfg.split, seed, agent=self.target.provider, config_hash=self.chash
                )
            except SpendUnknown as unknown:
                self.stop(f"{unknown}; use a server that reports usage, or drop --max-cost-usd to run without a cap")
                return
            except BudgetReached as reached:
                self.stop(f"budget reached ({reached}); rerun with --resume and a higher --max-cost-usd to go on")
                return
            except EpisodeFailed as failed:
                self.fail(seed, failed)
                continue
            self.consecutive_failures = 0
            line = dumps(record)
            self.writer.write_line(line)
            self.records.append(orjson.loads(line))
            if self.progress:
                self.progress(1)

    def stop(self, reason: str) -> None:
        if self.stopped is None:
            self.stopped = reason

    def fail(self, seed: int, failed: EpisodeFailed) -> None:
        self.failed += 1
        self.consecutive_failures += 1
        entry = {
            "condition": self.cfg.condition,
            "split": self.cfg.split,
            "seed": seed,
            "agent": self.target.provider,
            "model": self.target.name,
            "step": failed.step,
            "error": failed.error.kind,
            "status": failed.error.status,
            "reason": failed.error.reason,
            "usage": failed.usage,
            "config_hash": self.chash,
            "created_at": now_iso(),
        }
        if self.errors_file is None:
            sys.stderr.write(dumps(entry).decode())
        else:
            if self.errors_writer is None:
                self.errors_writer = JsonlWriter(self.errors_file, resume=True)
            self.errors_writer.write(entry)
        if self.progress:
            self.progress(1)
        if self.consecutive_failures >= self.cfg.llm.max_consecutive_failures:
            self.stop(f"{self.consecutive_failures} episodes failed in a row (last: {failed.error.reason})")

    def close(self) -> None:
        if self.errors_writer is not None:
            self.errors_writer.close()


def prune_errors(path: Path, done: set[tuple[str, str, int]]) -> None:
    """Rewrite the errors file to the episodes still missing from the output: drop those now in it
    (``done``: a resumed run played them), keep the latest failure of each other episode, and remove
    the file when none is left. Written beside and renamed over, so a crash leaves one whole file."""
    if not path.exists():
        return
    latest: dict[tuple[str, str, int], dict[str, Any]] = {}
    for _, entry in iter_jsonl(path, skip_torn_last=True):
        key = episode_key(entry)
        if key not in done:
            latest.pop(key, None)  # re-inserted last: the file keeps the order of the latest failures
            latest[key] = entry
    if not latest:
        path.unlink()
        return
    write_atomic(path, b"".join(dumps(entry) for entry in latest.values()))


def written_config(cfg: GenerateConfig) -> GenerateConfig:
    """The config as recorded beside the data: the teacher spelt :func:`~rhythm.teacher.output.canonical`, URLs
    without passwords or secret query values."""
    cfg = canonical(cfg)
    return replace(cfg, llm=redacted(cfg.llm))


def _run_async(make: Callable[[], Any]) -> None:
    """``asyncio.run`` here, or in a helper thread when this thread already runs a loop (a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(make())
        return
    failure: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(make())
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=target, name="rhythm-generate-llm")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def _money(x: float) -> str:
    return f"${x:.4f}" if x < 100 else f"${x:,.2f}"


def _cost_line(meter: CostMeter, name: str) -> str:
    """The summary's cost: the spend, the budget, and what is unknown (no price; replies without usage)."""
    if meter.price is None:
        return f"unknown (no llm.prices entry for {name!r})"
    cap = f" of {_money(meter.max_cost_usd)} budget" if meter.max_cost_usd is not None else ""
    if meter.unknown:
        return f"unknown: {_money(meter.spent)}{cap} for the replies with usage, plus {meter.unknown} without"
    return _money(meter.spent) + cap


def generate_llm(
    cfg: GenerateConfig,
    seeds: list[int],
    *,
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    credential: Any = None,
) -> GenerateSummary:
    """Play the chat-model teacher on every seed not yet in the output; see the module docstring.

    ``credential`` (azure with Entra ID) is any object with ``get_token``; default
    ``DefaultAzureCredential()``.
    """
    target = target_of(cfg)
    recorded = written_config(cfg)
    chash = data_hash(recorded)
    started = time.perf_counter()
    with open_output(cfg, seeds, recorded, chash, on_total, {"endpoint": target.url}) as (writer, todo, summary):
        out_path = None if cfg.output == "-" else Path(cfg.output)
        if out_path is not None and not cfg.resume:
            errors_path(out_path).unlink(missing_ok=True)
        run = _Run(cfg, target, chash, writer, credential, progress)
        try:
            if todo:
                _run_async(lambda: run.main(todo))
        finally:
            run.close()
            if run.errors_file is not None and cfg.resume:
                done = {(cfg.condition, cfg.split, s) for s in set(seeds) - set(todo)}
                prune_errors(run.errors_file, done | {episode_key(r) for r in run.records})
    records = run.records
    summary.episodes = len(records)
    summary.steps = sum(len(r["steps"]) for r in records)
    summary.parse_failures = sum(not s["parse_ok"] for r in records for s in r["steps"])
    scores = [r["score"]["final_score"] for r in records]
    summary.mean_final_score = sum(scores) / len(scores) if scores else None
    summary.seconds = time.perf_counter() - started
    summary.failed = run.failed
    summary.stopped = run.stopped
    stats, meter = run.stats, run.meter
    extra: dict[str, Any] = {
        "re-asks": sum(r["usage"]["reasks"] for r in records),
        "requests sent": stats.attempts,
        "retries": f"{stats.retries} (429: {stats.rate_limited}, 5xx: {stats.server_errors}, timeouts/no connection: {stats.no_response})",
        "tokens": f"{meter.prompt_tokens:,} in{f' ({meter.cached_tokens:,} cached)' if meter.cached_tokens else ''}"
        f" / {meter.completion_tokens:,} out",
    }
    extra["cost"] = _cost_line(meter, target.name)
    if stats.missing_usage:
        extra["replies without usage"] = stats.missing_usage
    if run.failed:
        where = f"see {run.errors_file}" if run.errors_file is not None else "reasons on stderr"
        extra["failed episodes"] = f"{run.failed} ({where}; --resume plays them again)"
    unplayed = len(todo) - len(records) - run.failed
    if run.stopped:
        extra["stopped"] = f"{run.stopped}; {unplayed} episodes not written"
    summary.extra = extra
    return summary
