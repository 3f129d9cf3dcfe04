"""The whole recipe offline on a CPU, in one run directory: ``rhythm quickstart [--out DIR]``.

Stages, each a call of the same library function its own command uses:

1. ``generate``: bayes teacher episodes on the train split (in-dist).
2. ``reeval``: replay and regrade them beside random and heuristic.
3. ``sft-openings`` then ``sft``: the tiny offline student distilled with TRL, every weight, first on
   the openings of the teacher's weeks (``configs/sft-tiny-openings.yaml``), then on whole weeks
   (``configs/sft-tiny-weeks.yaml``).
4. ``grpo``: GRPO refinement of the SFT model from the environment (``configs/grpo-tiny-branch.yaml``): on
   the student's own weeks, each sampled reply rewarded with the final score of the week it leads to, the
   states the batch does not score held by a KL anchor to the starting policy.
   With a ``dagger:`` section (``configs/quickstart-few.yaml``), then ``dagger-play`` and ``dagger``: the refined
   student plays train-split people, the bayes filter relabels its weeks' beliefs, and ``rhythm sft`` learns them
   beside the teacher's weeks (``configs/sft-tiny-dagger.yaml``; DAgger for the belief).
5. ``eval``: the SFT and SFT+GRPO students (and SFT+GRPO+DAgger) beside random, heuristic, bayes and oracle on
   in-dist, ood and discrete (eval split, the same seeds for every agent).
6. ``plot``: ``final_scores.png``, ``belief_accuracy.png``, ``training_loss.png``.
7. A summary table (``summary.md``, ``summary.json``) that compares the student with the baselines
   whatever the result.

Every stage records a stamp: the package version, the env version, the tiny student's cache key (a hash of
what the built-in agents write, the bayes teacher's sentences included, and of how the student is built), a hash
of its resolved config and of the files it reads. A second run with the same stamp reuses a stage's outputs; a stage whose stamp
differs runs again and says why (``[generate] env version changed (rhythm-v1 -> rhythm-v2): rerunning``). One quickstart at a time
per run directory (:mod:`rhythm.locking`): a second one on the same ``--out`` stops at once, or waits.
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rhythm.agents.filtering import filtered_weeks
from rhythm.agents.registry import check_agent_spec
from rhythm.agents.tiny import tiny_student_name
from rhythm.config import NULL, Positive, Unit, config_dict, flat_settings, load_config, settings_change, write_config
from rhythm.env.constants import CONDITIONS, ENV_VERSION
from rhythm.errors import RhythmError
from rhythm.eval.evaluate import EvalConfig, PlayedCache, run_eval
from rhythm.eval.paired import final_scores, paired_differences
from rhythm.eval.plots import PlotConfig, make_plots
from rhythm.eval.reeval import ReevalConfig, reeval
from rhythm.eval.results import EvalResults, episodes_path
from rhythm.eval.stats import ci_text
from rhythm.locking import output_lock
from rhythm.model.load import ModelOptions, check_model_exists
from rhythm.provenance import file_digest, now_iso, package_version, versions
from rhythm.records import check_output, read_episodes, write_atomic, write_episodes
from rhythm.seeds import parse_seeds
from rhythm.teacher.generate import GenerateConfig, generate
from rhythm.teacher.generate import validate as validate_generate
from rhythm.train.grpo import GRPORunConfig, check_given_sections, run_grpo
from rhythm.train.grpo import validate as validate_grpo
from rhythm.train.run_folder import data_paths, empty_folder, latest_checkpoint, remove
from rhythm.train.sft import SFTRunConfig, run_sft
from rhythm.train.sft import validate as validate_sft

STAMP = ".rhythm_stage.json"
PENDING = ".rhythm_stage.pending.json"
"""Written before a stage runs, removed when its stamp is: a rerun with the same stamp goes on from what it wrote."""
TUNING_SEED_OFFSET = 100_000
"""With ``eval_split: train``, students are evaluated on train-split seeds from here on (never teacher data)."""


@dataclass(frozen=True)
class DaggerStage:
    """The refine stage after GRPO (``dagger:``): the refined student plays train-split people greedily, the bayes
    filter relabels the beliefs of its weeks (:func:`rhythm.agents.filtering.filtered_weeks`, as ``rhythm
    relabel``), and ``rhythm sft`` learns those weeks beside the teacher's. DAgger for the belief, from the
    environment alone (docs/grpo.md)."""

    config: str | None = None
    """SFT settings of the stage (configs/sft-tiny-dagger.yaml; data, model and output_dir are set by the
    quickstart); null: no stage."""
    seeds: str = "5512-9607"
    """Train-split in-dist people the refined student plays (no teacher week and no GRPO rollout played them)."""
    copies: Positive = 1
    """Times the relabelled weeks enter the data, beside the teacher's weeks once."""
    restore_below: Unit | None = None
    """Where a meter (not progress) is below this and the restore rule names an action that keeps it off the crash
    line, the label is that action instead of the one played (:func:`rhythm.agents.restore.restore_labels`; the
    last step keeps its own); null: the actions as played."""
    sft: dict[str, Any] = field(default_factory=dict)
    """Overrides of the stage's SFT config."""


@dataclass(frozen=True)
class QuickstartConfig:
    """``rhythm quickstart``: sizes of the offline run (defaults fit 2 CPU cores in minutes)."""

    out: str = "runs/quickstart"
    """Run directory: data, adapters, eval results, plots, resolved configs, summary."""
    seeds: str = "0-4799"
    """Train-split seeds the bayes teacher plays (in-dist): 4,800 weeks."""
    concurrency: int = 2
    """Worker processes for the teacher."""
    openings_config: str | None = "configs/sft-tiny-openings.yaml"
    """SFT stage 1, on the openings of the teacher's weeks (its data and output_dir are set by the
    quickstart); null: no stage 1, the SFT stage starts from its config's model."""
    openings: dict[str, Any] = field(default_factory=dict)
    """Overrides of stage 1's config (configs/sft-tiny-openings.yaml: 800 steps of 27 eight-turn openings)."""
    sft_config: str = "configs/sft-tiny-weeks.yaml"
    """SFT settings, stage 2 on whole weeks (data, output_dir and, after stage 1, the model are set by
    the quickstart). Without stage 1 (openings_config null), name a config that starts from scratch, e.g.
    configs/sft-tiny.yaml."""
    grpo_config: str = "configs/grpo-tiny-branch.yaml"
    """GRPO settings (the model and output_dir are set by the quickstart; the teacher data too, unless the
    config names none). Branch mode: the student's own weeks, each sampled reply rewarded with the final
    score of the week it leads to (docs/grpo.md)."""
    sft: dict[str, Any] = field(default_factory=dict)
    """Overrides of stage 2's config (configs/sft-tiny-weeks.yaml states the recipe: 120 steps of 8 whole weeks
    at lr 1e-3 decaying to 0, continuing stage 1's model)."""
    grpo: dict[str, Any] = field(default_factory=dict)
    """Overrides of the GRPO config (configs/grpo-tiny-branch.yaml states the recipe)."""
    dagger: DaggerStage = field(default_factory=DaggerStage)
    """The refine stage after GRPO: DAgger for the belief on the refined student's own weeks (off by default;
    configs/quickstart-few.yaml sets it)."""
    eval_episodes: dict[str, int] = field(default_factory=lambda: {"in-dist": 100, "ood": 50, "discrete": 15})
    """Eval episodes per condition (eval split, seeds 0..N-1): rhythm eval's defaults."""
    references: list[str] = field(default_factory=lambda: ["random", "heuristic", "bayes", "oracle"])
    """Agents evaluated on the same seeds as the student."""
    max_new_tokens: Positive = 16
    """Reply budget of the student per step (the tiny student writes only BELIEF and ACTION lines, ~11 tokens)."""
    batch_size: Positive = 64
    """Episodes per lockstep batch (one kept KV cache each)."""
    eval_split: str = "eval"
    """eval: the final table (seeds 0..N-1 of the eval split); train: for choosing settings, train-split
    seeds from 100000 on, which no teacher data of the quickstart uses."""


def stage_digest(path: str | Path) -> str:
    """:func:`rhythm.provenance.file_digest` of a stage's input: a file, or a folder less its stage stamp."""
    return file_digest(path, keep=lambda rel: rel.name != STAMP)


def _stamp(config: Any, inputs: list[str | Path], root: Path) -> dict[str, Any]:
    """What a stage's outputs are made from: code and env versions, its resolved config, the files it reads. Paths
    under ``root`` (the quickstart's folder) are recorded relative to it, so a moved folder is reused."""
    def name(path: str | Path) -> str:
        return Path(path).relative_to(root).as_posix() if Path(path).is_relative_to(root) else str(path)

    settings = _under_out(config_dict(config), str(root))
    config_text = orjson.dumps(settings, option=orjson.OPT_SORT_KEYS).decode()
    return {"package_version": package_version(), "env_version": ENV_VERSION, "tiny_student": tiny_student_name(),
            "config": hashlib.sha256(config_text.encode()).hexdigest()[:16],
            "settings": flat_settings(settings),
            "inputs": {name(i): stage_digest(i) for i in inputs}}


def _under_out(value: Any, root: str) -> Any:
    """``value`` (a config's settings) with each path under the folder ``root`` written as ``<out>/...``: whole
    values, the items of a comma-separated list and an agent's path (``model:<out>/sft``), never text that merely
    contains the folder's name (``--out .``, ``--out 2``, ``--out data``)."""
    if isinstance(value, dict):
        return {k: _under_out(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_under_out(v, root) for v in value]
    if isinstance(value, str):
        base = root.rstrip("/")

        def under(item: str) -> str:  # a path, or an agent's (model:PATH)
            kind, colon, rest = item.partition(":")
            prefix, path = (kind + colon, rest) if colon and kind.isidentifier() else ("", item)
            return prefix + "<out>" + path[len(base):] if path == base or path.startswith(base + "/") else item

        return ",".join(under(item) for item in value.split(","))
    return value


def _config_change(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The settings that differ between two stamps' ``settings`` (a stamp without them says only that)."""
    if "settings" not in old:
        return "config changed"
    return f"config changed ({settings_change(old['settings'], new['settings'])})"


def _why_stale(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why a stage recorded as ``old`` must run again for ``new``, or None when nothing changed."""
    for key, what in (("package_version", "package version"), ("env_version", "env version"),
                      ("tiny_student", "tiny student (what the agents write, or how it is built)")):
        if old.get(key) != new[key]:
            return f"{what} changed ({old.get(key)} -> {new[key]})"
    if old.get("config") != new["config"]:
        return _config_change(old, new)
    before, now = old.get("inputs", {}), new["inputs"]
    changed = sorted(name for name in {*before, *now} if before.get(name) != now.get(name))
    return f"input changed ({', '.join(changed)})" if changed else None


@dataclass
class StageResult:
    name: str
    reused: bool
    seconds: float
    outputs: dict[str, str]
    info: dict[str, Any] = field(default_factory=dict)


def run_stage(
    name: str,
    stamp_dir: Path,
    config: Any,
    inputs: list[str | Path],
    outputs: dict[str, Path],
    fn: Callable[[], dict[str, Any] | None],
    say: Callable[[str], None],
    root: Path,
    clears: tuple[Path, ...] = (),
) -> StageResult:
    """Run ``fn`` unless the stamp says the same code, env, config and inputs already produced ``outputs``;
    ``root``: the quickstart's folder, which paths in the stamp are relative to. An output or a cleared path that no
    stage of a quickstart made (no stamp) is refused, never written over. ``clears``: what ``fn`` writes, removed
    before it runs, except after a run of the same stage with the same stamp was interrupted (its pending stamp says
    so): ``fn`` then goes on from what that one wrote."""
    new = _stamp(config, inputs, root)
    stamp, pending = stamp_dir / STAMP, stamp_dir / PENDING
    made_before = orjson.loads(pending.read_bytes()).get("made_from") if pending.exists() else None
    interrupted = made_before == new
    why = "interrupted earlier, inputs unchanged: going on from what it wrote" if interrupted else "running"
    if stamp.exists():
        old = orjson.loads(stamp.read_bytes())
        missing = [str(p) for p in outputs.values() if not p.exists()]
        if missing:
            stale = f"output missing ({', '.join(missing)})"
        else:
            stale = _why_stale(old["made_from"], new) if "made_from" in old else "stamp of an older rhythm"
        if stale is None:
            say(f"[{name}] inputs unchanged: reusing {', '.join(str(p) for p in outputs.values())}")
            info = {**old.get("info", {}), "made_in_s": old.get("seconds"), "made_at": old.get("created_at")}
            return StageResult(name, True, 0.0, {k: str(v) for k, v in outputs.items()}, info)
        why = f"{stale}: rerunning"
    if not interrupted:
        if not (stamp.exists() or pending.exists()):  # what it would write over, or clear, is someone else's
            found = [path for path in (*clears, *outputs.values()) if path.exists() or path.is_symlink()]
            if found:
                raise RhythmError(f"{found[0]} exists and no quickstart stage made it; move it away or give another --out")
        for path in (p for p in clears if p.exists() or p.is_symlink()):
            remove(path)
    say(f"[{name}] {why}")
    stamp.unlink(missing_ok=True)
    stamp_dir.mkdir(parents=True, exist_ok=True)
    pending.write_bytes(orjson.dumps({"stage": name, "made_from": new, "created_at": now_iso()}))
    started = time.perf_counter()
    info = fn() or {}
    seconds = round(time.perf_counter() - started, 1)
    stamp.write_bytes(orjson.dumps({"stage": name, "made_from": new, "created_at": now_iso(), "seconds": seconds, "info": info}))
    pending.unlink()
    say(f"[{name}] done in {seconds:.0f} s")
    return StageResult(name, False, seconds, {k: str(v) for k, v in outputs.items()}, info)


PLOTS = ("final_scores", "belief_accuracy", "training_loss")
"""The figures the plot stage draws (``plots/NAME.png``); a stage whose figure is gone draws them again."""


def weights_file(run_dir: Path, adapter: bool) -> Path:
    """The weights a training stage leaves in ``run_dir``: a LoRA adapter's, or a model's (its shards' index where
    it was saved in shards). A stage whose weights are gone trains again, not reused for the summary beside them."""
    if adapter:
        return run_dir / "adapter_model.safetensors"
    index = run_dir / "model.safetensors.index.json"
    return index if index.exists() else run_dir / "model.safetensors"


def train_or_keep(run_dir: Path, cfg: Any, stage: str, run: Callable[..., dict[str, Any]], say: Callable[[str], None],
                  quiet: bool) -> dict[str, Any]:
    """A training stage's ``run`` (``run_sft``, ``run_grpo``) from where an interrupted run of it stopped
    (:func:`going_on`); a run that finished, its ``STAGE_summary.json`` written, before the stage's stamp was is kept
    (resumed, it would be refused as finished)."""
    summary = run_dir / f"{stage}_summary.json"
    with contextlib.suppress(FileNotFoundError, orjson.JSONDecodeError):  # a summary cut short: the run goes on
        kept = orjson.loads(summary.read_bytes())
        say(f"{run_dir} finished before the stage was stamped: keeping it")
        return kept
    summary.unlink(missing_ok=True)
    return run(going_on(run_dir, cfg, say), quiet=quiet, log=say)


def going_on(run_dir: Path, cfg: Any, say: Callable[[str], None]) -> Any:
    """A training stage's config, resumed from the newest checkpoint an interrupted run of it left in ``run_dir``
    (the same weights as an uninterrupted run: tests/train); without one, that run's folder is started afresh."""
    last = latest_checkpoint(run_dir) if run_dir.is_dir() else None
    if last is not None:
        say(f"resuming from {last}")
        return replace(cfg, resume_from_checkpoint="latest")
    if run_dir.is_dir():  # killed before its first checkpoint: afresh
        empty_folder(run_dir, keep={PENDING})
    return cfg


def _eval_row(results: EvalResults) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for cond, r in results.conditions.items():
        rows[cond] = {
            "final_score": r.final_score.mean,
            "ci95": r.final_score.ci95,
            "final_score_v2": r.final_score_v2.mean,
            "behaviour_score": r.behaviour_score.mean,
            "belief_mae": r.belief_mae.mean,
            "belief_mae_prior": r.belief_mae_prior,
            "parse_failure_rate": r.parse_failure_rate,
            "cut_reply_rate": r.cut_reply_rate,
            "win_rate_vs_heuristic": r.win_rate_vs.get("heuristic"),
            "normalized_score": r.normalized_score,
            "references": {name: ref.model_dump(mode="json", exclude_unset=True) for name, ref in r.references.items()},
        }
    return rows


def summary_table(students: dict[str, dict[str, Any]]) -> str:
    """Markdown: each condition, the students and every reference agent, v3 / v2 / behaviour."""
    lines = [
        "| condition | agent | final v3 [95% CI] | final v2 | behaviour | belief MAE (prior) | parse failures | win vs heuristic |",
        "|---|---|---|---|---|---|---|---|",
    ]
    first = next(iter(students.values()))
    for cond in first:
        for name, rows in students.items():
            r = rows[cond]
            mae = "—" if r["belief_mae"] is None else f"{r['belief_mae']:.3f} ({r['belief_mae_prior']:.3f})"
            win = "—" if r["win_rate_vs_heuristic"] is None else f"{r['win_rate_vs_heuristic']:.2f}"  # no heuristic reference
            lines.append(
                f"| {cond} | **{name}** | {r['final_score']:.3f} {ci_text(r['ci95'])} | "
                f"{r['final_score_v2']:.3f} | {r['behaviour_score']:.3f} | {mae} | {r['parse_failure_rate']:.1%} | {win} |"
            )
        for ref, v in first[cond]["references"].items():
            lines.append(f"| {cond} | {ref} | {v['final_score']:.3f} | {v['final_score_v2']:.3f} | {v['behaviour_score']:.3f} | | | |")
    return "\n".join(lines)


def verdict(students: dict[str, dict[str, Any]]) -> list[str]:
    """Plain sentences comparing each student with the baselines, whatever the result."""
    out = []
    for name, rows in students.items():
        for cond, r in rows.items():
            refs = r["references"]
            beats = [ref for ref in ("random", "heuristic", "bayes") if ref in refs and r["final_score"] > refs[ref]["final_score"]]
            loses = [ref for ref in ("random", "heuristic", "bayes") if ref in refs and ref not in beats]
            out.append(
                f"{name} on {cond}: final v3 {r['final_score']:.3f}; "
                + (f"above {', '.join(beats)}" if beats else "above none of the baselines" if refs else "no baselines evaluated")
                + (f"; below {', '.join(loses)}" if loses else "")
                + f"; parse failures {r['parse_failure_rate']:.1%}"
                + (f", {r['cut_reply_rate']:.1%} of replies cut at max_new_tokens." if r.get("cut_reply_rate") else ".")
            )
    return out


def paired_sentences(minus_sft: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """Each refined student minus the SFT student, per condition, with its 95% CI and whether that CI excludes 0.
    When the GRPO stage gained nowhere (no CI above 0), one more sentence says where that result is explained, so
    a reader of the summary does not take a null stage for a broken one."""
    out = []
    for label, diffs in minus_sft.items():
        for cond, d in diffs.items():
            lo, hi = d["ci95"] or (np.nan, np.nan)
            where = "its CI above 0" if lo > 0 else "its CI below 0" if hi < 0 else "its CI reaches 0" if lo <= 0 <= hi else "one person"
            out.append(f"{label.removeprefix('student ')} minus SFT on {cond} (paired, same seeds): "
                       f"{d['mean']:+.3f} {ci_text(d['ci95'], '+.3f')}; {where}.")
    grpo = minus_sft.get("student SFT+GRPO", {})
    if grpo and not any(d["ci95"] and d["ci95"][0] > 0 for d in grpo.values()):
        beside = "" if len(minus_sft) > 1 else "; configs/quickstart-dagger.yaml adds a refine stage that pays, in ~20 minutes more"
        out.append("The GRPO stage gained nothing beyond its CIs here, as docs/grpo.md measures for the quickstart's "
                   f"student; it says where refinement stands and why{beside}.")
    return out


def quickstart(cfg: QuickstartConfig, *, say: Callable[[str], None] = print, quiet: bool = False,
               wait_lock: bool = False) -> dict[str, Any]:
    """Run (or reuse) every stage under ``cfg.out``, holding the run directory's lock (held by another
    quickstart: :class:`rhythm.locking.OutputLocked` at once, or wait with ``wait_lock``); returns the summary."""
    check_output(cfg.out, folder=True, what="--out")
    check_stages(cfg)
    with output_lock(cfg.out, wait=wait_lock, say=say):  # its SFT and GRPO stages delete stale run folders
        return _quickstart(cfg, say=say, quiet=quiet)


def check_stages(cfg: QuickstartConfig) -> None:
    """Every stage's config and overrides, the references and the eval sizes, checked before the first stage
    runs: a bad key in the GRPO section must not wait for the teacher and SFT stages to finish."""
    if cfg.openings_config is None and cfg.openings:
        raise RhythmError("openings settings without openings_config: no stage 1 runs")
    sections: list[tuple[str, type, str | None, dict[str, Any]]] = [
        ("openings", SFTRunConfig, cfg.openings_config, cfg.openings), ("sft", SFTRunConfig, cfg.sft_config, cfg.sft),
        ("grpo", GRPORunConfig, cfg.grpo_config, cfg.grpo), ("dagger.sft", SFTRunConfig, cfg.dagger.config, cfg.dagger.sft)]
    with tempfile.TemporaryDirectory() as tmp:
        teacher = Path(tmp) / "teacher.jsonl"  # stands in for the teacher weeks, played by the first stage
        teacher.touch()
        for name, cls, path, over in sections:
            if path is None:
                continue
            try:
                stage = load_config(cls, path, over)
                if stage.jobs.flavor:  # the stages run here, one after another
                    raise RhythmError(f"jobs.flavor={stage.jobs.flavor}: the quickstart runs its stages on this machine; "
                                      "submit a stage to Hugging Face Jobs with rhythm sft/grpo --flavor")
                if name == "sft" and not stage.use_peft and cfg.grpo.get("use_peft"):
                    raise RhythmError("grpo.use_peft: the SFT student is full weights, which GRPO refines whole "
                                      "(use_peft in the sft section trains an adapter for GRPO to go on with)")
                # the stage's own checks, on what the quickstart sets: its data, its folder and (GRPO) its start
                stage = replace(stage, output_dir=str(Path(tmp) / name),
                                data=str(teacher) if cls is SFTRunConfig or data_paths(stage) else stage.data)
                if cls is GRPORunConfig:
                    check_given_sections(stage, list(over))  # grpo.episode.* beside a branch stage would do nothing
                    validate_grpo(replace(stage, adapter=None, model_name_or_path=str(Path(tmp) / "sft")))
                else:
                    validate_sft(stage)
                    if name == "sft" and cfg.openings_config is None:  # no stage 1 sets where it starts
                        check_model_exists(stage.model_name_or_path, "model_name_or_path (no openings stage runs first)")
            except RhythmError as err:
                raise RhythmError(f"quickstart {name}: {str(err).removeprefix('command line: ')}") from None
        # the teacher stage's, before it clears the data of an earlier run (a typo in seeds would cost the weeks)
        validate_generate(GenerateConfig(teacher="bayes", seeds=cfg.seeds, split="train", output=str(teacher),
                                         concurrency=cfg.concurrency, resume=True))
    if cfg.dagger.config is not None:
        parse_seeds(cfg.dagger.seeds)
    elif cfg.dagger != DaggerStage():
        raise RhythmError("dagger settings without dagger.config: no DAgger stage runs (name its SFT config, e.g. "
                          "configs/sft-tiny-dagger.yaml)")
    for ref in cfg.references:
        check_agent_spec(ref)
    unknown = [c for c in cfg.eval_episodes if c not in CONDITIONS]
    if unknown or not cfg.eval_episodes or any(n < 1 for n in cfg.eval_episodes.values()):
        raise RhythmError(f"eval_episodes takes a positive count per condition ({', '.join(CONDITIONS)}), got {cfg.eval_episodes}")
    if cfg.eval_split not in ("eval", "train"):
        raise RhythmError(f"eval_split must be eval or train, got {cfg.eval_split!r}")


def _quickstart(cfg: QuickstartConfig, *, say: Callable[[str], None], quiet: bool) -> dict[str, Any]:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    started_at = now_iso()  # quickstart_config.yaml is written with the summary: a failed run leaves the last one's
    stages: list[StageResult] = []

    # 1. teacher data
    data = out / "data" / "teacher.jsonl"
    gen_cfg = GenerateConfig(teacher="bayes", seeds=cfg.seeds, condition="in-dist", split="train",
                             output=str(data), concurrency=cfg.concurrency, resume=True)

    def do_generate() -> dict[str, Any]:
        s = generate(gen_cfg)  # resumes the weeks of an interrupted run of the same stage (any other is cleared)
        scores = [float(r["score"]["final_score"]) for _, r in read_episodes(data)]
        return {"episodes": len(scores), "played": s.episodes, "skipped": s.skipped,
                "mean_final_score": float(np.mean(scores)) if scores else None}

    how = {k: v for k, v in config_dict(gen_cfg).items() if k not in ("concurrency", "chunk", "resume")}  # not what
    stages.append(run_stage("generate", out / "data", how, [], {"data": data}, do_generate, say, out, clears=(data,)))

    # 2. reeval
    reeval_out = out / "data" / "reeval.json"
    re_cfg = ReevalConfig(jsonl=str(data), output=str(reeval_out))

    def do_reeval() -> dict[str, Any]:
        summary = reeval(re_cfg)
        reeval_out.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
        if summary["flagged"]:
            raise RhythmError(f"{len(summary['flagged'])} teacher records do not replay; see {reeval_out}")
        g = summary["groups"][0]
        return {"teacher_final_score": g["final_score"]["mean"], "heuristic_final_score": g["baselines"]["heuristic"]["final_score"]["mean"]}

    stages.append(run_stage("reeval", out / "reeval", re_cfg, [data], {"summary": reeval_out}, do_reeval, say, out))

    # 3. SFT: stage 1 on the weeks' openings (a curriculum), stage 2 on whole weeks
    def sft_stage(name: str, run_dir: Path, run_cfg: SFTRunConfig, inputs: list[Path]) -> None:
        def do_sft() -> dict[str, Any]:
            s = train_or_keep(run_dir, run_cfg, "sft", run_sft, say, quiet)
            return {k: s[k] for k in ("global_step", "train_loss_first", "train_loss_last", "eval_loss_first", "eval_loss_last", "seconds")}

        made = {"summary": run_dir / "sft_summary.json", "weights": weights_file(run_dir, run_cfg.use_peft)}
        stages.append(run_stage(name, run_dir, run_cfg, inputs, made, do_sft, say, out, clears=(run_dir,)))

    sft_dir = out / "sft"
    sft_over: dict[str, Any] = {**cfg.sft, "data": str(data), "output_dir": str(sft_dir)}
    stage1_dirs: list[Path] = []  # the openings stage's run directory, when there is one
    if cfg.openings_config is not None:
        openings_dir = out / "sft-openings"
        openings_cfg = load_config(SFTRunConfig, cfg.openings_config,
                                   {**cfg.openings, "data": str(data), "output_dir": str(openings_dir)})
        sft_stage("sft-openings", openings_dir, openings_cfg, [data])
        sft_over["model_name_or_path"] = str(openings_dir)
        stage1_dirs.append(openings_dir)
    sft_cfg = load_config(SFTRunConfig, cfg.sft_config, sft_over)
    sft_stage("sft", sft_dir, sft_cfg, [data, *stage1_dirs])

    # 4. GRPO, from the SFT output: a LoRA adapter, or (the tiny student's default) a fully trained model
    grpo_dir = out / "grpo"
    start: dict[str, Any] = {"adapter": str(sft_dir)} if sft_cfg.use_peft else {"adapter": NULL, "model_name_or_path": str(sft_dir), "use_peft": False}
    grpo_cfg = load_config(GRPORunConfig, cfg.grpo_config, {**cfg.grpo, **start, "output_dir": str(grpo_dir)})
    if data_paths(grpo_cfg):  # the teacher's weeks; a config that names no data refines on the student's own weeks
        grpo_cfg = replace(grpo_cfg, data=str(data))

    if cfg.dagger.config is not None and grpo_cfg.use_peft:
        raise RhythmError("the dagger stage continues a fully trained student; this GRPO stage trains a LoRA adapter")

    def do_grpo() -> dict[str, Any]:
        s = train_or_keep(grpo_dir, grpo_cfg, "grpo", run_grpo, say, quiet)
        return {k: v for k, v in s.items() if isinstance(v, (int, float, str)) or v is None}

    stages.append(run_stage("grpo", grpo_dir, grpo_cfg, [data, sft_dir],
                            {"summary": grpo_dir / "grpo_summary.json", "weights": weights_file(grpo_dir, sft_cfg.use_peft or grpo_cfg.use_peft)}, do_grpo,
                            say, out, clears=(grpo_dir,)))
    model_opts = ModelOptions(batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens)

    # 4b. DAgger for the belief: the refined student's own weeks, their beliefs the filter's, learned by SFT
    dagger_dir = out / "dagger"
    if cfg.dagger.config is not None:
        play_dir = out / "dagger-play"
        own = play_dir / "own_filtered.jsonl"
        play_cfg = EvalConfig(agent=f"model:{grpo_dir}", condition="in-dist", seeds=cfg.dagger.seeds, split="train",
                              references=[], model=model_opts, output=str(play_dir / "eval_results_v2.json"))

        def do_play() -> dict[str, Any]:
            run_eval(play_cfg, start_over=True)
            played = [r for _, r in read_episodes(play_dir / "eval_results_v2.episodes.jsonl")]
            return {"weeks": write_episodes(own, filtered_weeks(played, cfg.dagger.restore_below))}

        made_by = {"play": play_cfg, "restore_below": cfg.dagger.restore_below}
        stages.append(run_stage("dagger-play", play_dir, made_by, [grpo_dir], {"weeks": own}, do_play, say, out))
        dagger_cfg = load_config(SFTRunConfig, cfg.dagger.config, {
            **cfg.dagger.sft, "data": ",".join([str(data), *[str(own)] * cfg.dagger.copies]),
            "model_name_or_path": str(grpo_dir), "output_dir": str(dagger_dir)})
        sft_stage("dagger", dagger_dir, dagger_cfg, [data, own])

    # 5. eval of both students, references on the same seeds; the teacher too, for its belief curve
    students: dict[str, dict[str, Any]] = {}
    result_files = []
    played_cache: PlayedCache = {}  # the references (and the teacher) play each condition's seeds once
    refined = [("student SFT+GRPO", "grpo", f"model:{grpo_dir}", grpo_dir)]
    if cfg.dagger.config is not None:
        refined.append(("student SFT+GRPO+DAgger", "dagger", f"model:{dagger_dir}", dagger_dir))
    evaluated = (("student SFT", "sft", f"model:{sft_dir}", sft_dir), *refined, ("teacher (bayes)", "teacher", "bayes", None))
    for label, tag, agent, trained in evaluated:
        res_path = out / "eval" / tag / "eval_results_v2.json"
        conditions = list(cfg.eval_episodes)
        per_condition: dict[str, Any] = {}
        references = list(cfg.references) if trained is not None else ["random", "heuristic"]
        for cond in conditions:
            first = TUNING_SEED_OFFSET if cfg.eval_split == "train" else 0
            ev_cfg = EvalConfig(agent=agent, condition=cond, seeds=f"{first}-{first + cfg.eval_episodes[cond] - 1}", split=cfg.eval_split,
                                references=references, model=model_opts,
                                output=str(out / "eval" / tag / cond / "eval_results_v2.json"))
            cond_path = Path(ev_cfg.output)

            def do_eval(ev_cfg: EvalConfig = ev_cfg) -> dict[str, Any]:
                run_eval(ev_cfg, played_cache=played_cache, start_over=True)
                return {}

            inputs = [trained] if trained is not None else []
            made = {"results": cond_path, "episodes": episodes_path(cond_path)}
            stages.append(run_stage(f"eval {tag} {cond}", cond_path.parent, ev_cfg, inputs, made, do_eval, say, out))
            per_condition[cond] = EvalResults.load(cond_path)
        first_results = next(iter(per_condition.values())).to_dict()
        config = {**first_results.get("config", {}), "condition": "all", "output": str(res_path),  # what all of it ran
                  "seeds": {c: r.config.get("seeds") for c, r in per_condition.items()}}
        merged = EvalResults.model_validate({**first_results, "condition": "all", "config": config, "conditions": {
            c: r.conditions[c].model_dump(mode="json", exclude_unset=True) for c, r in per_condition.items()}})
        merged.save(res_path)
        _merge_episodes(out / "eval" / tag, conditions, res_path)
        result_files.append(res_path)
        if trained is not None:
            students[label] = _eval_row(merged)

    def scores(tag: str) -> dict:
        return final_scores(r for cond in cfg.eval_episodes for _, r in read_episodes(out / "eval" / tag / cond / "eval_results_v2.episodes.jsonl"))

    sft_scores = scores("sft")
    minus_sft = {label: paired_differences(sft_scores, scores(tag)) for label, tag, _, _ in refined}
    paired = minus_sft["student SFT+GRPO"]

    # 6. plots
    plots_dir = out / "plots"
    trained_dirs = [*stage1_dirs, sft_dir, *(d for _, _, _, d in refined)]
    plot_cfg = PlotConfig(results=[str(p) for p in result_files], logs=[str(d) for d in trained_dirs], out=str(plots_dir))

    def do_plot() -> dict[str, Any]:
        make_plots(plot_cfg)
        return {}

    stages.append(run_stage("plot", plots_dir, plot_cfg, [*result_files, *(d / "training_log.jsonl" for d in trained_dirs)],
                            {name: plots_dir / f"{name}.png" for name in PLOTS}, do_plot, say, out))

    # 7. summary
    table = summary_table(students)
    sentences = verdict(students) + paired_sentences(minus_sft)
    summary = {
        "out": str(out),
        "stages": [s.__dict__ for s in stages],
        "students": students,
        "grpo_minus_sft": paired,
        "minus_sft": minus_sft,
        "verdict": sentences,
        "versions": versions(),
        "seconds": round(sum(s.seconds for s in stages), 1),
    }
    write_config(cfg, out / "quickstart_config.yaml", {"versions": versions(), "created_at": started_at})
    (out / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
    (out / "summary.md").write_text(
        "# rhythm quickstart\n\n" + table + "\n\n" + "\n".join(f"- {s}" for s in sentences) + "\n\n"
        f"Plots: {plots_dir}/final_scores.png, belief_accuracy.png, training_loss.png\n"
    )
    return summary


def _merge_episodes(folder: Path, conditions: list[str], res_path: Path) -> None:
    """Concatenate per-condition episode files beside the merged results JSON (for the belief plot)."""
    target = episodes_path(res_path)
    write_atomic(target, b"".join((folder / cond / "eval_results_v2.episodes.jsonl").read_bytes() for cond in conditions))
