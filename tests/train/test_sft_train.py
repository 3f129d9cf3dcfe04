"""Tiny SFT end to end on CPU, on whole weeks (protocol v2): the loss falls, the log and config are
written, the trained model (every weight, as configs/sft-tiny.yaml trains it) and a LoRA adapter (the
3B recipe's path) reload and generate, masking puts the loss on every assistant turn and nothing else,
and a run resumes from its checkpoint."""

from __future__ import annotations

import dataclasses
import os
import shutil
from importlib.metadata import version
from pathlib import Path

import orjson
import pytest
import yaml

from rhythm.env.constants import ACTIONS
from rhythm.errors import RhythmError
from rhythm.train.run_folder import LOG_NAME
from rhythm.train.sft import SFTRunConfig, build_trainer, run_sft

from .helpers import read_training_log, shared_sft_run, write_episodes

pytestmark = pytest.mark.slow

TINY = dict(
    model_name_or_path="rhythm-tiny", max_steps=30, learning_rate=1e-3, lr_scheduler_type="constant",
    warmup_ratio=0.0, per_device_train_batch_size=2, per_device_eval_batch_size=4, gradient_accumulation_steps=1,
    lora_dropout=0.0, eval_steps=30, logging_steps=5, save_steps=15, val_fraction=0.2, bf16=False,
    gradient_checkpointing=False, strip_reasoning=True, max_length=1536, use_peft=False,
)
"""As configs/sft-tiny.yaml trains the tiny student (every weight, protocol lines only, whole weeks), smaller."""

LORA = dict(TINY, use_peft=True, learning_rate=2e-3, max_steps=4, eval_steps=4, logging_steps=2, save_steps=4)
"""The LoRA path (the 3B recipe, configs/sft.yaml), a few steps."""


@pytest.fixture(scope="session")
def sft_run(tmp_path_factory, tiny_student):
    """One tiny SFT run (30 steps on 5 + 1 whole weeks) shared by every test and worker; read-only."""
    out = shared_sft_run(tmp_path_factory, "rhythm-sft-run", 6, **TINY)
    return out, orjson.loads((out / "sft_summary.json").read_bytes())


@pytest.fixture(scope="session")
def lora_run(tmp_path_factory, tiny_student):
    out = shared_sft_run(tmp_path_factory, "rhythm-sft-lora", 6, **LORA)
    return out, orjson.loads((out / "sft_summary.json").read_bytes())


def stripped_week(record: dict) -> list[str]:
    """The replies of a week as strip_reasoning trains them: the BELIEF/ACTION lines."""
    from rhythm.protocol import format_ending, parse_reply

    return [format_ending(p.belief, p.action) for p in (parse_reply(s["response"]) for s in record["steps"])]


def test_training_lowers_the_loss(sft_run):
    out, s = sft_run
    assert s["global_step"] == 30
    assert s["train_loss_last"] < s["train_loss_first"] - 1.5, (s["train_loss_first"], s["train_loss_last"])
    assert s["eval_loss_last"] < s["eval_loss_first"] - 1.0, (s["eval_loss_first"], s["eval_loss_last"])
    assert s["data"]["train_episodes"] == 5 and s["data"]["validation_episodes"] == 1
    assert s["resolved"]["bf16"] is False and s["resolved"]["device"] == "cpu"
    assert s["train_loss_steps"] == [1, 30]  # logging_first_step, then every logging_steps
    assert s["resolved"]["world_size"] == 1 and s["resolved"]["effective_batch_size"] == 2  # 2 a device x 1 x 1
    assert s["eval_reply_loss_last"] == pytest.approx(s["eval_loss_last"], rel=1e-5)  # assistant-only: the same tokens


def test_training_log_is_log_history_with_stage(sft_run):
    out, _ = sft_run
    log = read_training_log(out / LOG_NAME)
    assert all(e.pop("stage") == "sft" for e in log)
    # the checkpoint's own record of the history is a prefix of the streamed log, entry for entry
    state = orjson.loads((out / "checkpoint-30" / "trainer_state.json").read_bytes())
    assert log[: len(state["log_history"])] == state["log_history"]
    losses = [e for e in log if "loss" in e]
    assert [e["step"] for e in losses] == [1, 5, 10, 15, 20, 25, 30]
    assert {"learning_rate", "grad_norm", "epoch", "num_tokens"} <= set(losses[0])
    assert [e["step"] for e in log if "eval_loss" in e] == [0, 30]
    assert "train_runtime" in log[-1]


def test_outputs_model_tokenizer_and_effective_config(sft_run):
    out, s = sft_run
    for name in ("model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja",
                 "sft_config.yaml", "data_report.json", "checkpoint-15", "checkpoint-30"):
        assert (out / name).exists(), name
    assert not (out / "adapter_config.json").exists()  # use_peft false: the model itself
    written = yaml.safe_load((out / "sft_config.yaml").read_text())
    provenance = written.pop("_provenance")
    assert written == orjson.loads(orjson.dumps(dataclasses.asdict(SFTRunConfig(**TINY, data=written["data"], output_dir=str(out)))))
    assert provenance["versions"]["trl"] == version("trl") and provenance["versions"]["peft"] == version("peft")
    assert provenance["resolved"]["gradient_checkpointing"] is False
    report = orjson.loads((out / "data_report.json").read_bytes())
    assert report["train_examples"] == 5 and report["validation_examples"] == 1  # one example per week
    assert 0 < report["max_tokens"] <= TINY["max_length"] and report["dropped_episodes"] == {}


def _teacher_nll(model, tok, messages: list[dict], reply: str) -> float:
    import torch

    inputs = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    target = tok(reply + "<|im_end|>", add_special_tokens=False, return_tensors="pt")["input_ids"]
    full = torch.cat([inputs["input_ids"], target], dim=1)
    n = inputs["input_ids"].shape[1]
    with torch.no_grad():
        return torch.nn.functional.cross_entropy(model(input_ids=full).logits[0, n - 1 : -1], full[0, n:]).item()


def test_saved_model_reloads_and_prefers_the_teachers_reply_in_context(sft_run, tiny_student):
    """The reloaded student gives the teacher's step-t reply, after the week so far, a far lower loss
    than the untrained student does, and greedy decoding writes a reply."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rhythm.protocol import record_conversation

    out, _ = sft_run
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_student).eval()
    tok = AutoTokenizer.from_pretrained(out)
    first = orjson.loads((out.parent / "teacher.jsonl").read_bytes().splitlines()[0])
    replies = stripped_week(first)
    messages = record_conversation(first, 9, replies=replies)
    nll = {name: _teacher_nll(m, tok, messages, replies[9]) for name, m in (("tuned", model), ("base", base))}
    assert nll["tuned"] < nll["base"] - 2.0, nll
    inputs = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        generated = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    reply = tok.decode(generated[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert generated.shape[1] > inputs["input_ids"].shape[1] and reply.strip()


def test_lora_run_writes_an_adapter_that_reloads_onto_the_tiny_student(lora_run, tiny_student):
    import torch
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rhythm.protocol import record_conversation

    out, s = lora_run
    assert s["global_step"] == 4
    for name in ("adapter_model.safetensors", "adapter_config.json", "tokenizer.json", "checkpoint-4"):
        assert (out / name).exists(), name
    adapter = orjson.loads((out / "adapter_config.json").read_bytes())
    assert adapter["r"] == 16 and set(adapter["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    model = AutoPeftModelForCausalLM.from_pretrained(out).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_student).eval()
    tok = AutoTokenizer.from_pretrained(out)
    first = orjson.loads((out.parent / "teacher.jsonl").read_bytes().splitlines()[0])
    inputs = tok.apply_chat_template(record_conversation(first, 3, replies=stripped_week(first)), add_generation_prompt=True,
                                     return_tensors="pt", return_dict=True)
    with torch.no_grad():
        assert (model(**inputs).logits[0, -1] - base(**inputs).logits[0, -1]).abs().max() > 0.01, "the adapter changes nothing"


def test_resume_continues_from_the_checkpoint(sft_run, tmp_path):
    out, _ = sft_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    cfg = SFTRunConfig(**{**TINY, "max_steps": 35}, data=str(out.parent / "teacher.jsonl"), output_dir=str(copy))
    with pytest.raises(RhythmError, match="already holds a run"):
        run_sft(cfg, quiet=True, log=lambda m: None)
    summary = run_sft(dataclasses.replace(cfg, resume_from_checkpoint="latest"), quiet=True, log=lambda m: None)
    assert summary["global_step"] == 35
    log = read_training_log(copy / LOG_NAME)
    state = orjson.loads((out / "checkpoint-30" / "trainer_state.json").read_bytes())
    n = len(state["log_history"])
    assert [{k: v for k, v in e.items() if k != "stage"} for e in log[:n]] == state["log_history"]
    assert [e["step"] for e in log[n:] if "loss" in e] == [35]  # no step logged twice, none before the checkpoint
    assert [e["step"] for e in log[n:] if "eval_loss" in e] == [35]
    assert "train_runtime" in log[-1]
    before = max(e["num_tokens"] for e in state["log_history"] if "num_tokens" in e)
    after = [e["num_tokens"] for e in log[n:] if "num_tokens" in e]
    assert after and min(after) > before, "the token count goes on from the checkpoint's"
    assert summary["resumed_from_step"] == 30 and summary["train_tokens"] == max(after)


@pytest.mark.slow
def test_a_run_moved_with_its_data_resumes_and_other_data_there_is_refused(tmp_path, tiny_student):
    """A run folder moved together with its inputs (a quickstart folder: the data, the model it starts from) resumes:
    their paths compare as where they lie from the run. Other data or another model at the same place is still
    refused (the data digest, the model's weights digest)."""
    a = tmp_path / "a"
    a.mkdir()
    write_episodes(a / "teacher.jsonl", range(4))
    shutil.copytree(tiny_student, a / "base")  # the model it starts from, moved with it
    cfg = SFTRunConfig(**{**TINY, "max_steps": 2, "save_steps": 1, "eval_steps": 2, "model_name_or_path": str(a / "base")},
                       data=str(a / "teacher.jsonl"), output_dir=str(a / "run"))
    run_sft(cfg, quiet=True, log=lambda m: None)
    shutil.rmtree(a / "run" / "checkpoint-2")  # stopped after its first checkpoint
    (a / "run" / "sft_summary.json").unlink()
    b = tmp_path / "b"
    a.rename(b)
    moved = dataclasses.replace(cfg, data=str(b / "teacher.jsonl"), output_dir=str(b / "run"),
                                model_name_or_path=str(b / "base"), resume_from_checkpoint="latest")
    write_episodes(tmp_path / "other.jsonl", range(5))
    with pytest.raises(RhythmError, match=r"other settings \(data: \S+/a/teacher.jsonl -> \S+/other.jsonl\)"):
        run_sft(dataclasses.replace(moved, data=str(tmp_path / "other.jsonl")), quiet=True, log=lambda m: None)
    kept = (b / "teacher.jsonl").read_bytes()
    shutil.copy(tmp_path / "other.jsonl", b / "teacher.jsonl")
    with pytest.raises(RhythmError, match=r"other settings \(the data files changed since the run started"):
        run_sft(moved, quiet=True, log=lambda m: None)
    (b / "teacher.jsonl").write_bytes(kept)
    weights = (b / "base" / "model.safetensors").read_bytes()
    shutil.copy(b / "run" / "checkpoint-1" / "model.safetensors", b / "base" / "model.safetensors")  # another model there
    with pytest.raises(RhythmError, match=r"other settings \(model_name_or_path: \S+/a/base -> \S+/b/base\)"):
        run_sft(moved, quiet=True, log=lambda m: None)
    (b / "base" / "model.safetensors").write_bytes(weights)
    summary = run_sft(moved, quiet=True, log=lambda m: None)
    assert summary["global_step"] == 2 and summary["resumed_from_step"] == 1


def test_a_resume_with_fewer_epochs_than_its_checkpoint_took_is_refused(tmp_path, tiny_student):
    """A checkpoint past the steps fewer ``num_train_epochs`` plan: resumed, nothing was trained and the config said 1
    epoch beside a model of 2 (``max_steps`` shorter than the checkpoint was already refused)."""
    write_episodes(tmp_path / "t.jsonl", range(4))  # 3 train weeks + 1 validation, batch 2: 2 steps an epoch
    cfg = SFTRunConfig(**{**TINY, "max_steps": -1, "num_train_epochs": 2, "save_steps": 1, "save_total_limit": None,
                          "eval_steps": 100}, data=str(tmp_path / "t.jsonl"), output_dir=str(tmp_path / "run"))
    run_sft(cfg, quiet=True, log=lambda m: None)
    (tmp_path / "run" / "sft_summary.json").unlink()  # stopped after its last checkpoint
    with pytest.raises(RhythmError, match=r"checkpoint-4 is at step 4, past the 2 steps this run plans"):
        run_sft(dataclasses.replace(cfg, num_train_epochs=1, resume_from_checkpoint="latest"), quiet=True, log=lambda m: None)


@pytest.mark.parametrize("peft", [False, True], ids=["full", "lora"])
def test_a_resumed_run_trains_the_weights_an_unbroken_one_does(tmp_path, tiny_student, peft):
    """Stopped at a checkpoint and resumed, a run ends on the same weights, bit for bit, as one never stopped. The
    tiny student's LM head is tied to its embeddings, so a checkpoint holds no ``lm_head.weight`` and transformers
    logs it as a missing key on resume: the embeddings it is tied to are loaded, and this test is what says so."""
    data = tmp_path / "teacher.jsonl"
    write_episodes(data, range(6))
    base = {**(LORA if peft else TINY), "max_steps": 3, "save_steps": 2, "eval_steps": 3, "save_total_limit": 5}
    runs = {}
    for name, steps in (("whole", 3), ("stopped", 2)):
        cfg = SFTRunConfig(**{**base, "max_steps": steps}, data=str(data), output_dir=str(tmp_path / name))
        runs[name] = run_sft(cfg, quiet=True, log=lambda m: None)
    cfg = SFTRunConfig(**base, data=str(data), output_dir=str(tmp_path / "stopped"), resume_from_checkpoint="latest")
    assert run_sft(cfg, quiet=True, log=lambda m: None)["resumed_from_step"] == 2
    weights = "adapter_model.safetensors" if peft else "model.safetensors"
    assert (tmp_path / "stopped" / weights).read_bytes() == (tmp_path / "whole" / weights).read_bytes()


@pytest.mark.parametrize(("steps", "epochs", "last"), [(4, 3.0, 4), (-1, 1.5, 5)], ids=["max_steps", "epochs"])
def test_a_run_stopped_after_its_last_checkpoint_finishes_on_resume_without_a_step(tmp_path, tiny_student, steps, epochs, last):
    """Killed between its checkpoint at the last step and its final save, a run resumes to save and report: the model
    is the checkpoint's and no step is trained (transformers' train() takes one more when the last step ends no
    epoch: 5 weeks at batch 2 make 3 steps an epoch), and a finished run stays refused. Another learning rate on
    resume is refused, named."""
    data = tmp_path / "teacher.jsonl"
    write_episodes(data, range(6))
    cfg = SFTRunConfig(**{**TINY, "max_steps": steps, "num_train_epochs": epochs, "save_steps": last, "eval_steps": last},
                       data=str(data), output_dir=str(tmp_path / "whole"))
    first = run_sft(cfg, quiet=True, log=lambda m: None)
    assert first["global_step"] == last and (tmp_path / "whole" / f"checkpoint-{last}").is_dir()
    copy = tmp_path / "stopped"
    shutil.copytree(tmp_path / "whole", copy)
    for name in ("model.safetensors", "sft_summary.json", "README.md"):
        (copy / name).unlink()
    cfg = dataclasses.replace(cfg, output_dir=str(copy), resume_from_checkpoint="latest")
    with pytest.raises(RhythmError, match=r"was trained with other settings \(learning_rate: 0.001 -> 0.1\)"):
        run_sft(dataclasses.replace(cfg, learning_rate=0.1), quiet=True, log=lambda m: None)
    summary = run_sft(cfg, quiet=True, log=lambda m: None)
    assert summary["global_step"] == last and summary["resumed_from_step"] == last and summary["train_loss_mean"] is None
    assert (copy / "model.safetensors").read_bytes() == (tmp_path / "whole" / "model.safetensors").read_bytes()
    assert summary["eval_loss_last"] == first["eval_loss_last"]
    losses = [[e for e in read_training_log(run / LOG_NAME) if "loss" in e] for run in (copy, tmp_path / "whole")]
    assert losses[0] == losses[1] and max(e["step"] for e in read_training_log(copy / LOG_NAME)) == last
    with pytest.raises(RhythmError, match=f"checkpoint-{last} is at step {last}, where the run finished"):
        run_sft(cfg, quiet=True, log=lambda m: None)


def _masked_batch(tmp_path, tiny_student, data, chat_template: str | None):
    """First training batch as the trainer builds it, for a student whose chat template is ``chat_template``."""
    model = tiny_student
    if chat_template is not None:
        model = tmp_path / "student"
        shutil.copytree(tiny_student, model)
        (model / "chat_template.jinja").write_text(chat_template)
    cfg = SFTRunConfig(**{**TINY, "val_fraction": 0.0, "per_device_train_batch_size": 2, "model_name_or_path": str(model)},
                       data=str(data), output_dir=str(tmp_path / "out"))
    run = build_trainer(cfg, quiet=True)
    batch = next(iter(run.trainer.get_train_dataloader()))
    return run, batch


def _runs(values: list[int], keep: list[bool]) -> list[list[int]]:
    """Maximal runs of consecutive ``values`` whose ``keep`` is true."""
    runs: list[list[int]] = []
    previous = False
    for v, k in zip(values, keep, strict=True):
        if k:
            if not previous:
                runs.append([])
            runs[-1].append(v)
        previous = k
    return runs


# With Qwen2.5's template TRL's block starts at the newline after "assistant"; the tiny tokenizer writes
# "assistant\n" as one token, which straddles that edge and is trained too (Qwen2.5's own tokenizer
# splits it, so there only "\n" is).
@pytest.mark.parametrize("template, start, end", [("tiny", "", "<|im_end|>"), ("qwen2.5", "assistant\n", "<|im_end|>\n")])
def test_assistant_only_loss_covers_every_turn_of_the_week_and_nothing_else(tmp_path, tiny_student, template, start, end):
    """The trainer's own batch of whole weeks: the tokens carrying loss are exactly the 28 replies, each
    with its <|im_end|>, in order; everything else (system prompt, observations, turn headers, padding)
    is masked. With Qwen2.5's own chat template (no generation markers) TRL swaps in its training
    template (which also trains the newlines around each reply)."""
    from importlib.resources import files

    from rhythm.protocol import record_conversation

    data = tmp_path / "two.jsonl"
    records = write_episodes(data, [11, 12])
    qwen = (files("trl") / "chat_templates" / "qwen2_5.jinja").read_text() if template == "qwen2.5" else None
    run, batch = _masked_batch(tmp_path, tiny_student, data, qwen)
    tok = run.trainer.processing_class
    assert batch["input_ids"].shape[0] == 2 and len(run.trainer.train_dataset) == 2  # one example per week
    weeks = {tuple(stripped_week(r)): r for r in records}
    for row in range(2):
        ids, labels = batch["input_ids"][row].tolist(), batch["labels"][row].tolist()
        assert all(lab in (-100, i) for i, lab in zip(ids, labels, strict=True))
        runs = [tok.decode(r) for r in _runs(ids, [lab != -100 for lab in labels])]
        assert len(runs) == 28
        assert all(r.startswith(start) and r.endswith(end) for r in runs)
        replies = tuple(r[len(start): len(r) - len(end)] for r in runs)
        record = weeks[replies]  # exactly the 28 (stripped) replies of one week, in order
        context = tok.decode([i for i, lab in zip(ids, labels, strict=True) if lab == -100 and i != tok.pad_token_id])
        for m in record_conversation(record, include_reply=True, replies=list(replies)):
            if m["role"] != "assistant":
                assert m["content"] in context
        from rhythm.protocol import SYSTEM_PROMPT

        rest = context.replace(SYSTEM_PROMPT, "")
        assert "BELIEF:" not in rest and "ACTION:" not in rest  # no reply line is context
    assert (run.trainer.chat_template is None) == (template == "tiny")  # swapped only for Qwen2.5's own


def test_distributed_run_shards_data_and_writes_once(tmp_path, tiny_student, rhythm_cache):
    """The ``__main__`` entry under a distributed launcher (torchrun; ``accelerate launch`` on GPUs):
    two CPU processes train one model over gloo, and only rank 0 writes."""
    import subprocess
    import sys

    data = tmp_path / "four.jsonl"
    write_episodes(data, [0, 1, 2, 3])
    out = tmp_path / "ddp"
    env = dict(os.environ, RHYTHM_CACHE=str(rhythm_cache), OMP_NUM_THREADS="1",
               TMPDIR=str(tmp_path))  # torchrun leaves a torchelastic_* folder in TMPDIR
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "rhythm.train.sft",
         "--config", "configs/sft-tiny.yaml", "--set", f"data={data}", "--set", f"output_dir={out}", "--set", "max_steps=2",
         "--set", "val_fraction=0", "--set", "per_device_train_batch_size=2", "--set", "logging_steps=1", "--set", "save_steps=2", "-q"],
        env=env, cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = proc.stdout.strip().splitlines()  # one summary, from rank 0
    assert proc.stderr.count("data: 4 episodes") == 1  # and one process says what it read
    summary = orjson.loads(line)
    # 4 whole weeks, 2 per process, 2 processes: 1 step per epoch (one process alone would need 2)
    assert summary["global_step"] == 2 and abs(summary["epochs"] - 2.0) < 1e-9
    assert summary["resolved"]["world_size"] == 2 and summary["resolved"]["effective_batch_size"] == 4  # recorded
    steps = [e["step"] for e in read_training_log(out / LOG_NAME) if "loss" in e]
    assert steps == [1, 2]
    assert (out / "model.safetensors").exists() and (out / "checkpoint-2").is_dir()
    assert "find_unused_parameters" not in proc.stderr  # every parameter is used: no graph walk each step, no warning


@pytest.mark.parametrize(("observation", "echo"), [(0.0, None), (0.1, None), (0.1, 1.0), (0.1, 0.0), (0.5, 0.25), (1.0, None)])
def test_the_trainers_loss_is_cross_entropy_weighted_by_observation_and_echo_loss(tmp_path, tiny_student, observation, echo):
    """``observation_loss`` and ``echo_loss``: SFTTrainer's own ``compute_loss`` on a batch equals the
    cross-entropy computed by hand from the model's logits, with the replies (the assistant-only labels) at 1,
    the action name after each observation's ``After`` at ``echo_loss`` (None: as the rest), every other token
    of the week at ``observation_loss``, divided by the number of tokens of weight above 0."""
    import torch

    data = tmp_path / "teacher.jsonl"
    write_episodes(data, range(2))
    plain_run, run = (build_trainer(SFTRunConfig(**{**TINY, "val_fraction": 0.0, "observation_loss": w, "echo_loss": e},
                                                 data=str(data), output_dir=str(tmp_path / name)), quiet=True)
                      for name, w, e in (("plain", 0.0, None), ("weighted", observation, echo)))
    plain, weighted = (next(iter(r.trainer.get_train_dataloader())) for r in (plain_run, run))
    assert torch.equal(plain["input_ids"], weighted["input_ids"])
    tokenizer = run.trainer.processing_class
    target = weighted["input_ids"][:, 1:]
    after = weighted["input_ids"][:, :-1] == tokenizer.convert_tokens_to_ids("\nAfter")
    echoed = after & torch.isin(target, torch.tensor(tokenizer.convert_tokens_to_ids([" " + a for a in ACTIONS])))
    assert echoed.sum(dim=1).tolist() == [27] * len(target)  # every step but the first echoes an action
    reply = plain["labels"][:, 1:] != -100
    padding = ~weighted["attention_mask"][:, 1:].bool()
    w = torch.where(reply, 1.0, torch.where(echoed, observation if echo is None else echo, observation)) * ~padding
    assert torch.equal(weighted["labels"][:, 1:] != -100, w > 0)
    model = run.trainer.model
    model.train()
    loss = run.trainer.compute_loss(model, dict(weighted))
    with torch.no_grad():
        logits = model(input_ids=weighted["input_ids"], attention_mask=weighted["attention_mask"]).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
    assert torch.allclose(loss, (nll * w).sum() / (w > 0).sum(), atol=1e-5)
    loss.backward()
    # the reply-only metrics beside it: the replies' mean cross-entropy and top-1 accuracy, whatever the weights
    metrics = run.trainer._metrics["train"]
    assert metrics["reply_loss"][-1] == pytest.approx((nll * reply).sum().item() / reply.sum().item(), abs=1e-5)
    top1 = (logits.argmax(-1) == target) & reply
    assert metrics["reply_token_accuracy"][-1] == pytest.approx(top1.sum().item() / reply.sum().item(), abs=1e-6)


def test_validation_figures_do_not_depend_on_the_eval_batch_size(tmp_path, tiny_student):
    """transformers averages the batches' mean losses, TRL the batches' mean accuracies: with another
    ``per_device_eval_batch_size`` the same model on the same weeks read otherwise. Each is now a ratio of sums over
    every token of the split: one week a batch gives what all weeks in one batch give (each exact by construction)."""
    data = tmp_path / "teacher.jsonl"
    write_episodes(data, range(8))
    found = []
    for batch in (1, 3, 8):
        cfg = SFTRunConfig(**{**TINY, "val_fraction": 0.5, "observation_loss": 0.1, "per_device_eval_batch_size": batch},
                           data=str(data), output_dir=str(tmp_path / f"b{batch}"))
        trainer = build_trainer(cfg, quiet=True).trainer
        assert len(trainer.eval_dataset) == 4
        found.append(trainer.evaluate())
    for key in ("eval_loss", "eval_reply_loss", "eval_reply_token_accuracy", "eval_mean_token_accuracy", "eval_entropy"):
        assert [m[key] for m in found] == pytest.approx([found[-1][key]] * 3, abs=1e-5), key
    assert found[0]["eval_loss"] != pytest.approx(found[0]["eval_reply_loss"], abs=1e-3)  # the weighted loss, not the replies'


def test_observation_loss_refuses_settings_that_would_train_unlearned_replies(tmp_path):
    from rhythm.train.sft import validate

    with pytest.raises(RhythmError, match="observation_loss=1.5: input should be less than or equal to 1"):
        validate(SFTRunConfig(**{**TINY, "observation_loss": 1.5}, data=str(tmp_path)))
    with pytest.raises(RhythmError, match="echo_loss=1.5: input should be less than or equal to 1"):
        validate(SFTRunConfig(**{**TINY, "observation_loss": 0.1, "echo_loss": 1.5}, data=str(tmp_path)))


@pytest.mark.parametrize("checkpointing", [True, False])
def test_the_trainer_arguments_use_the_names_transformers_has_now(tmp_path: Path, checkpointing: bool) -> None:
    """``gradient_checkpointing`` is a deprecated alias in transformers 5.x: passing it warned a FutureWarning on
    every run, ``--quiet`` ones too. The setting still reaches the trainer."""
    import warnings

    from rhythm.train.common import resolve_precision
    from rhythm.train.sft import sft_config

    cfg = SFTRunConfig(output_dir=str(tmp_path), gradient_checkpointing=checkpointing)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        args = sft_config(cfg, resolve_precision(cfg, cuda=False), has_validation=False)
    assert args.gradient_checkpointing is checkpointing
