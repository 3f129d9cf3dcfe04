"""Tiny SFT end to end on CPU: the loss falls, the log and config are written, the adapter reloads and
generates, masking puts the loss on the assistant's tokens only, and a run resumes from its checkpoint."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import orjson
import pytest
import yaml

from rhythm.errors import RhythmError
from rhythm.train.sft import LOG_NAME, SFTRunConfig, build_trainer, read_training_log, run_sft

from .helpers import shared_sft_run, write_episodes

pytestmark = pytest.mark.slow

TINY = dict(
    model_name_or_path="rhythm-tiny", max_steps=30, learning_rate=2e-3, lr_scheduler_type="constant",
    warmup_ratio=0.0, per_device_train_batch_size=4, per_device_eval_batch_size=16, gradient_accumulation_steps=1,
    lora_dropout=0.0, eval_steps=30, logging_steps=5, save_steps=15, val_fraction=0.2, bf16=False,
    gradient_checkpointing=False,
)


@pytest.fixture(scope="session")
def sft_run(tmp_path_factory, tiny_student):
    """One tiny SFT run (30 steps on 5 + 1 episodes) shared by every test and worker; read-only."""
    out = shared_sft_run(tmp_path_factory, "rhythm-sft-run", 6, **TINY)
    return out, orjson.loads((out / "sft_summary.json").read_bytes())


def test_training_lowers_the_loss(sft_run):
    out, s = sft_run
    assert s["global_step"] == 30
    assert s["train_loss_last"] < s["train_loss_first"] - 1.5, (s["train_loss_first"], s["train_loss_last"])
    assert s["eval_loss_last"] < s["eval_loss_first"] - 1.0, (s["eval_loss_first"], s["eval_loss_last"])
    assert s["data"]["train_episodes"] == 5 and s["data"]["validation_episodes"] == 1
    assert s["resolved"]["bf16"] is False and s["resolved"]["device"] == "cpu"


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


def test_outputs_adapter_tokenizer_and_effective_config(sft_run):
    out, _ = sft_run
    for name in ("adapter_model.safetensors", "adapter_config.json", "tokenizer.json", "chat_template.jinja",
                 "sft_config.yaml", "data_report.json", "checkpoint-15", "checkpoint-30"):
        assert (out / name).exists(), name
    written = yaml.safe_load((out / "sft_config.yaml").read_text())
    provenance = written.pop("_provenance")
    assert written == orjson.loads(orjson.dumps(dataclasses.asdict(SFTRunConfig(**TINY, data=written["data"], output_dir=str(out)))))
    assert provenance["versions"]["trl"] == "1.16.0" and provenance["versions"]["peft"] == "0.21.2"
    assert provenance["resolved"]["gradient_checkpointing"] is False
    adapter = orjson.loads((out / "adapter_config.json").read_bytes())
    assert adapter["r"] == 16 and set(adapter["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_saved_adapter_reloads_and_generates(sft_run, tiny_student):
    import torch
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rhythm.protocol import chat_messages

    out, _ = sft_run
    model = AutoPeftModelForCausalLM.from_pretrained(out).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_student).eval()
    tok = AutoTokenizer.from_pretrained(out)
    first = orjson.loads((out.parent / "teacher.jsonl").read_bytes().splitlines()[0])
    inputs = tok.apply_chat_template(chat_messages(first["steps"][3]["observation"]), add_generation_prompt=True,
                                     return_tensors="pt", return_dict=True)
    with torch.no_grad():
        tuned_logits = model(**inputs).logits[0, -1]
        base_logits = base(**inputs).logits[0, -1]
        generated = model.generate(**inputs, max_new_tokens=24, do_sample=False)
    assert (tuned_logits - base_logits).abs().max() > 0.1, "the adapter changes nothing"
    reply = tok.decode(generated[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert generated.shape[1] > inputs["input_ids"].shape[1] and reply.strip()
    # the reloaded adapter is the trained one: the teacher's reply is likelier under it than under the base
    target = tok(first["steps"][3]["response"] + "<|im_end|>", return_tensors="pt")["input_ids"]
    full = torch.cat([inputs["input_ids"], target], dim=1)
    n = inputs["input_ids"].shape[1]
    with torch.no_grad():
        nll = {name: torch.nn.functional.cross_entropy(m(input_ids=full).logits[0, n - 1 : -1], full[0, n:]).item()
               for name, m in (("tuned", model), ("base", base))}
    assert nll["tuned"] < nll["base"] - 1.0, nll


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


@pytest.mark.parametrize("template, start, end", [("tiny", "", "<|im_end|>"), ("qwen2.5", "\n", "<|im_end|>\n")])
def test_assistant_only_loss_masks_system_and_user(tmp_path, tiny_student, template, start, end):
    """Only the assistant's reply and its <|im_end|> carry loss; with Qwen2.5's own chat template (no
    generation markers) TRL swaps in its training template (which also trains the newlines around it)."""
    from importlib.resources import files

    from rhythm.protocol import chat_messages

    data = tmp_path / "one.jsonl"
    records = write_episodes(data, [11])
    qwen = (files("trl") / "chat_templates" / "qwen2_5.jinja").read_text() if template == "qwen2.5" else None
    run, batch = _masked_batch(tmp_path, tiny_student, data, qwen)
    tok = run.trainer.processing_class
    by_t = {s["t"]: s for s in records[0]["steps"]}
    dataset = run.trainer.train_dataset
    seen = 0
    for row in range(batch["input_ids"].shape[0]):
        ids, labels = batch["input_ids"][row].tolist(), batch["labels"][row].tolist()
        trained = [i for i, lab in zip(ids, labels, strict=True) if lab != -100]
        assert all(lab in (-100, i) for i, lab in zip(ids, labels, strict=True))
        text = tok.decode(trained)
        # which step is this row? the one whose reply is exactly what carries the loss
        step = next(s for s in by_t.values() if text == start + s["response"] + end)
        prompt = tok.apply_chat_template(chat_messages(step["observation"]), add_generation_prompt=True, tokenize=False)
        first = next(i for i, lab in enumerate(labels) if lab != -100)
        assert tok.decode([i for i in ids[:first] if i != tok.pad_token_id]) + start == prompt
        assert "BELIEF:" in text and "ACTION:" in text and "You manage one week" not in text
        seen += 1
    assert seen == batch["input_ids"].shape[0] and len(dataset) == 28
    assert (run.trainer.chat_template is None) == (template == "tiny")  # swapped only for Qwen2.5's own


def test_distributed_run_shards_data_and_writes_once(tmp_path, tiny_student, rhythm_cache):
    """The ``__main__`` entry under a distributed launcher (torchrun; ``accelerate launch`` on GPUs):
    two CPU processes train one model over gloo, and only rank 0 writes."""
    import subprocess
    import sys

    data = tmp_path / "two.jsonl"
    write_episodes(data, [0, 1])
    out = tmp_path / "ddp"
    env = dict(os.environ, RHYTHM_CACHE=str(rhythm_cache), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "rhythm.train.sft",
         "--config", "configs/sft-tiny.yaml", f"data={data}", f"output_dir={out}", "max_steps=2", "val_fraction=0",
         "per_device_train_batch_size=2", "logging_steps=1", "save_steps=2", "-q"],
        env=env, cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = proc.stdout.strip().splitlines()  # one summary, from rank 0
    summary = orjson.loads(line)
    # 56 examples, 2 per process, 2 processes: 14 steps per epoch (one process alone would need 28)
    assert summary["global_step"] == 2 and abs(summary["epochs"] - 2 / 14) < 1e-9
    steps = [e["step"] for e in read_training_log(out / LOG_NAME) if "loss" in e]
    assert steps == [1, 2]
    assert (out / "adapter_model.safetensors").exists() and (out / "checkpoint-2").is_dir()
