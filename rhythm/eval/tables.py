"""Markdown tables from ``eval_results_v2.json`` files, for the README and docs/results.md.

Run: ``rhythm analyze tables results/bayes/eval_results_v2.json [more.json ...]``. Every number
in the published tables comes from here, so the docs can be regenerated instead of retyped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rhythm.env.constants import BELIEF_DIMS, CONDITIONS
from rhythm.errors import RhythmError
from rhythm.eval.behaviour import labels
from rhythm.eval.names import display_name
from rhythm.eval.results import EvalResults
from rhythm.eval.stats import ci_text

AGENT_ORDER = ("random", "heuristic", "planner", "bayes", "oracle")


def agent_rows(results: list[EvalResults]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{agent: {condition: {"v3", "v2", "behaviour", "ci": (lo, hi) | None, "episodes", ...}}}`` across files, by
    the agent string. An agent that two files evaluated in one condition is refused (which one would the table
    show?); a reference comes from the first file that played it."""
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    evaluated: set[tuple[str, str]] = set()
    for res in results:
        for cond, r in res.conditions.items():
            if (res.agent, cond) in evaluated:
                raise RhythmError(f"{res.name} is evaluated in {cond} by two of the files; tabulate one of them")
            evaluated.add((res.agent, cond))
            rows.setdefault(res.agent, {})[cond] = {
                "v3": r.final_score.mean,
                "v2": r.final_score_v2.mean,
                "behaviour": r.behaviour_score.mean,
                "ci": r.final_score.ci95,
                "evaluated": True,
                "episodes": r.episodes,
                "mae": r.belief_mae.mean,
                "mae_prior": r.belief_mae_prior,
                "by_dim": r.belief_mae_by_dim,
                "win_heuristic": r.win_rate_vs.get("heuristic"),
                "normalized": r.normalized_score,
                "parse_failure_rate": r.parse_failure_rate,
            }
            for name, ref in r.references.items():
                rows.setdefault(name, {}).setdefault(cond, {
                    "v3": ref.final_score, "v2": ref.final_score_v2, "behaviour": ref.behaviour_score, "ci": None,
                    "episodes": r.episodes,
                })
    return rows


def _order(names: list[str]) -> list[str]:
    known = [a for a in AGENT_ORDER if a in names]
    return known + [n for n in names if n not in AGENT_ORDER]  # the students in the order their files came


def _names(results: list[EvalResults]) -> Callable[[str], str]:
    """Each agent string's display name (``model:runs/q/sft`` -> ``student (SFT)``); two agents of one display name
    (two SFT students) each with the shortest end of its path that tells them apart (``student (SFT) (a/sft)``)."""
    named = {res.agent: res.name for res in results}
    clashing = [agent for agent, name in named.items() if list(named.values()).count(name) > 1]
    apart = dict(zip(clashing, labels([agent.partition(":")[2] or agent for agent in clashing]), strict=True))
    return lambda agent: (f"{named[agent]} ({apart[agent]})" if agent in apart else named.get(agent)) or display_name(agent)


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def score_table(results: list[EvalResults]) -> str:
    """Final score v3 with its 95% CI (references: means only) / v2 (behaviour), and the people, per agent and
    condition."""
    rows, name = agent_rows(results), _names(results)
    conds = [c for c in CONDITIONS if any(c in r for r in rows.values())]
    lines = ["| agent | " + " | ".join(f"{c}: v3 [95% CI] / v2 (behaviour), n" for c in conds) + " |",
             "|---" * (len(conds) + 1) + "|"]
    for agent in _order(list(rows)):
        cells = []
        for c in conds:
            x = rows[agent].get(c)
            ci = f" {ci_text(x['ci'])}" if x and (x["ci"] or x.get("evaluated")) else ""  # references: means only
            cells.append("—" if x is None else f"{_fmt(x['v3'])}{ci} / {_fmt(x['v2'])} ({_fmt(x['behaviour'])}), {x['episodes']}")
        lines.append(f"| {name(agent)} | " + " | ".join(cells) + " |")
    notes = seeds_notes(results)
    return "\n".join(lines + ([""] + [f"Note: {n}" for n in notes] if notes else []))


def seeds_notes(results: list[EvalResults]) -> list[str]:
    """A note for each condition whose files played different people: their rows are not on the same seeds."""
    notes = []
    for c in CONDITIONS:
        played = {(res.conditions[c].split, res.conditions[c].seeds) for res in results if c in res.conditions}
        if len(played) > 1:
            which = "; ".join(f"{res.name}: {res.conditions[c].split} seeds {res.conditions[c].seeds or '?'}"
                              for res in results if c in res.conditions)
            notes.append(f"in {c} the files played different people ({which}); their rows are not paired, "
                         "and each reference is the first file's.")
    return notes


def belief_table(results: list[EvalResults]) -> str:
    """Belief MAE per agent and condition, per dimension, beside the constant prior's on the same episodes."""
    rows, name = agent_rows(results), _names(results)
    lines = ["| agent | condition | belief MAE | prior MAE | ratio | " + " | ".join(f"MAE {d}" for d in BELIEF_DIMS) + " |",
             "|---" * (5 + len(BELIEF_DIMS)) + "|"]
    for agent in _order(list(rows)):
        for c in CONDITIONS:
            x = rows[agent].get(c)
            if not x or x.get("mae") is None:
                continue
            dims, prior = x["by_dim"] or {}, x.get("mae_prior")  # an older results file may lack the prior's
            lines.append(
                f"| {name(agent)} | {c} | {x['mae']:.3f} | " + (f"{prior:.3f} | {x['mae'] / prior:.2f} | " if prior else "n/a | n/a | ")
                + " | ".join(f"{dims.get(d, float('nan')):.3f}" for d in BELIEF_DIMS) + " |"
            )
    return "\n".join(lines)


def results_tables(paths: list[str]) -> str:
    """The score table and the belief table of the ``eval_results_v2.json`` files at ``paths``."""
    if not paths:
        raise RhythmError("nothing to tabulate: pass one or more eval_results_v2.json files")
    results = [EvalResults.load(p) for p in paths]
    return f"{score_table(results)}\n\n{belief_table(results)}"
