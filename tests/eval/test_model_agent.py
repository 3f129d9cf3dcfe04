"""``model:PATH`` agents: the tiny student evaluated end to end, each episode one conversation whose KV
cache is kept across the week (replies equal to a loop that re-encodes the conversation every step, and
to each episode played alone), parse failures counted, LoRA adapters found and loaded onto their base."""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest

from rhythm.agents.base import BatchObservation, EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.env import RhythmEnv
from rhythm.env.constants import ACTIONS, EPISODE_STEPS
from rhythm.errors import RhythmError
from rhythm.eval.evaluate import EvalConfig
from rhythm.grader import MAE_PRIOR
from rhythm.model.load import ModelOptions, weights_digest
from rhythm.protocol import FALLBACK_ACTION, conversation, record_conversation

SMALL = ModelOptions(max_new_tokens=6, device="cpu")
CONDITION_KEYS = {
    "episodes", "final_score", "final_score_v2", "behaviour_score", "belief_mae", "belief_mae_prior",
    "win_rate_vs", "parse_failure_rate", "action_counts", "normalized_score",
}


@pytest.fixture(scope="module")
def tiny_agent(tiny_student: Path):
    from rhythm.agents.model import ModelAgent

    return ModelAgent(str(tiny_student), SMALL)


def first_step(specs: list[EpisodeSpec]) -> BatchObservation:
    """The observation every episode of ``specs`` (one condition and split) shows at step 0."""
    from rhythm.env.batched import BatchedRhythmEnv
    from rhythm.env.render import render_observation

    env = BatchedRhythmEnv(specs[0].condition, specs[0].split, len(specs))
    env.reset(seed=[e.seed for e in specs])
    st = env.state
    prompts = [render_observation(0, st.meters[i], -1, st.delta[i], st.anomaly[i]) for i in range(len(specs))]
    return BatchObservation(0, st.meters, st.last_action, st.delta, st.anomaly, prompts)


def first_replies(agent, specs: list[EpisodeSpec]) -> list[str]:
    agent.reset(specs)
    return [d.text for d in agent.act(first_step(specs))]


@pytest.fixture(scope="module")
def agent64(tiny_student: Path):
    """The tiny student in float64 with its weights redrawn (std 0.1, seeded), so greedy replies vary in
    content and length (some stop early on <|im_end|>) and no two logits tie: any difference between
    two ways of computing a reply is then a real difference in what the model saw, not rounding."""
    import torch

    from rhythm.agents.model import ModelAgent

    agent = ModelAgent(str(tiny_student), replace(SMALL, max_new_tokens=6))
    agent.model.to(torch.float64)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, weight in agent.model.named_parameters():
            if "norm" not in name:
                weight.copy_(torch.randn(weight.shape, generator=g, dtype=weight.dtype) * 0.1)
    return agent


WEEKS = [EpisodeSpec("in-dist", "eval", s) for s in range(3)]


@pytest.fixture(scope="module")
def weeks64(agent64) -> list[dict]:
    """Three whole weeks played in one lockstep batch with a kept KV cache (the eval path)."""
    agent64.options = replace(agent64.options, batch_size=4)
    records = [r.to_dict() for r in play(agent64, WEEKS)]
    engine = agent64.engines[0]
    return records, engine.prefill_tokens, [list(ids) for ids in engine._ids]


@pytest.mark.slow
def test_eval_of_the_tiny_model_end_to_end(run_cli, tiny_student: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval_results_v2.json"
    code, _, err = run_cli(
        "eval", "--agent", f"model:{tiny_student}", "--condition", "all", "--episodes", "2", "--batch-size", "4",
        "--set", "model.max_new_tokens=6", "--set", "model.device=cpu", "--output", str(out), "-q",
    )
    assert code == 0, err
    assert "norm" in err and "parse fail" in err  # the stderr table
    assert "replies cut at the token cap" in " ".join(err.split())  # a random-init model runs into max_new_tokens
    res = orjson.loads(out.read_bytes())
    assert res["agent"] == f"model:{tiny_student}" and res["grader"] == "v3"
    assert res["weights"] == {f"model:{tiny_student}": weights_digest(str(tiny_student))}
    # what "auto" became here (a GPU eval of the same config would say bfloat16 and cuda)
    assert res["config"]["model"]["dtype"] == "auto" and res["runtime"] == {f"model:{tiny_student}": {"device": "cpu", "dtype": "float32"}}
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
        refs = cond["references"]
        expected = (cond["final_score"]["mean"] - refs["random"]["final_score"]) / (
            refs["oracle"]["final_score"] - refs["random"]["final_score"])
        assert cond["normalized_score"] == pytest.approx(expected, abs=1e-6)  # (agent - random) / (oracle - random)
        assert cond["belief_mae_prior"] > 0
        # a random-init model never writes a valid ACTION line: every step is a counted fallback
        assert cond["parse_failure_rate"] == 1.0 and 0 < cond["cut_reply_rate"] <= 1.0
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
        assert rec["usage"]["cost_usd"] == 0.0  # a local student: known to cost nothing, not unknown
        # each step's prompt is the whole conversation so far (the system prompt is one tiny token)
        assert rec["usage"]["prompt_tokens"] > EPISODE_STEPS * (EPISODE_STEPS - 1) / 2 * 10


def reencoded(agent, record: dict, t: int) -> str:
    """Step ``t``'s greedy reply from a batch-1 loop that re-encodes the whole conversation, no cache kept."""
    from rhythm.model.lockstep import reencode_reply

    return reencode_reply(agent.model, agent.tokenizer, record_conversation(record, t), stop_ids=agent.stop_ids,
                          max_new_tokens=agent.options.max_new_tokens)


@pytest.mark.slow
def test_kv_reuse_eval_equals_the_loop_that_reencodes_the_conversation(agent64, weeks64) -> None:
    """Every greedy reply of three whole weeks, played in lockstep with the KV cache kept, equals the
    reply of a batch-1 loop that re-encodes the whole conversation each step (a plain transformers loop)."""
    records, _, _ = weeks64
    for rec in records:
        for t, step in enumerate(rec["steps"]):
            assert step["response"] == reencoded(agent64, rec, t), (rec["seed"], t)


def test_kv_reuse_equals_reencoding_at_the_start_middle_and_end_of_a_week(agent64, weeks64) -> None:
    """The fast spot check of the test above (the whole of it is marked slow)."""
    records, _, _ = weeks64
    for t in (0, 13, 27):
        assert records[1]["steps"][t]["response"] == reencoded(agent64, records[1], t)


def test_each_token_is_prefilled_once_and_the_batch_is_ragged(agent64, weeks64) -> None:
    records, prefilled, ids = weeks64
    tok = agent64.tokenizer
    for rec, kept in zip(records, ids, strict=True):
        # the cache holds exactly the rendered conversation up to the last step's generation prompt
        text = tok.apply_chat_template(record_conversation(rec, 27), add_generation_prompt=True, tokenize=False)
        assert kept == tok(text, add_special_tokens=False)["input_ids"]
    assert prefilled == sum(len(k) for k in ids)  # each step prefilled only its new turn, never the past
    lengths = [len(tok(s["response"], add_special_tokens=False)["input_ids"]) for r in records for s in r["steps"]]
    assert min(lengths) < agent64.options.max_new_tokens and len(set(lengths)) > 2  # ragged turns


def test_equal_conversations_in_a_batch_get_the_ids_each_gets_alone(agent64) -> None:
    """Equal conversations of a batch (a branch's futures before they part) are rendered and tokenized once; each
    row's context is still exactly its own rendered conversation, and a row that parts from its twin gets its own."""
    from rhythm.model.lockstep import LockstepChat

    tok = agent64.tokenizer
    engine = LockstepChat(agent64.model, tok, stop_ids=agent64.stop_ids, max_new_tokens=3)
    engine.reset(3)
    first = [conversation(["obs 0"]), conversation(["obs 0"]), conversation(["other 0"])]
    engine.step(first)
    second = [conversation(["obs 0", "obs 1"], ["ACTION: SLEEP"]), conversation(["obs 0", "obs 1b"], ["ACTION: SLEEP"]),
              conversation(["other 0", "obs 1"], ["ACTION: SLEEP"])]
    turns = engine.step(second)
    for messages, turn in zip(second, turns, strict=True):
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert turn.prompt_ids == tok(text, add_special_tokens=False)["input_ids"]
    assert turns[0].prompt_ids != turns[1].prompt_ids


def test_a_reply_that_reaches_the_token_cap_is_counted_as_cut(agent64, weeks64) -> None:
    """A reply that reaches max_new_tokens before a stop token is cut; each decision's usage counts it, and eval
    reports the share of cut replies (a parse failure among them may only need a higher cap)."""
    from rhythm.eval.evaluate import cut_reply_rate
    from rhythm.model.lockstep import LockstepChat
    from rhythm.records import EpisodeRecord

    def replies(stop_ids: list[int]) -> list:
        engine = LockstepChat(agent64.model, agent64.tokenizer, stop_ids=stop_ids, max_new_tokens=6)
        engine.reset(8)
        return engine.step([conversation([f"obs {i}"]) for i in range(8)])

    first = replies(agent64.stop_ids)
    stops = [*agent64.stop_ids, first[0].completion_ids[0]]  # the first reply's first token now stops it
    turns = replies(stops)
    assert not turns[0].cut and turns[0].completion_ids == first[0].completion_ids[:1]
    assert [t.cut for t in turns] == [t.completion_ids[-1] not in stops for t in turns]
    assert all(len(t.completion_ids) == 6 for t in turns if t.cut) and any(t.cut for t in turns)
    records, _, _ = weeks64
    counts = [r["usage"]["cut_replies"] for r in records]
    assert all(0 <= n <= EPISODE_STEPS for n in counts) and 0 < sum(counts) < len(records) * EPISODE_STEPS
    rate = cut_reply_rate([EpisodeRecord.from_dict(r) for r in records])
    assert rate == round(sum(counts) / (len(records) * EPISODE_STEPS), 6)
    scripted = [EpisodeRecord.from_dict({**r, "usage": {"prompt_tokens": 0, "completion_tokens": 0}}) for r in records]
    assert cut_reply_rate(scripted) is None


@pytest.mark.slow  # > 3 s on 2 cores
def test_a_ragged_batch_equals_each_episode_alone(agent64, weeks64) -> None:
    records, _, _ = weeks64
    try:
        agent64.options = replace(agent64.options, batch_size=1)
        alone = [play(agent64, [spec])[0].to_dict() for spec in WEEKS[:2]]
    finally:
        agent64.options = replace(agent64.options, batch_size=4)
    for rec, one in zip(records, alone):
        assert [s["response"] for s in one["steps"]] == [s["response"] for s in rec["steps"]]


def test_lockstep_takes_any_last_reply_but_refuses_a_rewritten_past(agent64) -> None:
    """The cache is cut back to where each reply began, so the next turn may carry another reply than
    the generated one (it is re-encoded as the template writes it); an earlier turn that changed is refused."""
    from rhythm.model.lockstep import LockstepChat

    tok = agent64.tokenizer
    engine = LockstepChat(agent64.model, tok, stop_ids=agent64.stop_ids, max_new_tokens=2)
    engine.reset(1)
    engine.step([conversation(["obs 0"])])
    messages = conversation(["obs 0", "obs 1"], ["ACTION: SLEEP"])
    turn = engine.step([messages])[0]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert turn.prompt_ids == tok(text, add_special_tokens=False)["input_ids"]
    with pytest.raises(ValueError, match="does not extend"):
        engine.step([conversation(["obs 0 (edited)", "obs 1", "obs 2"], ["ACTION: SLEEP", turn.text])])
    with pytest.raises(ValueError, match="holds 1 conversations, got 2"):
        engine.step([conversation(["a"]), conversation(["b"])])


@pytest.mark.slow  # > 3 s on 2 cores
def test_all_live_episodes_share_one_forward_per_token(tiny_agent) -> None:
    specs = [EpisodeSpec("discrete", "eval", s) for s in range(3)]
    n = 3
    try:
        tiny_agent.options = replace(SMALL, batch_size=64, max_new_tokens=n)
        records = play(tiny_agent, specs)
        assert len(tiny_agent.engines) == 1
        # per step: one prefill of the new turn for all 3 episodes, then at most n - 1 decoding passes
        assert EPISODE_STEPS <= tiny_agent.calls <= EPISODE_STEPS * n
        one_chunk = tiny_agent.calls
        tiny_agent.options = replace(SMALL, batch_size=2, max_new_tokens=n)
        again = play(tiny_agent, specs)
        assert [e.n for e in tiny_agent.engines] == [2, 1]  # chunks of 2: two engines, two passes per token
        assert 2 * EPISODE_STEPS <= tiny_agent.calls <= 2 * one_chunk
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
    from rhythm.model.lockstep import LockstepChat, Turn

    monkeypatch.setattr(LockstepChat, "step", lambda self, convs, generator=None: [
        Turn(r, [1] * 5, [1] * 10) for r in replies[: len(convs)]])
    specs = [EpisodeSpec("in-dist", "eval", s) for s in range(3)]
    records = play(tiny_agent, specs)
    good, silent, bogus = records
    assert all(s.parse_ok and s.action == "MEDITATE" and s.belief == [0.2, 0.6, 0.5] for s in good.steps)
    for rec in (silent, bogus):
        assert all(not s.parse_ok and s.action == FALLBACK_ACTION and s.belief is None for s in rec.steps)
        assert rec.score["parse_failures"] == EPISODE_STEPS
    assert good.score["parse_failures"] == 0
    env = RhythmEnv("in-dist", "eval")
    env.reset(seed=good.seed)
    mae = float(np.abs(np.array([0.2, 0.6, 0.5]) - env.belief_target).mean())
    assert good.score["belief_mae"] == pytest.approx(mae, abs=1e-12)
    for rec, belief in ((good, 1.0 - mae / MAE_PRIOR["in-dist"]), (silent, 0.0)):  # the grader's formula
        behaviour = min(1.0, max(0.0, (sum(s.reward for s in rec.steps) + 1.0) / 2.0))
        assert rec.score["final_score"] == pytest.approx(0.8 * behaviour + 0.2 * max(0.0, belief), abs=1e-9)
    assert silent.steps[0].response == replies[1]  # the reply is kept, so the failure can be read
    assert good.usage["prompt_tokens"] == 10 * EPISODE_STEPS


def test_sampling_is_seeded(tiny_agent) -> None:
    specs = [EpisodeSpec("in-dist", "eval", s) for s in range(3)]
    tiny_agent.options = replace(SMALL, do_sample=True, temperature=1.0, max_new_tokens=12)
    try:
        a = first_replies(tiny_agent, specs)
        b = first_replies(tiny_agent, specs)
        tiny_agent.options = replace(tiny_agent.options, seed=2)
        c = first_replies(tiny_agent, specs)
        tiny_agent.options = replace(SMALL, max_new_tokens=12)
        greedy = first_replies(tiny_agent, specs)
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


def test_lora_adapter_is_detected_and_loaded_onto_its_base(tiny_student: Path, tiny_agent, tmp_path: Path) -> None:
    from rhythm.agents.model import ModelAgent
    from rhythm.model.load import adapter_config

    adapter = _make_adapter(tiny_student, tmp_path / "adapter", with_tokenizer=False)
    cfg = adapter_config(str(adapter))
    assert cfg is not None and cfg["base_model_name_or_path"] == str(tiny_student)
    assert adapter_config(str(tiny_student)) is None
    agent = ModelAgent(str(adapter), SMALL)
    assert agent.source.adapter == str(adapter) and agent.source.base == str(tiny_student)
    assert agent.source.tokenizer == str(tiny_student)  # the adapter ships no tokenizer
    specs = [EpisodeSpec("in-dist", "eval", s) for s in range(3)]
    assert first_replies(agent, specs) != first_replies(tiny_agent, specs)  # the adapter's weights are in use
    # a tokenizer saved with the adapter is preferred; an explicit base overrides the recorded one
    with_tok = _make_adapter(tiny_student, tmp_path / "adapter-tok", with_tokenizer=True)
    moved_base = tmp_path / "elsewhere"
    shutil.copytree(tiny_student, moved_base)
    agent2 = ModelAgent(str(with_tok), replace(SMALL, base_model=str(moved_base)))
    assert agent2.source.tokenizer == str(with_tok) and agent2.source.base == str(moved_base)


def test_adapter_whose_recorded_tiny_base_moved_finds_the_local_tiny_student(tiny_student: Path, tmp_path: Path) -> None:
    from rhythm.agents.model import ModelAgent

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
    from rhythm.agents.model import ModelAgent
    from rhythm.model.load import pick_device, pick_dtype

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


@pytest.mark.parametrize("name, local", [("runs/typo", True), ("./x", True), ("a/b/c", True), ("~/m", True),
                                         ("Qwen/Qwen2.5-3B-Instruct", False), ("gpt2", False), ("me/rhythm-sft", False),
                                         ("out/sft", False)])
def test_a_name_meant_as_a_folder_here_is_not_asked_of_the_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              name: str, local: bool) -> None:
    """``runs/typo`` reads as a Hub id (owner runs): asked of the Hub offline, it failed after a minute of retries. A
    name under runs/ is a path: missing, it is one line at once. A Hub id whose owner is also a folder here
    (``Qwen/`` made by ``hf download --local-dir``) is still a Hub id."""
    from rhythm.model.load import check_model_exists, means_local

    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    assert means_local(name) is local
    if local:
        with pytest.raises(RhythmError, match=f"model path not found: {name}$"):
            check_model_exists(name)
    else:
        check_model_exists(name)  # a Hub id: loading it says whether it is there


def test_a_model_whose_weights_were_cut_short_is_one_line(tiny_student: Path, tmp_path: Path) -> None:
    import shutil

    from rhythm.model.load import ModelOptions, load_model

    copy = tmp_path / "model"
    shutil.copytree(tiny_student, copy)
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(RhythmError, match=r"cannot load model .*model.* \(from model:"):
        load_model(str(copy), ModelOptions(device="cpu"))


def _edited_copy(tiny_student: Path, folder: Path, **config) -> Path:
    shutil.copytree(tiny_student, folder)
    settings = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**settings, **config}))
    return folder


def test_a_model_that_would_not_play_as_its_checkpoint_is_one_line(tiny_student: Path, tmp_path: Path) -> None:
    """Weights the config names and the files lack (transformers leaves them random, with a warning), a tokenizer
    past the embedding table (an IndexError mid-week), sliding-window attention (a traceback some steps in), an
    adapter whose keys reach layers its base lacks: each refused before a week is played."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rhythm.model.load import load_model

    deeper = _edited_copy(tiny_student, tmp_path / "deeper", num_hidden_layers=4, layer_types=["full_attention"] * 4)
    with pytest.raises(RhythmError, match=r"model:.*deeper: its weights lack model\.layers\.2\..* left random"):
        load_model(str(deeper), ModelOptions(device="cpu"))
    narrow = tmp_path / "narrow"
    base = AutoModelForCausalLM.from_pretrained(tiny_student)
    small = AutoModelForCausalLM.from_config(base.config.__class__(**{**base.config.to_dict(), "vocab_size": 500}))
    small.save_pretrained(narrow)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tiny_student / name).exists():
            shutil.copy(tiny_student / name, narrow / name)
    with pytest.raises(RhythmError, match=r"its tokenizer has ids up to \d+, its embedding table 500 rows"):
        load_model(str(narrow), ModelOptions(device="cpu"))
    sliding = _edited_copy(tiny_student, tmp_path / "sliding", use_sliding_window=True, sliding_window=64,
                           layer_types=["sliding_attention"] * 2)
    with pytest.raises(RhythmError, match="uses sliding-window attention"):
        load_model(str(sliding), ModelOptions(device="cpu"))
    adapter = tmp_path / "adapter"
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(adapter)
    four = AutoModelForCausalLM.from_config(base.config.__class__(**{**base.config.to_dict(), "num_hidden_layers": 4,
                                                                     "layer_types": ["full_attention"] * 4}))
    four.save_pretrained(tmp_path / "four")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tiny_student / name).exists():
            shutil.copy(tiny_student / name, tmp_path / "four" / name)
    with pytest.raises(RhythmError, match=r"cannot load LoRA adapter .* \(is it that base's adapter\?\): Found missing adapter keys"):
        load_model(str(adapter), ModelOptions(device="cpu", base_model=str(tmp_path / "four")))
    assert load_model(str(adapter), ModelOptions(device="cpu", base_model=str(tiny_student)))[2].adapter == str(adapter)


def test_a_model_under_home_written_with_a_tilde_loads(tiny_student: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A shell leaves ``model:~/x`` as typed (and YAML too): the folder loads, as every other check already read it,
    instead of being sent to the Hub as a repo id."""
    from rhythm.model.load import load_model

    shutil.copytree(tiny_student, tmp_path / "student")
    monkeypatch.setenv("HOME", str(tmp_path))
    model, _, source = load_model("~/student", ModelOptions(device="cpu"))
    assert source.base == str(tmp_path / "student") and model.config.model_type == "qwen2"


@pytest.mark.parametrize("setting, needle", [("model.top_p=0", "model.top_p=0.0: input should be greater than 0"),
                                             ("model.temperature=-1", "model.temperature=-1.0: input should be greater than 0")])
def test_sampling_settings_outside_their_range_are_one_line(setting: str, needle: str) -> None:
    """top_p 0 kept no token and crashed the first sampled step (a torch traceback)."""
    from rhythm.config import load_config

    with pytest.raises(RhythmError, match=needle):
        load_config(EvalConfig, None, [setting])


def test_a_device_this_machine_lacks_is_one_line() -> None:
    import torch

    from rhythm.model.load import pick_device

    if getattr(torch, "xpu", None) is None or not torch.xpu.is_available():
        with pytest.raises(RhythmError, match="no Intel XPU is available"):
            pick_device("xpu")
    with pytest.raises(RhythmError, match="unknown device 'tpu'"):
        pick_device("tpu")


def test_act_answers_every_live_episode(tiny_agent) -> None:
    import numpy as np

    from rhythm.env.render import render_observation

    tiny_agent.reset([EpisodeSpec("ood", "eval", s) for s in range(5)])
    meters = np.full((5, 5), 0.5)
    zeros = np.zeros((5, 5))
    prompts = [render_observation(0, meters[i], -1, zeros[i], zeros[i]) for i in range(5)]
    obs = BatchObservation(0, meters, np.full(5, -1), zeros, zeros, prompts)
    decisions = tiny_agent.act(obs)
    assert len(decisions) == 5
    assert all(0 <= d.action < len(ACTIONS) and set(d.usage) == {"prompt_tokens", "completion_tokens", "cost_usd", "cut_replies"}
               and d.usage["cost_usd"] == 0.0 for d in decisions)
    # identical observations, greedy decoding: identical replies, whatever their place in the batch
    assert len({d.text for d in decisions}) == 1


def test_eval_config_routes_model_options() -> None:
    from rhythm.eval.evaluate import agent_options

    cfg = EvalConfig(agent="model:x", model=replace(SMALL, batch_size=3))
    assert agent_options(cfg, "model:x").batch_size == 3


def test_loading_a_model_draws_no_transformers_bar_and_restores_its_bars(tiny_student: Path, capfd) -> None:
    from transformers.utils import logging as hf_logging

    from rhythm.model.load import load_model

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()  # as on a user's terminal (tests may run with bars off)
    try:
        capfd.readouterr()
        load_model(str(tiny_student), ModelOptions(device="cpu"))
        _, err = capfd.readouterr()
        assert "Loading weights" not in err
        bar = hf_logging.tqdm(range(1), desc="after the load")  # transformers' own bars work again afterwards
        assert not isinstance(bar, hf_logging.EmptyTqdm)
        bar.close()
    finally:
        if not was:
            hf_logging.disable_progress_bar()


def test_the_weights_digest_covers_the_model_and_not_the_runs_records(tmp_path: Path) -> None:
    """What an eval records of a model:PATH folder changes with its weights, configs and tokenizer, and not with
    its checkpoints, logs or trainer state; a Hub id is recorded by name only."""
    folder = tmp_path / "student"
    (folder / "checkpoint-5").mkdir(parents=True)
    for name in ("model.safetensors", "config.json", "tokenizer.json", "training_args.bin", "training_log.jsonl",
                 "sft_summary.json", "checkpoint-5/model.safetensors"):
        (folder / name).write_bytes(b"a")
    first = weights_digest(str(folder))
    for name in ("training_args.bin", "training_log.jsonl", "sft_summary.json", "checkpoint-5/model.safetensors"):
        (folder / name).write_bytes(b"b")
    assert weights_digest(str(folder)) == first
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        (folder / name).write_bytes(b"c")
        assert weights_digest(str(folder)) != first
        first = weights_digest(str(folder))
    assert weights_digest("Qwen/Qwen2.5-3B-Instruct") is None


def test_an_adapters_recorded_weights_cover_its_base(tmp_path: Path) -> None:
    """A LoRA adapter's replies depend on its base: the digest an eval records (and checks on --resume) changes with
    a local base's weights, and names a Hub base."""
    from rhythm.eval.evaluate import model_weights

    base, adapter = tmp_path / "base", tmp_path / "adapter"
    for folder, files in ((base, ("config.json", "model.safetensors", "tokenizer.json")),
                          (adapter, ("adapter_model.safetensors",))):
        folder.mkdir()
        for name in files:
            (folder / name).write_bytes(b"a")
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
    cfg = EvalConfig(agent=f"model:{adapter}")
    first = model_weights(cfg, [cfg.agent, "bayes"])
    assert list(first) == [cfg.agent] and first[cfg.agent] == f"{weights_digest(str(adapter))}+{weights_digest(str(base))}"
    (base / "model.safetensors").write_bytes(b"b")  # another base under the same adapter
    assert model_weights(cfg, [cfg.agent]) != first
    other = tmp_path / "other"
    shutil.copytree(base, other)
    assert model_weights(replace(cfg, model=replace(cfg.model, base_model=str(other))), [cfg.agent]) == model_weights(cfg, [cfg.agent])
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen2.5-3B-Instruct"}))
    assert model_weights(cfg, [cfg.agent])[cfg.agent] == f"{weights_digest(str(adapter))}+Qwen/Qwen2.5-3B-Instruct"
    assert model_weights(EvalConfig(agent=f"model:{base}"), [f"model:{base}"]) == {f"model:{base}": weights_digest(str(base))}


MOVES_THE_SYSTEM_PROMPT = (  # as Mistral-7B-Instruct-v0.3's template does: into the newest user turn
    "{% set system = messages[0]['content'] if messages[0]['role'] == 'system' else '' %}{{ bos_token }}"
    "{% for m in messages if m['role'] != 'system' %}{% if m['role'] == 'user' %}[INST] "
    "{% if loop.last %}{{ system }}\n\n{% endif %}{{ m['content'] }}[/INST]{% else %}{{ m['content'] }}{{ eos_token }}"
    "{% endif %}{% endfor %}"
)


def test_a_model_whose_template_rewrites_earlier_turns_or_that_has_no_tokenizer_is_one_line(
        run_cli, tiny_student: Path, tmp_path: Path) -> None:
    """A week is one growing conversation whose cache keeps what was rendered: a template that moves earlier text
    cannot play it, and a folder without its tokenizer would load an empty one; each is refused before any week."""
    from rhythm.agents.model import ModelAgent

    moved = tmp_path / "moved"
    shutil.copytree(tiny_student, moved)
    (moved / "chat_template.jinja").write_text(MOVES_THE_SYSTEM_PROMPT)
    with pytest.raises(RhythmError, match="rewrites earlier turns when one is added"):
        ModelAgent(str(moved), SMALL)
    from transformers import AutoTokenizer

    from rhythm.model.lockstep import check_appends

    tok = AutoTokenizer.from_pretrained(tiny_student)
    check_appends(tok)  # the tiny student's own template only appends
    tok.chat_template = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    with pytest.raises(RhythmError, match=r"cannot render a week \(System role not supported\)"):
        check_appends(tok)
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors", "chat_template.jinja"):
        shutil.copy(tiny_student / name, bare / name)
    code, _, err = run_cli("eval", "--agent", f"model:{bare}", "--seeds", "0", "--condition", "discrete",
                           "--output", str(tmp_path / "r.json"))
    assert code == 2 and err.strip().count("\n") == 0 and "holds no tokenizer (tokenizer_config.json or" in err
    assert not (tmp_path / "r.episodes.jsonl.partial").exists()
