"""Pictures of a run: final scores beside the published ones, belief error across the week, training
curves.

Run it with ``rhythm plot --results runs/eval/eval_results_v2.json --log runs/sft --out plots``.

- ``final_scores.png``: every agent of every results JSON (and the reference agents each one played on
  the same seeds) per condition, mean final score with its 95% CI. Top panel grader v2, beside the
  published reference run (hatched; SPEC's table, also grader v2); bottom panel grader v3 (the
  default, nothing published to compare). References carry no CI: results files keep only their means.
- ``belief_accuracy.png``: per condition, the MAE of each agent's stated belief against the true belief
  at every step, from the per-episode JSONL beside each results file (``<stem>.episodes.jsonl``),
  with a 95% band, beside the MAE of the constant prior-mean guess on the same episodes.
- ``training_loss.png``: SFT train and validation loss, and GRPO reward, from ``<DIR>/training_log.jsonl``
  (one JSON object per entry of TRL's ``trainer.state.log_history``, plus ``"stage": "sft"|"grpo"``).

The series each figure draws are computed by plain functions (:func:`score_bars`,
:func:`belief_curves`, :func:`training_series`) so they can be checked without looking at pixels.
Figures are drawn with matplotlib's object API on the Agg canvas; pyplot's global state is never touched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rhythm.config import write_config
from rhythm.env.constants import CONDITIONS, EPISODE_STEPS, N_SLOTS
from rhythm.errors import RhythmError
from rhythm.eval.behaviour import labels as path_labels
from rhythm.eval.names import display_name, start_of_sft
from rhythm.eval.results import EvalResults, episodes_path
from rhythm.eval.stats import mean_ci
from rhythm.eval.tables import seeds_notes
from rhythm.grader import belief_mae_by_step, prior_mae, prior_mae_beside, week_truth
from rhythm.provenance import made_by
from rhythm.records import check_output, each_person_once, iter_jsonl, read_episodes

PUBLISHED_V2: dict[str, dict[str, float]] = {
    "random": {"in-dist": 0.402, "ood": 0.397, "discrete": 0.426},
    "heuristic": {"in-dist": 0.449, "ood": 0.454, "discrete": 0.455},
    "LLM teacher (gpt-5.4)": {"in-dist": 0.611, "ood": 0.621},
    "3B student, SFT": {"in-dist": 0.574, "ood": 0.536, "discrete": 0.507},
    "3B student, SFT+GRPO": {"in-dist": 0.573, "ood": 0.559, "discrete": 0.520},
}
"""Published reference run of the recipe (SPEC's table; grader v2, the original environment)."""
PUBLISHED_STUDENT_BELIEF_MAE: dict[str, float] = {"in-dist": 0.216, "ood": 0.263, "discrete": 0.430}
"""Published 3B student's belief MAE (at the last step)."""

LOG_FILE = "training_log.jsonl"
PLOT_CONFIG = "plot_config.yaml"
FIGURES = ("final_scores.png", "belief_accuracy.png", "training_loss.png")
"""What ``rhythm plot`` draws into its ``--out`` folder, each when its inputs are given."""

_FIXED_COLORS = {
    display_name(agent): color
    for agent, color in {"random": "#9e9e9e", "heuristic": "#c49a6c", "planner": "#8c6bb1", "bayes": "#2b8cbe", "oracle": "#31a354"}.items()
}
"""Colours of the built-in agents, by display name."""
_CYCLE = ("#d62728", "#9467bd", "#17becf", "#e377c2", "#bcbd22", "#8c564b", "#1f77b4", "#7f7f7f")
"""Colours of other agents (students): none is a fixed or a published colour."""
_RANK = {display_name(agent): rank for agent, rank in {"random": 0, "heuristic": 1, "planner": 2, "bayes": 3, "oracle": 9}.items()}
"""Left-to-right order of our bars, as in the published table: baselines, teachers, students, oracle last."""
_PUBLISHED_COLORS = {
    "random": "#9e9e9e",
    "heuristic": "#c49a6c",
    "LLM teacher (gpt-5.4)": "#2b8cbe",
    "3B student, SFT": "#fdae6b",
    "3B student, SFT+GRPO": "#e6550d",
}


@dataclass(frozen=True)
class PlotConfig:
    """``rhythm plot``: which results and training logs to draw, and where."""

    results: list[str] = field(default_factory=list)
    """Results JSON files of ``rhythm eval`` (their ``<stem>.episodes.jsonl`` feed the belief plot)."""
    logs: list[str] = field(default_factory=list)
    """Training output dirs holding training_log.jsonl (SFT and/or GRPO), or the log files themselves."""
    out: str = "plots"
    """Directory for final_scores.png, belief_accuracy.png and training_loss.png."""
    dpi: int = 150
    """Resolution of the PNGs."""


@dataclass
class PlotSummary:
    """What ``make_plots`` wrote, and anything it had to leave out (one line each)."""

    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- inputs --------------------------------------------------------------------------------------


def load_results(path: str | Path) -> EvalResults:
    """Read and check an ``eval_results_v2.json``; a file of another shape is a one-line error."""
    return EvalResults.load(path)


def _labels(results: list[tuple[Path, EvalResults]]) -> list[str]:
    """Each file's display name (:func:`rhythm.eval.names.display_name`); two alike get the shortest end of their
    folder's path that tells them apart (``student (SFT) (q1/eval/sft)``)."""
    names = [r.name for _, r in results]
    clashing = [i for i, name in enumerate(names) if names.count(name) > 1]
    folders = [str(results[i][0].parent) if results[i][0].parent.name else results[i][0].stem for i in clashing]
    apart = dict(zip(clashing, path_labels(folders), strict=True))
    labels = [f"{name} ({apart[i]})" if i in apart else name for i, name in enumerate(names)]
    seen: dict[str, int] = {}
    numbered = []
    for label in labels:  # still equal: same agent, same folder name
        seen[label] = seen.get(label, 0) + 1
        numbered.append(f"{label} #{seen[label]}" if labels.count(label) > 1 else label)
    return numbered


# -- final scores --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreBar:
    """One bar of final_scores.png."""

    agent: str
    condition: str
    grader: str  # "v2" | "v3"
    mean: float
    ci95: tuple[float, float] | None
    kind: str  # "agent" (an evaluated agent, with CI) | "reference" (played on the same seeds) | "published"


def score_bars(results: list[tuple[Path, EvalResults]]) -> list[ScoreBar]:
    """Every bar of the final-score figure, in drawing order: evaluated agents, their references,
    then the published run (v2 only). An agent evaluated in its own right is not repeated as a
    reference in a condition where it has its own bar; a reference is taken from the first results file that played
    it."""
    bars: list[ScoreBar] = []
    labels = _labels(results)
    own = {(r.agent, cond) for _, r in results for cond in r.conditions}
    for label, (_, r) in zip(labels, results, strict=True):
        for cond, entry in r.conditions.items():
            for grader, stat in (("v2", entry.final_score_v2), ("v3", entry.final_score)):
                if stat.mean is None:
                    continue
                ci = tuple(stat.ci95) if stat.ci95 else None
                bars.append(ScoreBar(label, cond, grader, float(stat.mean), ci, "agent"))
    taken: set[tuple[str, str]] = set()
    for _, r in results:
        for cond, entry in r.conditions.items():
            for name, ref in sorted(entry.references.items()):
                if (name, cond) in own or (name, cond) in taken:
                    continue
                taken.add((name, cond))
                for grader, value in (("v2", ref.final_score_v2), ("v3", ref.final_score)):
                    if value is not None:
                        bars.append(ScoreBar(display_name(name), cond, grader, float(value), None, "reference"))
    for name, values in PUBLISHED_V2.items():
        for cond, value in values.items():
            bars.append(ScoreBar(name, cond, "v2", value, None, "published"))
    return bars


def _color(name: str, kind: str, order: dict[str, int]) -> str:
    if kind == "published":
        return _PUBLISHED_COLORS.get(name, "#636363")
    if name in _FIXED_COLORS:
        return _FIXED_COLORS[name]
    return _CYCLE[order.setdefault(name, len(order)) % len(_CYCLE)]


def final_scores_figure(bars: list[ScoreBar], same_seeds: bool = True, split: str = "eval") -> Any:
    """The final-score figure: conditions on x, one bar per agent; v2 with the published run on top, v3 below.
    ``same_seeds``: whether every results file played the same people (the legend says which); ``split``: the split
    they played (the title says it)."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    conditions = [c for c in CONDITIONS if any(b.condition == c and b.kind != "published" for b in bars)]
    if not conditions:
        raise RhythmError("no condition with a final score to plot")
    order: dict[str, int] = {}
    fig = Figure(figsize=(13, 9.5), layout="constrained")
    axes = fig.subplots(2, 1, sharey=True)
    panels = (
        ("v2", "Grader v2 (published grader): ours (solid) beside the published reference run (hatched)"),
        ("v3", "Grader v3 (default): belief credit only for beating the constant prior guess"),
    )
    handles: dict[str, Any] = {}
    for ax, (grader, title) in zip(axes, panels, strict=True):
        series = [b for b in bars if b.grader == grader and b.condition in conditions]
        ours = list(dict.fromkeys((b.agent, b.kind) for b in series if b.kind != "published"))
        ours.sort(key=lambda slot: _RANK.get(slot[0], 5))  # stable: students keep their input order
        published = list(dict.fromkeys((b.agent, b.kind) for b in series if b.kind == "published"))
        slots = ours + ([None] if published else []) + published  # None: a gap before the published bars
        width = 0.84 / len(slots)
        for ci, cond in enumerate(conditions):
            for si, slot in enumerate(slots):
                if slot is None:
                    continue
                name, kind = slot
                found = [b for b in series if b.agent == name and b.kind == kind and b.condition == cond]
                x = ci + (si - (len(slots) - 1) / 2) * width
                if not found:
                    if kind == "published":
                        ax.text(x, 0.01, "n/a", ha="center", va="bottom", fontsize=7, rotation=90, color="#636363")
                    continue
                b = found[0]
                color = _color(name, kind, order)
                style: dict[str, Any] = dict(color=color, edgecolor="black", linewidth=0.5)
                if kind == "published":
                    style.update(color="white", edgecolor=color, hatch="///", linewidth=1.2)
                elif kind == "reference":
                    style.update(alpha=0.75)
                yerr = None
                if b.ci95 is not None:
                    yerr = [[max(0.0, b.mean - b.ci95[0])], [max(0.0, b.ci95[1] - b.mean)]]
                ax.bar(x, b.mean, width * 0.92, yerr=yerr, capsize=3, error_kw={"linewidth": 1}, **style)
                top = b.ci95[1] if b.ci95 is not None else b.mean
                ax.text(x, top + 0.012, f"{b.mean:.2f}", ha="center", va="bottom", fontsize=7, rotation=90)
                legend_name = {
                    "agent": f"{name} (95% CI)" if b.ci95 is not None else f"{name} (one week: no CI)",
                    "reference": f"{name} (reference, " + ("same seeds)" if same_seeds else "the seeds of the first file that played it)"),
                    "published": f"published: {name}",
                }[kind]
                if legend_name not in handles:
                    handles[legend_name] = Patch(
                        facecolor=style["color"], edgecolor=style["edgecolor"], hatch=style.get("hatch"),
                        alpha=style.get("alpha"), label=legend_name,
                    )
        ax.set_title(title, fontsize=11, loc="left")
        ax.set_xticks(range(len(conditions)), [f"{c}" for c in conditions], fontsize=11)
        ax.set_ylabel(f"final score ({grader})")
        ax.set_ylim(0, 1.0)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        for ci in range(len(conditions) - 1):
            ax.axvline(ci + 0.5, color="#cccccc", linewidth=0.8)
    # beside the panels, centred: clear of the data, the panel titles and the figure title above
    fig.legend(handles=list(handles.values()), loc="outside right center", fontsize=9, frameon=False)
    fig.suptitle(f"Final score by condition ({split} split; mean and bootstrap 95% CI)", fontsize=13)
    fig.supxlabel(  # a caption, laid out below the panels
        "Reference agents: means only (results files keep no CI for them).   Published: SPEC's reference run "
        "(grader v2, the original environment; n/a = not published).",
        fontsize=8.5, color="#444444",
    )
    return fig


def plot_final_scores(bars: list[ScoreBar], path: Path, dpi: int = 150, same_seeds: bool = True,
                      split: str = "eval") -> Path:
    return _save(final_scores_figure(bars, same_seeds, split), path, dpi)


# -- belief accuracy -----------------------------------------------------------------------------


@dataclass
class BeliefCurve:
    """Belief MAE per step of one agent in one condition, over the episodes that stated a belief."""

    agent: str
    condition: str
    mean: np.ndarray  # (EPISODE_STEPS,), NaN where no episode stated a belief
    low: np.ndarray
    high: np.ndarray
    stated: np.ndarray  # (EPISODE_STEPS,) episodes that stated a belief at that step
    episodes: int
    prior: float  # MAE of the constant prior-mean belief on the episodes that stated a belief (all, if none did)


def belief_errors(records: list[tuple[str, dict[str, Any]]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per condition: ``(errors, prior_errors)`` from ``(where, record)`` pairs; errors is (episodes,
    EPISODE_STEPS) with NaN where the step stated no belief; prior_errors is (episodes,), the constant
    prior guess's MAE against the same people. The true belief is this env's, so weeks of another env version (other
    people under the same seeds) are refused, as is a person twice (counted twice, the intervals would narrow). The
    weeks are taken in (split, seed) order, as eval writes them: the same weeks in another order (files concatenated
    the other way round) give the same intervals."""
    out: dict[str, tuple[list[np.ndarray], list[float]]] = {}
    ordered = sorted(records, key=lambda item: (item[1]["split"], item[1]["seed"]))  # checked by the readers
    for where, rec in each_person_once(ordered, "give each week once"):
        cond = rec["condition"]
        truth = week_truth(rec, where)
        try:
            err = belief_mae_by_step([(int(step["t"]), step.get("belief")) for step in rec["steps"]], truth, EPISODE_STEPS)
        except (ValueError, TypeError) as exc:
            raise RhythmError(f"{where}: {exc}") from None
        errs, priors = out.setdefault(cond, ([], []))
        errs.append(err)
        priors.append(float(prior_mae(cond, truth)))
    return {c: (np.stack(e), np.array(p)) for c, (e, p) in out.items()}


def _curve(agent: str, condition: str, errors: np.ndarray, priors: np.ndarray) -> BeliefCurve:
    """Mean MAE per step with the reports' 95% interval (:func:`rhythm.eval.stats.mean_ci`) as its band."""
    stated = (~np.isnan(errors)).sum(axis=0)
    cis = [mean_ci(errors[:, t]) for t in range(errors.shape[1])]
    mean = np.array([np.nan if c["mean"] is None else c["mean"] for c in cis])
    low, high = (np.array([np.nan if c["ci95"] is None else c["ci95"][i] for c in cis]) for i in (0, 1))
    prior = prior_mae_beside(priors, (~np.isnan(errors)).any(axis=1))  # the weeks the curve averages, at any step
    return BeliefCurve(agent, condition, mean, low, high, stated, len(errors), prior)


def read_episode_records(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """``("path:line", record)`` for every episode of a JSONL (a bad line is a one-line error)."""
    return list(read_episodes(path))


def belief_curves(results: list[tuple[Path, EvalResults]]) -> tuple[list[BeliefCurve], list[str]]:
    """Curves of every results file whose episodes JSONL is beside it; notes for the ones without."""
    curves: list[BeliefCurve] = []
    notes: list[str] = []
    for label, (path, _) in zip(_labels(results), results, strict=True):
        ep = episodes_path(path)
        if not ep.is_file():
            notes.append(f"{path}: no {ep.name} beside it; its agent is left out of belief_accuracy.png")
            continue
        for cond, (errors, priors) in sorted(belief_errors(read_episode_records(ep)).items(), key=lambda kv: CONDITIONS.index(kv[0])):
            curves.append(_curve(label, cond, errors, priors))
    return curves, notes


def belief_accuracy_figure(curves: list[BeliefCurve]) -> Any:
    """One panel per condition: MAE of the stated belief against step, per agent, and the prior's MAE."""
    from matplotlib.figure import Figure

    conditions = [c for c in CONDITIONS if any(cv.condition == c for cv in curves)]
    if not conditions:
        raise RhythmError("no per-episode records to draw belief accuracy from")
    fig = Figure(figsize=(5.2 * len(conditions) + 1.5, 5.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(conditions), sharey=True))
    order: dict[str, int] = {}
    steps = np.arange(1, EPISODE_STEPS + 1)
    ymax = 0.0
    for ax, cond in zip(axes, conditions, strict=True):
        group = [cv for cv in curves if cv.condition == cond]
        drawn = [cv for cv in group if cv.stated.sum() > 0]
        silent = [cv.agent for cv in group if cv.stated.sum() == 0]
        sizes = {cv.episodes for cv in drawn} or {cv.episodes for cv in group}
        for cv in drawn:
            color = _color(cv.agent, "agent", order)
            rate = cv.stated.sum() / (cv.episodes * EPISODE_STEPS)
            n = f"n={cv.episodes}, " if len(sizes) > 1 else ""
            ax.plot(steps, cv.mean, color=color, linewidth=2, marker="o", markersize=3,
                    label=f"{cv.agent} ({n}belief stated {rate:.0%} of steps)")
            ax.fill_between(steps, cv.low, cv.high, color=color, alpha=0.18, linewidth=0)
            ymax = max(ymax, float(np.nanmax(np.append(cv.high, cv.mean))))  # one week: no band, the curve itself
        priors = [cv.prior for cv in drawn] or [cv.prior for cv in group]
        same_people = max(priors) - min(priors) < 1e-9
        if same_people:  # one line
            ax.axhline(priors[0], color="black", linestyle="--", linewidth=1.4, label="constant prior guess (same episodes)")
        else:  # different people: each curve's own prior, in its colour
            for cv in drawn:
                ax.axhline(cv.prior, color=_color(cv.agent, "agent", order), linestyle="--", linewidth=1.2,
                           label=f"constant prior guess on {cv.agent}'s episodes")
        prior = float(np.mean(priors))
        ymax = max(ymax, max(priors))
        if cond in PUBLISHED_STUDENT_BELIEF_MAE:
            v = PUBLISHED_STUDENT_BELIEF_MAE[cond]
            ax.plot([EPISODE_STEPS], [v], marker="*", markersize=13, color="#e6550d", markeredgecolor="black",
                    linestyle="none", label="published 3B student, last step")
            ax.annotate(f"{v:.3f}", (EPISODE_STEPS, v), xytext=(-9, 0), textcoords="offset points", ha="right",
                        va="center", fontsize=8)
            ymax = max(ymax, v)
        for agent in silent:  # a legend line without a curve: present, but nothing to draw
            ax.plot([], [], " ", label=f"{agent}: no belief stated")
        for day in range(1, EPISODE_STEPS // N_SLOTS):
            ax.axvline(day * N_SLOTS + 0.5, color="#e0e0e0", linewidth=0.8, zorder=0)
        size = f"n={sizes.pop()}" if len(sizes) == 1 else "n in the legend"
        guess = f"constant prior MAE {prior:.3f}" if same_people else "different people"
        ax.set_title(f"{cond}  ({size}; {guess})", fontsize=11)
        ax.set_xlabel("step (belief stated with that step's action; grey lines: day boundaries)", fontsize=9)
        ax.set_xlim(0.5, EPISODE_STEPS + 0.5)
        ax.set_xticks([1, 4, 8, 12, 16, 20, 24, 28])
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("belief MAE vs true (S, M, W)  (lower is better)")
    legend: dict[str, Any] = {}  # one legend for every panel, below them: clear of the curves and the titles
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncols=min(3, len(legend)), fontsize=9,
               frameon=False)
    axes[0].set_ylim(0, max(0.05, ymax * 1.35))
    fig.suptitle("Belief accuracy across the week (mean over episodes, 95% band)", fontsize=13)
    return fig


def plot_belief_accuracy(curves: list[BeliefCurve], path: Path, dpi: int = 150) -> Path:
    return _save(belief_accuracy_figure(curves), path, dpi)


# -- training curves -----------------------------------------------------------------------------


@dataclass
class TrainingSeries:
    """What one training log holds, as (steps, values) pairs."""

    label: str
    train_loss: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))
    eval_loss: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))
    reward: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))
    reward_std: list[float] = field(default_factory=list)
    step_reward: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))
    """The mean reward of each optimizer step, from ``reward_log.jsonl`` beside the log (TRL's ``reward`` is the
    mean over a logging window)."""
    reward_funcs: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    learning: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    """GRPO's can-it-learn figures by log key (:data:`LEARNING_KEYS`)."""
    not_finite: dict[str, list[float]] = field(default_factory=dict)
    """The steps whose loss, eval_loss or reward was logged but is not a finite number (a diverged run: the log
    writes NaN as null), by key; the curves leave them out, and ``make_plots`` says so."""


LEARNING_KEYS = {
    "groups_without_spread": "groups with no reward spread (share)",
    "probe/action_changed": "probe states whose greedy action changed (share)",
    "probe/belief_shift": "mean change of the probe states' greedy belief",
    "probe/kl": "KL to the starting policy per reply token (nats)",
}
"""What shows whether a refine run can learn (TRL's and :mod:`rhythm.train.grpo.probe`'s log keys)."""
KL_KEY = "probe/kl"
REWARD_LOG_FILE = "reward_log.jsonl"


def log_file(path: str | Path) -> Path:
    p = Path(path)
    return p / LOG_FILE if p.is_dir() else p


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def training_series(path: str | Path, label: str | None = None) -> TrainingSeries:
    """Read ``training_log.jsonl`` (a dir holding it, or the file): SFT loss/eval_loss, GRPO reward.

    Entries without ``stage`` count as GRPO when they log a reward and as SFT otherwise.
    """
    file = log_file(path)
    if not file.is_file():
        raise RhythmError(f"training log not found: {file} (expected {LOG_FILE} from rhythm sft / rhythm grpo)")
    name = label or (Path(path).name if Path(path).is_dir() else file.parent.name) or str(file)
    s = TrainingSeries(name)
    for lineno, entry in iter_jsonl(file):
        stage = entry.get("stage") or ("grpo" if "reward" in entry else "sft")
        if stage not in ("sft", "grpo"):
            raise RhythmError(f"{file}:{lineno}: unknown stage {stage!r}; expected sft or grpo")
        step = _number(entry.get("step"))
        if step is None:
            step = float(lineno)
        if stage == "sft":
            for key, series in (("loss", s.train_loss), ("eval_loss", s.eval_loss)):
                value = _number(entry.get(key))
                if value is not None:
                    series[0].append(step)
                    series[1].append(value)
                elif key in entry:
                    s.not_finite.setdefault(key, []).append(step)
        else:
            value = _number(entry.get("reward"))
            if value is None and "reward" in entry:
                s.not_finite.setdefault("reward", []).append(step)
            if value is not None:
                s.reward[0].append(step)
                s.reward[1].append(value)
                s.reward_std.append(_number(entry.get("reward_std")) or 0.0)
            for key in LEARNING_KEYS:
                value = _number(entry.get(key))
                if value is not None:
                    xs, ys = s.learning.setdefault(key, ([], []))
                    xs.append(step)
                    ys.append(value)
            for key, raw in entry.items():
                if key.startswith("rewards/") and key.endswith("/mean") and _number(raw) is not None:
                    func = key[len("rewards/") : -len("/mean")]
                    xs, ys = s.reward_funcs.setdefault(func, ([], []))
                    xs.append(step)
                    ys.append(float(raw))
    if not (s.train_loss[0] or s.eval_loss[0] or s.reward[0]):
        raise RhythmError(f"{file}: no loss, eval_loss or reward entries to plot")
    if s.reward[0] and (file.parent / REWARD_LOG_FILE).is_file():
        s.step_reward = step_rewards(file.parent / REWARD_LOG_FILE)
    return s


def step_rewards(path: Path) -> tuple[list[float], list[float]]:
    """The mean reward of every optimizer step in a ``reward_log.jsonl`` (one line per scored reply)."""
    by_step: dict[float, list[float]] = {}
    for _, entry in iter_jsonl(path):
        step, reward = _number(entry.get("step")), _number(entry.get("reward"))
        if step is not None and reward is not None:
            by_step.setdefault(step, []).append(reward)
    steps = sorted(by_step)
    return steps, [float(np.mean(by_step[k])) for k in steps]


def continued(series: list[TrainingSeries], paths: list[str]) -> list[TrainingSeries]:
    """An SFT run that continued another plotted one (the quickstart's stage 2 from stage 1) is drawn after it:
    its steps shifted by the earlier run's last step, its label naming where it started."""
    folders = [log_file(p).parent for p in paths]
    for s, folder in zip(series, folders, strict=True):
        start = start_of_sft(folder)
        if start is None or not s.train_loss[0]:
            continue
        for earlier, other in zip(series, folders, strict=True):  # after a moved run folder: the same name
            same = start.exists() and other.exists() and start.resolve() == other.resolve()
            if earlier is not s and earlier.train_loss[0] and (same or (not start.exists() and start.name == other.name)):
                shift = max(earlier.train_loss[0] + earlier.eval_loss[0])
                s.train_loss = ([x + shift for x in s.train_loss[0]], s.train_loss[1])
                s.eval_loss = ([x + shift for x in s.eval_loss[0]], s.eval_loss[1])
                s.label = f"{s.label} (from {earlier.label})"
                break
    return series


def training_figure(series: list[TrainingSeries]) -> Any:
    """SFT loss (train solid, validation dashed), GRPO reward (mean with ±1 std band) and, where the log has
    them, GRPO's can-it-learn figures (zero-spread groups, greedy-action changes, KL to the start)."""
    from matplotlib.figure import Figure

    has_sft = [s for s in series if s.train_loss[0] or s.eval_loss[0]]
    has_grpo = [s for s in series if s.reward[0]]
    has_learning = [s for s in has_grpo if s.learning]
    panels = (["sft"] if has_sft else []) + (["grpo"] if has_grpo else []) + (["learning"] if has_learning else [])
    fig = Figure(figsize=(6.5 * len(panels), 4.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    order: dict[str, int] = {}
    for ax, panel in zip(axes, panels, strict=True):
        if panel == "sft":
            for s in has_sft:
                color = _CYCLE[order.setdefault(s.label, len(order)) % len(_CYCLE)]
                if s.train_loss[0]:
                    ax.plot(*s.train_loss, color=color, linewidth=1.6, label=f"{s.label}: train loss",
                            marker="o" if len(s.train_loss[0]) < 2 else None, markersize=4)  # one point draws no line
                if s.eval_loss[0]:
                    ax.plot(*s.eval_loss, color=color, linestyle="--", marker="o", markersize=4, linewidth=1.6,
                            label=f"{s.label}: validation loss")
            ax.set_title("SFT: loss", fontsize=12)
            ax.set_ylabel("loss per labelled token")
        elif panel == "learning":  # shares on the left axis, the KL (a thousandth of them, early on) on its own
            kl_ax = ax.twinx() if any(KL_KEY in s.learning for s in has_learning) else None
            for s in has_learning:
                color = _CYCLE[order.setdefault(s.label, len(order)) % len(_CYCLE)]
                for k, (key, what) in enumerate(LEARNING_KEYS.items()):
                    if key in s.learning:
                        on = kl_ax if key == KL_KEY and kl_ax is not None else ax
                        on.plot(*s.learning[key], color=color, linewidth=1.4, linestyle=("-", "--", "-.", ":")[k], marker="o",
                                markersize=3, label=f"{s.label}: {what}" + (" (right axis)" if on is kl_ax else ""))
            ax.set_title("GRPO: can it learn?", fontsize=12)
            ax.set_ylabel("share; belief change")
            if kl_ax is not None:
                kl_ax.set_ylabel("KL (nats per reply token)")
                kl_ax.set_ylim(bottom=0)
                handles, labels = ax.get_legend_handles_labels()
                more = kl_ax.get_legend_handles_labels()
                ax.legend(handles + more[0], labels + more[1], fontsize=8, loc="upper center",
                          bbox_to_anchor=(0.5, -0.16), frameon=False)  # below: clear of the right axis's ticks and label
        else:
            for s in has_grpo:
                color = _CYCLE[order.setdefault(s.label, len(order)) % len(_CYCLE)]
                xs, ys = np.array(s.reward[0]), np.array(s.reward[1])
                std = np.array(s.reward_std)
                ax.plot(xs, ys, color=color, linewidth=1.8, label=f"{s.label}: mean reward (logging window)")
                if s.step_reward[0]:
                    ax.plot(*s.step_reward, color=color, linewidth=0.8, marker=".", markersize=3, alpha=0.7,
                            label=f"{s.label}: mean reward of each step")
                ax.fill_between(xs, ys - std, ys + std, color=color, alpha=0.15, linewidth=0, label=f"{s.label}: ±1 std across completions")
                if len(s.reward_funcs) > 1:
                    for k, (func, (fx, fy)) in enumerate(sorted(s.reward_funcs.items())):
                        ax.plot(fx, fy, color=color, linewidth=1, linestyle=(0, (1 + k, 2)), alpha=0.8,
                                label=f"{s.label}: {func}")
            ax.set_title("GRPO: reward", fontsize=12)
            ax.set_ylabel("reward per completion")
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
        if ax.get_legend() is None:
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside the panel
    fig.suptitle("Training curves", fontsize=13)
    return fig


def plot_training(series: list[TrainingSeries], path: Path, dpi: int = 150) -> Path:
    return _save(training_figure(series), path, dpi)


# -- the command ---------------------------------------------------------------------------------


def _save(fig: Any, path: Path, dpi: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, dpi=dpi, format="png", metadata={"Software": None})
    tmp.replace(path)  # a reader never sees half a PNG
    return path


def make_plots(cfg: PlotConfig) -> PlotSummary:
    """``rhythm plot``: read every input first (so bad input fails before anything is drawn), then draw."""
    if not cfg.results and not cfg.logs:
        raise RhythmError("nothing to plot: pass --results FILE (from rhythm eval) and/or --log DIR (from rhythm sft/grpo)")
    if cfg.dpi < 30 or cfg.dpi > 600:
        raise RhythmError(f"dpi must be between 30 and 600, got {cfg.dpi}")
    check_output(cfg.out, folder=True, what="--out")
    results = [(Path(p), load_results(p)) for p in cfg.results]
    curves, notes = belief_curves(results) if results else ([], [])
    logs = continued([training_series(p) for p in cfg.logs], cfg.logs)
    out = Path(cfg.out)
    summary = PlotSummary(notes=list(notes))
    if results:
        mixed = seeds_notes([r for _, r in results])
        summary.notes += [f"final_scores.png: {note}" for note in mixed]
        summary.written.append(plot_final_scores(score_bars(results), out / "final_scores.png", cfg.dpi,
                                                 same_seeds=not mixed, split=" and ".join(sorted({r.split for _, r in results}))))
        if curves:
            summary.written.append(plot_belief_accuracy(curves, out / "belief_accuracy.png", cfg.dpi))
        else:
            summary.notes.append("belief_accuracy.png not written: no per-episode JSONL beside any results file")
    else:
        summary.notes.append("no --results given: final_scores.png and belief_accuracy.png not written")
    if logs:
        summary.notes += [f"training_loss.png: {log.label}'s {key} is not a finite number at {len(steps)} logged "
                          f"step(s) from step {steps[0]:g} on (a diverged run?); the curve leaves them out"
                          for log in logs for key, steps in log.not_finite.items()]
        summary.written.append(plot_training(logs, out / "training_loss.png", cfg.dpi))
    else:
        summary.notes.append("no --log given: training_loss.png not written")
    summary.notes += [f"{out / name} is an earlier plot's: this one did not draw it"
                      for name in FIGURES if (out / name).exists() and out / name not in summary.written]
    write_config(cfg, out / PLOT_CONFIG, made_by(  # what the images were drawn from, beside them
        stage="plot", written=[p.name for p in summary.written], notes=summary.notes))
    return summary
