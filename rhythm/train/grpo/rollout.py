"""Episode mode's rollouts: the policy being trained plays whole weeks inside TRL's ``rollout_func``
(see :mod:`rhythm.train.grpo`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rhythm.agents.episodes import play_batch
from rhythm.agents.model import decision_of
from rhythm.model.lockstep import LockstepChat
from rhythm.records import JsonlWriter
from rhythm.train.grpo.data import parse_placeholder
from rhythm.train.processes import gathered, is_main_process, process_seed


class PolicyAgent:
    """The policy being trained, as a rhythm agent: each week one conversation, every turn one sampled
    reply with the trainer's own generation settings (temperature, top_p, max_completion_length, eos
    tokens), through the same lockstep engine eval uses (:class:`rhythm.model.lockstep.LockstepChat`).

    For the GRPO loss, each turn keeps its prompt ids (the whole conversation so far, as the chat
    template renders it: what the policy saw) and its completion ids (up to and including the stop token).
    """

    def __init__(self, model: Any, tokenizer: Any, generation_config: Any, eos_token_ids: Sequence[int], name: str,
                 seed: int = 0) -> None:
        g = generation_config
        self.engine = LockstepChat(model, tokenizer, stop_ids=list(eos_token_ids), max_new_tokens=int(g.max_new_tokens),
                                   do_sample=True, temperature=float(g.temperature or 1.0), top_p=float(g.top_p or 1.0))
        self.name = name
        self.seed = seed
        self.turns: list[dict[int, tuple[list[int], list[int]]]] = []

    def reset(self, episodes: list[Any]) -> None:
        self.turns = [{} for _ in episodes]
        self.engine.reset(len(episodes))

    def act(self, obs: Any) -> list[Any]:
        import torch

        generator = torch.Generator(device="cpu").manual_seed(self.seed * 1000 + obs.t)
        turns = self.engine.step([obs.conversation(i) for i in range(len(obs.prompts))], generator=generator)
        for i, turn in enumerate(turns):
            self.turns[i][obs.t] = (turn.prompt_ids, turn.completion_ids)
        return [decision_of(turn) for turn in turns]


def assign_weeks(keys: Sequence[tuple[str, str, int, int]]) -> list[int]:
    """Which week of its person each row belongs to: the k-th copy of (person, turn) is week k."""
    seen: Counter = Counter()
    weeks = []
    for key in keys:
        weeks.append(seen[key])
        seen[key] += 1
    return weeks


def make_week_rollout(name: str, records_path: Path | None) -> Callable[[list[Any], Any], dict[str, Any]]:
    """TRL ``rollout_func`` for episode mode (see the module docstring)."""

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        import torch
        from trl.models import unwrap_model_for_generation

        keys = [parse_placeholder(p) for p in prompts]
        weeks = assign_weeks(keys)
        n_weeks: dict[tuple[str, str, int], int] = defaultdict(int)
        for (c, s, seed, _), k in zip(keys, weeks, strict=True):
            n_weeks[(c, s, seed)] = max(n_weeks[(c, s, seed)], k + 1)
        by_split: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
        for (c, s, seed), n in n_weeks.items():
            by_split[(c, s)].extend((seed, k) for k in range(n))
        played: dict[tuple[str, str, int, int], tuple[Any, dict[int, tuple[list[int], list[int]]]]] = {}
        step = trainer.state.global_step + 1
        with unwrap_model_for_generation(
            trainer.model_wrapped, trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            generation_kwargs=trainer.generation_kwargs,
        ) as model, torch.no_grad():
            agent = PolicyAgent(model, trainer.processing_class, trainer.generation_config, trainer.eos_token_ids, name,
                                seed=process_seed(trainer.args.seed * 100_003 + step))  # its own people (validate)
            for (c, s), weeks_here in by_split.items():
                records = play_batch(agent, c, s, [seed for seed, _ in weeks_here], model=name)
                for (seed, k), record, turns in zip(weeks_here, records, agent.turns, strict=True):
                    record.extra = {"grpo_step": step, "week": k}
                    played[(c, s, seed, k)] = (record, turns)
        if records_path is not None:
            everyone = gathered([record for record, _ in played.values()])
            if is_main_process():
                with JsonlWriter(records_path, resume=True) as w:
                    for record in everyone:
                        w.write(record)
        out: dict[str, list[Any]] = defaultdict(list)
        for (c, s, seed, t), k in zip(keys, weeks, strict=True):
            record, turns = played[(c, s, seed, k)]
            prompt_ids, completion_ids = turns[t]
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion_ids)
            out["final_score"].append(float(record.score["final_score"]))
            out["final_score_v2"].append(float(record.score["final_score_v2"]))
            out["prefix"].append([st.action for st in record.steps[:t]])
            out["week"].append(k)
        return {**out, "logprobs": None}  # sampling logprobs only matter for vLLM's importance correction

    return rollout
