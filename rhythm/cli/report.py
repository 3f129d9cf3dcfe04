"""Tables of results on stderr."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from rhythm.cli.ui import err_console
from rhythm.eval.names import display_name
from rhythm.eval.results import EvalResults, MeanCI
from rhythm.eval.stats import ci_text


def _ci(stat: dict[str, Any] | None) -> str:
    if not stat or stat.get("mean") is None:
        return "-"
    return f"{stat['mean']:.3f} {ci_text(stat['ci95'])}"


def _mean_ci(stat: MeanCI) -> str:
    if stat.mean is None:
        return "-"
    return f"{stat.mean:.3f} {ci_text(stat.ci95)}"


def print_eval_table(results: EvalResults) -> None:
    table = Table(title=f"rhythm eval: {results.name}; {results.env_version}, grader {results.grader}")
    for col in ("condition", "n", "final v3 [95% CI]", "v2 [95% CI]", "behaviour", "MAE", "prior MAE", "win/rand", "win/heur", "norm", "parse fail"):
        table.add_column(col, justify="right" if col != "condition" else "left")
    for cond, r in results.conditions.items():
        win = r.win_rate_vs
        table.add_row(
            cond,
            str(r.episodes),
            _mean_ci(r.final_score),
            _mean_ci(r.final_score_v2),
            f"{r.behaviour_score.mean:.3f}",
            "-" if r.belief_mae.mean is None else f"{r.belief_mae.mean:.3f}",
            f"{r.belief_mae_prior:.3f}",
            "-" if "random" not in win else f"{win['random']:.2f}",
            "-" if "heuristic" not in win else f"{win['heuristic']:.2f}",
            "-" if r.normalized_score is None else f"{r.normalized_score:.2f}",
            f"{r.parse_failure_rate:.1%}",
        )
    err_console.print(table)
    cut = {c: r.cut_reply_rate for c, r in results.conditions.items() if r.cut_reply_rate}
    if cut:
        shares = ", ".join(f"{c} {rate:.1%}" for c, rate in cut.items())
        err_console.print(f"replies cut at the token cap (model.max_new_tokens, or the API's max_tokens): {shares}; "
                          "where the parse failures are these, a higher cap may be all they need")
    used = {c: r.usage for c, r in results.conditions.items() if r.usage}
    if used:
        err_console.print("usage: " + "; ".join(f"{c} {usage_text(u)}" for c, u in used.items()))
    refs = {c: r.references for c, r in results.conditions.items()}
    if any(refs.values()):
        ref_table = Table(title="references on the same seeds (final v3 / v2 / behaviour)")
        ref_table.add_column("condition")
        names = sorted({n for r in refs.values() for n in r})
        for n in names:
            ref_table.add_column(display_name(n), justify="right")
        for cond, r in refs.items():
            ref_table.add_row(cond, *[
                f"{r[n].final_score:.3f} / {r[n].final_score_v2:.3f} / {r[n].behaviour_score:.3f}" if n in r else "-"
                for n in names
            ])
        err_console.print(ref_table)


def usage_text(usage: dict[str, Any]) -> str:
    """``1,234 prompt + 56 completion tokens, 28 requests, $0.0012`` (the cost "unknown" where a price or a reply's
    usage is missing; requests and retries where the agent counts them). An agent that sent no request and spent
    nothing (a local model) shows no cost: "$0.0000" would read as an API run that was free."""
    parts = [f"{usage.get('prompt_tokens', 0):,} prompt + {usage.get('completion_tokens', 0):,} completion tokens"]
    parts += [f"{usage[k]:,} {k if usage[k] != 1 else one}" for k, one in (("requests", "request"), ("retries", "retry"))
              if usage.get(k)]
    cost = usage.get("cost_usd")
    if cost is None:
        parts.append("cost unknown")
    elif cost or usage.get("requests"):
        parts.append(f"${cost:.4f}")
    return ", ".join(parts)


def print_reeval_table(summary: dict[str, Any]) -> None:
    table = Table(title=f"rhythm reeval: {summary['jsonl']} ({summary['episodes']} episodes, {summary['env_version']})")
    for col in ("condition", "split", "agent", "n", "flagged", "final v3 [95% CI]", "v2", "behaviour", "MAE", "prior MAE", "random v3 / v2", "heuristic v3 / v2"):
        table.add_column(col, justify="left" if col in ("condition", "split", "agent") else "right")
    def pair(base: dict[str, Any], name: str) -> str:
        if name not in base or base[name]["final_score"]["mean"] is None:
            return "-"
        return f"{base[name]['final_score']['mean']:.3f} / {base[name]['final_score_v2']['mean']:.3f}"

    for g in summary["groups"]:

        table.add_row(
            g["condition"], g["split"], g["agent"], str(g["episodes"]), str(g["flagged"]),
            _ci(g["final_score"]),
            "-" if g["final_score_v2"]["mean"] is None else f"{g['final_score_v2']['mean']:.3f}",
            "-" if g["behaviour_score"]["mean"] is None else f"{g['behaviour_score']['mean']:.3f}",
            "-" if g["belief_mae"]["mean"] is None else f"{g['belief_mae']['mean']:.3f}",
            "-" if g["belief_mae_prior"] is None else f"{g['belief_mae_prior']:.3f}",
            pair(g["baselines"], "random"), pair(g["baselines"], "heuristic"),
        )
    err_console.print(table)
    for f in summary["flagged"][:20]:
        err_console.print(f"[red]does not replay[/red] {f['where']} (seed {f['seed']}): {'; '.join(f['reasons'][:3])}")
    if len(summary["flagged"]) > 20:
        err_console.print(f"... and {len(summary['flagged']) - 20} more flagged records")
