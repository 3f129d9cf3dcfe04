"""The bayes filter run on any recorded week: the posterior-mean belief at each step, from that week's own actions
and observations. The benchmark's own inference, free to run (no teacher call): ``rhythm analyze teacher-forced
--filter`` compares a student's beliefs with it, and the few-teacher-weeks quickstart's ``dagger`` stage learns it at the states
the student itself reached (docs/grpo-ablation.md, ninth and seventeenth rounds)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import replay_records, week_actions
from rhythm.agents.posterior import ParticlePosterior
from rhythm.agents.restore import restore_labels
from rhythm.agents.teachers import spec_keys
from rhythm.config import read_recorded, settings_change, write_config
from rhythm.env.constants import ENV_VERSION
from rhythm.errors import RhythmError
from rhythm.locking import output_lock
from rhythm.protocol import format_ending
from rhythm.provenance import made_by
from rhythm.records import (
    JsonlWriter,
    check_output,
    check_protocol,
    check_trainable,
    done_keys,
    episode_key,
    read_episodes,
    sidecar_path,
)

RELABEL_CHUNK = 256
"""Weeks relabelled per batch (the filter plays them in lockstep); each week's labels are its own alone."""


def read_along(records: Sequence[dict[str, Any]], width: int,
               reader: Callable[[np.ndarray], Callable[[ParticlePosterior, np.ndarray, int], np.ndarray]]
               ) -> list[np.ndarray]:
    """The bayes filter walked along each recorded week as played, read at every step before that step's update:
    one ``(steps, width)`` array a week. ``reader(keys)`` is called once per batch of weeks (their person keys) and
    returns ``read(posterior, seen, t)``, the ``(weeks, width)`` reading at step t. Each record needs
    ``condition``, ``split``, ``seed`` and ``steps`` with an ``action`` name; the recorded agent's beliefs play no
    part."""
    out: list[np.ndarray] = [np.zeros((0, width))] * len(records)
    for rows, actions, played in replay_records(records, week_actions):
        keys = spec_keys([EpisodeSpec(str(records[i]["condition"]), str(records[i]["split"]), int(records[i]["seed"]))
                          for i in rows])
        posterior, read = ParticlePosterior(keys), reader(keys)
        weeks = np.zeros((len(rows), actions.shape[1], width))
        for t in range(actions.shape[1]):
            weeks[:, t] = read(posterior, played.seen[:, t], t)
            posterior.update(t, played.seen[:, t], actions[:, t], played.meters[:, t])
        for i, week in zip(rows, weeks, strict=True):
            out[i] = week
    return out


def filter_beliefs(records: Sequence[dict[str, Any]]) -> list[np.ndarray]:
    """The bayes teacher's posterior-mean belief at every step of each week, from that week's own observations and
    actions (:func:`read_along`): one ``(steps, 3)`` array a week. The belief at step t is stated before step t's
    action, as the protocol's is."""
    return read_along(records, 3, lambda keys: lambda posterior, seen, t: posterior.belief()[0])


def with_beliefs(records: list[dict[str, Any]], beliefs: Sequence[np.ndarray],
                 labels: list[list[str | None]] | None = None) -> list[dict[str, Any]]:
    """The same weeks with every reply's BELIEF replaced (rounded as the protocol states it) and its action as
    played, or, where ``labels`` names one (a week's list, a step's action or None), that action. With
    :func:`filter_beliefs`, the teacher's belief at the states a student reached: what ``rhythm analyze
    teacher-forced --filter`` compares with, and what the quickstart's ``dagger`` stage learns (DAgger for the
    belief). The records are copied; each step's ``action`` stays the one played, so each week's observations
    still follow from its actions; every reply parses (``parse_ok``, the score's ``parse_failures`` 0)."""
    out = []
    for i, (record, week) in enumerate(zip(records, beliefs, strict=True)):
        steps = []
        for t, (step, b) in enumerate(zip(record["steps"], week, strict=True)):
            stated = [round(float(x), 2) for x in b]
            action = (labels[i][t] if labels is not None else None) or step["action"]
            # the reply is the protocol's by construction: a parse failure of the week as played is not its own
            steps.append({**step, "belief": stated, "response": format_ending(stated, action), "parse_ok": True})
        score = record.get("score")  # as played, less the parse failures its replies no longer have
        out.append({**record, "steps": steps, **({"score": {**score, "parse_failures": 0}} if isinstance(score, dict) else {})})
    return out


def filtered_weeks(records: list[dict[str, Any]], restore_below: float | None = None) -> list[dict[str, Any]]:
    """:func:`with_beliefs` of :func:`filter_beliefs`: DAgger labels for the belief, the
    teacher's belief at the states the recorded agent reached, its actions as played (``rhythm relabel``, the
    quickstart's ``dagger`` stage). With ``restore_below``, the action is the restore rule's wherever a meter is
    below it and the rule names one (:func:`rhythm.agents.restore.restore_labels`; docs/grpo-ablation.md, twenty-seventh
    round). Each week says so in ``relabelled``; its ``agent``, ``score`` and ``config_hash`` stay those of the
    week as played."""
    labels = restore_labels(records, restore_below) if restore_below is not None else None
    how = {"belief": "bayes filter", "action": "as played" if labels is None else f"restore rule below {restore_below}"}
    return [{**week, "relabelled": how} for week in with_beliefs(records, filter_beliefs(records), labels)]


def relabel_file(episodes: str, output: str, restore_below: float | None = None, *, resume: bool = False,
                 bars: Callable[[str, int], Callable[[int], None]] | None = None, wait_lock: bool = False,
                 say: Callable[[str], None] | None = None) -> tuple[int, int]:
    """``rhythm relabel``: the weeks of ``episodes`` (a JSONL file or ``-``) as :func:`filtered_weeks` to ``output``
    (``-``: stdout), each batch written as it is labelled, and beside a file output its settings
    (``OUTPUT.config.yaml``). A week that SFT would refuse (an eval-split person) is refused before anything is
    written. ``resume`` skips the weeks already in ``output``, which must have been relabelled from the same
    file with the same ``restore_below``. The output's lock is held throughout (:mod:`rhythm.locking`: a second
    run on it stops at once, or waits with ``wait_lock``). ``bars(label, total)`` gives the progress's
    ``advance(n)``. Returns ``(weeks relabelled, weeks already there)``."""
    check_output(output, inputs=[episodes])
    with output_lock(output, wait=wait_lock, say=say):
        return _relabel(episodes, output, restore_below, resume, bars)


def _relabel(episodes: str, output: str, restore_below: float | None, resume: bool,
             bars: Callable[[str, int], Callable[[int], None]] | None) -> tuple[int, int]:
    records = []
    for where, record in read_episodes(episodes):
        check_trainable(record, where)  # what relabel writes is SFT data: refused here, not at the next stage
        check_protocol(record, where)
        if record.get("env_version") != ENV_VERSION:  # the filter replays its actions in this env: another person
            raise RhythmError(f"{where}: a week of env {record.get('env_version')} (this rhythm: {ENV_VERSION}); the "
                              "filter would read it through this env's dynamics: relabel weeks played by this rhythm")
        records.append(record)
    if not records:
        raise RhythmError(f"no weeks in {episodes}")
    settings = {"episodes": _resolved(episodes), "output": output, "restore_below": restore_below}
    done: set = set()
    if resume and output != "-":
        recorded = read_recorded(sidecar_path(Path(output)))
        if recorded is not None:
            before = {**recorded[0], "episodes": _resolved(recorded[0].get("episodes")), "output": output}
            if differs := settings_change(before, settings):
                raise RhythmError(f"{output} was relabelled with other settings ({differs}); resume with them, or "
                                  "write another --output")
        done = set(done_keys(Path(output)))
    todo = [r for r in records if episode_key(r) not in done]
    advance = bars("relabel", len(todo)) if bars is not None else None
    with JsonlWriter(output, resume=resume) as writer:  # each batch written as it is labelled: a kill keeps them
        if output != "-":  # what made the labels, beside them (as rhythm generate writes its config)
            write_config(settings, sidecar_path(Path(output)), made_by(stage="relabel"))
        for i in range(0, len(todo), RELABEL_CHUNK):
            batch = todo[i : i + RELABEL_CHUNK]
            for week in filtered_weeks(batch, restore_below):
                writer.write(week)
            if advance is not None:
                advance(len(batch))
    return len(todo), len(done)


def _resolved(path: Any) -> Any:
    """An input path as :func:`relabel_file` records and compares it: resolved (stdin as ``-``; a recorded one
    written before paths were resolved is resolved here too)."""
    return path if not isinstance(path, str) or path == "-" else str(Path(path).expanduser().resolve())
