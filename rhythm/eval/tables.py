"""Markdown tables from ``eval_results_v2.json`` files, for the README and docs/results.md.

Run: ``rhythm analyze tables results/bayes/eval_results_v2.json [more.json ...]``. Every number
in the published tables comes from here, so the docs can be regenerated instead of retyped.
"""

from __future__ import annotations

from typing import Any

from rhythm.env.constants import BELIEF_DIMS, CONDITIONS
from rhythm.errors import RhythmError
from rhythm.eval.results import EvalResults

AGENT_ORDER = ("random", "heuristic", "planner", "bayes", "oracle")


def agent_rows(results: list[EvalResults]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{agent: {condition: {"v3", "v2", "behaviour", "ci": (lo, hi) | None}}}`` across files."""
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for res in results:
        for cond, r in res.conditions.items():
            rows.setdefault(res.agent, {})[cond] = {
                "v3": r.final_score.mean,
                "v2": r.final_score_v2.mean,
                "behaviour": r.behaviour_score.mean,
                "ci": r.final_score.ci95,
                "mae": r.belief_mae.mean,
                "mae_prior": r.belief_mae_prior,
                "by_dim": r.belief_mae_by_dim,
                "win_heuristic": r.win_rate_vs.get("heuristic"),
                "normalized": r.normalized_score,
                "parse_failure_rate": r.parse_failure_rate,
            }
            for name, ref in r.references.items():
                rows.setdefault(name, {}).setdefault(
                    cond, {"v3": ref.final_score, "v2": ref.final_score_v2, "behaviour": ref.behaviour_score, "ci": None}
                )
    return rows


def _order(names: list[str]) -> list[str]:
    known = [a for a in AGENT_ORDER if a in names]
    return known + sorted(n for n in names if n not in AGENT_ORDER)


def score_table(results: list[EvalResults]) -> str:
    """Final score v3 / v2 (behaviour) per agent and condition."""
    rows = agent_rows(results)
    conds = [c for c in CONDITIONS if any(c in r for r in rows.values())]
    lines = ["| agent | " + " | ".join(f"{c} v3 / v2 (behaviour)" for c in conds) + " |", "|---" * (len(conds) + 1) + "|"]
    for agent in _order(list(rows)):
        cells = []
        for c in conds:
            x = rows[agent].get(c)
            cells.append("—" if x is None else f"{x['v3']:.3f} / {x['v2']:.3f} ({x['behaviour']:.3f})")
        lines.append(f"| {agent} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def belief_table(results: list[EvalResults]) -> str:
    """Belief MAE per agent and condition, per dimension, beside the constant prior's."""
    rows = agent_rows(results)
    lines = ["| agent | condition | belief MAE | prior MAE | ratio | " + " | ".join(f"MAE {d}" for d in BELIEF_DIMS) + " |",
             "|---" * (5 + len(BELIEF_DIMS)) + "|"]
    for agent in _order(list(rows)):
        for c in CONDITIONS:
            x = rows[agent].get(c)
            if not x or x.get("mae") is None:
                continue
            dims = x["by_dim"] or {}
            lines.append(
                f"| {agent} | {c} | {x['mae']:.3f} | {x['mae_prior']:.3f} | {x['mae'] / x['mae_prior']:.2f} | "
                + " | ".join(f"{dims.get(d, float('nan')):.3f}" for d in BELIEF_DIMS) + " |"
            )
    return "\n".join(lines)


def results_tables(paths: list[str]) -> str:
    """The score table and the belief table of the ``eval_results_v2.json`` files at ``paths``."""
    if not paths:
        raise RhythmError("nothing to tabulate: pass one or more eval_results_v2.json files")
    results = [EvalResults.load(p) for p in paths]
    return f"{score_table(results)}\n\n{belief_table(results)}"
