"""The one small interface through which rhythm talks to chat models: any OpenAI-compatible endpoint
(OpenAI, vLLM, Ollama, ...) or Azure OpenAI, with the client's own retries, token and cost accounting,
a spending cap, and secrets kept out of everything written.

Used by ``rhythm generate --teacher openai|azure`` (:mod:`rhythm.teacher.llm_generate`) and by the
``openai:MODEL`` / ``azure:DEPLOYMENT`` agents of ``rhythm eval`` (:mod:`rhythm.agents.llm`).

- OpenAI-compatible: ``AsyncOpenAI(base_url=...)``; the key comes from ``OPENAI_API_KEY`` (a server
  given by ``base_url`` may need none).
- Azure OpenAI: ``AsyncAzureOpenAI(azure_endpoint=..., azure_deployment=..., api_version=...)``; the key
  comes from ``AZURE_OPENAI_API_KEY``; without one, Microsoft Entra ID through azure-identity's
  ``DefaultAzureCredential`` and ``get_bearer_token_provider`` (any credential object can be passed in).
- Retries are the client's own (``max_retries``, ``timeout_s``): connection errors, timeouts, 408, 409,
  429 (honouring ``Retry-After``) and 5xx. Attempts, retries, 429s and 5xx are counted from httpx event
  hooks, so the summary reports what the server actually saw; an attempt whose connection dropped before
  its body arrived counts as no response. A ``Retry-After`` longer than the client waits (120 s) is not
  retried at all; the error says so, with both numbers.
- A 200 that is not a chat completion (a body that is not JSON, a proxy's HTML page, an ``error`` object
  where the choices should be) is a failed request, like a 5xx after its retries: it is not sent again
  (a server may have billed it), and the error carries the server's message or the start of the body.
  A completion with an empty ``choices`` list is a reply with no text (re-asked, then the fallback).
- A reply's text is always a string (:func:`reply_text`): content parts some gateways send are joined, a
  refusal is kept, and any other content is no text, so nothing but text is recorded or sent back.
- A 400 saying the conversation is past the model's context (``context_length_exceeded``, vLLM's "maximum
  context length") stops the run and points at ``llm.history_turns``, which keeps only the last K steps.
- Keys and tokens come from the environment only: they are never config fields, and every error
  message that leaves this module goes through :meth:`Redactor.redact`.
- Request fields that are not configured are left out of the request, never sent as null.
- Cost: prompt tokens the server served from its prompt cache (``usage.prompt_tokens_details.cached_tokens``,
  reported by OpenAI and Azure) are priced at ``cached_input``, the rest at ``input``, completions at
  ``output``. A server that reports no cached tokens is charged the full input price for every prompt token.
  A reply without ``usage`` has an unknown cost (None, never 0); with ``max_cost_usd`` set, the spend can no
  longer be held to the cap, so no further request is sent.

The ``openai`` and ``azure.identity`` packages are imported only when a client is built.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Annotated, Any
from urllib.parse import urlsplit

from annotated_types import Ge, Gt

from rhythm.config import NonNegative, Positive, check_bounds
from rhythm.errors import RhythmError
from rhythm.protocol import FORMAT_REMINDER, ParsedReply, parse_reply
from rhythm.provenance import redact_url

PROVIDERS = ("openai", "azure")
KEY_ENV = {"openai": "OPENAI_API_KEY", "azure": "AZURE_OPENAI_API_KEY"}
ENTRA_SCOPE = "https://cognitiveservices.azure.com/.default"
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
AUTH_MODES = ("auto", "key", "entra")
CONNECT_TIMEOUT_S = 5.0
"""Seconds to connect before an attempt is retried: the openai client's own default (``timeout_s`` caps it)."""


@dataclass(frozen=True)
class Price:
    """USD per 1M tokens of one model. ``input`` and ``output`` have no default: a price that leaves one out
    (or misspells it) would make those tokens free and let ``max_cost_usd`` pass in silence."""

    input: NonNegative
    """Per 1M prompt tokens not served from the server's prompt cache."""
    output: NonNegative
    """Per 1M completion tokens (reasoning tokens included, as the API counts them)."""
    cached_input: NonNegative | None = None
    """Per 1M prompt tokens the server served from its prompt cache (usage.prompt_tokens_details.cached_tokens;
    OpenAI and Azure bill them at a fraction of ``input``); null: the input price."""

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        """USD for one request's usage; ``cached_tokens`` are part of ``prompt_tokens``."""
        cached_price = self.input if self.cached_input is None else self.cached_input
        fresh = prompt_tokens - cached_tokens
        return (fresh * self.input + cached_tokens * cached_price + completion_tokens * self.output) / 1e6


SENDING = ("base_url", "endpoint", "concurrency", "max_retries", "timeout_s", "max_cost_usd", "prices",
           "max_consecutive_failures")
"""The :class:`LLMConfig` fields that decide how requests are sent (which server answers for the model, how many at
once, retries, budget), not what a reply is: left out of the hash of what an eval or a generate run makes."""


@dataclass(frozen=True)
class LLMConfig:
    """Settings of chat-model teachers and agents (``--teacher openai|azure``, ``--agent openai:M``)."""

    model: str | None = None
    """openai: the model name (``--model``, or ``--teacher openai:NAME``)."""
    base_url: str | None = None
    """openai: an OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (vLLM); default api.openai.com."""
    endpoint: str | None = None
    """azure: the resource endpoint, e.g. https://RESOURCE.openai.azure.com."""
    deployment: str | None = None
    """azure: the deployment name (``--deployment``, or ``--teacher azure:NAME``)."""
    api_version: str = "2025-04-01-preview"
    """azure: the api-version query parameter; use one your resource supports."""
    auth: str = "auto"
    """azure: auto (AZURE_OPENAI_API_KEY if set, else Entra ID) | key | entra."""
    max_retries: Annotated[int, Ge(0)] = 5
    """Client retries per request: connection errors, timeouts, 408/409/429 (Retry-After honoured), 5xx."""
    timeout_s: Annotated[float, Gt(0)] = 600.0
    """Seconds an attempt may wait for the server (to send, and for each read of the reply; to connect, at most 5)
    before it is abandoned and retried: reasoning replies can take minutes, and a server may still bill an
    abandoned attempt. A reply that keeps arriving, however slowly, is not cut."""
    temperature: float | None = None
    """Sampling temperature; null: the server's default (reasoning models accept no other)."""
    max_tokens: int | None = None
    """Reply cap for older servers that only know max_tokens; null: not sent."""
    max_completion_tokens: int | None = None
    """Reply cap, reasoning included (reasoning models); null: not sent."""
    reasoning_effort: str | None = None
    """none | minimal | low | medium | high | xhigh (reasoning models); null: not sent."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Extra JSON fields for the request body (server-specific, e.g. vLLM's top_k); empty: none."""
    prices: dict[str, Price] = field(default_factory=dict)
    """USD per 1M tokens, by model name (azure: by deployment name): {name: {input: X, cached_input: Z, output: Y}}
    (cached_input optional: the price of prompt tokens served from the server's cache)."""
    max_cost_usd: Annotated[float, Gt(0)] | None = None
    """Stop sending requests once this run has spent this much (needs a price for the model); a ``--resume``d run
    counts from 0, so give it what is left."""
    concurrency: Positive = 8
    """rhythm eval: requests in flight per step; weeks are played in lockstep batches of 4x this, each written as it
    finishes (rhythm generate uses its own --concurrency)."""
    history_turns: Positive | None = None
    """Steps of the week sent with each request (protocol v2 sends the whole conversation); K keeps
    only the last K observations and replies, to cut cost. null: the whole week."""
    max_consecutive_failures: Positive = 10
    """rhythm generate: stop after this many episodes in a row failed (the endpoint looks down)."""


# ---------------------------------------------------------------------------------------------------
# Configuration checks


@dataclass(frozen=True)
class Target:
    """Where requests go: provider, the model (openai) or deployment (azure), and the base URL."""

    provider: str
    name: str
    url: str


def redacted(llm: LLMConfig) -> LLMConfig:
    """``llm`` as a file records it: its URLs without passwords or secret-looking query values."""
    return replace(llm, base_url=None if llm.base_url is None else redact_url(llm.base_url),
                   endpoint=None if llm.endpoint is None else redact_url(llm.endpoint))


def resolve_target(provider: str, arg: str, llm: LLMConfig) -> Target:
    """Check the settings a provider needs before anything is sent; ``arg`` is from ``openai:NAME``."""
    if provider not in PROVIDERS:
        raise RhythmError(f"unknown LLM provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
    given = llm.model if provider == "openai" else (llm.deployment or llm.model)
    flag = "--model" if provider == "openai" else "--deployment"
    if arg and given and arg != given:
        raise RhythmError(f"{provider}:{arg} disagrees with {flag} {given}; give the name once")
    name = arg or given
    if not name:
        raise RhythmError(f"--teacher {provider} needs {flag} NAME (or {provider}:NAME, or llm.{flag[2:]} in the config)")
    check_bounds(llm, "llm.")  # an LLMConfig built in code, not loaded
    if provider == "openai" or llm.auth != "entra":  # under Entra ID auth the key is not sent
        check_key(KEY_ENV[provider])
    if llm.reasoning_effort is not None and llm.reasoning_effort not in REASONING_EFFORTS:
        raise RhythmError(f"unknown reasoning_effort {llm.reasoning_effort!r}; expected one of {', '.join(REASONING_EFFORTS)}")
    if llm.max_cost_usd is not None and name not in llm.prices:
        raise RhythmError(
            f"--max-cost-usd needs a price for {name!r}: add llm.prices.{name} (input and output USD per 1M tokens) to the config"
        )
    if provider == "openai":
        url = llm.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        check_url(url, "--base-url (llm.base_url)" if llm.base_url else "OPENAI_BASE_URL")
        if not (llm.base_url or os.environ.get("OPENAI_BASE_URL")) and not os.environ.get(KEY_ENV["openai"]):
            raise RhythmError("OPENAI_API_KEY is not set; export it, or give --base-url (llm.base_url) for a server that needs no key")
        return Target(provider, name, redact_url(url))
    if not llm.endpoint:
        raise RhythmError("azure needs --endpoint URL (llm.endpoint), e.g. https://RESOURCE.openai.azure.com")
    if not llm.api_version:
        raise RhythmError("azure needs --api-version (llm.api_version), e.g. 2025-04-01-preview")
    if llm.auth not in AUTH_MODES:
        raise RhythmError(f"unknown llm.auth {llm.auth!r}; expected one of {', '.join(AUTH_MODES)}")
    if llm.auth == "key" and not os.environ.get(KEY_ENV["azure"]):
        raise RhythmError("llm.auth is key but AZURE_OPENAI_API_KEY is not set")
    check_url(llm.endpoint, "--endpoint (llm.endpoint)")
    return Target(provider, name, redact_url(llm.endpoint))


def check_key(env: str) -> None:
    """The key in ``env``, if set, is what an HTTP header can carry: a pasted key with a trailing newline was retried
    as a connection error for minutes, and one with a non-ASCII character (a typographic dash) crashed the client."""
    key = os.environ.get(env)
    if key and not (key.isascii() and key.isprintable() and key == key.strip()):
        raise RhythmError(f"{env} holds a line break, a space at an end or a character outside ASCII, which no API "
                          "key has; set it again without them")


def check_url(url: str, what: str) -> None:
    """An endpoint URL needs ``http://`` or ``https://``, a host and, if it names one, a port that is one: without
    them the client cannot connect and would retry for minutes (or fail with a traceback) before saying so."""
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise RhythmError(f"{what} must be an http:// or https:// URL with a host, got {redact_url(url)!r} "
                          f"(e.g. http://{url.split('://')[-1]})")
    try:
        parts.port  # noqa: B018 - reading it checks it: out of 0-65535, or not a number, raises
    except ValueError:
        raise RhythmError(f"{what} {redact_url(url)!r} names no valid port (a number in 0-65535)") from None


# ---------------------------------------------------------------------------------------------------
# Secrets


_SECRET_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9_\-\.=+/]{8,}"),
    re.compile(r"(?i)(api[-_]?key[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9_\-\.]{8,}"),
)


class Redactor:
    """Removes known secrets (keys, tokens) and anything shaped like one from text."""

    def __init__(self) -> None:
        self._secrets: set[str] = set()

    def add(self, secret: str | None) -> None:
        if secret and len(secret) >= 4:
            self._secrets.add(secret)

    def redact(self, text: str) -> str:
        for secret in sorted(self._secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        for pattern in _SECRET_PATTERNS:
            text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "***", text)
        return text


# ---------------------------------------------------------------------------------------------------
# Counters and money


@dataclass
class RequestStats:
    """What went over the wire, counted by httpx event hooks (every attempt, retries included)."""

    attempts: int = 0
    retries: int = 0
    responses: int = 0
    rate_limited: int = 0
    server_errors: int = 0
    missing_usage: int = 0

    @property
    def no_response(self) -> int:
        """Attempts that got no HTTP response: timeouts and connection errors."""
        return self.attempts - self.responses

    async def on_request(self, request: Any) -> None:
        self.attempts += 1
        try:
            if int(request.headers.get("x-stainless-retry-count", "0")) > 0:
                self.retries += 1
        except ValueError:
            pass

    async def on_response(self, response: Any) -> None:
        """Count a response once its body has arrived: a connection lost after the headers raises here, and
        the client retries it as a connection error, so it counts as no response."""
        await response.aread()
        self.responses += 1
        if response.status_code == 429:
            self.rate_limited += 1
        elif response.status_code >= 500:
            self.server_errors += 1


class BudgetReached(Exception):
    """Raised instead of sending a request once ``max_cost_usd`` has been spent."""


class SpendUnknown(BudgetReached):
    """Raised instead of sending a request once a reply came without ``usage`` while ``max_cost_usd`` is set:
    the spend can no longer be held to the cap, so the run stops rather than spend without bound."""


class CostMeter:
    """Prices token usage and enforces the spending cap across every request of a run."""

    def __init__(self, name: str, prices: dict[str, Price], max_cost_usd: float | None) -> None:
        price = prices.get(name)
        self.price = Price(**price) if isinstance(price, dict) else price
        self.max_cost_usd = max_cost_usd
        self.spent = 0.0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.completion_tokens = 0
        self.unknown = 0
        """Replies without usage: their cost is unknown, and :attr:`spent` leaves them out."""

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float | None:
        return None if self.price is None else self.price.cost(prompt_tokens, completion_tokens, cached_tokens)

    def add(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float | None:
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += cached_tokens
        self.completion_tokens += completion_tokens
        cost = self.cost(prompt_tokens, completion_tokens, cached_tokens)
        if cost is not None:
            self.spent += cost
        return cost

    def add_unknown(self) -> None:
        """Count a reply that came without usage (its tokens and cost are unknown)."""
        self.unknown += 1

    @property
    def exhausted(self) -> bool:
        return self.max_cost_usd is not None and self.spent >= self.max_cost_usd

    def check(self) -> None:
        """Raise instead of sending once the cap is reached, or once the spend against it is unknown."""
        if self.max_cost_usd is not None and self.unknown:
            raise SpendUnknown(
                f"{self.unknown} {'reply' if self.unknown == 1 else 'replies'} came without usage, so the spend "
                f"(${self.spent:.4f} known) cannot be held to the ${self.max_cost_usd:.4f} budget")
        if self.exhausted:
            raise BudgetReached(f"spent ${self.spent:.4f} of the ${self.max_cost_usd:.4f} budget")


# ---------------------------------------------------------------------------------------------------
# Errors


class FatalAPIError(RhythmError):
    """An error every further request would repeat (wrong key, unknown model, rejected parameters)."""


class EpisodeAPIError(Exception):
    """A request that failed for good (retries exhausted, or a per-request refusal): that episode fails."""

    def __init__(self, reason: str, kind: str, status: int | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.status = status
        self.spent: dict[str, Any] | None = None
        """The usage of the step's replies before the failed request (a re-ask's first reply), as a step records it."""


def _body_message(body: Any) -> str | None:
    """The message of an OpenAI-style error body (``{"error": {"message": ...}}`` or ``{"message": ...}``)."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return body["message"]
    return None


def _api_message(exc: Any) -> str:
    return _body_message(getattr(exc, "body", None)) or str(getattr(exc, "message", None) or exc)


def _api_code(exc: Any) -> str:
    code = getattr(exc, "code", None)
    if code is None and isinstance(getattr(exc, "body", None), dict):
        inner = exc.body.get("error", exc.body)
        code = inner.get("code") if isinstance(inner, dict) else None
    return str(code or "")


def _context_too_long(code: str, message: str) -> bool:
    """A 400 that says the prompt does not fit the model's context: OpenAI's and Azure's code
    ``context_length_exceeded``, or vLLM's "This model's maximum context length is N tokens"."""
    return code == "context_length_exceeded" or "maximum context length" in message.lower()


def _retries_taken(exc: Any) -> int | None:
    """How many retries the client made before ``exc``: the count its last attempt carried in
    ``x-stainless-retry-count`` (None when that request or header is missing)."""
    try:
        return int(exc.request.headers["x-stainless-retry-count"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _retry_after_s(headers: Any) -> float | None:
    """The wait a response asks for, read as the client reads it: ``retry-after-ms``, then
    ``retry-after`` in seconds or as an HTTP date."""
    import email.utils
    import math
    import time

    for name, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        text = headers.get(name)
        try:
            value = float(text)
        except (TypeError, ValueError):
            continue
        if math.isinf(value) and value > 0 and text.strip().lower() not in ("inf", "+inf", "infinity", "+infinity"):
            return math.inf  # a number too large for a float: a wait longer than any cap, which the client refuses
        return value / divisor if math.isfinite(value) else None  # "inf" itself: no wait, the client backs off
    try:
        return float(email.utils.mktime_tz(email.utils.parsedate_tz(headers.get("retry-after"))) - time.time())
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def _client_retry_after_cap_s() -> float:
    """The longest ``Retry-After`` the openai client waits for; past it, it does not retry."""
    try:
        from openai._constants import MAX_RETRY_AFTER_DELAY
    except ImportError:  # pragma: no cover - moved in another client version
        return 120.0
    return float(MAX_RETRY_AFTER_DELAY)


def _after_retries(exc: Any) -> str:
    """`` after N retries`` with the number the client really made, or nothing when unknown."""
    taken = _retries_taken(exc)
    return "" if taken is None else f" after {taken} {'retry' if taken == 1 else 'retries'}"


def _shorten(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------------
# The client


@dataclass
class Completion:
    """One reply of the endpoint, with its accounting."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    retries: int
    finish_reason: str | None = None
    cached_tokens: int = 0
    """Prompt tokens the server served from its prompt cache (0 when it reports none)."""
    usage_missing: bool = False
    """The reply came without ``usage``: its tokens count 0 and its cost is unknown (None)."""


def _completion_of(raw: Any) -> Any:
    """The chat completion of a 2xx reply, or ``openai.APIResponseValidationError`` with what the server sent
    instead: a body that is not JSON, not a completion (a proxy's HTML page), or an ``error`` object without
    choices (some gateways answer 200 with the upstream's error). An empty ``choices`` list is a completion."""
    import openai
    from openai.types.chat import ChatCompletion

    response = raw.http_response
    try:
        parsed = raw.parse()
    except ValueError:  # the body is not JSON (json.JSONDecodeError is a ValueError)
        raise openai.APIResponseValidationError(
            response, response.text, message=f"a body that is not JSON: {_shorten(response.text, 120)!r}"
        ) from None
    if not isinstance(parsed, ChatCompletion):
        kind = response.headers.get("content-type", "no content-type")
        raise openai.APIResponseValidationError(
            response, parsed, message=f"not a chat completion ({kind}): {_shorten(str(parsed), 120)!r}")
    extra = getattr(parsed, "model_extra", None) or {}
    if not parsed.choices and extra.get("error"):
        body = {"error": extra["error"]}
        message = _body_message(body) or str(extra["error"])
        raise openai.APIResponseValidationError(
            response, body, message=f"an error instead of a reply: {message}")
    return parsed


def reply_text(message: Any) -> str:
    """The text of a reply's message, always a string: ``content`` when it is one; the ``text`` of each part, joined,
    when a gateway sends content parts (``[{"type": "text", "text": ...}]``); else the model's refusal
    (``message.refusal``), so the record keeps what it said. Anything else (null, a number, an object) is no text:
    a parse failure, re-asked like any other, and never sent back to the server as it came."""
    content = getattr(message, "content", None)
    if isinstance(content, list):
        texts = (part.get("text") if isinstance(part, dict) else getattr(part, "text", None) for part in content)
        content = "".join(t for t in texts if isinstance(t, str))
    if isinstance(content, str) and content:
        return content
    refusal = getattr(message, "refusal", None)
    return refusal if isinstance(refusal, str) else ""


class ChatClient:
    """An async chat endpoint: ``await complete(messages)``; ``await aclose()`` when done.

    Build it inside the event loop that will use it. ``credential`` (azure, Entra ID) is any object
    with ``get_token(*scopes)`` returning an ``AccessToken``; default ``DefaultAzureCredential()``.
    """

    def __init__(
        self,
        target: Target,
        llm: LLMConfig,
        *,
        credential: Any = None,
        meter: CostMeter | None = None,
        stats: RequestStats | None = None,
    ) -> None:
        import openai

        self.target = target
        self.llm = llm
        self.meter = meter or CostMeter(target.name, llm.prices, llm.max_cost_usd)
        self.stats = stats or RequestStats()
        self.redactor = Redactor()
        self.auth = "key"
        http_client = openai.DefaultAsyncHttpxClient(
            event_hooks={"request": [self.stats.on_request], "response": [self.stats.on_response]}
        )
        # a host that does not answer is given the client's own connect limit, not timeout_s (an hour a request over
        # five retries at the default 600 s)
        timeout = openai.Timeout(llm.timeout_s, connect=min(llm.timeout_s, CONNECT_TIMEOUT_S))
        common: dict[str, Any] = {"max_retries": llm.max_retries, "timeout": timeout, "http_client": http_client}
        if target.provider == "openai":
            key = os.environ.get(KEY_ENV["openai"])
            self.redactor.add(key)
            self.client = openai.AsyncOpenAI(api_key=key or "no-key", base_url=llm.base_url, **common)
        else:
            key = os.environ.get(KEY_ENV["azure"])
            use_key = llm.auth == "key" or (llm.auth == "auto" and bool(key) and credential is None)
            azure: dict[str, Any] = {
                "azure_endpoint": llm.endpoint,
                "azure_deployment": target.name,
                "api_version": llm.api_version,
            }
            if use_key:
                self.redactor.add(key)
                azure["api_key"] = key
            else:
                self.auth = "entra"
                azure["azure_ad_token_provider"] = self._entra_provider(credential)
            self.client = openai.AsyncAzureOpenAI(**azure, **common)
        self.request_fields = request_fields(llm)

    def _entra_provider(self, credential: Any) -> Callable[[], Any]:
        """An async token provider over a (sync) azure-identity credential; tokens are redacted."""
        from azure.identity import get_bearer_token_provider

        if credential is None:
            from azure.identity import DefaultAzureCredential

            _quiet_azure_identity()
            credential = DefaultAzureCredential()
        sync_provider = get_bearer_token_provider(credential, ENTRA_SCOPE)

        async def provider() -> str:
            token = await asyncio.to_thread(sync_provider)
            self.redactor.add(token)
            return token

        return provider

    async def complete(self, messages: list[dict[str, str]]) -> Completion:
        """One chat completion; raises BudgetReached, FatalAPIError or EpisodeAPIError."""
        self.meter.check()
        try:
            raw = await self.client.chat.completions.with_raw_response.create(
                model=self.target.name, messages=messages, **self.request_fields
            )
            resp = _completion_of(raw)
        except Exception as exc:  # classified, redacted and re-raised
            raise self._classify(exc) from None
        choice = resp.choices[0] if resp.choices else None
        text = reply_text(choice.message if choice is not None else None)
        finish = getattr(choice, "finish_reason", None)
        usage = resp.usage
        prompt, completion = (getattr(usage, key, None) for key in ("prompt_tokens", "completion_tokens"))
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (prompt, completion)):
            # no usage, or no token counts in it ({}, only total_tokens, nulls): its cost is unknown, never 0
            self.stats.missing_usage += 1
            self.meter.add_unknown()
            return Completion(text, 0, 0, None, raw.retries_taken, finish, 0, usage_missing=True)
        details = getattr(usage, "prompt_tokens_details", None)
        cached = min(max(int(getattr(details, "cached_tokens", 0) or 0), 0), prompt)
        cost = self.meter.add(prompt, completion, cached)
        return Completion(text, prompt, completion, cost, raw.retries_taken, finish, cached)

    def _classify(self, exc: Exception) -> Exception:
        import openai

        where = f"{self.target.provider} endpoint {self.target.url}"
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            message = self.redactor.redact(_shorten(_api_message(exc)))
            code = _api_code(exc)
            if isinstance(exc, openai.AuthenticationError):
                how = (
                    "check the identity's access (role Cognitive Services OpenAI User)"
                    if self.auth == "entra"
                    else f"check {KEY_ENV[self.target.provider]}"
                )
                return FatalAPIError(f"{where} refused the credentials (401 Unauthorized): {how}. Server said: {message}")
            if isinstance(exc, openai.PermissionDeniedError):
                return FatalAPIError(f"{where} denied access (403 Forbidden): check the key's or identity's permissions. Server said: {message}")
            if isinstance(exc, openai.NotFoundError):
                what = "--deployment and --api-version" if self.target.provider == "azure" else "--model and --base-url"
                return FatalAPIError(f"{where} has no {self.target.name!r} (404 Not Found): check {what}. Server said: {message}")
            if status == 429 and code == "insufficient_quota":
                return FatalAPIError(f"{where} says the quota is used up (429 insufficient_quota): check billing. Server said: {message}")
            if status in (400, 422) and _context_too_long(code, message):
                return FatalAPIError(
                    f"{where} says the conversation is longer than the model's context ({status} {code or 'context length'}): "
                    "protocol v2 sends the whole week so far; send only the last K steps with --set llm.history_turns=K "
                    f"(e.g. 8), or serve the model with a longer context. Server said: {message}")
            if status in (400, 422) and code != "content_filter":
                return FatalAPIError(f"{where} rejected the request ({status}): check llm settings such as temperature, max_tokens, reasoning_effort. Server said: {message}")
            retried = ""
            if status in (408, 409, 429) or status >= 500:
                retried = _after_retries(exc)
                wait, cap = _retry_after_s(exc.response.headers), _client_retry_after_cap_s()
                if wait is not None and wait > cap:
                    retried += f" (the server asked to wait {wait:.0f} s before retrying; the client waits at most {cap:g} s)"
            return EpisodeAPIError(f"HTTP {status}{retried}: {message}", type(exc).__name__, status)
        if isinstance(exc, openai.APIResponseValidationError):
            message = self.redactor.redact(_shorten(exc.message))
            return EpisodeAPIError(f"HTTP {exc.status_code}{_after_retries(exc)}: {message}", type(exc).__name__, exc.status_code)
        if isinstance(exc, openai.APITimeoutError):
            connecting = "Connect" in type(exc.__cause__).__name__  # httpx's ConnectTimeout
            limit = f"no connection in {min(self.llm.timeout_s, CONNECT_TIMEOUT_S):g} s" if connecting else f"{self.llm.timeout_s:g} s"
            return EpisodeAPIError(f"timed out ({limit}){_after_retries(exc)}", "APITimeoutError", None)
        if isinstance(exc, openai.APIConnectionError):
            cause = self.redactor.redact(_shorten(str(exc.__cause__ or exc)))
            return EpisodeAPIError(f"cannot connect to {where}{_after_retries(exc)}: {cause}", "APIConnectionError", None)
        try:
            from azure.core.exceptions import ClientAuthenticationError
        except ImportError:  # pragma: no cover - azure-identity is a dependency
            ClientAuthenticationError = ()  # type: ignore[assignment]  # noqa: N806
        if isinstance(exc, ClientAuthenticationError):
            message = self.redactor.redact(_shorten(str(exc)))
            return FatalAPIError(
                f"could not get a Microsoft Entra ID token for {where}: set AZURE_OPENAI_API_KEY, or sign in (az login) with an identity that has access. Details: {message}"
            )
        if isinstance(exc, openai.OpenAIError):
            return EpisodeAPIError(self.redactor.redact(_shorten(str(exc))), type(exc).__name__, None)
        return exc

    async def aclose(self) -> None:
        await self.client.close()

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _quiet_azure_identity() -> None:
    """Keep azure-identity's warnings (a dozen lines, one per credential tried) off stderr: a failed token
    becomes one error line that carries the same details. A level someone set on that logger is kept."""
    import logging

    logger = logging.getLogger("azure.identity")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.ERROR)


def request_fields(llm: LLMConfig) -> dict[str, Any]:
    """The optional request fields that are configured; unset ones are left out (never null)."""
    fields: dict[str, Any] = {}
    for name in ("temperature", "max_tokens", "max_completion_tokens", "reasoning_effort"):
        value = getattr(llm, name)
        if value is not None:
            fields[name] = value
    if llm.extra_body:
        fields["extra_body"] = dict(llm.extra_body)
    return fields


# ---------------------------------------------------------------------------------------------------
# One step of the protocol


@dataclass
class StepReply:
    """What one step cost and said: the reply kept (the re-ask's when there was one) and its parse."""

    text: str
    parsed: ParsedReply
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    requests: int
    retries: int
    cached_tokens: int = 0
    usage_missing: int = 0
    """Requests of this step whose reply came without usage (then ``cost_usd`` is None)."""
    cut_replies: int = 0
    """Requests of this step whose reply stopped at the token cap (``finish_reason`` length)."""

    @property
    def reasked(self) -> bool:
        return self.requests > 1

    def usage(self) -> dict[str, Any]:
        """The step's ``usage`` as a record keeps it, whether an API teacher's week (``rhythm generate``) or an API
        agent's decision (``rhythm eval``): the episode sums it with :func:`rhythm.agents.episodes.episode_usage`."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 8),
            "requests": self.requests,
            "reasks": int(self.reasked),
            "retries": self.retries,
            "usage_missing": self.usage_missing,
            "cut_replies": self.cut_replies,
        }


def reask_messages(messages: list[dict[str, str]], first_reply: str) -> list[dict[str, str]]:
    """The follow-up conversation after a reply without a valid action: the reply, then the reminder."""
    return [
        *messages,
        {"role": "assistant", "content": first_reply},
        {"role": "user", "content": FORMAT_REMINDER},
    ]


async def ask(client: ChatClient, messages: list[dict[str, str]]) -> StepReply:
    """One step: the conversation so far (protocol v2), ending on this step's observation. A reply with
    no valid action gets one re-ask with the format reminder, and if that fails too the parser's
    fallback action stands (``parsed.ok`` False). Only the kept reply enters the conversation."""
    first = await client.complete(messages)
    parsed = parse_reply(first.text)
    replies = [first]
    if not parsed.ok:
        try:
            second = await client.complete(reask_messages(messages, first.text))
        except EpisodeAPIError as err:  # the first reply was paid for: the failed episode's usage counts it
            err.spent = _step_reply(replies, parsed).usage()
            raise
        replies.append(second)
        parsed = parse_reply(second.text)
    return _step_reply(replies, parsed)


def _step_reply(replies: list[Completion], parsed: ParsedReply) -> StepReply:
    """One step's reply from the completions it took (the last one kept), their usage summed."""
    costs = [r.cost_usd for r in replies]
    return StepReply(
        text=replies[-1].text,
        parsed=parsed,
        prompt_tokens=sum(r.prompt_tokens for r in replies),
        completion_tokens=sum(r.completion_tokens for r in replies),
        cost_usd=None if any(c is None for c in costs) else sum(c for c in costs if c is not None),
        requests=len(replies),
        retries=sum(r.retries for r in replies),
        cached_tokens=sum(r.cached_tokens for r in replies),
        usage_missing=sum(r.usage_missing for r in replies),
        cut_replies=sum(r.finish_reason == "length" for r in replies),
    )
