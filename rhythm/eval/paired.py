"""Two agents on the same people: the paired difference of their final scores, per condition.

Run: ``rhythm analyze paired FIRST.episodes.jsonl SECOND.episodes.jsonl`` (``rhythm eval``'s episode
files; several files per side may be joined with commas). Prints, per condition, the mean of (second -
first) over the people both played, its seeded 95% bootstrap CI (:func:`rhythm.eval.stats.mean_ci`) and
how often the second beats the first. ``--metric crashes`` pairs the crashes a week instead (``crashes:S``:
the steps that ended with serenity below the crash line; any of V, C, P, S, N), where fewer is a win;
``--metric belief_mae`` the grader's last belief error (``score.belief_mae``), where lower is a win and a week
that stated no belief is left out; ``--metric behaviour_score`` / ``belief_score`` the final score's two parts.
Pairing removes the person-to-person spread that makes two students' own CIs overlap: this is how
docs/student.md compares one training choice with another on the same train-split seeds, and how the
quickstart reports GRPO against SFT. ``--target THIRD.episodes.jsonl`` also prints the share of the distance from
first to third that second closes, ``mean(second - first) / mean(third - first)`` over the people all three played,
with its 95% CI (:func:`distance_shares`): how much of the way from a student to a stronger one a refinement goes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from rhythm.env.constants import METER_ABBREV, condition_order
from rhythm.errors import RhythmError
from rhythm.eval.behaviour import meter_crashes
from rhythm.eval.stats import bootstrap_ci, ci_text, mean_ci, paired_win_rate
from rhythm.records import file_list, read_episodes, score_field

Key = tuple[str, str, int]
"""An episode's person: condition, split, seed."""


SCORES = ("final_score", "behaviour_score", "belief_score")
"""The grader's score and its two parts (``final = 0.8 behaviour + 0.2 belief``, :mod:`rhythm.grader`): pairing each
says whether a gain is in what the agent did or in what it believed."""
METRICS = (*SCORES, "belief_mae", "crashes", *(f"crashes:{m}" for m in METER_ABBREV))
"""What ``rhythm analyze paired`` can pair: the final score (v3) or one of its parts, the last belief's error, the
week's crashes, or one meter's."""


def lower_is_better(metric: str) -> bool:
    """Whether less of ``metric`` is the better week (crash counts, the belief's error)."""
    return metric.startswith("crashes") or metric == "belief_mae"


def episode_value(record: dict[str, Any], metric: str = "final_score") -> float | None:
    """One week's ``metric`` (:data:`METRICS`); ``crashes:M`` is meter M's count in
    :func:`rhythm.eval.behaviour.meter_crashes`; ``belief_mae`` is None for a week that stated no belief."""
    if metric in (*SCORES, "crashes"):
        return score_field(record, metric, needed=True)
    if metric == "belief_mae":
        return score_field(record, "belief_mae")
    return float(meter_crashes(record)[METER_ABBREV.index(metric.split(":")[1])])


def final_scores(records: Iterable[dict[str, Any]], metric: str = "final_score", what: str = "one side") -> dict[Key, float]:
    """``{(condition, split, seed): value}`` of ``metric`` (the final score by default), less the weeks where it
    has no value; a person played twice is refused (which week to pair?)."""
    if metric not in METRICS:
        raise RhythmError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    values: dict[Key, float | None] = {}
    records = list(records)
    env_version_of(records, what)
    for r in records:
        key = (r["condition"], r["split"], int(r["seed"]))
        if key in values:
            raise RhythmError(f"{key[0]} person {key[2]} ({key[1]} split) appears twice on one side")
        values[key] = episode_value(r, metric)
    return {k: v for k, v in values.items() if v is not None}


def env_version_of(records: list[dict[str, Any]], what: str) -> str | None:
    """The one env version of ``records`` (None for none); weeks of two env versions are refused: the same seed is
    another person there, and pairing by seed would pair strangers."""
    found = sorted({str(r.get("env_version")) for r in records})
    if len(found) > 1:
        raise RhythmError(f"{what} mixes weeks of env versions {', '.join(found)}; pair weeks of one env version")
    return found[0] if found else None


def unpaired_note(*sides: dict[Key, float]) -> str | None:
    """A line saying which weeks no pairing used (a side's people the others did not play), or None when every week
    of every side is paired."""
    shared = set.intersection(*(set(side) for side in sides))
    left = [len(set(side) - shared) for side in sides]
    if not any(left):
        return None
    names = ("first", "second", "target")
    conditions = sorted({k[0] for side in sides for k in side} - {k[0] for k in shared}, key=condition_order)
    return (f"paired {len(shared)} people; not paired: " + ", ".join(f"{n} of {len(side)} {name} weeks"
                                                                     for n, side, name in zip(left, sides, names) if n)
            + (f" (no shared person in {', '.join(conditions)})" if conditions else ""))


def shared_people(*sides: dict[Key, float], none: str) -> list[tuple[str, list[Key]]]:
    """The people every side played, per condition in the benchmark's order: ``[(condition, sorted keys)]``;
    none in common raises ``RhythmError(none)``."""
    shared = sorted(set.intersection(*(set(side) for side in sides)))
    if not shared:
        raise RhythmError(none)
    return [(cond, [k for k in shared if k[0] == cond]) for cond in sorted({k[0] for k in shared}, key=condition_order)]


def paired_differences(first: dict[Key, float], second: dict[Key, float], lower_better: bool = False) -> dict[str, dict[str, Any]]:
    """Per condition: ``{"episodes": n, "mean": m, "ci95": [lo, hi], "win_rate": w}`` of (second - first)
    over the people both sides played (conditions in the benchmark's order); none in common raises. A win is a
    higher value, or a lower one with ``lower_better``."""
    out = {}
    for cond, keys in shared_people(first, second, none="the two sides share no person (condition, split and seed): "
                                                          "nothing to pair"):
        a, b = [first[k] for k in keys], [second[k] for k in keys]
        out[cond] = {"episodes": len(keys), **mean_ci([y - x for x, y in zip(a, b, strict=True)]),
                     "win_rate": paired_win_rate(a, b) if lower_better else paired_win_rate(b, a)}
    return out


def distance_shares(first: dict[Key, float], second: dict[Key, float], target: dict[Key, float]) -> dict[str, dict[str, Any]]:
    """Per condition: ``{"episodes": n, "share": s, "ci95": [lo, hi]}``, the share of the distance from ``first`` to
    ``target`` that ``second`` closes, ``s = mean(second - first) / mean(target - first)`` over the people all three
    played, its interval the one bootstrap (:func:`rhythm.eval.stats.bootstrap_ci`) with each person's three values
    resampled together. A condition where the mean distance is 0 has no share (None). The ratio does not depend on
    which direction is better, so it reads the same for every metric."""
    def share(a: np.ndarray, b: np.ndarray, c: np.ndarray, axis: int = -1) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return (b - a).mean(axis=axis) / (c - a).mean(axis=axis)

    out = {}
    for cond, keys in shared_people(first, second, target, none="the three sides share no person (condition, split "
                                                                 "and seed): no distance to share"):
        a, b, c = (np.array([side[k] for k in keys], dtype=np.float64) for side in (first, second, target))
        value = float(share(a, b, c))
        if not np.isfinite(value):
            out[cond] = {"episodes": len(keys), "share": None, "ci95": None}
            continue
        if len(keys) < 2:
            out[cond] = {"episodes": 1, "share": round(value, 6), "ci95": None}
            continue
        if np.ptp(b - a) == 0.0 and np.ptp(c - a) == 0.0:
            lo = hi = value
        else:
            lo, hi = bootstrap_ci((a, b, c), share)
        out[cond] = {"episodes": len(keys), "share": round(value, 6), "ci95": [round(lo, 6), round(hi, 6)]}
    return out


def final_scores_of(files: str, metric: str = "final_score") -> tuple[dict[Key, float], str | None]:
    """:func:`final_scores` of the episodes in ``files`` (comma-separated JSONL paths), and their env version; weeks
    that all lack the metric (an agent that states no belief, for ``belief_mae``) are named as such, not as people
    not shared."""
    records = [r for path in file_list(files) for _, r in read_episodes(path)]
    if not records:
        raise RhythmError(f"{files}: no weeks")
    values = final_scores(records, metric, files)  # which also holds the side to one env version
    if not values:
        raise RhythmError(f"{files}: no week has a {metric} (the agent states no belief); pair another metric")
    return values, str(records[0].get("env_version"))


def read_sides(files: list[str], metric: str = "final_score") -> list[dict[Key, float]]:
    """:func:`final_scores_of` of each side; sides of different env versions are refused (:func:`env_version_of`)."""
    if sum(file_list(f).count("-") for f in files) > 1:
        raise RhythmError("stdin (-) can be read only once; give the other sides as files")
    read = [final_scores_of(f, metric) for f in files]
    versions = {version for _, version in read}
    if len(versions) > 1:
        raise RhythmError(f"the sides are weeks of different env versions ({', '.join(sorted(map(str, versions)))}): "
                          "the same seed is another person there; pair weeks of one env version")
    return [values for values, _ in read]


def paired_table(diffs: dict[str, dict[str, Any]], shares: dict[str, dict[str, Any]] | None = None) -> str:
    """:func:`paired_differences` as the table ``rhythm analyze paired`` prints; with ``shares``
    (:func:`distance_shares`) each row also gives the share of the distance to the target, in percent."""
    lines = ["condition  people  second - first [95% CI]    second wins" + ("  share of target - first [95% CI]" if shares else "")]
    for cond, d in diffs.items():
        line = f"{cond:9s}  {d['episodes']:6d}  {d['mean']:+.3f} {ci_text(d['ci95'], '+.3f')}  {d['win_rate']:.2f}"
        if shares:
            line += " " * 7  # under its header, past "second wins"
            s = shares.get(cond)
            if s is None or s["share"] is None:
                line += "  -"
            elif s["ci95"] is None:
                line += f"  {_percent(s['share'])} [no CI: n=1] of {s['episodes']}"
            else:
                line += f"  {_percent(s['share'])} [{_percent(s['ci95'][0])}, {_percent(s['ci95'][1])}] of {s['episodes']}"
        lines.append(line)
    return "\n".join(lines)


def _percent(share: float) -> str:
    """``0.771`` -> ``77%``; never ``-0%``; an unbounded end (a distance near 0 in some resamples) -> ``-inf%``."""
    text = f"{100 * share:.0f}%"
    return "0%" if text == "-0%" else text
