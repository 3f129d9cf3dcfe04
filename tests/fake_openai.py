"""A loopback OpenAI-compatible chat server for tests and benchmarks (stdlib only, one thread per
connection), driven by the real ``openai`` client.

It serves ``POST /v1/chat/completions`` (OpenAI) or, given a ``deployment``,
``POST /openai/deployments/{deployment}/chat/completions?api-version=...`` (Azure), checks the
credentials the way those services do (``Authorization: Bearer KEY`` / ``api-key: KEY`` / an Entra ID
bearer token) and records every attempt it sees: path, query, headers, JSON body, and three times on
its own clock: when it arrived, when the answer began to go out (before the client can have any of
it) and when it was done. ``max_in_flight`` is the most requests it was answering at once.

By default it answers every request with a valid protocol reply whose action is a fixed function of
the observation (:func:`policy_action`), after ``latency`` seconds, with ``usage`` tokens. A
``handler(seen)`` can script anything else by returning a :class:`Reply` or :class:`Fail` (or None for
the default), or :class:`Raw` bytes for what no well-behaved server sends (a body that is not JSON, a
proxy's HTML page, a connection reset half-way through a body).

With ``prompt_cache=True`` the default reply counts the prompt's tokens (:func:`prompt_tokens`) and
reports, as OpenAI does in ``usage.prompt_tokens_details.cached_tokens``, the longest prefix it shares
with any prompt the server saw before, under OpenAI's rule (:func:`cached_tokens`): nothing below 1,024
tokens, then whole 128-token blocks. The simplification: a token is a whitespace-separated word of a
message, plus a start marker, the role and an end marker per message (ChatML's framing); the real
tokenizers cut text finer, so real prompts have more tokens than these.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

REMINDER_START = "Your reply did not end with a valid action"
"""How the protocol's format reminder (a re-ask) begins."""

CACHE_MIN_TOKENS = 1024
"""OpenAI caches nothing of a prompt shorter than this."""
CACHE_BLOCK = 128
"""...and beyond it, cache hits come in whole blocks of this many tokens (1,024, 1,152, 1,280, ...)."""

ACTIONS = ("DEEP_WORK", "ADMIN", "LEARN", "EXERCISE", "SOCIALIZE", "FAMILY_TIME", "MEDITATE", "LEISURE", "NAP", "SLEEP")


def policy_action(observation: str) -> int:
    """The default reply's action: a fixed function of the observation text."""
    return zlib.crc32(observation.encode()) % len(ACTIONS)


def protocol_reply(observation: str) -> str:
    a = policy_action(observation)
    return f"The anomalies are small.\nBELIEF: S=0.{a}0 M=0.50 W=0.55\nACTION: {ACTIONS[a]}"


def prompt_tokens(messages: list[dict[str, Any]]) -> list[str]:
    """The fake's tokens of a prompt: per message a start marker, the role, the words, an end marker."""
    tokens: list[str] = []
    for m in messages:
        tokens += ["<|im_start|>", str(m.get("role")), *str(m.get("content") or "").split(), "<|im_end|>"]
    return tokens


def cached_tokens(shared_prefix: int) -> int:
    """How many of a prompt's tokens OpenAI serves from its cache when it shares ``shared_prefix`` tokens
    with an earlier prompt: none below 1,024, else the whole 128-token blocks of the prefix."""
    return 0 if shared_prefix < CACHE_MIN_TOKENS else shared_prefix // CACHE_BLOCK * CACHE_BLOCK


def _shared_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass
class Seen:
    """One attempt as the server saw it."""

    n: int
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: dict[str, Any]
    started: float
    answered: float | None = None
    """Stamped just before the first byte of the answer is sent, so the client's next request can only
    arrive after it."""
    ended: float | None = None
    status: int | None = None
    usage: dict[str, Any] | None = None
    """The usage the server answered with (None: an error, or no usage)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", [])

    @property
    def observations(self) -> list[str]:
        """The observations of the conversation (protocol v2: every step so far), oldest first; a
        re-ask's format reminder is not one."""
        return [m["content"] for m in self.messages if m["role"] == "user" and not m["content"].startswith(REMINDER_START)]

    @property
    def replies(self) -> list[str]:
        """The assistant turns the client sent back (earlier replies, and a re-asked one)."""
        return [m["content"] for m in self.messages if m["role"] == "assistant"]

    @property
    def observation(self) -> str:
        """The step's observation: the newest one."""
        seen = self.observations
        return seen[-1] if seen else ""

    @property
    def retry_count(self) -> int:
        return int(self.headers.get("x-stainless-retry-count", "0"))


@dataclass
class Reply:
    """Answer 200 with this text (``text=None``: a null content; ``usage=None``: no usage field;
    ``cached`` set: ``usage.prompt_tokens_details.cached_tokens``;
    ``no_choices``: an empty ``choices`` list)."""

    text: str | None
    usage: tuple[int, int] | None = (100, 20)
    delay: float = 0.0
    cached: int | None = None
    finish_reason: str = "stop"
    no_choices: bool = False


@dataclass
class Fail:
    """Answer an error status with an OpenAI-style error body."""

    status: int
    message: str = "simulated failure"
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Raw:
    """Send exactly these bytes (status line and headers included), then close the connection; ``reset``:
    with an RST, as a proxy or a crashed server would, so a body cut short is an error, not a short read."""

    data: bytes
    reset: bool = False
    delay: float = 0.0

    @classmethod
    def ok(cls, body: bytes, content_type: str = "application/json") -> Raw:
        """A 200 with this body as it is."""
        return cls(b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
                   % (content_type.encode(), len(body), body))


Handler = Callable[[Seen], "Reply | Fail | Raw | None"]


class LoopbackServer(ThreadingHTTPServer):
    """A threading server that stays quiet when a client drops its connection mid-request (a CLI that
    stops after a refused key does, with requests still in flight); any other handler error is printed
    as the standard library does. Its tracebacks would otherwise land in the stderr a test reads."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FakeOpenAI:
    """Start with ``with FakeOpenAI(...) as server:``; point clients at ``server.base_url`` (OpenAI)
    or ``server.endpoint`` (Azure)."""

    def __init__(
        self,
        *,
        api_key: str = "test-key",
        tokens: tuple[str, ...] = (),
        deployment: str | None = None,
        api_version: str | None = None,
        latency: float = 0.0,
        usage: tuple[int, int] = (100, 20),
        handler: Handler | None = None,
        prompt_cache: bool = False,
    ) -> None:
        self.api_key = api_key
        self.tokens = tokens
        self.deployment = deployment
        self.api_version = api_version
        self.latency = latency
        self.usage = usage
        self.handler = handler
        self.prompt_cache = prompt_cache
        self.prompts: list[list[str]] = []  # every prompt answered so far, as tokens (prompt_cache=True)
        self.seen: list[Seen] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server: LoopbackServer | None = None

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> FakeOpenAI:
        fake = self

        class _H(_RequestHandler):
            server_fake = fake

        self._server = LoopbackServer(("127.0.0.1", 0), _H)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- what was seen ---------------------------------------------------------------------------------
    @property
    def completed(self) -> list[Seen]:
        """Attempts answered 200."""
        return [s for s in self.seen if s.status == 200]

    def reset(self) -> None:
        with self._lock:
            self.seen = []
            self.max_in_flight = 0

    # -- answering ---------------------------------------------------------------------------------------
    def _authorised(self, headers: dict[str, str]) -> bool:
        auth = headers.get("authorization", "")
        if self.deployment is None:
            return auth == f"Bearer {self.api_key}"
        if "api-key" in headers:
            return headers["api-key"] == self.api_key
        return auth.startswith("Bearer ") and auth[len("Bearer ") :] in self.tokens

    def _answer(self, seen: Seen) -> Reply | Fail | Raw:
        split = urlsplit(seen.path)
        if self.deployment is None:
            if split.path != "/v1/chat/completions":
                return Fail(404, f"no route {split.path}", "not_found")
        else:
            if split.path != f"/openai/deployments/{self.deployment}/chat/completions":
                return Fail(404, "The API deployment for this resource does not exist.", "DeploymentNotFound")
            if seen.query.get("api-version") != [self.api_version]:
                return Fail(404, "Resource not found (api-version)", "404")
        if not self._authorised(seen.headers):
            given = seen.headers.get("api-key") or seen.headers.get("authorization", "")
            return Fail(401, f"Incorrect API key provided: {given}.", "invalid_api_key")
        scripted = self.handler(seen) if self.handler is not None else None
        if scripted is not None:
            return scripted
        text = protocol_reply(seen.observation)
        if not self.prompt_cache:
            return Reply(text, usage=self.usage, delay=self.latency)
        tokens = prompt_tokens(seen.messages)
        with self._lock:
            shared = max((_shared_prefix(tokens, p) for p in self.prompts), default=0)
            self.prompts.append(tokens)
        return Reply(text, usage=(len(tokens), self.usage[1]), delay=self.latency, cached=cached_tokens(shared))

    def _body(self, seen: Seen, reply: Reply) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": f"chatcmpl-{seen.n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": seen.body.get("model", "fake"),
            "choices": [] if reply.no_choices else [
                {"index": 0, "message": {"role": "assistant", "content": reply.text}, "finish_reason": reply.finish_reason}],
        }
        if reply.usage is not None:
            p, c = reply.usage
            body["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
            if reply.cached is not None:
                body["usage"]["prompt_tokens_details"] = {"cached_tokens": reply.cached}
            seen.usage = body["usage"]
        return body


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK stalls
    server_fake: FakeOpenAI

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        fake = self.server_fake
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {}
        split = urlsplit(self.path)
        with fake._lock:
            seen = Seen(len(fake.seen), self.path, parse_qs(split.query), {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
            fake.seen.append(seen)
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
        try:
            answer = fake._answer(seen)
            if answer.delay:
                time.sleep(answer.delay)
            if isinstance(answer, Raw):
                self._send_raw(seen, answer)
                return
            if isinstance(answer, Reply):
                status, headers, payload = 200, {}, fake._body(seen, answer)
            else:
                error = {"message": answer.message, "type": "error", "param": None, "code": answer.code}
                status, headers, payload = answer.status, answer.headers, {"error": error}
            data = json.dumps(payload).encode()
            seen.status = status
            seen.answered = time.monotonic()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with fake._lock:
                fake.in_flight -= 1
                seen.ended = time.monotonic()

    def _send_raw(self, seen: Seen, answer: Raw) -> None:
        import socket
        import struct

        status = answer.data.split(b" ", 2)[1:2]
        seen.status = int(status[0]) if status and status[0].isdigit() else None
        seen.answered = time.monotonic()
        self.wfile.write(answer.data)
        self.wfile.flush()
        if answer.reset:  # SO_LINGER 0: close() sends an RST instead of a FIN
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
