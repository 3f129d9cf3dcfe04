"""Preference pairs (ETO / PAPRIKA) from a branch-mode run's decided pairs, trained with TRL's DPOTrainer.

    python benchmarks/dpo_pairs.py RUN --model MODEL -o OUT [--beta 0.1] [--lr 1e-4] [--epochs 1] [--batch 16]

RUN is a ``rhythm grpo`` output folder of ``branch.group: pair`` (its ``reward_log.jsonl`` and
``student_rollouts.jsonl``); each pair whose two rewards differ (the futures agreed) becomes one DPO example:
the state's conversation as the prompt, the higher-rewarded reply chosen, the other rejected. MODEL is the full
tiny student the pairs came from; it is also the reference. docs/grpo.md, fifteenth round: it measured no help.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from typing import Any

from rhythm.records import read_episodes
from rhythm.train.grpo.data import PromptOptions, build_prompts


def decided_pairs(run: str) -> list[dict[str, Any]]:
    """DPO rows (conversational prompt, chosen, rejected) of the run's pairs whose rewards differ."""
    records = [r for _, r in read_episodes(f"{run}/student_rollouts.jsonl")]
    rows, _ = build_prompts([], PromptOptions(strip_reasoning=True), records)
    prompts = {(r["condition"], r["seed"], int(r["t"])): r["prompt"] for r in rows}
    groups: dict[tuple[int, int], list[dict[str, Any]]] = collections.defaultdict(list)
    with open(f"{run}/reward_log.jsonl") as fh:
        for line in fh:
            r = json.loads(line)
            groups[(r["step"], r["group"])].append(r)
    out = []
    for first, second in groups.values():
        if first["reward"] == second["reward"]:
            continue
        won, lost = (first, second) if first["reward"] > second["reward"] else (second, first)
        out.append({"prompt": prompts[(won["condition"], won["seed"], int(won["t"]))],
                    "chosen": [{"role": "assistant", "content": won["reply"]}],
                    "rejected": [{"role": "assistant", "content": lost["reply"]}]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    ap.add_argument("--model", required=True)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=16)
    a = ap.parse_args()
    data = decided_pairs(a.run)
    print(f"{len(data)} decided pairs", file=sys.stderr)

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype="float32")
    args = DPOConfig(output_dir=a.output, beta=a.beta, learning_rate=a.lr, num_train_epochs=a.epochs,
                     per_device_train_batch_size=a.batch, lr_scheduler_type="constant_with_warmup", warmup_steps=0.05,
                     logging_steps=5, save_strategy="no", report_to="none", use_cpu=True, max_length=None,
                     precompute_ref_log_probs=True, seed=0, data_seed=0)
    trainer = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(data), processing_class=tokenizer)
    trainer.train()
    trainer.save_model(a.output)
    tokenizer.save_pretrained(a.output)
    with open(f"{a.output}/log.json", "w") as fh:
        json.dump(trainer.state.log_history, fh)


if __name__ == "__main__":
    main()
