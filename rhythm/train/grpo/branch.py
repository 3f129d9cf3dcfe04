"""Branch mode's rollouts: every sampled reply is scored by the week it leads to.

A prompt is one state of a recorded week (step mode's rows: usually the student's own greedy weeks,
``rollout_seeds``). For each state the policy samples ``num_generations`` replies; each distinct
reply action is then played in the env from that exact state and **the policy plays the rest of the
week greedily, as eval plays it**. The reply's reward is that week's final score (v3, graded by
:func:`rhythm.grader.score_episode` through :func:`rhythm.agents.episodes.play_batch`). A group's weeks
share the person and the env's noise (the simulator is deterministic given the actions), so the only
difference between two replies' scores is what the reply did: common random numbers for free. This is
VinePPO's Monte Carlo value of an action from an intermediate state, with the student's own greedy
continuation as the rollout policy, so the reward measures what eval measures.

Replies of one state that name the same action share one continuation (the first such reply's text
is kept in the week's context); at the last step the stated belief also enters the key, since it is
the belief the grader scores. For the same reason only the tokens that the score judges enter the loss
(TRL's ``env_mask``, :func:`decision_mask`): the action line before the last step, the belief line at
it; otherwise every reply's belief numbers would be pushed up or down with its action's luck, and the
last step's action with its belief's.

Settings under ``branch:`` (:class:`rhythm.train.grpo.config.BranchMode`): ``futures`` plays each branch
under several futures (the person's own noise and others redrawn from the branch step on, the env's
``future`` option), the reward their mean; ``group: pair`` compares the policy's greedy action with its
runner-up (:mod:`rhythm.train.grpo.pairs`), ``agree_z`` only where the futures agree; ``challenger: restore``
compares it instead with the action that keeps a low meter off the crash line, ``restore_only`` trains only there.
Runs inside TRL's ``rollout_func`` (:mod:`rhythm.train.grpo`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from rhythm.agents.base import Decision
from rhythm.agents.episodes import play_batch, replay_records
from rhythm.agents.model import decision_of
from rhythm.agents.restore import restoring_action
from rhythm.env.constants import EPISODE_STEPS
from rhythm.model.lockstep import LockstepChat
from rhythm.protocol import action_line_start, parse_reply
from rhythm.train.grpo.config import BranchMode
from rhythm.train.grpo.pairs import agreed_rewards, pair_replies
from rhythm.train.grpo.probe import cut_at_stop, encode_prompts, left_pad
from rhythm.train.processes import process_seed


def prompt_key(prompt: Sequence[dict[str, Any]]) -> bytes:
    """A conversation's identity (roles and texts), as the dataset row and the rollout both see it."""
    return orjson.dumps([(m.get("role"), m.get("content")) for m in prompt])


@dataclass(frozen=True)
class State:
    """Where a prompt sits: the person, the step, and the replies already played before it."""

    condition: str
    split: str
    seed: int
    t: int
    replies: tuple[str, ...]

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> State:
        replies = tuple(str(m["content"]) for m in row["prompt"] if m.get("role") == "assistant")
        if len(replies) != int(row["t"]):
            raise ValueError(f"prompt at t={row['t']} holds {len(replies)} replies")
        return cls(str(row["condition"]), str(row["split"]), int(row["seed"]), int(row["t"]), replies)


def decision_mask(tokenizer: Any, completion_ids: Sequence[int], t: int) -> list[int]:
    """Which reply tokens the branch score judges (TRL's ``env_mask``: 1 = in the loss). Before the last
    step the stated belief changes no score: the action line alone (:func:`rhythm.protocol.action_line_start`:
    from the token where the reply's last ACTION line starts to the end; a reasoning that names ACTION before
    it stays out). At the last step the belief is what is graded and the action is worth one step's reward:
    what comes before that token (the belief line, and a reasoning student's reasoning). A reply with no
    action line: every token."""
    ids = list(completion_ids)
    start = action_line_start(tokenizer.decode(ids, skip_special_tokens=True))
    if start is None:
        return [1] * len(ids)
    k = next(k for k in range(len(ids)) if len(tokenizer.decode(ids[: k + 1], skip_special_tokens=True)) > start)
    rest = len(ids) - k
    return [1] * k + [0] * rest if t == EPISODE_STEPS - 1 else [0] * k + [1] * rest


def branch_key(text: str, t: int) -> tuple[Any, ...]:
    """Replies with the same key lead to the same week: the action, and at the last step the belief too."""
    parsed = parse_reply(text)
    return (parsed.action, parsed.belief if t == EPISODE_STEPS - 1 else None)


class BranchAgent:
    """Plays given weeks: recorded replies before each week's branch step, the branch reply at it, and the
    greedy policy after it (one lockstep engine for every week of the batch, started when the first week
    leaves its recorded part; weeks still in theirs are prefilled and their engine reply ignored)."""

    def __init__(self, engine: LockstepChat, name: str, forced: Sequence[Sequence[str]]) -> None:
        self.engine = engine
        self.name = name
        self.forced = [list(f) for f in forced]  # week i: replies for steps 0..t_i (the branch reply last)
        self.started = False

    def reset(self, episodes: list[Any]) -> None:
        if len(episodes) != len(self.forced):
            raise ValueError(f"{len(episodes)} episodes for {len(self.forced)} branches")
        self.started = False

    def act(self, obs: Any) -> list[Decision]:
        t = obs.t
        n = len(self.forced)
        turns = None
        if any(t >= len(f) for f in self.forced):
            if not self.started:
                self.engine.reset(n)
                self.started = True
            turns = self.engine.step([obs.conversation(i) for i in range(n)])
        out = []
        for i, f in enumerate(self.forced):
            if t < len(f):
                p = parse_reply(f[t])
                out.append(Decision(action=p.action, belief=p.belief, text=f[t], parse_ok=p.ok))
            else:
                out.append(decision_of(turns[i]))
        return out


def branch_scores(model: Any, tokenizer: Any, stop_ids: Sequence[int], max_new_tokens: int,
                  branches: Sequence[tuple[State, str]], name: str, futures: int = 1,
                  max_rows: int = 256) -> list[dict[str, Any]]:
    """Play each (state, reply) branch to the end of its week, the policy greedy after the reply, under
    ``futures`` futures (the person's own noise, then ones redrawn from the branch step on); returns each
    branch's score dict in order: the own future's (``final_score_v2``, ...) with ``final_score`` the mean
    over futures and ``draws`` each future's final score. The futures of a condition's branches are played as
    one lockstep batch (the env takes a future per week), at most ``max_rows`` weeks at a time."""
    by_split: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, (state, _) in enumerate(branches):
        by_split[(state.condition, state.split)].append(i)
    scores: list[dict[str, Any]] = [{"draws": []} for _ in branches]
    for (condition, split), idx in by_split.items():
        weeks = [(i, d) for d in range(futures) for i in idx]  # the own future first: its record is the score dict
        for start in range(0, len(weeks), max_rows):
            batch = weeks[start : start + max_rows]
            forced = [[*branches[i][0].replies, branches[i][1]] for i, _ in batch]
            engine = LockstepChat(model, tokenizer, stop_ids=stop_ids, max_new_tokens=max_new_tokens)
            records = play_batch(BranchAgent(engine, name, forced), condition, split,
                                 [branches[i][0].seed for i, _ in batch], model=name,
                                 env_options={"future": [d for _, d in batch], "future_from": [branches[i][0].t for i, _ in batch]})
            for (i, d), record in zip(batch, records, strict=True):
                if d == 0:
                    scores[i] = {**record.score, "draws": scores[i]["draws"]}
                scores[i]["draws"].append(float(record.score["final_score"]))
    for s in scores:
        s["final_score"] = float(np.mean(s["draws"]))
    return scores


def state_meters(rows: Sequence[dict[str, Any]]) -> list[np.ndarray]:
    """The meters the student sees at each row's state: its week replayed through the actions played before it
    (``prefix``)."""
    out: list[np.ndarray] = [np.empty(0)] * len(rows)
    for idx, _, done in replay_records(rows, lambda r: r["prefix"]):
        for i, m in zip(idx, done.final_meters, strict=True):
            out[i] = m
    return out


def restore_challengers(rows: Sequence[dict[str, Any]], below: float) -> list[str | None]:
    """Each row's restoring action (:func:`rhythm.agents.restore.restoring_action` at its meters), or None."""
    return [restoring_action(m, int(r["t"]), below) for r, m in zip(rows, state_meters(rows), strict=True)]


def make_branch_rollout(rows: Sequence[dict[str, Any]], name: str, settings: BranchMode = BranchMode(),
                        challengers: Sequence[str | None] | None = None) -> Callable[[list[Any], Any], dict[str, Any]]:
    """TRL ``rollout_func`` for branch mode over the dataset ``rows`` (step mode's rows); ``challengers``: each
    row's named second reply for ``group: pair`` (:func:`restore_challengers`; None: the runner-up everywhere)."""
    states = {prompt_key(r["prompt"]): State.of_row(r) for r in rows}
    restore = dict(zip((prompt_key(r["prompt"]) for r in rows), challengers, strict=True)) if challengers is not None else {}

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        import torch
        from trl.models import unwrap_model_for_generation

        tokenizer = trainer.processing_class
        g = trainer.generation_config
        stop_ids = list(trainer.eos_token_ids)
        pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0])
        prompt_ids = encode_prompts(tokenizer, prompts)
        with unwrap_model_for_generation(
            trainer.model_wrapped, trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            generation_kwargs=trainer.generation_kwargs,
        ) as model, torch.no_grad():
            if settings.group == "pair":  # TRL repeats each prompt num_generations (2) times in a row
                completion_ids = pair_replies(model, tokenizer, prompt_ids[::2], pad_id, stop_ids, int(g.max_new_tokens),
                                              [restore.get(prompt_key(p)) for p in prompts[::2]])
            else:
                ids, mask = left_pad(prompt_ids, pad_id)
                torch.manual_seed(process_seed(trainer.args.seed * 100_003 + trainer.state.global_step + 1))
                out = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device), do_sample=True,
                                     temperature=float(g.temperature or 1.0), top_p=float(g.top_p or 1.0),
                                     max_new_tokens=int(g.max_new_tokens), eos_token_id=stop_ids, pad_token_id=pad_id)
                completion_ids = cut_at_stop(out[:, ids.shape[1]:].tolist(), stop_ids)
            texts = tokenizer.batch_decode([[t for t in c if t not in stop_ids] for c in completion_ids], skip_special_tokens=True)
            texts = [t.strip() for t in texts]
            row_states = [states[prompt_key(p)] for p in prompts]
            branch_of: dict[tuple[Any, ...], int] = {}
            branches: list[tuple[State, str]] = []
            index = []
            for state, text in zip(row_states, texts, strict=True):
                key = (state, *branch_key(text, state.t))
                if key not in branch_of:
                    branch_of[key] = len(branches)
                    branches.append((state, text))
                index.append(branch_of[key])
            scores = branch_scores(model, tokenizer, stop_ids, int(g.max_new_tokens), branches, name, settings.futures)
        rewards = [float(scores[j]["final_score"]) for j in index]
        if settings.agree_z > 0:
            rewards, _ = agreed_rewards(rewards, [scores[j]["draws"] for j in index], settings.agree_z)
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": None,  # sampling logprobs only matter for vLLM's importance correction
            "env_mask": [decision_mask(tokenizer, c, s.t) for c, s in zip(completion_ids, row_states, strict=True)],
            "branch_score": rewards,
        }

    return rollout
