"""benchmarks/value_labels.py (docs/grpo-ablation.md, twenty-seventh round): which states it contests, and that a won state's
label, and nothing else, changes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play, replay
from rhythm.agents.filtering import filtered_weeks
from rhythm.agents.registry import make_agent
from rhythm.agents.restore import restoring_action
from rhythm.records import read_episodes, write_episodes
from tests.train.helpers import load_benchmark

value_labels = load_benchmark("value_labels")


def test_contested_states_are_the_rules_where_it_differs_from_the_played_action_and_relabelling_changes_only_the_won(tmp_path: Path) -> None:
    plays = [r.to_dict() for r in play(make_agent("random"), [EpisodeSpec("ood", "train", s) for s in range(4)])]
    states = value_labels.contested(plays, 0.25)
    expected = []  # the rule at the meters each step was chosen on (the week replayed), where it differs from the play
    for i, week in enumerate(plays):
        seen = replay(week["condition"], week["split"], [week["seed"]], np.zeros((1, 0), dtype=np.int64)).start_meters[0]
        for t, step in enumerate(week["steps"][:-1]):  # the last step leads to no week to compare
            rule = restoring_action(seen, t, 0.25)
            if rule is not None and rule != step["action"]:
                expected.append((i, t, rule))
            seen = step["meters"]
    assert sorted((plays.index(r), t, a) for r, t, a in states) == sorted(expected) and len(states) > 2
    assert [t for _, t, _ in states] == sorted(t for _, t, _ in states)  # by step: one batch of futures starts together

    write_episodes(tmp_path / "own.jsonl", filtered_weeks(plays))
    own = [r for _, r in read_episodes(tmp_path / "own.jsonl")]
    record, t, rule = states[0]
    out = value_labels.relabelled(str(tmp_path / "own.jsonl"), {value_labels.key(record): {t: rule}})
    i = plays.index(record)
    changed = [(j, k) for j, (a, b) in enumerate(zip(own, out, strict=True))
               for k, (x, y) in enumerate(zip(a["steps"], b["steps"], strict=True)) if x != y]
    assert changed == [(i, t)]
    assert out[i]["steps"][t]["response"] == own[i]["steps"][t]["response"].rsplit("ACTION: ", 1)[0] + f"ACTION: {rule}"
