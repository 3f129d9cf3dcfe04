"""Chat models as agents: ``rhythm eval --agent openai:MODEL`` (any OpenAI-compatible endpoint) or
``--agent azure:DEPLOYMENT``, configured by the eval config's ``llm`` section (``--set
llm.base_url=...``, ``--set llm.endpoint=...``).

The agent plays the same protocol as the LLM teacher (:func:`rhythm.model.llm_client.ask`: one
request per step carrying the week's conversation so far, ``llm.history_turns`` to keep only the last
K steps; one re-ask on a reply without a valid action, then the fallback) through the same client. At each step the requests of every live episode go out together, at most
``llm.concurrency`` at a time, on an event loop the agent owns in a background thread (so ``act`` is a
plain call, from any thread). Each decision carries its usage; the batch runner sums it per episode.

An evaluation must not score a silently shortened run, so a request that fails for good (a 200 that is
not a chat completion included), or the budget ``llm.max_cost_usd`` being reached, stops the evaluation
with one clear line; so does a reply without usage while that budget is set (the spend could no longer be
held to it). A step whose cost is unknown (an unpriced model, a reply without usage) carries ``cost_usd``
None and ``usage_missing``, the requests without usage, so an episode's summed cost is never silently short; the
step's usage is the one an API teacher's week records (:meth:`rhythm.model.llm_client.StepReply.usage`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from rhythm.agents.base import BatchObservation, Decision, EpisodeSpec
from rhythm.errors import RhythmError
from rhythm.model.llm_client import (
    BudgetReached,
    ChatClient,
    CostMeter,
    EpisodeAPIError,
    LLMConfig,
    RequestStats,
    SpendUnknown,
    StepReply,
    ask,
    resolve_target,
)

T = TypeVar("T")


class LLMAgent:
    """Answers every live episode's observation with one chat request (plus a re-ask when needed)."""

    def __init__(self, provider: str, arg: str, options: Any = None, *, credential: Any = None) -> None:
        if options is not None and not isinstance(options, LLMConfig):  # another stage's settings: none of them would apply
            raise TypeError(f"an API agent's options are an LLMConfig, got {type(options).__name__}")
        self.options = options if options is not None else LLMConfig()
        self.target = resolve_target(provider, arg, self.options)
        self.name = provider
        self.credential = credential
        self.meter = CostMeter(self.target.name, self.options.prices, self.options.max_cost_usd)
        self.stats = RequestStats()
        self._client: ChatClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def reset(self, episodes: list[EpisodeSpec]) -> None:
        self.episodes = list(episodes)

    def act(self, obs: BatchObservation) -> list[Decision]:
        k = self.options.history_turns
        replies = self._run(self._ask_all([obs.conversation(i, max_turns=k) for i in range(len(obs.prompts))]))
        return [Decision(r.parsed.action, r.parsed.belief, r.text, r.parsed.ok, r.usage()) for r in replies]

    async def _ask_all(self, prompts: list[list[dict[str, str]]]) -> list[StepReply]:
        if self._client is None:  # built on the agent's own loop, which every later call uses too
            self._client = ChatClient(self.target, self.options, credential=self.credential, meter=self.meter, stats=self.stats)
        client = self._client
        gate = asyncio.Semaphore(self.options.concurrency)

        async def one(prompt: list[dict[str, str]]) -> StepReply:
            async with gate:
                return await ask(client, prompt)

        tasks = [asyncio.ensure_future(one(p)) for p in prompts]
        label = f"{self.name}:{self.target.name}"
        try:
            return list(await asyncio.gather(*tasks))
        except SpendUnknown as unknown:
            raise RhythmError(f"{label}: {unknown}; drop llm.max_cost_usd to evaluate against a server that "
                              "reports no usage") from None
        except BudgetReached as reached:
            raise RhythmError(f"{label}: {reached}; raise llm.max_cost_usd to evaluate further") from None
        except EpisodeAPIError as err:
            raise RhythmError(f"{label}: a request failed for good, so the evaluation stops: {err.reason}") from None
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="rhythm-llm-agent", daemon=True)
            self._thread.start()
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:  # Ctrl-C, SIGTERM: the requests in flight are cancelled on the loop (see close)
            future.cancel()
            raise

    def close(self) -> None:
        """Close the client and stop the agent's event loop (also fine if it never started)."""
        if self._loop is None:
            return
        self._run(_cancel_pending())  # an interrupted step's requests end here, not as "Task was destroyed" at exit
        if self._client is not None:
            self._run(self._client.aclose())
            self._client = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._loop.close()
        self._loop = None


async def _cancel_pending() -> None:
    """Cancel every other task on the running loop and wait until each has ended."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
