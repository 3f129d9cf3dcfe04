"""GRPO prompts from recorded episodes: the columns the rewards need, exact replay of every state,
deterministic subsampling, episode-mode rows, and bad records named by file:line."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.env.batched import BatchedRhythmEnv
from rhythm.env.constants import ACTION_INDEX, EPISODE_STEPS
from rhythm.env.render import METER_HEADER, when
from rhythm.errors import RhythmError
from rhythm.protocol import SYSTEM_PROMPT, format_ending, parse_reply, record_conversation
from rhythm.train.grpo.data import (
    PromptOptions,
    build_prompts,
    episode_keys,
    episode_rows,
    parse_placeholder,
    subsample,
)

from .helpers import write_episodes, write_v1_episodes


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    path = tmp_path_factory.mktemp("grpodata") / "teacher.jsonl"
    records = write_episodes(path, [0, 1, 2])
    ood = write_episodes(path.with_name("ood.jsonl"), [5], condition="ood")
    return path, records, path.with_name("ood.jsonl"), ood


def test_one_prompt_per_step_with_the_state_columns(teacher):
    path, records, ood_path, ood = teacher
    rows, report = build_prompts([str(path), str(ood_path)])
    assert len(rows) == 4 * EPISODE_STEPS and report.prompts == len(rows) and report.episodes == 4
    assert report.by_condition == {"in-dist": 84, "ood": 28} and report.by_source == {"bayes": 112}
    assert report.episodes_replayed == 4
    by_key = {(r["condition"], r["seed"], r["t"]): r for r in rows}
    for rec in [*records, *ood]:
        actions = [s["action"] for s in rec["steps"]]
        for step in rec["steps"]:
            row = by_key[(rec["condition"], rec["seed"], step["t"])]
            # protocol v2: the conversation up to step t, the recorded teacher's earlier replies in it
            t = step["t"]
            assert row["prompt"] == record_conversation(rec, t)
            assert row["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}
            assert [m["role"] for m in row["prompt"][1:]] == ["user", "assistant"] * t + ["user"]
            assert row["prompt"][-1]["content"] == step["observation"]
            assert [m["content"] for m in row["prompt"][2::2]] == [s["response"] for s in rec["steps"][:t]]
            assert row["split"] == "train" and row["prefix"] == actions[: step["t"]]
            assert row["episode"] == f"{rec['condition']}/train/{rec['seed']}" and row["source"] == "bayes"
    assert set(rows[0]) == {"prompt", "condition", "split", "seed", "t", "prefix", "episode", "source"}


def test_prefix_replays_to_the_recorded_state(teacher):
    """Replaying a row's prefix reproduces the meters recorded after the previous step, bit for bit, and
    the observation the teacher saw (its meters line) comes from that state."""
    path, records, _, _ = teacher
    rows, _ = build_prompts(str(path))
    by_key = {(r["seed"], r["t"]): r for r in rows}
    for rec in records:
        for t in (1, 9, 27):
            row = by_key[(rec["seed"], t)]
            env = BatchedRhythmEnv(row["condition"], row["split"], 1)
            env.reset(seed=[row["seed"]])
            for name in row["prefix"]:
                env.step_raw(np.array([ACTION_INDEX[name]]))
            assert env.state.t == t
            assert env.state.meters[0].tolist() == rec["steps"][t - 1]["meters"]
            shown = row["prompt"][-1]["content"].splitlines()[0]
            assert shown == f"{when(t)}. {METER_HEADER} " + " ".join(f"{v:.2f}" for v in env.state.meters[0])


def test_strip_reasoning_cuts_earlier_replies_to_the_protocol_lines(teacher):
    path, records, _, _ = teacher
    full, _ = build_prompts(str(path))
    rows, _ = build_prompts(str(path), PromptOptions(strip_reasoning=True))
    assert [(r["seed"], r["t"]) for r in rows] == [(r["seed"], r["t"]) for r in full]
    by_seed = {r["seed"]: r for r in records}
    for row, whole in zip(rows, full):
        steps = by_seed[row["seed"]]["steps"]
        said = [format_ending(p.belief, p.action) for p in (parse_reply(s["response"]) for s in steps[: row["t"]])]
        assert [m["content"] for m in row["prompt"][2::2]] == said
        assert [m["content"] for m in row["prompt"][1::2]] == [m["content"] for m in whole["prompt"][1::2]]


def test_a_v1_file_is_refused_with_one_line(teacher, tmp_path):
    _, records, _, _ = teacher
    old = write_v1_episodes(tmp_path / "old.jsonl", records[:1])
    with pytest.raises(RhythmError) as err:
        build_prompts(str(old))
    msg = str(err.value)
    assert msg.startswith(f"{old}:1: record is text protocol v1, this rhythm speaks v2") and "\n" not in msg
    # episode mode takes only the people from the data (the student writes its own weeks): read correctly
    keys, _ = episode_keys(str(old))
    assert keys == [("in-dist", "train", records[0]["seed"])]


def test_eval_split_weeks_are_refused_as_training_data(teacher, tmp_path):
    """As rhythm sft: eval's people stay unseen, whether their weeks would be prompts (step mode) or the people the
    student plays (episode mode)."""
    _, records, _, _ = teacher
    leaked = {**records[1], "split": "eval"}
    path = tmp_path / "leaked.jsonl"
    path.write_bytes(orjson.dumps(records[0]) + b"\n" + orjson.dumps(leaked) + b"\n")
    for read in (build_prompts, episode_keys):
        with pytest.raises(RhythmError, match=r"leaked\.jsonl:2: a week of an eval-split person \(in-dist/eval/1\)"):
            read(str(path))


def test_a_record_that_does_not_replay_is_refused(teacher, tmp_path):
    path, records, _, _ = teacher
    bad = dict(records[1])
    bad["steps"] = [dict(s) for s in bad["steps"]]
    bad["steps"][6]["meters"] = [m + 0.01 for m in bad["steps"][6]["meters"]]
    out = tmp_path / "tampered.jsonl"
    out.write_bytes(orjson.dumps(records[0]) + b"\n" + orjson.dumps(bad) + b"\n")
    with pytest.raises(RhythmError, match=r"tampered.jsonl:2: episode in-dist/train/1 does not replay \(meters after step 6"):
        build_prompts(str(out))


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["steps"].pop(3), "step 3 has t=4"),
    (lambda r: r["steps"][2].update(action="DANCE"), "step 2 has unknown action 'DANCE'"),
    (lambda r: r.update(condition="moon"), "unknown condition 'moon'"),
])
def test_bad_records_name_file_and_line(teacher, tmp_path, edit, message):
    _, records, _, _ = teacher
    rec = orjson.loads(orjson.dumps(records[0]))
    edit(rec)
    out = tmp_path / "bad.jsonl"
    out.write_bytes(orjson.dumps(rec) + b"\n")
    with pytest.raises(RhythmError, match=f"bad.jsonl:1: .*{message}"):
        build_prompts(str(out))


def test_subsampling_is_deterministic_and_spreads_over_slots(teacher):
    path, _, _, _ = teacher
    full, _ = build_prompts(str(path))
    strided, _ = build_prompts(str(path), PromptOptions(every_k_steps=4, seed=3))
    again, _ = build_prompts(str(path), PromptOptions(every_k_steps=4, seed=3))
    assert strided == again and len(strided) == 3 * 7
    for seed in (0, 1, 2):
        ts = [r["t"] for r in strided if r["seed"] == seed]
        assert len(ts) == 7 and len({t % 4 for t in ts}) == 1 and np.diff(ts).tolist() == [4] * 6
    offsets = {seed: [r["t"] for r in strided if r["seed"] == seed][0] for seed in (0, 1, 2)}
    other = {seed: [r["t"] for r in build_prompts(str(path), PromptOptions(every_k_steps=4, seed=s))[0] if r["seed"] == seed][0]
             for s in range(6) for seed in (0, 1, 2)}
    assert len(set(offsets.values()) | set(other.values())) > 1, "every episode kept the same slot"
    capped, _ = build_prompts(str(path), PromptOptions(max_prompts=10, seed=7))
    assert capped == build_prompts(str(path), PromptOptions(max_prompts=10, seed=7))[0]
    assert len(capped) == 10 and all(r in full for r in capped)
    assert capped != build_prompts(str(path), PromptOptions(max_prompts=10, seed=8))[0]
    assert [full.index(r) for r in capped] == sorted(full.index(r) for r in capped)  # original order kept
    assert subsample(full, None, 0) is full
    with pytest.raises(RhythmError, match="every_k_steps must be >= 1"):
        build_prompts(str(path), PromptOptions(every_k_steps=0))


def test_rollout_records_become_prompts_the_same_way(teacher):
    """Records played live (as the student's rollouts are, through rhythm.agents.episodes.play) convert like a file's."""
    path, _, _, _ = teacher
    played = [r.to_dict() for r in play(make_agent("heuristic"), [EpisodeSpec("discrete", "train", 4)])]
    rows, report = build_prompts(str(path), PromptOptions(), played)
    mine = [r for r in rows if r["source"] == "heuristic"]
    assert len(mine) == EPISODE_STEPS and report.by_source == {"bayes": 84, "heuristic": 28}
    assert mine[5]["prefix"] == [s["action"] for s in played[0]["steps"][:5]] and mine[5]["condition"] == "discrete"


def test_episode_mode_rows_keep_whole_weeks_together(teacher):
    path, _, ood_path, _ = teacher
    keys, report = episode_keys([str(path), str(ood_path)])
    assert keys == [("in-dist", "train", 0), ("in-dist", "train", 1), ("in-dist", "train", 2), ("ood", "train", 5)]
    rows = episode_rows(keys, every_k_turns=7, seed=1, report=report)
    assert len(rows) == 4 * 4 and report.prompts == 16 and report.episodes == 4
    for i in range(0, 16, 4):  # each person's turns are consecutive: 0, 7, 14, 21
        block = rows[i : i + 4]
        assert [r["t"] for r in block] == [0, 7, 14, 21] and len({r["episode"] for r in block}) == 1
        for r in block:
            assert parse_placeholder(r["prompt"]) == (r["condition"], r["split"], r["seed"], r["t"])
    assert rows == episode_rows(keys, every_k_turns=7, seed=1)
    assert [r["episode"] for r in episode_rows(keys, every_k_turns=7, max_episodes=2, seed=1)][::4] == [r["episode"] for r in rows][:8:4]
    with pytest.raises(ValueError, match="not an episode-mode prompt"):
        parse_placeholder([{"role": "user", "content": "Day 1 (Mon morning)"}])
