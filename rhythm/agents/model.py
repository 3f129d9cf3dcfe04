"""The student as an agent: a causal LM that plays the benchmark through the text protocol.

Run it with ``rhythm eval --agent model:PATH`` (loading: :func:`rhythm.model.load.load_model`).

Protocol v2: each episode is one conversation, and all live episodes advance in lockstep (in chunks
of ``ModelOptions.batch_size``), each chunk keeping its key/value cache for the whole week
(:class:`rhythm.model.lockstep.LockstepChat`): a step prefills only the new turn and decodes the
reply, so a week costs one pass over its tokens instead of 28. Greedy unless ``do_sample`` is set
(then seeded per step, so a run is reproducible); replies equal a loop that re-encodes the whole
conversation every step (tested). Decoding settings come from ``ModelOptions`` alone (no repetition penalty or sampling defaults
from a model card). Replies go through
:func:`rhythm.protocol.parse_reply`; a reply that never parses gets the fallback action and counts
as a parse failure, never an error.
"""

from __future__ import annotations

import hashlib
from typing import Any

from rhythm.agents.base import BatchObservation, Decision, EpisodeSpec
from rhythm.agents.tiny import resolve_base
from rhythm.errors import RhythmError
from rhythm.model.load import ModelOptions, load_model, stop_token_ids
from rhythm.model.lockstep import LockstepChat, check_appends
from rhythm.protocol import parse_reply


def _step_seed(seed: int, episodes: list[EpisodeSpec], t: int, chunk: int) -> int:
    key = f"{seed}|{t}|{chunk}|" + ",".join(f"{e.condition}/{e.split}/{e.seed}" for e in episodes)
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def decision_of(turn: Any) -> Decision:
    """A generated reply (:class:`rhythm.model.lockstep.Turn`) as the agent's decision, parsed by the protocol."""
    parsed = parse_reply(turn.text)
    # a local model is paid for by its machine, not per token: known to cost nothing
    usage = {"prompt_tokens": len(turn.prompt_ids), "completion_tokens": len(turn.completion_ids), "cost_usd": 0.0,
             "cut_replies": int(turn.cut)}
    return Decision(action=parsed.action, belief=parsed.belief, text=turn.text, parse_ok=parsed.ok, usage=usage)


class ModelAgent:
    """``model:PATH``: a causal LM playing every live episode as one conversation, in lockstep batches
    whose key/value caches persist across the week (:class:`rhythm.model.lockstep.LockstepChat`)."""

    def __init__(self, path: str, options: ModelOptions | None = None) -> None:
        if options is not None and not isinstance(options, ModelOptions):  # another stage's settings: none would apply
            raise TypeError(f"a model agent's options are ModelOptions, got {type(options).__name__}")
        self.options = options or ModelOptions()
        if self.options.batch_size < 1:
            raise RhythmError(f"model.batch_size must be >= 1, got {self.options.batch_size}")
        if self.options.max_new_tokens < 1:
            raise RhythmError(f"model.max_new_tokens must be >= 1, got {self.options.max_new_tokens}")
        self.name = f"model:{path}"
        self.model, self.tokenizer, self.source = load_model(path, self.options, resolve=resolve_base)
        self.stop_ids = stop_token_ids(self.model, self.tokenizer)
        check_appends(self.tokenizer)  # before any week is played
        self.episodes: list[EpisodeSpec] = []
        self.engines: list[Any] = []

    def _engine(self) -> Any:
        o = self.options
        return LockstepChat(self.model, self.tokenizer, stop_ids=self.stop_ids, max_new_tokens=o.max_new_tokens,
                            do_sample=o.do_sample, temperature=o.temperature, top_p=o.top_p)

    def reset(self, episodes: list[EpisodeSpec]) -> None:
        self.episodes = list(episodes)
        size = self.options.batch_size
        self.engines = []
        for start in range(0, len(self.episodes), size):
            engine = self._engine()
            engine.reset(len(self.episodes[start : start + size]))
            self.engines.append(engine)

    @property
    def calls(self) -> int:
        """Forward passes so far (for tests and benchmarks)."""
        return sum(e.forward_calls for e in self.engines)

    def act(self, obs: BatchObservation) -> list[Decision]:
        import torch

        size = self.options.batch_size
        decisions: list[Decision] = []
        for chunk, engine in enumerate(self.engines):
            start = chunk * size
            convs = [obs.conversation(i) for i in range(start, start + engine.n)]
            generator = None
            if self.options.do_sample:
                generator = torch.Generator(device="cpu").manual_seed(_step_seed(self.options.seed, self.episodes[start : start + engine.n], obs.t, chunk))
            decisions.extend(decision_of(turn) for turn in engine.step(convs, generator=generator))
        return decisions
