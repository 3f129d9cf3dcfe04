"""Evaluate any agent on the benchmark's eval split, beside reference agents on the same seeds.

Run it with ``rhythm eval --agent bayes --condition all``. For each condition the agent and every
reference agent (random, heuristic and oracle by default) play the same eval-split seeds; the report
holds means with seeded bootstrap 95% CIs (v3 and v2), behaviour score, belief MAE beside the constant
prior's on the same episodes, paired win rates, the normalised score (agent - random) /
(oracle - random), parse-failure rate and action counts. The JSON is byte-identical across runs;
per-episode records (every reply included) go to a JSONL beside it.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import ProgressFn, episode_usage, play
from rhythm.agents.registry import check_agent_spec, make_agent, split_agent_spec
from rhythm.agents.teachers import TeacherConfig
from rhythm.agents.tiny import resolve_base, resolve_model
from rhythm.config import change_since, config_dict, config_hash, read_recorded, write_config
from rhythm.env.constants import ACTIONS, BELIEF_DIMS, CONDITIONS, ENV_VERSION, EPISODE_STEPS, PROTOCOL_VERSION, SPLITS
from rhythm.errors import RhythmError
from rhythm.eval.names import display_name
from rhythm.eval.results import EvalResults, episodes_path
from rhythm.eval.stats import mean_ci, normalized_score, paired_win_rate
from rhythm.grader import GRADERS, SCORE_KEYS, belief_mae_by_step, prior_mae_beside, true_belief
from rhythm.locking import output_lock
from rhythm.model.llm_client import SENDING, LLMConfig, redacted
from rhythm.model.load import ModelOptions, adapter_config, weights_digest
from rhythm.provenance import made_by, versions
from rhythm.records import (
    EpisodeRecord,
    JsonlWriter,
    check_episode,
    check_output,
    check_resumable,
    episode_key,
    iter_jsonl,
    sidecar_path,
)
from rhythm.seeds import MAX_SEEDS, format_seeds, parse_seeds

DEFAULT_EPISODES: dict[str, int] = {"in-dist": 100, "ood": 50, "discrete": 15}
"""Eval sizes: 100 in-dist, 50 ood, 5 per discrete profile."""
WIN_RATE_BASELINES = ("random", "heuristic")


@dataclass(frozen=True)
class EvalConfig:
    """``rhythm eval``: which agent, which conditions, how many episodes, where to write."""

    agent: str = "heuristic"
    """random | heuristic | planner | bayes | oracle | model:PATH | openai:MODEL | azure:DEPLOYMENT | NAME[:ARG] of an
    installed ``rhythm.agents`` entry point (:mod:`rhythm.agents.registry`)"""
    condition: str = "all"
    """in-dist | ood | discrete | all"""
    episodes: int | None = None
    """Episodes per condition (eval seeds 0..N-1); default in-dist 100, ood 50, discrete 15."""
    seeds: str | None = None
    """Explicit eval-split seeds (e.g. 0-9), instead of episodes (not both)."""
    split: str = "eval"
    """eval (the final table) | train: choose settings on train-split seeds that the SFT data did not
    use (e.g. --split train --seeds 100000-100099), keeping the eval split for the final table."""
    grader: str = "v3"
    """Headline grader (v3 or v2): the score the paired win rates and the normalised score are computed on
    (``final_score`` or ``final_score_v2``). Both scores are always reported under their own names."""
    references: list[str] = field(default_factory=lambda: ["random", "heuristic", "oracle"])
    """Agents played on the same seeds for win rates and the normalised score."""
    output: str = "eval_results_v2.json"
    """Results JSON; per-episode records go beside it as <stem>.episodes.jsonl."""
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    """Settings of bayes / oracle / planner (as agent or reference)."""
    model: ModelOptions = field(default_factory=ModelOptions)
    """Settings of model:PATH agents."""
    llm: LLMConfig = field(default_factory=LLMConfig)
    """Settings of openai:MODEL and azure:DEPLOYMENT agents (endpoint, retries, concurrency, prices)."""


def conditions_of(name: str) -> list[str]:
    if name == "all":
        return list(CONDITIONS)
    if name not in CONDITIONS:
        raise RhythmError(f"unknown condition {name!r}; expected one of {', '.join(CONDITIONS)}, all")
    return [name]


HOW_NOT_WHAT = ("output", *(f"llm.{key}" for key in SENDING))
"""Settings that do not change an eval's results (where they go, which server answers for the model, how requests
are sent; the results' ``config`` records them): out of its ``config_hash``, as in ``rhythm generate``'s.
``model.batch_size`` stays in: sampled decoding (``model.do_sample``) depends on which weeks share a batch."""


def eval_seeds(cfg: EvalConfig, condition: str) -> list[int]:
    if cfg.seeds is not None:  # given, even empty: parse_seeds says what is wrong with it
        return sorted(parse_seeds(cfg.seeds))  # in order, as the results record them: one interval however they are typed
    n = cfg.episodes if cfg.episodes is not None else DEFAULT_EPISODES[condition]
    if not 1 <= n <= MAX_SEEDS:
        raise RhythmError(f"--episodes must be in 1..{MAX_SEEDS:,}, got {n}")
    return list(range(n))


def eval_weeks(cfg: EvalConfig) -> list[tuple[str, str, int]]:
    """The (condition, split, seed) of every week the agent plays, in the order the episodes file lists them."""
    return [(c, cfg.split, s) for c in conditions_of(cfg.condition) for s in eval_seeds(cfg, c)]


def validate(cfg: EvalConfig) -> None:
    """Fail fast, before any episode is played, on names and seeds that cannot work."""
    if cfg.episodes is not None and cfg.seeds is not None:  # seeds would win, and the results record both
        raise RhythmError(f"give episodes ({cfg.episodes}: seeds 0..N-1) or seeds ({cfg.seeds}), not both")
    for condition in conditions_of(cfg.condition):
        eval_seeds(cfg, condition)
    if cfg.split not in SPLITS:
        raise RhythmError(f"unknown split {cfg.split!r}; expected one of {', '.join(SPLITS)}")
    check_agent_spec(cfg.agent)
    for ref in cfg.references:
        check_agent_spec(ref)
    if cfg.grader not in GRADERS:
        raise RhythmError(f"unknown grader {cfg.grader!r}; expected one of {', '.join(GRADERS)}")
    if str(cfg.output).strip() == "-":
        raise RhythmError("eval writes a results file and an episodes file beside it; give --output a path, not -")
    if str(cfg.output).endswith(".jsonl"):  # another eval's episodes file, or a name this one's would clash with
        raise RhythmError(f"--output {cfg.output} is the results JSON (its weeks go beside it as NAME.episodes.jsonl); "
                          "give a .json name")
    check_output(cfg.output)


def canonical_agents(cfg: EvalConfig) -> EvalConfig:
    """``cfg`` with its agent and references spelt as the registry reads them (``OpenAI:m`` and `` openai:m`` are
    ``openai:m``), so every lookup by kind (its settings, batch size, weights, resume) finds what the agent is, and
    the results and their hash name it one way."""
    def spelt(spec: str) -> str:
        kind, arg = split_agent_spec(spec)
        return f"{kind}:{arg}" if arg else kind

    return replace(cfg, agent=spelt(cfg.agent), references=[spelt(r) for r in cfg.references])


def agent_options(cfg: EvalConfig, spec: str) -> Any:
    kind = split_agent_spec(spec)[0]
    if kind in ("openai", "azure"):
        return cfg.llm
    return cfg.model if kind == "model" else cfg.teacher


def make_agents(cfg: EvalConfig) -> dict[str, Any]:
    """The agent and its references, built with their settings (a bad setting or a missing model path
    fails here, before anything is played or written)."""
    names = [cfg.agent] + [r for r in cfg.references if r != cfg.agent]
    return {name: make_agent(name, agent_options(cfg, name)) for name in names}


def _scores(records: list[EpisodeRecord], key: str) -> np.ndarray:
    return np.array([np.nan if r.score[key] is None else r.score[key] for r in records], dtype=np.float64)


def prior_on_stated(records: list[EpisodeRecord]) -> float:
    """The constant prior guess's MAE on the episodes whose belief MAE is reported (those that stated a last
    belief), so the two compare the same people; on all episodes when none stated one."""
    return round(prior_mae_beside(_scores(records, "belief_mae_prior"), ~np.isnan(_scores(records, "belief_mae"))), 6)


def mean_belief_mae_by_step(records: list[EpisodeRecord], truth: np.ndarray) -> list[float | None]:
    """Mean MAE of the belief stated at each step (None where no episode stated one): does it sharpen?"""
    errors = np.stack([belief_mae_by_step([(s.t, s.belief) for s in r.steps], target, EPISODE_STEPS)
                       for r, target in zip(records, truth, strict=True)])
    stated = ~np.isnan(errors)
    sums = np.where(stated, errors, 0.0).sum(axis=0)
    return [round(float(s / n), 6) if n else None for s, n in zip(sums, stated.sum(axis=0))]


def cut_reply_rate(records: list[EpisodeRecord]) -> float | None:
    """The share of replies that stopped at the token cap (``model.max_new_tokens``, an API's ``max_tokens``): a
    parse failure among them may only need a higher cap. None for an agent that writes no replies (a scripted one)."""
    if not any("cut_replies" in r.usage for r in records):
        return None
    replies = sum(int(r.usage.get("requests", len(r.steps))) for r in records)  # an API step may have asked twice
    return round(sum(int(r.usage.get("cut_replies", 0)) for r in records) / max(replies, 1), 6)


def replies_usage(records: list[EpisodeRecord]) -> dict[str, Any] | None:
    """The weeks' usage summed (:func:`rhythm.agents.episodes.episode_usage`), for an agent that writes replies (a
    model's or an API's); None for a scripted one. The weeks' wall time is left out: results are the same however
    fast, or in how many sittings (``--resume``), they were played."""
    if not any(r.usage.get("prompt_tokens") or r.usage.get("requests") for r in records):
        return None
    return {k: v for k, v in episode_usage([r.usage for r in records]).items() if k != "seconds"}


def summarize_condition(
    condition: str,
    records: list[EpisodeRecord],
    references: dict[str, list[EpisodeRecord]],
    grader: str = "v3",
) -> dict[str, Any]:
    """The report of one condition (SPEC section 6), from the agent's and references' records; win rates and the
    normalised score on the ``grader``'s final score."""
    headline = "final_score" if grader == "v3" else f"final_score_{grader}"
    seeds = [r.seed for r in records]
    truth = true_belief(condition, records[0].split, seeds)
    beliefs = [r.steps[-1].belief for r in records]
    stated = [b is not None for b in beliefs]
    by_dim = None
    if any(stated):
        err = np.array([np.abs(np.array(b) - t) for b, t in zip(beliefs, truth) if b is not None])
        by_dim = {d: round(float(v), 6) for d, v in zip(BELIEF_DIMS, err.mean(axis=0))}
    steps = [s for r in records for s in r.steps]
    counts = Counter(s.action for s in steps)
    final = _scores(records, headline)
    out: dict[str, Any] = {
        "episodes": len(records),
        "split": records[0].split,
        "seeds": format_seeds(seeds),
        "final_score": mean_ci(_scores(records, "final_score")),
        "final_score_v2": mean_ci(_scores(records, "final_score_v2")),
        "behaviour_score": mean_ci(_scores(records, "behaviour_score")),
        "belief_mae": mean_ci(_scores(records, "belief_mae")),
        "belief_mae_by_dim": by_dim,
        "belief_mae_prior": prior_on_stated(records),
        "belief_mae_by_step": mean_belief_mae_by_step(records, truth),
        "belief_stated_rate": round(sum(stated) / len(records), 6),
        "crashes": round(float(_scores(records, "crashes").mean()), 6),
        "win_rate_vs": {},
        "normalized_score": None,
        "parse_failure_rate": round(sum(not s.parse_ok for s in steps) / len(steps), 6),
        "cut_reply_rate": cut_reply_rate(records),
        "usage": replies_usage(records),
        "action_counts": {a: counts.get(a, 0) for a in ACTIONS},
        "references": {},
    }
    for name, recs in references.items():
        if [r.seed for r in recs] != seeds:
            raise RuntimeError(f"reference {name} played other seeds")
        ref_final = _scores(recs, headline)
        out["references"][name] = {
            "final_score": round(float(_scores(recs, "final_score").mean()), 6),
            "final_score_v2": round(float(_scores(recs, "final_score_v2").mean()), 6),
            "behaviour_score": round(float(_scores(recs, "behaviour_score").mean()), 6),
        }
        if name in WIN_RATE_BASELINES:
            out["win_rate_vs"][name] = paired_win_rate(final, ref_final)
    refs = out["references"]
    if "random" in refs and "oracle" in refs:
        out["normalized_score"] = normalized_score(
            float(final.mean()), refs["random"][headline], refs["oracle"][headline]
        )
    return out


PlayedCache = dict[tuple[str, ...], list[EpisodeRecord]]
"""Records of scripted agents already played, keyed by :func:`played_key`: see :func:`evaluate`."""


@contextlib.contextmanager
def closing_agents(agents: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``agents``, each closed at the end that has a ``close`` (an API agent's client, event loop and thread), also when
    the evaluation fails: a notebook or a script that evaluates again keeps no connection or thread of the last one."""
    try:
        yield agents
    finally:
        for agent in agents.values():
            close = getattr(agent, "close", None)
            if callable(close):
                close()


def played_key(cfg: EvalConfig, name: str, condition: str, seeds: list[int]) -> tuple[str, ...] | None:
    """The cache key of one scripted agent's episodes, or None for agents that are not replayable
    from their name and settings alone (``model:`` weights change on disk, LLM replies vary)."""
    if name.partition(":")[1]:
        return None
    return (name, config_hash(agent_options(cfg, name)), condition, cfg.split, format_seeds(seeds))


LLM_BATCH_WAVES = 4
"""``openai:`` / ``azure:`` agents play a condition in lockstep batches of this many times ``llm.concurrency``
weeks, each written as it finishes (a killed run loses one batch); their replies do not depend on the batch."""


SCRIPTED_BATCH = 256
"""Weeks a scripted agent (bayes, heuristic, a plugin...) plays in lockstep: its weeks do not depend on the batch, and
a bounded one keeps memory flat and writes the partial file as it goes (a killed run keeps what it played)."""


def play_batch_size(cfg: EvalConfig, name: str) -> int:
    """Weeks one agent plays in lockstep: ``model.batch_size`` for ``model:`` agents, a few waves of requests for
    LLM agents, :data:`SCRIPTED_BATCH` for the scripted ones."""
    kind = name.partition(":")[0]
    if kind == "model":
        return cfg.model.batch_size
    return cfg.llm.concurrency * LLM_BATCH_WAVES if kind in ("openai", "azure") else SCRIPTED_BATCH


def model_weights(cfg: EvalConfig, names: list[str]) -> dict[str, str | None]:
    """The weights digest (:func:`rhythm.model.load.weights_digest`) of each ``model:`` agent among ``names``; a local
    LoRA adapter's is ``ADAPTER+BASE``, its base's digest (or, from the Hub, its name) after it, so an adapter on a
    changed base never passes for the old one."""
    out: dict[str, str | None] = {}
    for name in names:
        if name.startswith("model:"):
            path = resolve_model(name.partition(":")[2])
            digest = weights_digest(path)
            adapter = adapter_config(path) if digest is not None else None
            if adapter is not None:
                base = resolve_base(cfg.model.base_model or adapter.get("base_model_name_or_path") or "")
                digest = f"{digest}+{weights_digest(base) or base}"
            out[name] = digest
    return out


def whole_batches(done: dict[tuple[str, str, int], EpisodeRecord], condition: str, split: str, seeds: list[int],
                  size: int) -> dict[tuple[str, str, int], EpisodeRecord]:
    """The weeks of ``done`` in ``condition`` whose whole batch (``seeds`` in order, ``size`` a batch) was played: a
    run killed while writing a batch plays it again whole, so a sampled reply, drawn for the weeks that share its
    batch, comes out as an uninterrupted run's."""
    keys = [(condition, split, s) for s in seeds]
    batches = [keys[i : i + size] for i in range(0, len(keys), size)]
    return {key: done[key] for batch in batches if all(k in done for k in batch) for key in batch}


def eval_hash(cfg: EvalConfig, weights: dict[str, str | None]) -> str:
    """The ``config_hash`` an eval stamps on its weeks: its settings less :data:`HOW_NOT_WHAT`, and the weights of its
    ``model:`` agents, so weeks of a retrained model never pass for the old one's (``--resume`` checks it)."""
    chash = config_hash(cfg, ignore=HOW_NOT_WHAT)
    return chash if not weights else config_hash({"config": chash, "weights": weights})


def evaluate(
    cfg: EvalConfig,
    *,
    progress_factory: Callable[[str, int], ProgressFn] | None = None,
    on_records: Callable[[str, str, list[EpisodeRecord]], None] | None = None,
    played_cache: PlayedCache | None = None,
    agents: dict[str, Any] | None = None,
    done: dict[tuple[str, str, int], EpisodeRecord] | None = None,
    weights: dict[str, str | None] | None = None,
) -> EvalResults:
    """Play the agent and its references on every requested condition; returns the results.

    ``progress_factory(label, total_steps)`` gives a progress callback per (agent, condition);
    ``on_records(agent, condition, records)`` sees every batch of records as it is played.
    ``played_cache``, shared by several evaluations in one process (the quickstart evaluates three
    agents beside the same references), keeps the episodes of the scripted agents: they are
    deterministic in their settings and seeds, so each is played once. ``agents``: those of
    :func:`make_agents`, when already built. ``done``: the agent's weeks already played under this
    config (``rhythm eval --resume``), keyed by (condition, split, seed); only the others are played.
    ``weights``: those of :func:`model_weights`, when already read.
    """
    validate(cfg)
    cfg = canonical_agents(cfg)
    if agents is None:
        with closing_agents(make_agents(cfg)) as built:
            return evaluate(cfg, progress_factory=progress_factory, on_records=on_records, played_cache=played_cache,
                            agents=built, done=done, weights=weights)
    names = list(agents)
    weights = weights if weights is not None else model_weights(cfg, names)
    chash = eval_hash(cfg, weights)
    results: dict[str, Any] = {
        "agent": cfg.agent,
        "display_name": display_name(cfg.agent),
        "grader": cfg.grader,
        "env_version": ENV_VERSION,
        "protocol": PROTOCOL_VERSION,
        "split": cfg.split,
        "config": config_dict(recorded_config(cfg)),
        "config_hash": chash,
        "versions": versions(),
        "conditions": {},
    }
    if weights:
        results["weights"] = weights
    runtime = agent_runtime(agents)
    if runtime:
        results["runtime"] = runtime
    endpoints = agent_endpoints(agents)
    if endpoints:
        results["endpoints"] = endpoints
    for condition in conditions_of(cfg.condition):
        seeds = eval_seeds(cfg, condition)
        specs = [EpisodeSpec(condition, cfg.split, s) for s in seeds]
        order = {seed: i for i, seed in enumerate(seeds)}
        played: dict[str, list[EpisodeRecord]] = {}
        for name in names:
            key = played_key(cfg, name, condition, seeds) if played_cache is not None else None
            if key is not None and key in played_cache:  # the same episodes, stamped with this evaluation's config
                played[name] = [replace(r, config_hash=chash) for r in played_cache[key]]
                if on_records is not None:
                    on_records(name, condition, played[name])
            else:
                kept = {s.seed: done[s.condition, s.split, s.seed] for s in specs
                        if name == cfg.agent and done and (s.condition, s.split, s.seed) in done}
                todo = [s for s in specs if s.seed not in kept]
                progress = None
                if progress_factory is not None and todo:
                    progress = progress_factory(f"{name} {condition}", len(todo) * EPISODE_STEPS)
                stream = None if on_records is None else functools.partial(on_records, name, condition)
                new = play(agents[name], todo, batch_size=play_batch_size(cfg, name), config_hash=chash,
                           model=name.partition(":")[2] or None, progress=progress, on_batch=stream)
                played[name] = sorted([*kept.values(), *new], key=lambda r: order[r.seed]) if kept else new
                if key is not None:
                    played_cache[key] = played[name]
        refs = {r: played[r] for r in cfg.references}
        results["conditions"][condition] = summarize_condition(condition, played[cfg.agent], refs, cfg.grader)
    return EvalResults.model_validate(results)


def recorded_config(cfg: EvalConfig) -> EvalConfig:
    """``cfg`` as the results and the episodes' sidecar record it: an API URL without its password (they travel with
    the weeks, to a dataset repo too)."""
    return replace(cfg, llm=redacted(cfg.llm))


def agent_runtime(agents: dict[str, Any]) -> dict[str, dict[str, str]]:
    """What each model agent's ``auto`` device and dtype became on this machine (bf16 and fp32 replies differ)."""
    return {name: {"device": agent.source.device, "dtype": agent.source.dtype}
            for name, agent in agents.items() if getattr(agent, "source", None) is not None}


def agent_endpoints(agents: dict[str, Any]) -> dict[str, str]:
    """The server each API agent asked (credentials masked): ``llm.base_url``, or ``OPENAI_BASE_URL`` when the config
    names none, so the record never reads as the default endpoint when another one answered."""
    return {name: agent.target.url for name, agent in agents.items() if getattr(agent, "target", None) is not None}


def run_eval(
    cfg: EvalConfig,
    *,
    progress_factory: Callable[[str, int], ProgressFn] | None = None,
    wait_lock: bool = False,
    resume: bool = False,
    start_over: bool = False,
    say: Callable[[str], None] | None = None,
    played_cache: PlayedCache | None = None,
) -> tuple[EvalResults, Path, Path]:
    """``rhythm eval``: evaluate, stream the agent's episodes to the JSONL, write the JSON.

    ``played_cache``: see :func:`evaluate`. The agents are built first, so bad settings stop the run
    before it touches a file, and the agent's episodes stream to ``<episodes>.partial`` batch by batch, which
    replaces the episodes file only once the results are written, its effective config and weights
    (``<partial>.config.yaml``) becoming ``<episodes>.config.yaml``: a run that fails leaves the last eval's
    files, and its partial. ``resume`` goes on from that partial (:func:`resumed_weeks`): its weeks are kept and
    only the others played, so the results equal an uninterrupted run's; without it, a partial that holds weeks is
    refused (``start_over``: deleted, as the quickstart's stages do), so a forgotten ``--resume`` loses nothing.
    Both files are written under the episodes file's lock (:mod:`rhythm.locking`): a second eval on the same output
    stops before it touches either (or waits, with ``wait_lock``).
    """
    validate(cfg)
    cfg = canonical_agents(cfg)
    with closing_agents(make_agents(cfg)) as agents:
        return _run_eval(cfg, agents, progress_factory, wait_lock, resume, start_over, say or (lambda msg: None),
                         played_cache)


def _run_eval(cfg: EvalConfig, agents: dict[str, Any], progress_factory: Callable[[str, int], ProgressFn] | None,
              wait_lock: bool, resume: bool, start_over: bool, say: Callable[[str], None],
              played_cache: PlayedCache | None) -> tuple[EvalResults, Path, Path]:
    weights = model_weights(cfg, list(agents))  # read once: the hash a resume checks, and the results' record
    ep_path = episodes_path(cfg.output)
    with output_lock(ep_path, wait=wait_lock, say=say):
        partial = ep_path.with_name(ep_path.name + ".partial")
        runtime, endpoints = agent_runtime(agents), agent_endpoints(agents)
        done = resumed_weeks(cfg, partial, weights, runtime) if resume else {}
        if resume:
            say(f"resuming from {partial}: {len(done)} of the agent's weeks kept" if done else
                f"nothing to resume in {partial}; playing every week")
        else:
            held = sum(1 for line in partial.read_bytes().splitlines() if line.strip()) if partial.exists() else 0
            if held and not start_over:
                raise RhythmError(f"{partial} holds {held} weeks of an eval that did not finish; pass --resume to keep "
                                  "them and play the rest, or delete it to start over")
            partial.unlink(missing_ok=True)
        write_config(recorded_config(cfg), sidecar_path(partial),
                     made_by(config_hash=eval_hash(cfg, weights), weights=weights, runtime=runtime,
                             **({"endpoints": endpoints} if endpoints else {})))
        with JsonlWriter(partial, resume=resume) as writer:  # resume: a torn last line is cut first

            def keep(name: str, condition: str, records: list[EpisodeRecord]) -> None:
                if name == cfg.agent:
                    for r in records:
                        writer.write(r)

            results = evaluate(cfg, progress_factory=progress_factory, on_records=keep, played_cache=played_cache,
                               agents=agents, done=done, weights=weights)
        if resume:  # the kept weeks first, then the new ones: written again in the order a fresh run writes them
            _write_in_order(cfg, partial)
        saved = results.save(cfg.output)
        os.replace(sidecar_path(partial), sidecar_path(ep_path))
        os.replace(partial, ep_path)
        return results, saved, ep_path


def resumed_weeks(cfg: EvalConfig, partial: Path, weights: dict[str, str | None],
                  runtime: dict[str, dict[str, str]] | None = None) -> dict[tuple[str, str, int], EpisodeRecord]:
    """The agent's weeks a killed ``rhythm eval`` left in ``partial`` that this run would play, keyed by
    (condition, split, seed), the last of each (a batch a kill cut is played again, whole: :func:`whole_batches`,
    for ``model:`` agents, whose sampled replies depend on their batch). Weeks played under other settings or ``weights`` (another
    ``config_hash``: :func:`eval_hash`; the refusal names what differs from the partial's config sidecar), another
    env or another text protocol are refused, not mixed in, and so are a model's weeks played on another device or
    dtype (``runtime``: :func:`agent_runtime`, against the partial's sidecar); blank lines are skipped and a torn last
    line is left out (the writer cuts it)."""
    if not partial.exists():
        return {}
    chash = eval_hash(cfg, weights)
    wanted = set(eval_weeks(cfg))
    done: dict[tuple[str, str, int], EpisodeRecord] = {}
    start_over = f"delete {partial} to start over"
    for lineno, obj in iter_jsonl(partial, skip_torn_last=True):
        where = f"{partial}:{lineno}"
        check_episode(obj, where)
        check_resumable(obj, where, start_over)
        check_whole_week(obj, where, start_over)
        if obj.get("config_hash") != chash:
            differs = change_since(sidecar_path(partial), [obj.get("config_hash")], {**config_dict(cfg), "weights": weights},
                                   HOW_NOT_WHAT, provenance_keys=("weights",))
            raise RhythmError(f"{where}: a week played with other settings or weights (config_hash "
                              f"{obj.get('config_hash')}; this eval's is {chash}{': ' + differs if differs else ''}); "
                              f"--resume would mix them: rerun with the settings it was started with, or {start_over}")
        if episode_key(obj) in wanted:
            done[episode_key(obj)] = EpisodeRecord.from_dict(obj)
    recorded = (read_recorded(sidecar_path(partial)) or ({}, {}))[1].get("runtime")
    if done and runtime is not None and recorded and recorded != runtime:
        raise RhythmError(f"{partial}: its weeks were played as {_runtime_text(recorded)} and this machine plays "
                          f"{_runtime_text(runtime)} (their replies differ); --resume would mix them: resume where it "
                          f"ran, set model.device and model.dtype to what it used, or {start_over}")
    if cfg.agent.startswith("model:"):  # a batch the kill cut is played again whole
        done = {key: r for condition in conditions_of(cfg.condition)
                for key, r in whole_batches(done, condition, cfg.split, eval_seeds(cfg, condition), cfg.model.batch_size).items()}
    return done


def check_whole_week(record: dict[str, Any], where: str, instead: str) -> None:
    """A week an eval wrote is whole and graded: every step, and each figure the results average (a partial cut
    short or edited by hand was summed as it stood, a 5-step week with the rest, or crashed on a missing score)."""
    score = record.get("score")
    missing = [k for k in (*SCORE_KEYS, "parse_failures") if not isinstance(score, dict) or k not in score]
    if len(record["steps"]) != EPISODE_STEPS or missing:
        what = (f"{len(record['steps'])} steps of {EPISODE_STEPS}" if len(record["steps"]) != EPISODE_STEPS
                else f"its score lacks {', '.join(missing)}")
        raise RhythmError(f"{where}: not a whole graded week ({what}); --resume keeps only those: {instead}")


def _runtime_text(runtime: dict[str, dict[str, str]]) -> str:
    return ", ".join(f"{name} on {r.get('device')} in {r.get('dtype')}" for name, r in runtime.items())


def _write_in_order(cfg: EvalConfig, partial: Path) -> None:
    """Rewrite ``partial`` with each of this eval's weeks once (the last written: a batch the kill cut was played
    again), in condition, then seed order: the file an uninterrupted run writes. Blank lines and weeks this eval does
    not play are left out."""
    rank = {key: i for i, key in enumerate(eval_weeks(cfg))}
    lines: dict[int, bytes] = {}
    for line in partial.read_bytes().splitlines():
        if line.strip():
            at = rank.get(episode_key(orjson.loads(line)))
            if at is not None:
                lines[at] = line + b"\n"
    tmp = partial.with_name(partial.name + ".tmp")
    tmp.write_bytes(b"".join(lines[k] for k in sorted(lines)))
    os.replace(tmp, partial)
