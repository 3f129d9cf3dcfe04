"""Benchmark: where a refine step's time goes, in the quickstart's branch stage on CPU.

    python benchmarks/bench_grpo.py --model runs/quickstart/sft            # the quickstart's SFT student
    python benchmarks/bench_grpo.py --model runs/quickstart/sft --steps 20 --set per_device_train_batch_size=16

Runs ``rhythm grpo`` with ``configs/grpo-tiny-branch.yaml`` (the quickstart's refine stage; ``--config`` another)
from ``--model`` for ``--steps`` steps into a temporary folder, and times, outside the trainer:

- ``startup_s``: everything before the first step (the student's own weeks played for the prompts, the model,
  the trainer, the probe's start);
- per step, ``rollout_s``: TRL's ``rollout_func`` (sampling the replies and playing each branch's week to its
  end, :mod:`rhythm.train.grpo.branch`), and ``train_s``: the rest of the step (rewards, the loss's forward and
  backward passes, the optimizer, the probe at a logging step); beside them the tokens the loss reads a step and
  the share of the padded batch that is padding (states of one batch sit at different steps of the week, so their
  conversations differ in length).

The quickstart gives its refine stage 3 minutes of a 15-minute run on 2 cores; at 40 steps that is
``startup_s + 40 x step_s <= 180``, and ``projected_stage_s`` prints that sum (target: <= 180). ``--check``
exits 1 when it is missed. Figures are the median over the steps after the first (which warms the caches up).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report, run_or_exit  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STAGE_STEPS = 40
"""The quickstart's refine stage's steps (``configs/grpo-tiny-branch.yaml``)."""
STAGE_BUDGET_S = 180.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/quickstart/sft", help="the SFT student to refine (full weights)")
    parser.add_argument("--config", default=str(REPO / "rhythm" / "configs" / "grpo-tiny-branch.yaml"))
    parser.add_argument("--steps", type=int, default=8, help="steps timed (the first is left out of the medians)")
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                        help="override a config key, as rhythm grpo --set")
    parser.add_argument("--check", action="store_true", help="exit 1 if the projected stage is over 180 s")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is left out of the medians)")
    run_or_exit("bench_grpo", _run, args)


def _run(args: argparse.Namespace) -> None:
    from transformers import TrainerCallback

    from rhythm.config import load_config
    from rhythm.train.grpo.config import GRPORunConfig
    from rhythm.train.grpo.trainer import build_trainer

    steps: list[dict[str, float]] = []
    rollouts: list[float] = []
    tokens: dict[str, list[tuple[int, int]]] = {"prompt_mask": [], "completion_mask": []}

    class StepTimer(TrainerCallback):
        started = 0.0

        def on_step_begin(self, *_, **__):
            self.started = time.perf_counter()
            rollouts.append(0.0)

        def on_step_end(self, *_, **__):
            total = time.perf_counter() - self.started
            steps.append({"step_s": total, "rollout_s": rollouts[-1], "train_s": total - rollouts[-1]})

    with tempfile.TemporaryDirectory(prefix="bench_grpo_") as out:
        overrides = [f"model_name_or_path={args.model}", "adapter=null", "use_peft=false", f"output_dir={out}",
                     f"max_steps={args.steps}", "save_steps=100000", *args.overrides]
        cfg = load_config(GRPORunConfig, args.config, overrides)
        begun = time.perf_counter()
        run = build_trainer(cfg, quiet=True, callbacks=[StepTimer()])
        trainer = run.trainer
        rollout = trainer.rollout_func

        def timed(prompts, trainer_):
            at = time.perf_counter()
            try:
                return rollout(prompts, trainer_)
            finally:
                rollouts[-1] += time.perf_counter() - at

        trainer.rollout_func = timed
        loss = trainer.compute_loss

        def counted(model, inputs, *rest, **kw):  # what the loss's passes read: real tokens and the batch's padding
            for name in ("prompt_mask", "completion_mask"):
                tokens[name].append((int(inputs[name].sum()), inputs[name].numel()))
            return loss(model, inputs, *rest, **kw)

        trainer.compute_loss = counted
        startup = time.perf_counter() - begun
        trainer.train()
    later = steps[1:]
    median = {k: round(statistics.median(s[k] for s in later), 3) for k in ("step_s", "rollout_s", "train_s")}
    projected = round(startup + STAGE_STEPS * median["step_s"], 1)
    report("grpo_branch_cpu", {
        "model": args.model, "config": args.config, "overrides": args.overrides, "steps": len(steps),
        "batch": trainer.args.per_device_train_batch_size, "num_generations": trainer.args.num_generations,
        "startup_s": round(startup, 1), **median, "first_step_s": round(steps[0]["step_s"], 2),
        "projected_stage_s": projected,
        # the loss's tokens (prompt + reply, summed over the steps) and the share of them that is the batch's padding
        "loss_tokens_per_step": round(sum(real for rows in tokens.values() for real, _ in rows) / len(steps)),
        "padding_share": round(1 - sum(real for rows in tokens.values() for real, _ in rows)
                               / max(1, sum(n for rows in tokens.values() for _, n in rows)), 3),
    }, targets=None, check=False)
    if args.check and projected > STAGE_BUDGET_S:
        print(f"bench_grpo: the projected stage takes {projected} s, over {STAGE_BUDGET_S:.0f} s", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
