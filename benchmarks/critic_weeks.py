"""GRPO over whole weeks with a critic: does judging every state of the student's own weeks (coverage) make the
refine stage pay? A probe of docs/grpo-ablation.md's thirty-first round, not a shipped mode.

Each optimizer step the student plays ``--people`` train-split in-dist people twice (TRL's group of 2), with its
own replies in context as eval plays, except that the token after ``ACTION:`` is sampled at ``--tau`` (the belief
numbers stay greedy). The bayes filter then reads each week as played and the teacher's planner values every one
of the 10 actions at every state (:func:`teacher_values`: the values whose argmax bayes itself plays there; no
teacher week is written). One week is one GRPO row: the system prompt and first observation as the prompt, the
rest of the week as the completion, with only the 28 action tokens in the loss (TRL's ``env_mask``) and each
given its own advantage (TRL's ``_compute_loss`` takes ``(B, T)`` advantages from a subclass):

- ``--adv value``: ``Q(h, a) - sum_a' pi(a'|h) Q(h, a')``, the sampled action's value against the policy's mean
  under the same posterior (the exact baseline: every action is valued);
- ``--adv argmax``: ``1[a = a*] - pi(a*|h)``, whose expectation is the gradient of the probability of the
  critic's best action a*;
- ``--adv hits``: ``1[a = a*]``, the same without its baseline: only a sampled best action moves the policy, up
  (no sampled action is pushed down);
- ``--adv mpo``: no sampled action at all. The weeks are played greedily, as eval plays them (TRL's second copy of a
  person plays another person), and at every state the loss is the cross-entropy from the policy to the
  mirror-descent target ``pi_old(a|h) exp(A(h, a) / eta)`` over the 10 actions (MPO's E-step, with the critic's
  ``value`` advantage of every action), through a ``_compute_loss`` override: a better action's logit moves by its
  advantage, not by its advantage times its probability.

Both are divided by the batch's spread (as TRL's ``scale_rewards: batch``). So a step judges 28 states a week (a
20-step run 17,920 states, against the quickstart's branch stage's 160), in one forward pass a week. Run from
the quickstart's SFT student, then played and paired as every round::

    python benchmarks/critic_weeks.py --model runs/quickstart/sft --out runs/critic --steps 20 --people 16 --lr 1e-4
    rhythm eval --agent model:runs/critic --split train --seeds 100000-100299 --condition all \\
        --set 'references=[]' --set model.max_new_tokens=16 -o runs/critic/eval/eval_results_v2.json
    rhythm analyze paired QS_EVAL.episodes.jsonl runs/critic/eval/eval_results_v2.episodes.jsonl

``--diagnose`` trains nothing: it reads ``--people`` greedy weeks of ``--model`` with the critic (how often its action
is the critic's best, and the probability it gives that action where it is not)::

    python benchmarks/critic_weeks.py --diagnose --model runs/quickstart/sft --people 200

``--out`` receives the model, ``critic_log.jsonl`` (per step: seconds playing and valuing, the sampled weeks'
mean score, the advantages' spread, the mean regret of the played actions under the critic) and TRL's
``log_history.json``. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report, run_or_exit  # noqa: E402

from rhythm.agents.episodes import play_batch, replay_records, week_actions  # noqa: E402
from rhythm.agents.filtering import read_along  # noqa: E402
from rhythm.agents.model import decision_of  # noqa: E402
from rhythm.agents.planner import PlannerConfig  # noqa: E402
from rhythm.agents.teachers import planning_keys, posterior_values  # noqa: E402
from rhythm.env.constants import ACTIONS, EPISODE_STEPS  # noqa: E402
from rhythm.errors import RhythmError  # noqa: E402
from rhythm.model.lockstep import LockstepChat  # noqa: E402
from rhythm.protocol import record_conversation  # noqa: E402

OTHER_PEOPLE = 1_000_000  # mpo's second copy of a prompt plays seed + this (train split, in-dist: no eval person)
ACTION_MARK = "\nACTION:"  # the tiny tokenizer's token before the action name (one token per action after it)


def action_token_ids(tokenizer: Any) -> list[int]:
    """The token of each of the 10 action names as a reply writes it after the action mark (``" DEEP_WORK"``)."""
    return [tokenizer.convert_tokens_to_ids(" " + a) for a in ACTIONS]


def teacher_values(records: Sequence[dict[str, Any]], planner: PlannerConfig = PlannerConfig()) -> list[np.ndarray]:
    """The bayes teacher's value of each of the 10 actions at every step of each week, its filter reading the week
    as played (``(steps, 10)`` a week): what bayes would weigh there, had it reached that state."""
    def reader(keys: np.ndarray):
        plan = planning_keys(keys)
        return lambda posterior, seen, t: posterior_values(posterior, seen, t, plan, planner)

    return read_along(records, len(ACTIONS), reader)


def advantages(values: np.ndarray, probs: np.ndarray, played: Sequence[int], kind: str) -> np.ndarray:
    """Each step's advantage of the played action: ``value`` (its value minus the policy's mean value there),
    ``argmax`` (1 if it is the critic's best, minus the policy's probability of the best) or ``hits`` (1 if it is the
    critic's best, else 0). ``values`` and ``probs`` are ``(steps, 10)``; a step whose probabilities are unknown (no
    action was sampled) gets 0."""
    steps = np.arange(len(played))
    if kind == "value":
        adv = values[steps, played] - (probs * values).sum(-1)
    elif kind in ("argmax", "hits"):
        best = values.argmax(-1)
        adv = (np.asarray(played) == best).astype(float) - (probs[steps, best] if kind == "argmax" else 0.0)
    else:
        raise RhythmError(f"--adv must be value, argmax or hits, got {kind!r}")
    return np.nan_to_num(adv, nan=0.0)


def mirror_target(probs: np.ndarray, adv: np.ndarray, eta: float) -> np.ndarray:
    """MPO's E-step at one state: ``pi_old(a) exp(A(a) / eta)``, renormalised over the actions (``probs`` and ``adv``
    over the 10 actions; unknown probabilities count as 0). Large ``eta`` keeps ``pi_old``; small, the best action."""
    w = np.nan_to_num(probs, nan=0.0) * np.exp((adv - adv.max()) / eta)
    return w / w.sum()


def action_positions(ids: Sequence[int], mark: int, reply_start: int, reply_end: int, names: set[int]) -> list[int | None]:
    """For each assistant turn of a week's completion (which starts inside the first reply), the position of the
    action token after its last action mark, or None (a reply that names no action)."""
    out: list[int | None] = []
    last, inside = None, True
    for k, tok in enumerate(ids):
        if inside and tok == mark and k + 1 < len(ids) and ids[k + 1] in names:
            last = k + 1
        if inside and tok == reply_end:
            out.append(last)
            last, inside = None, False
        elif not inside and tok == reply_start:
            inside = True
    return out


def week_ids(tokenizer: Any, record: dict[str, Any]) -> tuple[list[int], list[int]]:
    """``(prompt_ids, completion_ids)`` of a whole week as the chat template renders it: the first observation is
    the prompt, everything after it (every reply and later observation) the completion."""
    first = tokenizer.apply_chat_template(record_conversation(record, 0), add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template(record_conversation(record, include_reply=True), tokenize=False)
    if not full.startswith(first):
        raise RhythmError("the chat template rewrites earlier turns; a week cannot be one row")
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    return encode(first), encode(full[len(first):])


class ActionSampler(LockstepChat):
    """Greedy replies, except the token right after the action mark, sampled at ``temperature`` (unless ``greedy``);
    keeps each step's probabilities of the 10 action tokens there (``probs``: one ``(n, 10)`` tensor a step)."""

    def __init__(self, *args: Any, mark: int, action_ids: Sequence[int], greedy: bool = False, **kwargs: Any) -> None:
        import torch

        super().__init__(*args, **kwargs)
        self.mark, self.action_ids, self.greedy = mark, torch.tensor(list(action_ids)), greedy
        self.probs: list[Any] = []

    def reset(self, n: int) -> None:
        super().reset(n)
        self.probs = []

    def step(self, conversations, *, generator=None):
        import torch

        self._prev = torch.full((len(conversations),), -1)
        self._step = torch.full((len(conversations), len(self.action_ids)), float("nan"))
        turns = super().step(conversations, generator=generator)
        self.probs.append(self._step)
        return turns

    def _pick(self, logits, generator):
        import torch

        token = logits.argmax(dim=-1).cpu()
        at = self._prev == self.mark
        if at.any():
            p = torch.softmax(logits[at].float() / self.temperature, dim=-1).cpu()
            if not self.greedy:
                token[at] = torch.multinomial(p, 1, generator=generator).squeeze(-1)
            self._step[at] = p[:, self.action_ids] / p[:, self.action_ids].sum(-1, keepdim=True)
        self._prev = token
        return token


class _Student:
    """The policy as an agent over an :class:`ActionSampler`, seeded per step."""

    name = "critic-weeks"

    def __init__(self, engine: ActionSampler, seed: int) -> None:
        self.engine, self.seed = engine, seed

    def reset(self, episodes: list[Any]) -> None:
        self.engine.reset(len(episodes))

    def act(self, obs: Any) -> list[Any]:
        import torch

        generator = torch.Generator().manual_seed(self.seed * 1000 + obs.t)
        turns = self.engine.step([obs.conversation(i) for i in range(len(obs.prompts))], generator=generator)
        return [decision_of(turn) for turn in turns]


def agreement(records: Sequence[dict[str, Any]], values: Sequence[np.ndarray], probs: np.ndarray,
              seen: Sequence[np.ndarray]) -> dict[str, Any]:
    """Where a greedy student's action is the critic's best a*: the shares of each action it plays and a* names,
    the policy's median probability of a* where they differ (by a*), and the same at low serenity (below 0.2)."""
    played = np.array([[ACTIONS.index(s["action"]) for s in r["steps"]] for r in records])
    best = np.stack([v.argmax(-1) for v in values])
    p_best = np.take_along_axis(probs, best[..., None], -1)[..., 0]
    low = np.stack(seen)[..., 3] < 0.2
    differ = played != best
    share = lambda a: {ACTIONS[k]: round(float((a == k).mean()), 3) for k in range(len(ACTIONS)) if (a == k).any()}  # noqa: E731
    return {
        "states": int(played.size), "agree": round(float((~differ).mean()), 3),
        "played_share": share(played), "best_share": share(best),
        "median_p_best_where_they_differ": {ACTIONS[k]: round(float(np.median(p_best[differ & (best == k)])), 3)
                                            for k in range(len(ACTIONS)) if (differ & (best == k)).sum() >= 20},
        "low_serenity": {"states": int(low.sum()), "meditate_best": round(float((best[low] == ACTIONS.index("MEDITATE")).mean()), 3),
                         "meditate_played": round(float((played[low] == ACTIONS.index("MEDITATE")).mean()), 3)},
    }


def diagnose(args: argparse.Namespace) -> dict[str, Any]:
    """The starting student's greedy weeks of ``--people`` people, read by the critic (:func:`agreement`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rhythm.model.load import stop_token_ids

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    engine = ActionSampler(model, tok, stop_ids=stop_token_ids(model, tok), max_new_tokens=16, temperature=1.0, greedy=True,
                           mark=tok.convert_tokens_to_ids(ACTION_MARK), action_ids=action_token_ids(tok))
    seeds = list(range(args.seeds_from, args.seeds_from + args.people))
    with torch.no_grad():
        records = [r.to_dict() for r in play_batch(_Student(engine, args.seed), "in-dist", "train", seeds)]
    seen: list[np.ndarray] = [np.empty(0)] * len(records)
    for rows, _, played in replay_records(records, week_actions):
        for i, s in zip(rows, played.seen, strict=True):
            seen[i] = s
    return agreement(records, teacher_values(records), torch.stack(engine.probs, dim=1).numpy(), seen)


def make_rollout(args: argparse.Namespace, log: Any):
    """TRL ``rollout_func``: the batch's people played, valued, and turned into one row a week."""

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        import torch
        from trl.models import unwrap_model_for_generation

        tok = trainer.processing_class
        ids = {name: tok.convert_tokens_to_ids(name) for name in (ACTION_MARK, "assistant\n", "<|im_end|>")}
        action_ids = action_token_ids(tok)
        seeds = [int(json.loads(p[-1]["content"])["seed"]) for p in prompts]
        if args.adv == "mpo":  # greedy weeks of one person are one week: TRL's second copy plays another person
            seeds = [s + OTHER_PEOPLE * seeds[:i].count(s) for i, s in enumerate(seeds)]
        step = trainer.state.global_step + 1
        started = time.perf_counter()
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as model, torch.no_grad():
            engine = ActionSampler(model, tok, stop_ids=list(trainer.eos_token_ids), max_new_tokens=16, greedy=args.adv == "mpo",
                                   temperature=args.tau, mark=ids[ACTION_MARK], action_ids=action_ids)
            records = [r.to_dict() for r in play_batch(_Student(engine, args.seed * 100_003 + step), "in-dist", "train",
                                                       seeds, model="critic-weeks")]
        played_s = time.perf_counter() - started
        probs = torch.stack(engine.probs, dim=1).numpy()
        values = teacher_values(records)
        valued_s = time.perf_counter() - started - played_s
        weeks, advs, regrets = [], [], []
        for record, q, p in zip(records, values, probs, strict=True):
            prompt, completion = week_ids(tok, record)
            pos = action_positions(completion, ids[ACTION_MARK], ids["assistant\n"], ids["<|im_end|>"], set(action_ids))
            if len(pos) != EPISODE_STEPS:
                raise RhythmError(f"a week's completion holds {len(pos)} replies, not {EPISODE_STEPS}")
            played = [ACTIONS.index(s["action"]) for s in record["steps"]]
            if args.adv == "mpo":  # every action's value against the policy's mean there: (steps, 10)
                adv = q - (p * q).sum(-1, keepdims=True)
            else:  # the played action's: (steps,)
                adv = advantages(q, p, played, args.adv)
            named = np.array([k is not None for k in pos])
            adv = np.where(named[:, None] if adv.ndim == 2 else named, np.nan_to_num(adv), 0.0)
            weeks.append((prompt, completion, pos, p))
            advs.append(adv)
            regrets.append(float((q.max(-1) - q[np.arange(EPISODE_STEPS), played]).mean()))
        spread = float(np.concatenate(advs).std())
        scale = spread + 1e-8  # the batch's spread, as TRL's scale_rewards=batch
        out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "env_mask": [], "token_advantages": [],
                                     "action_targets": []}
        for (prompt, completion, pos, p), adv in zip(weeks, advs, strict=True):
            mask, token_adv, targets = [0] * len(completion), [0.0] * len(completion), {}
            for t, (k, a) in enumerate(zip(pos, adv, strict=True)):
                if args.adv == "mpo" and k is not None:
                    mask[k], targets[k] = 1, mirror_target(p[t], a / scale, args.eta).tolist()
                elif args.adv != "mpo" and k is not None and a != 0.0:  # a sure step (or no action) adds nothing
                    mask[k], token_adv[k] = 1, float(a / scale)
            out["action_targets"].append(targets)
            out["prompt_ids"].append(prompt)
            out["completion_ids"].append(completion)
            out["env_mask"].append(mask)
            out["token_advantages"].append(token_adv)
        out["week_score"] = [float(r["score"]["final_score"]) for r in records]
        log.write(json.dumps({"step": step, "play_s": round(played_s, 2), "value_s": round(valued_s, 2),
                              "score": float(np.mean(out["week_score"])), "adv_std": spread,
                              "regret": float(np.mean(regrets))}) + "\n")
        log.flush()
        return {**out, "logprobs": None}

    return rollout


def run(args: argparse.Namespace) -> None:
    if not Path(args.model, "config.json").is_file():
        raise RhythmError(f"not a model folder (no config.json): {args.model}")
    if args.diagnose:
        report("critic_weeks_agreement", {"model": args.model, **diagnose(args)})
    else:
        train(args)


def train(args: argparse.Namespace) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.16 (pinned)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.padding_side = "left"
    if tokenizer.convert_tokens_to_ids(ACTION_MARK) in (None, tokenizer.unk_token_id):
        raise RhythmError(f"{args.model}: its tokenizer has no {ACTION_MARK!r} token (a rhythm-tiny student is needed)")
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    people = [{"prompt": [{"role": "user", "content": json.dumps({"seed": args.seeds_from + i})}]}
              for i in range(args.steps * args.people)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    action_ids = torch.tensor(action_token_ids(tokenizer))

    class TokenAdvantageGRPO(GRPOTrainer):
        """GRPO whose advantages are the rollout's, one per completion token (TRL's loss takes ``(B, T)``); with
        ``--adv mpo`` the loss is instead the cross-entropy to each state's mirror-descent target over the 10 actions."""

        def _generate_and_score_completions(self, inputs):
            batch = super()._generate_and_score_completions(inputs)
            adv = torch.zeros(batch["completion_ids"].shape, dtype=torch.float32, device=batch["completion_ids"].device)
            targets = torch.zeros((*batch["completion_ids"].shape, len(ACTIONS)), dtype=torch.float32)
            for i, row in enumerate(inputs):  # TRL merged the rollout's extra fields into each input
                adv[i, : len(row["token_advantages"])] = torch.tensor(row["token_advantages"])
                for k, q in row["action_targets"].items():
                    targets[i, int(k)] = torch.tensor(q)
            batch["advantages"] = adv
            batch["action_targets"] = targets.to(adv.device)
            return batch

        def _compute_loss(self, model, inputs):
            if args.adv != "mpo":
                return super()._compute_loss(model, inputs)
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            n = inputs["completion_ids"].size(1)
            logits = model(input_ids=ids, attention_mask=attention).logits[:, -n - 1 : -1].float() / self.temperature
            logp = torch.log_softmax(logits, dim=-1)[..., action_ids.to(logits.device)]  # (B, T, 10)
            at = inputs["tool_mask"].bool() & inputs["completion_mask"].bool()
            q = inputs["action_targets"]
            return -(q[at] * logp[at]).sum() / at.sum().clamp(min=1)

    def week_score(prompts, completions, week_score=None, **_):
        return week_score  # logged as TRL's reward; the advantages are the critic's

    config = GRPOConfig(output_dir=str(out), max_steps=args.steps, learning_rate=args.lr, lr_scheduler_type="constant_with_warmup",
                        warmup_steps=0.05, per_device_train_batch_size=2 * args.people, num_generations=2,
                        generation_batch_size=2 * args.people, max_completion_length=2048, temperature=args.tau, beta=0.0,
                        loss_type="dapo", max_grad_norm=1.0, bf16=False, use_cpu=True, report_to="none", logging_steps=1,
                        save_strategy="no", seed=args.seed, shuffle_dataset=False, disable_tqdm=True)
    started = time.perf_counter()
    with (out / "critic_log.jsonl").open("w") as log:
        trainer = TokenAdvantageGRPO(model=model, reward_funcs=[week_score], args=config, train_dataset=Dataset.from_list(people),
                                     processing_class=tokenizer, rollout_func=make_rollout(args, log))
        trainer.train()
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    (out / "log_history.json").write_text(json.dumps(trainer.state.log_history))
    report("critic_weeks", {"out": str(out), "steps": args.steps, "weeks": 2 * args.people * args.steps,
                            "states": 2 * args.people * args.steps * EPISODE_STEPS,
                            "seconds": round(time.perf_counter() - started, 1), **{k: v for k, v in vars(args).items() if k != "out"}})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the SFT student's folder (a rhythm-tiny student, full weights)")
    parser.add_argument("--out", help="output folder (training)")
    parser.add_argument("--diagnose", action="store_true",
                        help="train nothing: read --people greedy weeks of --model with the critic (agreement, p(a*))")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps")
    parser.add_argument("--people", type=int, default=16, help="people a step, each played twice")
    parser.add_argument("--lr", type=float, default=1e-4, help="learning rate")
    parser.add_argument("--tau", type=float, default=1.0, help="sampling temperature of the action token")
    parser.add_argument("--adv", default="value", choices=["value", "argmax", "hits", "mpo"],
                        help="advantage of a played action; mpo: a cross-entropy to pi_old * exp(A / eta) at every state")
    parser.add_argument("--eta", type=float, default=1.0, help="mpo: temperature of the target, in the batch's spreads")
    parser.add_argument("--seeds-from", type=int, default=5000, help="first train-split in-dist seed played")
    parser.add_argument("--seed", type=int, default=0, help="seeds the sampling")
    args = parser.parse_args(argv)
    if not args.diagnose and not args.out:
        parser.error("--out is required unless --diagnose")
    run_or_exit("critic_weeks", run, args)


if __name__ == "__main__":
    main()
