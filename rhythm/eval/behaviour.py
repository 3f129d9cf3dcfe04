"""What agents did, side by side: crashes a week (and on which meter), behaviour score, last belief error, how
far the last stated belief ever goes from 0.5 beside how far the people are, and how often each action was played,
per condition.

Run: ``rhythm analyze behaviour A.episodes.jsonl B.episodes.jsonl ...``. It shows *how* two students
differ where :mod:`rhythm.eval.paired` shows *by how much*: docs/grpo-ablation.md reads from it that every refine
setting moved the student's DEEP_WORK share on all people alike, and that the few-teacher-weeks student's
extra in-dist crashes are serenity's, and that it never meditates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rhythm.env.constants import ACTIONS, CRASH_THRESHOLD, METER_ABBREV, condition_order
from rhythm.errors import RhythmError
from rhythm.grader import week_truth
from rhythm.records import each_person_once, file_list, graded_belief, read_episodes, score_field


def meter_crashes(record: dict[str, Any]) -> np.ndarray:
    """One week's crashes on each meter (V, C, P, S, N): the steps after which that meter was below
    ``CRASH_THRESHOLD``, as the env counts a crash."""
    if any(not isinstance(s.get("meters"), list) for s in record["steps"]):
        raise RhythmError(f"{record.get('condition')} person {record.get('seed')}: a step records no meters, which its "
                          "crashes are counted from")
    below = np.array([[m < CRASH_THRESHOLD for m in s["meters"]] for s in record["steps"]], dtype=bool)
    return below.reshape(-1, len(METER_ABBREV)).sum(axis=0)


def belief_reach(records: Sequence[dict[str, Any]]) -> tuple[float, float] | None:
    """How far from 0.5 any number of the weeks' graded beliefs (:func:`rhythm.records.graded_belief`) goes, and how
    far the same people's true (S, M, W) go (:func:`rhythm.grader.week_truth`): ``(stated, truth)``, None when no
    week's last step stated a belief. A stated reach well short of the truth's is a belief that cannot say how
    extreme a person is (a student whose teacher weeks never showed such a person)."""
    stated = [(r, b) for r in records if (b := graded_belief(r)) is not None]
    if not stated:
        return None
    truth = np.array([week_truth(r) for r, _ in stated])
    return float(np.abs(np.array([b for _, b in stated]) - 0.5).max()), float(np.abs(truth - 0.5).max())


def behaviour_profile(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per condition: ``{"episodes", "crashes", "crashes_by_meter": {V: ...}, "behaviour", "belief_mae",
    "belief_reach", "actions": {name: share}}`` (means over episodes; a step's crash on a meter is that meter below
    ``CRASH_THRESHOLD`` after it, as the env counts them; the belief MAE over the episodes that stated one; the
    belief's reach by :func:`belief_reach`; shares over all steps)."""
    by_cond: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_cond.setdefault(r["condition"], []).append(r)
    out = {}
    for cond in sorted(by_cond, key=condition_order):
        eps = by_cond[cond]
        counts = Counter(s["action"] for e in eps for s in e["steps"])
        total = sum(counts.values()) or 1
        by_meter = np.sum([meter_crashes(e) for e in eps], axis=0) / len(eps)
        maes = [mae for e in eps if (mae := score_field(e, "belief_mae")) is not None]
        out[cond] = {
            "episodes": len(eps),
            "crashes": float(np.mean([score_field(e, "crashes", needed=True) for e in eps])),
            "crashes_by_meter": dict(zip(METER_ABBREV, by_meter.tolist(), strict=True)),
            "behaviour": float(np.mean([score_field(e, "behaviour_score", needed=True) for e in eps])),
            "belief_mae": float(np.mean(maes)) if maes else None,
            "belief_reach": belief_reach(eps),
            "actions": {a: counts.get(a, 0) / total for a in ACTIONS},
        }
    return out


def behaviour_table(named: Sequence[tuple[str, dict[str, dict[str, Any]]]]) -> str:
    """Profiles of several agents as one table: a row per (condition, agent); action shares in percent,
    crashes a week on each meter as ``V/C/P/S/N``; the actions no agent played left out."""
    played = [a for a in ACTIONS if any(p[c]["actions"][a] > 0 for _, p in named for c in p)]
    by_meter = "by meter " + "/".join(METER_ABBREV)
    width = max([16, *(len(name) for name, _ in named)])
    head = f"{'condition':9s}  {'agent':{width}s}  people  crashes  {by_meter:>20s}  behaviour  belief MAE  reach (truth)  " + " ".join(f"{a[:6]:>6s}" for a in played)
    lines = [head]
    conds = sorted({c for _, p in named for c in p}, key=condition_order)
    for cond in conds:
        for name, prof in named:
            if cond not in prof:
                continue
            d = prof[cond]
            mae = "      -" if d["belief_mae"] is None else f"{d['belief_mae']:.4f}"
            reach = "-" if d["belief_reach"] is None else "{:.2f} ({:.2f})".format(*d["belief_reach"])
            by_meter = "/".join(f"{d['crashes_by_meter'][m]:.2f}" for m in METER_ABBREV)
            shares = " ".join(f"{100 * d['actions'][a]:6.1f}" for a in played)
            lines.append(f"{cond:9s}  {name:{width}s}  {d['episodes']:6d}  {d['crashes']:7.2f}  {by_meter:>20s}  {d['behaviour']:9.3f}  {mae:>10s}  {reach:>13s}  {shares}")
    return "\n".join(lines)


def label(files: str, depth: int = 1, named: bool = False) -> str:
    """An agent's name in the table: the folder of its episodes file (``runs/eval/sft/eval_results_v2.episodes.jsonl``
    -> ``sft``), or the file's name when it is not eval's; with ``depth`` d, the last d parts of that path; ``named``:
    an eval file's own name too (``runs/eval/train``: two evals written to one folder)."""
    path = Path((file_list(files) or [files])[0])
    if path.name.endswith(".episodes.jsonl") and path.parent.name:
        parts = (*path.parent.parts, path.name.removesuffix(".episodes.jsonl")) if named else path.parent.parts
    else:
        parts = path.parts
    return "/".join(parts[-depth:])


def labels(files: Sequence[str]) -> list[str]:
    """:func:`label` of each agent, each name lengthened by its parent folders until no two agents share one
    (``few/eval/sft`` and ``full/eval/sft`` rather than ``sft`` twice), and by an eval file's own name where its
    folder holds another's (``eval/eval_results_v2`` and ``eval/train``)."""
    depth, named = [1] * len(files), [False] * len(files)
    folder = [Path((file_list(f) or [f])[0]).parent for f in files]
    while True:
        names = [label(f, d, n) for f, d, n in zip(files, depth, named, strict=True)]
        clash = [i for i, n in enumerate(names) if names.count(n) > 1]
        grown = False
        for i in clash:  # two evals in one folder: their own names (beside it); else the folders above
            shared = any(j != i and names[j] == names[i] and folder[j] == folder[i] for j in clash)
            if shared and not named[i] and label(files[i], depth[i] + 1, True) != names[i]:
                named[i], depth[i], grown = True, depth[i] + 1, True
            elif label(files[i], depth[i] + 1, named[i]) != names[i]:
                depth[i], grown = depth[i] + 1, True
        if not grown:
            return names


def _weeks(files: str) -> Iterator[dict[str, Any]]:
    """The weeks of one agent's files (joined with commas), each person once."""
    read = ((where, record) for path in file_list(files) for where, record in read_episodes(path))
    return (record for _, record in each_person_once(read, "one agent's mean would count it double"))


def behaviour_of(files: Sequence[str]) -> str:
    """:func:`behaviour_table` of each episodes file (several joined with commas count as one agent)."""
    profiles = [behaviour_profile(_weeks(f)) for f in files]
    for f, profile in zip(files, profiles, strict=True):
        if not profile:
            raise RhythmError(f"no weeks in {f}")
    return behaviour_table(list(zip(labels(files), profiles, strict=True)))
