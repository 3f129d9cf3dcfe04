"""``model:PATH`` agents: the tiny student evaluated end to end, lockstep batching that does not change
replies, parse failures counted, LoRA adapters found and loaded onto their base."""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from rhythm.agents import make_agent
from rhythm.agents.base import BatchObservation, EpisodeSpec
from rhythm.env.constants import ACTIONS, EPISODE_STEPS
from rhythm.episodes import play
from rhythm.errors import RhythmError
from rhythm.eval.evaluate import EvalConfig, ModelOptions
from rhythm.protocol import FALLBACK_ACTION

SMALL = ModelOptions(max_new_tokens=6, device="cpu")
CONDITION_KEYS = {
    "episodes", "final_score", "final_score_v2", "behaviour_score", "belief_mae", "belief_mae_prior",
    "win_rate_vs", "parse_failure_rate", "action_counts", "normalized_score",
}


@pytest.fixture(scope="module")
def tiny_agent(tiny_student: Path):
    from rhythm.eval.model_agent import ModelAgent

    return ModelAgent(str(tiny_student), SMALL)


@pytest.fixture(scope="module")
def observations() -> list[str]:
    """Observation texts of different episodes and steps (so prompt lengths differ)."""
    recs = play(make_agent("heuristic"), [EpisodeSpec("in-dist", "eval", s) for s in range(3)])
    return [recs[0].steps[0].observation, recs[1].steps[2].observation, recs[2].steps[27].observation]


def test_eval_of_the_tiny_model_end_to_end(run_cli, tiny_student: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval_results_v2.json"
    code, _, err = run_cli(
        "eval", "--agent", f"model:{tiny_student}", "--condition", "all", "--episodes", "2", "--batch-size", "4",
        "--set", "model.max_new_tokens=6", "--set", "model.device=cpu", "--output", str(out), "-q",
    )
    assert code == 0, err
    assert "norm" in err and "parse fail" in err  # the stderr table
    res = orjson.loads(out.read_bytes())
    assert res["agent"] == f"model:{tiny_student}" and res["grader"] == "v3"
    assert res["config"]["model"]["batch_size"] == 4 and res["config"]["model"]["max_new_tokens"] == 6
    assert set(res["conditions"]) == {"in-dist", "ood", "discrete"}
    for cond in res["conditions"].values():
        assert CONDITION_KEYS <= set(cond)
        assert cond["episodes"] == 2
        for key in ("final_score", "final_score_v2", "behaviour_score"):
            lo, hi = cond[key]["ci95"]
            assert lo <= cond[key]["mean"] <= hi
        assert set(cond["win_rate_vs"]) == {"random", "heuristic"}
        assert all(0.0 <= v <= 1.0 for v in cond["win_rate_vs"].values())
        assert isinstance(cond["normalized_score"], float)
        assert cond["belief_mae_prior"] > 0
        # a random-init model never writes a valid ACTION line: every step is a counted fallback
        assert cond["parse_failure_rate"] == 1.0
        assert cond["action_counts"][FALLBACK_ACTION] == 2 * EPISODE_STEPS
        assert sum(cond["action_counts"].values()) == 2 * EPISODE_STEPS
        assert cond["belief_mae"]["mean"] is None
    lines = out.with_name("eval_results_v2.episodes.jsonl").read_bytes().splitlines()
    assert len(lines) == 6
    for line in lines:
        rec = orjson.loads(line)
        assert rec["agent"] == f"model:{tiny_student}" and rec["model"] == str(tiny_student)
        assert rec["score"]["parse_failures"] == EPISODE_STEPS
        assert all(s["response"] and s["parse_ok"] is False and s["action"] == FALLBACK_ACTION for s in rec["steps"])
        assert 0 < rec["usage"]["completion_tokens"] <= 6 * EPISODE_STEPS
        assert rec["usage"]["prompt_tokens"] > 300 * EPISODE_STEPS  # the system prompt alone is ~320 tokens


def test_batched_replies_equal_one_at_a_time(tiny_agent, observations: list[str]) -> None:
    prompts = [tiny_agent.prompt_text(o) for o in observations]
    lengths = {len(tiny_agent.tokenizer(p)["input_ids"]) for p in prompts}
    assert len(lengths) == 3  # different lengths, so the batch is padded
    batched = tiny_agent.generate(prompts)
    alone = [tiny_agent.generate([p])[0] for p in prompts]
    assert batched == alone
    # without the shared system-prompt cache the replies are the same too
    from rhythm.eval.model_agent import ModelAgent

    plain = ModelAgent(tiny_agent.source.path, replace(SMALL, prefix_cache=False))
    assert plain._shared_prefix() is None and tiny_agent._shared_prefix() is not None
    assert plain.generate(prompts) == batched
    for text, n_prompt, n_completion in batched:
        assert isinstance(text, str) and n_prompt in lengths and 1 <= n_completion <= SMALL.max_new_tokens


def test_all_live_episodes_share_one_generate_per_step(tiny_agent) -> None:
    specs = [EpisodeSpec("discrete", "eval", s) for s in range(3)]
    try:
        tiny_agent.options = replace(SMALL, batch_size=64)
        before = tiny_agent.calls
        records = play(tiny_agent, specs)
        assert tiny_agent.calls - before == EPISODE_STEPS  # 3 episodes, one call per step
        tiny_agent.options = replace(SMALL, batch_size=2)
        before = tiny_agent.calls
        again = play(tiny_agent, specs)
        assert tiny_agent.calls - before == 2 * EPISODE_STEPS  # chunks of 2: two calls per step
    finally:
        tiny_agent.options = SMALL
    # greedy and independent of batch composition: the same replies either way
    assert [s.response for r in records for s in r.steps] == [s.response for r in again for s in r.steps]
    assert all(r.usage["prompt_tokens"] > 0 and r.usage["completion_tokens"] > 0 for r in records)


def test_replies_that_never_parse_are_counted_not_fatal(tiny_agent, monkeypatch: pytest.MonkeyPatch) -> None:
    replies = [
        "Company seems to drain them.\nBELIEF: S=0.2 M=0.6 W=0.5\nACTION: meditate",
        "I am not sure what to do here.",  # no action line at all
        "ACTION: FLY_TO_THE_MOON",  # an action that does not exist
    ]
    monkeypatch.setattr(tiny_agent, "generate", lambda prompts, seed=None: [(r, 10, 5) for r in replies[: len(prompts)]])
    specs = [EpisodeSpec("in-dist", "eval", s) for s in range(3)]
    records = play(tiny_agent, specs)
    good, silent, bogus = records
    assert all(s.parse_ok and s.action == "MEDITATE" and s.belief == [0.2, 0.6, 0.5] for s in good.steps)
    for rec in (silent, bogus):
        assert all(not s.parse_ok and s.action == FALLBACK_ACTION and s.belief is None for s in rec.steps)
        assert rec.score["parse_failures"] == EPISODE_STEPS
    assert good.score["parse_failures"] == 0 and good.score["belief_mae"] is not None
    assert silent.steps[0].response == replies[1]  # the reply is kept, so the failure can be read
    assert good.usage["prompt_tokens"] == 10 * EPISODE_STEPS


def test_sampling_is_seeded(tiny_agent, observations: list[str]) -> None:
    prompts = [tiny_agent.prompt_text(o) for o in observations]
    tiny_agent.options = replace(SMALL, do_sample=True, temperature=1.0, max_new_tokens=12)
    try:
        a = tiny_agent.generate(prompts, seed=1)
        b = tiny_agent.generate(prompts, seed=1)
        c = tiny_agent.generate(prompts, seed=2)
        tiny_agent.options = replace(SMALL, max_new_tokens=12)
        greedy = tiny_agent.generate(prompts)
    finally:
        tiny_agent.options = SMALL
    assert a == b
    assert a != c and a != greedy


def _make_adapter(base: Path, out: Path, *, with_tokenizer: bool) -> Path:
    """A LoRA adapter on the tiny student with non-zero weights (so it changes the model's output)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base)
    config = LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    with warnings.catch_warnings():  # peft calls a transformers method deprecated in v5
        warnings.simplefilter("ignore", FutureWarning)
        peft_model = get_peft_model(model, config)
    peft_model.save_pretrained(out)
    if with_tokenizer:
        AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


def test_lora_adapter_is_detected_and_loaded_onto_its_base(tiny_student: Path, tiny_agent, observations, tmp_path: Path) -> None:
    from rhythm.eval.model_agent import ModelAgent, adapter_config

    adapter = _make_adapter(tiny_student, tmp_path / "adapter", with_tokenizer=False)
    cfg = adapter_config(str(adapter))
    assert cfg is not None and cfg["base_model_name_or_path"] == str(tiny_student)
    assert adapter_config(str(tiny_student)) is None
    agent = ModelAgent(str(adapter), SMALL)
    assert agent.source.adapter == str(adapter) and agent.source.base == str(tiny_student)
    assert agent.source.tokenizer == str(tiny_student)  # the adapter ships no tokenizer
    prompts = [agent.prompt_text(o) for o in observations]
    assert agent.generate(prompts) != tiny_agent.generate(prompts)  # the adapter's weights are in use
    # a tokenizer saved with the adapter is preferred; an explicit base overrides the recorded one
    with_tok = _make_adapter(tiny_student, tmp_path / "adapter-tok", with_tokenizer=True)
    moved_base = tmp_path / "elsewhere"
    shutil.copytree(tiny_student, moved_base)
    agent2 = ModelAgent(str(with_tok), replace(SMALL, base_model=str(moved_base)))
    assert agent2.source.tokenizer == str(with_tok) and agent2.source.base == str(moved_base)


def test_adapter_whose_recorded_tiny_base_moved_finds_the_local_tiny_student(tiny_student: Path, tmp_path: Path) -> None:
    from rhythm.eval.model_agent import ModelAgent

    adapter = _make_adapter(tiny_student, tmp_path / "adapter", with_tokenizer=False)
    cfg_path = adapter / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = f"/machine/that/trained/it/{tiny_student.name}"
    cfg_path.write_text(json.dumps(cfg))
    assert ModelAgent(str(adapter), SMALL).source.base == str(tiny_student)
    cfg["base_model_name_or_path"] = "/machine/that/trained/it/some-other-model"
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(RhythmError, match="some-other-model"):
        ModelAgent(str(adapter), SMALL)


def test_bad_model_input_is_one_line(run_cli, tiny_student: Path, tmp_path: Path) -> None:
    from rhythm.eval.model_agent import ModelAgent, pick_device, pick_dtype

    code, _, err = run_cli("eval", "--agent", "model:./no/such/model", "--episodes", "1", "--output", str(tmp_path / "x.json"))
    assert code == 2 and err.strip().count("\n") == 0 and "model path not found" in err
    code, _, err = run_cli("eval", "--agent", "model:", "--episodes", "1")
    assert code == 2 and "needs an argument" in err
    with pytest.raises(RhythmError, match="batch_size"):
        ModelAgent(str(tiny_student), replace(SMALL, batch_size=0))
    with pytest.raises(RhythmError, match="not a LoRA adapter"):
        ModelAgent(str(tiny_student), replace(SMALL, base_model="rhythm-tiny"))
    import torch

    if not torch.cuda.is_available():
        assert pick_device("auto") in ("cpu", "mps")
        with pytest.raises(RhythmError, match="CUDA is not available"):
            pick_device("cuda")
    with pytest.raises(RhythmError, match="unknown device"):
        pick_device("tpu")
    assert pick_dtype("auto", "cpu") == torch.float32
    assert pick_dtype("auto", "mps") == torch.float16
    assert pick_dtype("bf16", "cpu") == torch.bfloat16
    with pytest.raises(RhythmError, match="unknown dtype"):
        pick_dtype("float8", "cpu")


def test_act_answers_every_live_episode(tiny_agent) -> None:
    import numpy as np

    from rhythm.env.render import render_observation

    tiny_agent.reset([EpisodeSpec("ood", "eval", s) for s in range(5)])
    meters = np.full((5, 5), 0.5)
    zeros = np.zeros((5, 5))
    prompts = [render_observation(0, meters[i], -1, zeros[i], zeros[i], []) for i in range(5)]
    obs = BatchObservation(0, meters, np.full(5, -1), zeros, zeros, prompts)
    decisions = tiny_agent.act(obs)
    assert len(decisions) == 5
    assert all(0 <= d.action < len(ACTIONS) and set(d.usage) == {"prompt_tokens", "completion_tokens"} for d in decisions)
    # identical observations, greedy decoding: identical replies, whatever their place in the batch
    assert len({d.text for d in decisions}) == 1


def test_eval_config_routes_model_options() -> None:
    from rhythm.eval.evaluate import agent_options

    cfg = EvalConfig(agent="model:x", model=replace(SMALL, batch_size=3))
    assert agent_options(cfg, "model:x").batch_size == 3
