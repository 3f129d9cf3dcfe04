"""LLM teachers and agents against an OpenAI-compatible server on 127.0.0.1, through the real
``openai`` client: OpenAI and Azure paths, Entra ID, retries, failures, re-asks, resume, budget,
concurrency, Ctrl-C, eval, the conversation each request carries (protocol v2), and secrets kept out
of everything written."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import yaml

from rhythm.agents.base import Decision
from rhythm.agents.episodes import play_batch
from rhythm.config import load_config
from rhythm.env import RhythmEnv
from rhythm.errors import RhythmError
from rhythm.eval.evaluate import EvalConfig, evaluate
from rhythm.model.llm_client import ENTRA_SCOPE, LLMConfig, Price, Redactor
from rhythm.protocol import (
    FALLBACK_ACTION,
    FORMAT_REMINDER,
    SYSTEM_PROMPT,
    conversation,
    parse_reply,
    record_conversation,
)
from rhythm.provenance import redact_url
from rhythm.teacher.generate import GenerateConfig, generate
from rhythm.teacher.llm_generate import errors_path, generate_llm
from tests.fake_openai import REMINDER_START, Fail, FakeOpenAI, Raw, Reply, protocol_reply

KEY = "sk-test-0123456789abcdefSECRET"
STEP_KEYS = {"t", "day", "slot", "observation", "response", "belief", "action", "parse_ok", "reward", "meters"}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def openai_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return KEY


def _hold_until_in_flight(holder: list[FakeOpenAI], n: int, wait_s: float = 10.0):
    """A handler that answers the first ``n`` requests only once ``n`` are in flight together (or after ``wait_s``),
    so a concurrency of ``n`` shows as requests that overlap on any machine; the tests assert bounds (more than one in
    flight, never more than the cap), not an exact count."""

    def handler(seen):
        if seen.n < n:
            deadline = time.monotonic() + wait_s
            while holder[0].in_flight < n and time.monotonic() < deadline:
                time.sleep(0.005)
        return None

    return handler


def _cfg(server: FakeOpenAI, tmp_path: Path, seeds: str = "0", **llm: object) -> GenerateConfig:
    options = {"model": "m", "base_url": server.base_url, **llm}
    return GenerateConfig(teacher="openai", seeds=seeds, output=str(tmp_path / "t.jsonl"), llm=LLMConfig(**options))


def _records(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n")
    return [orjson.loads(line) for line in data.splitlines()]


def _run(cfg: GenerateConfig, **kw):
    from rhythm.seeds import parse_seeds

    return generate_llm(cfg, parse_seeds(cfg.seeds), **kw)


def _no_secret_anywhere(root: Path, *secrets: str, text: str = "") -> None:
    for path in root.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            for secret in secrets:
                assert secret.encode() not in content, f"{secret!r} leaked into {path}"
    for secret in secrets:
        assert secret not in text


def assert_requests_carry_the_conversations(seen: list, records: list[dict], max_turns: int | None = None) -> None:
    """Each step of each recorded episode was sent exactly once, as its conversation so far: the k-th
    request of an episode holds the system prompt, k observations and the k-1 replies recorded before
    it (with ``max_turns`` K: the system prompt and the last K steps)."""
    expected = {}
    for rec in records:
        for t in range(len(rec["steps"])):
            messages = record_conversation(rec, t, max_turns=max_turns)
            kept = t + 1 if max_turns is None else min(t + 1, max_turns)
            assert len(messages) == 1 + 2 * kept - 1 and messages[0]["content"] == SYSTEM_PROMPT
            expected[orjson.dumps(messages)] = (rec["seed"], t)
    sent = [orjson.dumps(s.messages) for s in seen]
    assert sorted(expected[m] for m in sent) == sorted(expected.values())


class MirrorAgent:
    """Plays the fake server's default policy through the batch runner, for comparison."""

    name = "mirror"

    def reset(self, episodes) -> None:
        pass

    def act(self, obs) -> list[Decision]:
        out = []
        for prompt in obs.prompts:
            text = protocol_reply(prompt)
            parsed = parse_reply(text)
            out.append(Decision(parsed.action, parsed.belief, text, parsed.ok))
        return out


# ---------------------------------------------------------------------------------------------------
# OpenAI path, records, request bodies


def test_openai_records_equal_the_batch_runner_and_count_tokens(tmp_path: Path, openai_key: str) -> None:
    with FakeOpenAI(api_key=KEY, usage=(120, 30)) as server:
        cfg = _cfg(server, tmp_path, seeds="0-1", prices={"m": Price(input=2.0, output=10.0)})
        cfg = dataclasses.replace(cfg, concurrency=2)
        summary = _run(cfg)
    recs = sorted(_records(tmp_path / "t.jsonl"), key=lambda r: r["seed"])
    assert summary.episodes == 2 and summary.steps == 56 and summary.failed == 0 and summary.stopped is None
    assert len(server.seen) == 56
    for seen in server.seen:
        assert seen.path == "/v1/chat/completions" and seen.headers["authorization"] == f"Bearer {KEY}"
        assert set(seen.body) == {"model", "messages"}  # nothing unconfigured is sent, not even null
        assert seen.body["model"] == "m"
    assert_requests_carry_the_conversations(server.seen, recs)
    reference = play_batch(MirrorAgent(), "in-dist", "train", [0, 1])
    step_cost = (120 * 2.0 + 30 * 10.0) / 1e6
    for rec, ref in zip(recs, reference, strict=True):
        ref_d = ref.to_dict()
        assert (rec["agent"], rec["model"], rec["split"], rec["seed"]) == ("openai", "m", "train", ref.seed)
        assert rec["score"] == ref_d["score"]
        for step, ref_step in zip(rec["steps"], ref_d["steps"], strict=True):
            assert set(step) == STEP_KEYS | {"usage"}
            assert {k: step[k] for k in STEP_KEYS} == ref_step
            assert step["usage"] == {"prompt_tokens": 120, "cached_tokens": 0, "completion_tokens": 30, "cost_usd": pytest.approx(step_cost),
                                     "requests": 1, "reasks": 0, "retries": 0, "usage_missing": 0, "cut_replies": 0}
        usage = rec["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"], usage["requests"], usage["reasks"]) == (28 * 120, 28 * 30, 28, 0)
        assert usage["cost_usd"] == pytest.approx(28 * step_cost) and usage["seconds"] > 0
    assert summary.extra["tokens"] == "6,720 in / 1,680 out" and summary.extra["cost"] == f"${56 * step_cost:.4f}"
    sidecar_path = Path(str(tmp_path / "t.jsonl") + ".config.yaml")
    sidecar = yaml.safe_load(sidecar_path.read_text())
    assert sidecar["teacher"] == "openai" and sidecar["llm"]["model"] == "m"
    assert sidecar["_provenance"]["config_hash"] == recs[0]["config_hash"]
    assert load_config(GenerateConfig, sidecar_path) == cfg  # the written config reruns as-is
    _no_secret_anywhere(tmp_path, KEY)


def test_reasoning_and_sampling_fields_are_sent_only_when_configured(tmp_path: Path, openai_key: str) -> None:
    with FakeOpenAI(api_key=KEY) as server:
        _run(_cfg(server, tmp_path, max_completion_tokens=300, reasoning_effort="low", temperature=0.2,
                  extra_body={"top_k": 5}))
    body = server.seen[0].body
    assert {k: body[k] for k in body if k not in ("model", "messages")} == {
        "max_completion_tokens": 300, "reasoning_effort": "low", "temperature": 0.2, "top_k": 5}


# ---------------------------------------------------------------------------------------------------
# Azure: deployment path, api-version, key or Entra ID


def test_azure_deployment_path_with_api_version_and_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    with FakeOpenAI(api_key=KEY, deployment="teacher-dep", api_version="2024-10-21") as server:
        llm = LLMConfig(endpoint=server.endpoint, deployment="teacher-dep", api_version="2024-10-21")
        summary = _run(GenerateConfig(teacher="azure", seeds="0", output=str(tmp_path / "a.jsonl"), llm=llm))
    assert summary.episodes == 1 and len(server.seen) == 28
    for seen in server.seen:
        assert seen.path.split("?")[0] == "/openai/deployments/teacher-dep/chat/completions"
        assert seen.query == {"api-version": ["2024-10-21"]}
        assert seen.headers["api-key"] == KEY and "authorization" not in seen.headers
    rec = _records(tmp_path / "a.jsonl")[0]
    assert (rec["agent"], rec["model"]) == ("azure", "teacher-dep")
    _no_secret_anywhere(tmp_path, KEY)


class FakeCredential:
    """An azure-identity credential that never touches the network."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: object):
        from azure.core.credentials import AccessToken

        self.scopes.append(scopes)
        return AccessToken(self.token, int(time.time()) + 3600)


@pytest.mark.slow  # > 3 s on 2 cores
def test_azure_entra_id_token_reaches_the_server(tmp_path: Path) -> None:
    assert "AZURE_OPENAI_API_KEY" not in os.environ
    token = "entra-token-0123456789SECRET"
    credential = FakeCredential(token)
    with FakeOpenAI(deployment="dep", api_version="2025-04-01-preview", tokens=(token,)) as server:
        llm = LLMConfig(endpoint=server.endpoint, deployment="dep")
        summary = _run(GenerateConfig(teacher="azure", seeds="0", output=str(tmp_path / "e.jsonl"), llm=llm),
                       credential=credential)
    assert summary.episodes == 1 and all(s.status == 200 for s in server.seen)
    assert all(s.headers["authorization"] == f"Bearer {token}" and "api-key" not in s.headers for s in server.seen)
    assert credential.scopes and set(credential.scopes) == {(ENTRA_SCOPE,)}
    _no_secret_anywhere(tmp_path, token)


class ManagedIdentityEndpoint:
    """App Service's managed-identity endpoint on 127.0.0.1 (what ``IDENTITY_ENDPOINT`` names there): a token for
    the resource asked, to a caller that sends ``IDENTITY_HEADER``'s secret; every request is kept."""

    def __init__(self, token: str, secret: str) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import parse_qs, urlsplit

        self.requests: list[tuple[str, dict[str, list[str]], str | None]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                endpoint.requests.append((url.path, query, self.headers.get("X-IDENTITY-HEADER")))
                ok = url.path == "/msi/token" and self.headers.get("X-IDENTITY-HEADER") == secret
                body = orjson.dumps({"access_token": token, "expires_on": str(int(time.time()) + 3600),
                                     "resource": query.get("resource", [""])[0], "token_type": "Bearer"} if ok else
                                    {"error": "unauthorized"})
                self.send_response(200 if ok else 401)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/msi/token"

    def __enter__(self) -> ManagedIdentityEndpoint:
        import threading

        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_azure_entra_id_token_of_a_managed_identity_reaches_the_server(tmp_path, monkeypatch, run_cli,
                                                                     azure_identity_logger) -> None:
    """No key: azure-identity's own credential chain (limited to the managed identity, as on an Azure machine) asks
    the machine's identity endpoint for a Cognitive Services token, and every request carries it as a bearer token;
    the token is written nowhere."""
    token, secret = "managed-identity-token-0123456789SECRET", "identity-header-secret"
    for name in ("AZURE_OPENAI_API_KEY", "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "MSI_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    with ManagedIdentityEndpoint(token, secret) as identity, \
            FakeOpenAI(deployment="dep", api_version="2025-04-01-preview", tokens=(token,)) as server:
        monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "ManagedIdentityCredential")
        monkeypatch.setenv("IDENTITY_ENDPOINT", identity.url)
        monkeypatch.setenv("IDENTITY_HEADER", secret)
        code, _, err = run_cli("generate", "--teacher", "azure:dep", "--endpoint", server.endpoint, "--seeds", "0",
                               "--output", str(tmp_path / "m.jsonl"), "--quiet")
    assert code == 0, err
    assert identity.requests and {(path, query["resource"][0], header) for path, query, header in identity.requests} == {
        ("/msi/token", ENTRA_SCOPE.removesuffix("/.default"), secret)}
    assert len(server.completed) == 28
    assert all(s.headers["authorization"] == f"Bearer {token}" and "api-key" not in s.headers for s in server.seen)
    _no_secret_anywhere(tmp_path, token, text=err)


class BrokenCredential:
    def get_token(self, *scopes: str, **kwargs: object):
        from azure.identity import CredentialUnavailableError

        raise CredentialUnavailableError("no identity here")


def test_azure_entra_id_without_an_identity_is_one_clear_line(tmp_path: Path) -> None:
    with FakeOpenAI(deployment="dep", api_version="2025-04-01-preview") as server:
        cfg = GenerateConfig(teacher="azure:dep", seeds="0-3", output=str(tmp_path / "n.jsonl"),
                             llm=LLMConfig(endpoint=server.endpoint))
        with pytest.raises(RhythmError, match="could not get a Microsoft Entra ID token.*no identity here"):
            _run(cfg, credential=BrokenCredential())
    assert server.seen == []


@pytest.fixture
def azure_identity_logger():
    """azure-identity's logger, its level put back after the test (the client quiets it for good)."""
    import logging

    logger = logging.getLogger("azure.identity")
    level = logger.level
    yield logger
    logger.setLevel(level)


def test_no_entra_identity_is_one_line_without_azure_identitys_warnings(tmp_path, monkeypatch, run_cli, caplog,
                                                                         azure_identity_logger) -> None:
    """No key and no identity: the default credential chain fails, and only its one error line shows; the
    warning azure-identity logs for it (a dozen lines on stderr) is not emitted. The chain is limited to the
    environment credential (AZURE_TOKEN_CREDENTIALS), so nothing probes the network."""
    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "EnvironmentCredential")
    for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH",
                 "AZURE_USERNAME", "AZURE_PASSWORD", "AZURE_FEDERATED_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    with FakeOpenAI(deployment="dep", api_version="2025-04-01-preview") as server:
        code, _, err = run_cli("generate", "--teacher", "azure:dep", "--endpoint", server.endpoint, "--seeds", "0",
                               "--output", str(tmp_path / "n.jsonl"), "--quiet")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "could not get a Microsoft Entra ID token" in err, err
    assert [r for r in caplog.records if r.name.startswith("azure.identity") and r.levelno >= 30] == []
    assert server.seen == []


def test_azure_unknown_deployment_is_fatal_with_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    with FakeOpenAI(api_key=KEY, deployment="dep", api_version="v1") as server:
        llm = LLMConfig(endpoint=server.endpoint, deployment="other", api_version="v1")
        with pytest.raises(RhythmError, match=r"404 Not Found\): check --deployment and --api-version"):
            _run(dataclasses.replace(GenerateConfig(teacher="azure", seeds="0-5", output=str(tmp_path / "x.jsonl"), llm=llm),
                                     concurrency=2))
    assert len(server.seen) <= 2  # not retried, and no further episode was started


# ---------------------------------------------------------------------------------------------------
# Retries: 429 with Retry-After, 500, timeouts


def test_429_with_retry_after_is_retried_after_the_wait(tmp_path: Path, openai_key: str) -> None:
    retry_after = "1.5"

    def handler(seen):
        return Fail(429, "slow down", "rate_limit_exceeded", {"retry-after": retry_after}) if seen.n == 0 else None

    with FakeOpenAI(api_key=KEY, handler=handler) as server:
        summary = _run(_cfg(server, tmp_path))
    first, second = server.seen[0], server.seen[1]
    assert first.status == 429 and second.status == 200 and second.retry_count == 1
    assert second.messages == first.messages
    # Both stamps are the server's: the 429 began to go out before the client could read its header,
    # and the retry arrived after the client's wait, so the gap is at least the header's 1.5 s (not the
    # client's own 0.375-0.5 s backoff) however loaded the machine. No upper bound: load only adds delay.
    assert second.started - first.answered >= float(retry_after)
    assert summary.episodes == 1 and len(server.seen) == 29
    assert summary.extra["retries"].startswith("1 (429: 1, 5xx: 0")
    rec = _records(tmp_path / "t.jsonl")[0]
    assert rec["steps"][0]["usage"]["retries"] == 1 and rec["usage"]["retries"] == 1


def test_500_is_retried_and_counted(tmp_path: Path, openai_key: str) -> None:
    with FakeOpenAI(api_key=KEY, handler=lambda s: Fail(500, "boom") if s.n in (3, 4) else None) as server:
        summary = _run(_cfg(server, tmp_path, max_retries=2))
    assert [s.status for s in server.seen[3:6]] == [500, 500, 200] and server.seen[5].retry_count == 2
    assert summary.episodes == 1 and summary.extra["retries"].startswith("2 (429: 0, 5xx: 2")


def test_timeout_is_retried(tmp_path: Path, openai_key: str) -> None:
    def handler(seen):
        return Reply(protocol_reply(seen.observation), delay=1.5) if seen.n == 0 else None

    with FakeOpenAI(api_key=KEY, handler=handler) as server:
        summary = _run(_cfg(server, tmp_path, timeout_s=0.5))
    assert server.seen[1].retry_count == 1 and server.seen[1].messages == server.seen[0].messages
    # at least the first request timed out (a loaded machine may time out another one too)
    timeouts = int(summary.extra["retries"].split("timeouts/no connection: ")[1].rstrip(")"))
    assert summary.episodes == 1 and timeouts >= 1


# ---------------------------------------------------------------------------------------------------
# Failures: one episode fails, the others go on; a dead endpoint stops the run


def test_failed_episode_goes_to_the_errors_file_and_the_others_finish(tmp_path: Path, openai_key: str) -> None:
    # one worker: attempts 0-27 are seed 0; 28, 29 seed 1's first steps; 30 and its retry 31 fail for good
    def handler(seen):
        return Fail(503, f"upstream down (caller key {KEY})") if seen.n in (30, 31) else None

    with FakeOpenAI(api_key=KEY, handler=handler) as server:
        summary = _run(_cfg(server, tmp_path, seeds="0-2", max_retries=1))
    assert summary.episodes == 2 and summary.failed == 1 and summary.stopped is None
    assert sorted(r["seed"] for r in _records(tmp_path / "t.jsonl")) == [0, 2]
    (err,) = _records(errors_path(tmp_path / "t.jsonl"))
    assert (err["seed"], err["step"], err["status"], err["error"]) == (1, 2, 503, "InternalServerError")
    assert "HTTP 503 after 1 retry: upstream down" in err["reason"] and "***" in err["reason"]
    assert err["usage"]["requests"] == 2 and "failed episodes" in summary.extra
    _no_secret_anywhere(tmp_path, KEY)


def test_a_failed_reask_keeps_the_paid_first_reply_in_the_failed_weeks_usage(tmp_path: Path, openai_key: str) -> None:
    """Step 0's reply names no action and its re-ask fails: the errors file's usage counts the reply that came back."""
    def handler(seen):
        return Reply("no decision yet", usage=(500, 50)) if seen.n == 0 else Fail(503, "down")

    with FakeOpenAI(api_key=KEY, handler=handler) as server:
        summary = _run(_cfg(server, tmp_path, max_retries=0, prices={"m": Price(input=1.0, output=1.0)}))
    (err,) = _records(errors_path(tmp_path / "t.jsonl"))
    assert summary.failed == 1 and err["step"] == 0
    assert (err["usage"]["prompt_tokens"], err["usage"]["completion_tokens"], err["usage"]["requests"]) == (500, 50, 1)
    assert err["usage"]["cost_usd"] == pytest.approx(550 / 1e6)


def test_consecutive_failures_stop_the_run(tmp_path: Path, openai_key: str) -> None:
    with FakeOpenAI(api_key=KEY, handler=lambda s: Fail(500, "down")) as server:
        summary = _run(_cfg(server, tmp_path, seeds="0-9", max_retries=0, max_consecutive_failures=2))
    assert summary.failed == 2 and len(server.seen) == 2 and "2 episodes failed in a row" in summary.stopped
    assert len(_records(errors_path(tmp_path / "t.jsonl"))) == 2


@pytest.mark.parametrize(
    "fail, needle",
    [
        (Fail(429, "You exceeded your current quota", "insufficient_quota"), "says the quota is used up (429 insufficient_quota): check billing"),
        (Fail(400, "Unsupported value: 'temperature'", "unsupported_value"), "rejected the request (400): check llm settings"),
        (Fail(422, "Unprocessable entity"), "rejected the request (422): check llm settings"),
        (Fail(403, "Project does not have access", "model_not_found"), "denied access (403 Forbidden): check the key's or identity's permissions"),
        (Fail(400, "This model's maximum context length is 16384 tokens. However, you requested 16900 tokens."),
         "longer than the model's context (400 context length): protocol v2 sends the whole week so far; send only the "
         "last K steps with --set llm.history_turns=K"),
        (Fail(400, "Input tokens exceed the configured limit of 8192 tokens.", "context_length_exceeded"),
         "longer than the model's context (400 context_length_exceeded)"),
    ],
    ids=["429-insufficient_quota", "400", "422", "403", "400-vllm-context", "400-context_length_exceeded"],
)
def test_fatal_statuses_stop_the_run_with_one_line_and_keep_what_was_written(tmp_path, openai_key, run_cli, fail, needle) -> None:
    """Seed 0 is played, then every request fails: the run stops (nothing retried past the client's own
    429 retry, no further episode), one line, exit 2, and seed 0's record stays whole."""
    out = tmp_path / "f.jsonl"
    with FakeOpenAI(api_key=KEY, handler=lambda s: fail if s.n >= 28 else None) as server:
        code, stdout, err = run_cli("generate", "--teacher", "openai", "--model", "m", "--base-url", server.base_url,
                                    "--seeds", "0-3", "--concurrency", "1", "--output", str(out), "--quiet",
                                    "--set", "llm.max_retries=1")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("rhythm: error:") and needle in lines[0], err
    assert fail.message in lines[0]
    assert len(server.seen) == 28 + 1 + (fail.status == 429)  # the client retries a 429 once (max_retries 1), no other
    assert [r["seed"] for r in _records(out)] == [0]
    _no_secret_anywhere(tmp_path, KEY, text=err + stdout)


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_connection_refused_fails_episodes_and_keeps_the_finished_ones(tmp_path: Path, openai_key: str) -> None:
    with FakeOpenAI(api_key=KEY) as server:
        _run(_cfg(server, tmp_path, seeds="0"))
    cfg = GenerateConfig(teacher="openai", seeds="0-5", output=str(tmp_path / "t.jsonl"), resume=True,
                         llm=LLMConfig(model="m", base_url=f"http://127.0.0.1:{_closed_port()}/v1", max_retries=1,
                                       max_consecutive_failures=2))
    summary = _run(cfg)
    assert summary.skipped == 1 and summary.episodes == 0 and summary.failed == 2
    assert "2 episodes failed in a row" in summary.stopped
    assert [r["seed"] for r in _records(tmp_path / "t.jsonl")] == [0]  # what was there stays
    errors = _records(errors_path(tmp_path / "t.jsonl"))
    assert [(e["seed"], e["step"], e["error"]) for e in errors] == [(1, 0, "APIConnectionError"), (2, 0, "APIConnectionError")]
    assert all("cannot connect to openai endpoint" in e["reason"] and "after 1 retry:" in e["reason"] for e in errors)


@pytest.mark.parametrize("reply", [Reply(None, no_choices=True), Reply("I think the person needs BELIEF: S=0.4", finish_reason="length")],
                         ids=["empty-choices", "finish_reason-length"])
def test_empty_or_cut_reply_is_reasked_then_a_counted_fallback(tmp_path: Path, openai_key: str, reply: Reply) -> None:
    """An answer with no choices, or one cut off at the token limit before its ACTION line, is re-asked
    once; when the re-ask is no better, the fallback action stands and is counted, and the run goes on."""
    with FakeOpenAI(api_key=KEY, handler=lambda s: reply if s.n in (0, 1) else None) as server:
        summary = _run(_cfg(server, tmp_path))
    assert len(server.seen) == 29 and server.seen[1].messages[-1] == {"role": "user", "content": FORMAT_REMINDER}
    (rec,) = _records(tmp_path / "t.jsonl")
    first = rec["steps"][0]
    assert not first["parse_ok"] and first["action"] == FALLBACK_ACTION and first["usage"]["requests"] == 2
    assert all(s["parse_ok"] for s in rec["steps"][1:])
    # both requests of the step stopped at the token cap when the server said so
    assert first["usage"]["cut_replies"] == (2 if reply.finish_reason == "length" else 0)
    assert rec["usage"]["cut_replies"] == first["usage"]["cut_replies"] and rec["usage"]["requests"] == 29
    assert rec["score"]["parse_failures"] == 1 and summary.parse_failures == 1 and summary.extra["re-asks"] == 1


def test_retry_after_beyond_the_clients_cap_fails_the_episode_at_once(tmp_path: Path, openai_key: str) -> None:
    """A Retry-After of an hour is beyond what the client waits (120 s): it does not retry and does not
    sleep; the episode fails into the errors file and the other episodes finish."""
    def handler(seen):
        return Fail(429, "slow down", "rate_limit_exceeded", {"retry-after": "3600"}) if seen.n == 0 else None

    with FakeOpenAI(api_key=KEY, handler=handler) as server:
        summary = _run(dataclasses.replace(_cfg(server, tmp_path, seeds="0-1"), concurrency=1))
    assert server.seen[0].status == 429 and all(s.retry_count == 0 for s in server.seen)
    assert len(server.seen) == 1 + 28 and summary.episodes == 1 and summary.failed == 1
    assert [r["seed"] for r in _records(tmp_path / "t.jsonl")] == [1]
    (err,) = _records(errors_path(tmp_path / "t.jsonl"))
    assert (err["seed"], err["step"], err["status"]) == (0, 0, 429)
    assert err["reason"] == ("HTTP 429 after 0 retries (the server asked to wait 3600 s before retrying; "
                             "the client waits at most 120 s): slow down")


# ---------------------------------------------------------------------------------------------------
# Malformed replies: one re-ask with the format reminder, then the fallback, counted


def test_malformed_reply_gets_one_reask_then_the_fallback(tmp_path: Path, openai_key: str) -> None:
    good = {}

    def handler(seen):
        if seen.n == 0:
            return Reply("I would let them rest a little.")
        if seen.n == 1:
            good["text"] = protocol_reply(seen.observation)
            return Reply(good["text"])
        if seen.n == 2:
            return Reply(None, usage=None)  # null content, no usage field
        if seen.n == 3:
            return Reply("ACTION: TAKE_A_WALK")
        return None

    with FakeOpenAI(api_key=KEY, handler=handler) as server:
        summary = _run(_cfg(server, tmp_path))
    seen = server.seen
    obs0 = seen[0].observation
    assert seen[1].messages == [*conversation([obs0]), {"role": "assistant", "content": "I would let them rest a little."},
                                {"role": "user", "content": FORMAT_REMINDER}]
    # only the kept reply enters the conversation: step 1 sees step 0's second answer, not the re-asked one
    assert seen[2].messages == conversation([obs0, seen[2].observation], [good["text"]])
    assert FORMAT_REMINDER.startswith(REMINDER_START)  # the fake server tells observations from re-asks by it
    assert seen[3].messages[-2:] == [{"role": "assistant", "content": ""}, {"role": "user", "content": FORMAT_REMINDER}]
    assert len(seen) == 30
    rec = _records(tmp_path / "t.jsonl")[0]
    s0, s1 = rec["steps"][0], rec["steps"][1]
    assert s0["parse_ok"] and s0["response"] == good["text"] and s0["usage"]["requests"] == 2
    assert not s1["parse_ok"] and s1["action"] == FALLBACK_ACTION and s1["response"] == "ACTION: TAKE_A_WALK"
    assert s1["usage"]["prompt_tokens"] == 100  # the null-usage reply counts 0 tokens
    assert rec["score"]["parse_failures"] == 1 and rec["usage"]["reasks"] == 2
    assert summary.parse_failures == 1 and summary.extra["re-asks"] == 2 and summary.extra["replies without usage"] == 1


def test_content_parts_are_joined_and_content_that_is_not_text_is_no_text(tmp_path: Path, openai_key: str) -> None:
    """Some gateways send ``content`` as a list of parts: their text, joined, is the reply. A number or an object is no
    text (a parse failure, re-asked): the record and every later request carry text only, and the file reads back."""
    from rhythm.records import read_episodes

    said = {}

    def handler(seen):
        if seen.n == 0:
            said["text"] = protocol_reply(seen.observation)
            cut = said["text"].index("ACTION")
            return Reply([{"type": "text", "text": said["text"][:cut]}, {"type": "text", "text": said["text"][cut:]}])
        if seen.n == 1:
            return Reply(123)
        if seen.n == 2:
            return Reply({"type": "text", "text": "ACTION: NAP"})
        return None

    with FakeOpenAI(api_key=KEY, handler=handler) as server:
        summary = _run(_cfg(server, tmp_path))
    seen = server.seen
    assert seen[2].messages[-2:] == [{"role": "assistant", "content": ""}, {"role": "user", "content": FORMAT_REMINDER}]
    assert seen[3].messages[2] == {"role": "assistant", "content": said["text"]}
    assert all(isinstance(m["content"], str) for s in seen for m in s.messages)
    ((_, rec),) = list(read_episodes(str(tmp_path / "t.jsonl")))
    s0, s1 = rec["steps"][0], rec["steps"][1]
    assert s0["parse_ok"] and s0["response"] == said["text"] and s0["usage"]["requests"] == 1
    assert not s1["parse_ok"] and s1["response"] == "" and s1["action"] == FALLBACK_ACTION and s1["usage"]["requests"] == 2
    assert all(isinstance(s["response"], str) for s in rec["steps"]) and summary.parse_failures == 1


def test_a_refusal_is_kept_as_the_replys_text(tmp_path: Path, openai_key: str) -> None:
    """A reply with no content but a ``refusal`` is a parse failure (re-asked) whose record keeps what the model said."""
    refusal = "I can't help with planning someone's week."
    body = orjson.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": None, "refusal": refusal}}],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
    with FakeOpenAI(api_key=KEY, handler=lambda s: Raw.ok(body) if s.n in (0, 1) else None) as server:
        _run(_cfg(server, tmp_path))
    assert server.seen[1].messages[-2] == {"role": "assistant", "content": refusal}
    (rec,) = _records(tmp_path / "t.jsonl")
    assert rec["steps"][0]["response"] == refusal and not rec["steps"][0]["parse_ok"]


# ---------------------------------------------------------------------------------------------------
# A 200 that is not a chat completion: a failed request of its episode, the server's words kept

NOT_A_COMPLETION = {
    "not-json": (Raw.ok(b"{not json"), "HTTP 200 after 0 retries: a body that is not JSON: '{not json'"),
    "html": (Raw.ok(b"<html><body>Welcome to the proxy</body></html>", "text/html"),
             "HTTP 200 after 0 retries: not a chat completion (text/html): '<html><body>Welcome to the proxy</body></html>'"),
    "error-object": (Raw.ok(b'{"error": {"message": "upstream overloaded", "code": "overloaded"}}'),
                     "HTTP 200 after 0 retries: an error instead of a reply: upstream overloaded"),
}


@pytest.mark.parametrize("case", list(NOT_A_COMPLETION))
def test_a_200_that_is_not_a_completion_fails_its_episode_and_the_others_finish(tmp_path: Path, openai_key: str, case: str) -> None:
    """A 200 whose body is not JSON, a proxy's HTML page, or an ``error`` object where the choices should be,
    fails the episode it belongs to (not re-sent: a server may have billed it), into the errors file with
    what the server said; the other episodes finish. (An empty ``choices`` list alone is a reply with no
    text: test_empty_or_cut_reply_is_reasked_then_a_counted_fallback.)"""
    raw, reason = NOT_A_COMPLETION[case]
    with FakeOpenAI(api_key=KEY, handler=lambda s: raw if s.n == 3 else None) as server:
        summary = _run(dataclasses.replace(_cfg(server, tmp_path, seeds="0-1"), concurrency=1))
    assert summary.episodes == 1 and summary.failed == 1 and summary.stopped is None
    assert len(server.seen) == 4 + 28 and server.seen[4].retry_count == 0
    assert [r["seed"] for r in _records(tmp_path / "t.jsonl")] == [1]
    (err,) = _records(errors_path(tmp_path / "t.jsonl"))
    assert (err["seed"], err["step"], err["status"], err["error"]) == (0, 3, 200, "APIResponseValidationError")
    assert err["reason"] == reason


def test_eval_stops_with_one_line_on_a_200_that_is_not_a_completion(tmp_path: Path, openai_key: str, run_cli) -> None:
    out = tmp_path / "eval.json"
    with FakeOpenAI(api_key=KEY, handler=lambda s: NOT_A_COMPLETION["html"][0] if s.n == 2 else None) as server:
        code, _, err = run_cli("eval", "--agent", "openai:m", "--condition", "discrete", "--episodes", "1", "--output",
                               str(out), "--quiet", "--set", f"llm.base_url={server.base_url}", "--set", "references=[random]")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "a request failed for good" in lines[0] and "not a chat completion (text/html)" in lines[0]
    assert not out.exists()


def test_a_connection_reset_after_the_headers_is_counted_as_no_connection(tmp_path: Path, openai_key: str) -> None:
    """The headers of a 200 arrive, then the connection is reset half-way through the body: the client retries
    it, and the summary counts that retry under timeouts/no connection (not a 429 or a 5xx)."""
    cut = Raw(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"id\": \"x\", \"cho",
              reset=True)
    with FakeOpenAI(api_key=KEY, handler=lambda s: cut if s.n == 0 else None) as server:
        summary = _run(_cfg(server, tmp_path))
    assert summary.episodes == 1 and server.seen[1].retry_count == 1
    assert summary.extra["retries"] == "1 (429: 0, 5xx: 0, timeouts/no connection: 1)"


# ---------------------------------------------------------------------------------------------------
# Replies without usage: an unknown cost, and a budget that can no longer be held


@pytest.mark.parametrize("usage", [{}, {"total_tokens": 900}, {"prompt_tokens": None, "completion_tokens": None},
                                   {"prompt_tokens": 100}])
def test_a_usage_without_its_token_counts_is_an_unknown_cost_and_stops_a_budget(tmp_path: Path, openai_key: str, usage) -> None:
    """Counts the server left out are not 0 tokens: the cost is unknown, and a run with a budget stops rather than
    spend past it on replies it prices at nothing."""
    def reply(seen):
        body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "usage": usage,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": protocol_reply(seen.observation)}}]}
        return Raw.ok(orjson.dumps(body))

    with FakeOpenAI(api_key=KEY, handler=reply) as server:
        cfg = _cfg(server, tmp_path, seeds="0-1", prices={"m": Price(input=1000.0, output=1000.0)}, max_cost_usd=1.0)
        summary = _run(dataclasses.replace(cfg, concurrency=1))
    assert len(server.seen) == 1 and summary.episodes == 0 and "1 reply came without usage" in summary.stopped


def test_a_reply_without_usage_has_an_unknown_cost(tmp_path: Path, openai_key: str) -> None:
    with FakeOpenAI(api_key=KEY, handler=lambda s: Reply(protocol_reply(s.observation), usage=None) if s.n == 0 else None) as server:
        summary = _run(_cfg(server, tmp_path, prices={"m": Price(input=2.0, output=10.0)}))
    (rec,) = _records(tmp_path / "t.jsonl")
    assert rec["steps"][0]["usage"]["cost_usd"] is None and rec["usage"]["cost_usd"] is None
    assert rec["steps"][0]["usage"]["usage_missing"] == 1 and rec["usage"]["usage_missing"] == 1
    assert rec["steps"][1]["usage"]["cost_usd"] == pytest.approx((100 * 2.0 + 20 * 10.0) / 1e6)
    assert summary.extra["cost"] == "unknown: $0.0108 for the replies with usage, plus 1 without"
    assert summary.extra["replies without usage"] == 1


def test_a_budget_stops_the_run_once_a_reply_comes_without_usage(tmp_path: Path, openai_key: str) -> None:
    """With --max-cost-usd, a reply without usage means the spend can no longer be held to the cap: no
    further request is sent, the run stops and says why; nothing is written for the abandoned episode."""
    with FakeOpenAI(api_key=KEY, handler=lambda s: Reply(protocol_reply(s.observation), usage=None)) as server:
        cfg = _cfg(server, tmp_path, seeds="0-1", prices={"m": Price(input=2.0, output=10.0)}, max_cost_usd=1.0)
        summary = _run(dataclasses.replace(cfg, concurrency=1))
    assert len(server.seen) == 1 and summary.episodes == 0 and _records(tmp_path / "t.jsonl") == []
    assert "1 reply came without usage, so the spend ($0.0000 known) cannot be held to the $1.0000 budget" in summary.stopped
    assert "drop --max-cost-usd" in summary.stopped
    assert summary.extra["cost"] == "unknown: $0.0000 of $1.0000 budget for the replies with usage, plus 1 without"


def test_eval_agent_stops_once_a_reply_comes_without_usage_under_a_budget(openai_key: str) -> None:
    from rhythm.agents.llm import LLMAgent

    with FakeOpenAI(api_key=KEY, handler=lambda s: Reply(protocol_reply(s.observation), usage=None)) as server:
        agent = LLMAgent("openai", "m", LLMConfig(base_url=server.base_url, prices={"m": Price(input=1.0, output=0.0)}, max_cost_usd=1.0,
                                                  concurrency=1))
        try:
            with pytest.raises(RhythmError, match="came without usage.*drop llm.max_cost_usd"):
                play_batch(agent, "discrete", "eval", [0])
        finally:
            agent.close()
    assert len(server.seen) == 1


# ---------------------------------------------------------------------------------------------------
# The errors file after a resume


def test_resume_leaves_only_the_still_failed_episodes_in_the_errors_file(tmp_path: Path, openai_key: str) -> None:
    errors = errors_path(tmp_path / "t.jsonl")
    with FakeOpenAI(api_key=KEY, handler=lambda s: Fail(500, "down") if s.n >= 28 else None) as server:
        _run(dataclasses.replace(_cfg(server, tmp_path, seeds="0-2", max_retries=0), concurrency=1))
    assert [e["seed"] for e in _records(errors)] == [1, 2]
    with FakeOpenAI(api_key=KEY, handler=lambda s: Fail(500, "still down") if s.n >= 28 else None) as server:
        summary = _run(dataclasses.replace(_cfg(server, tmp_path, seeds="0-2", max_retries=0), concurrency=1, resume=True))
    assert summary.episodes == 1 and summary.failed == 1
    (left,) = _records(errors)  # seed 1 is in the output now; seed 2 keeps its latest failure only
    assert left["seed"] == 2 and "still down" in left["reason"]
    with FakeOpenAI(api_key=KEY) as server:
        _run(dataclasses.replace(_cfg(server, tmp_path, seeds="0-2"), resume=True))
    assert sorted(r["seed"] for r in _records(tmp_path / "t.jsonl")) == [0, 1, 2] and not errors.exists()


# ---------------------------------------------------------------------------------------------------
# Resume, budget, concurrency, Ctrl-C


def test_resume_requests_nothing_already_finished(tmp_path: Path, openai_key: str) -> None:
    with FakeOpenAI(api_key=KEY) as server:
        _run(_cfg(server, tmp_path, seeds="0-1"))
        server.reset()
        summary = _run(dataclasses.replace(_cfg(server, tmp_path, seeds="0-3"), resume=True))
        first_obs = {s.observation for s in server.seen if len(s.observations) == 1}
        assert len(server.seen) == 56 and summary.skipped == 2 and summary.episodes == 2
        expected = set()
        for seed in (2, 3):
            env = RhythmEnv("in-dist", "train")
            env.reset(seed=seed)
            expected.add(env.text)
        assert first_obs == expected
        server.reset()
        again = _run(dataclasses.replace(_cfg(server, tmp_path, seeds="0-3"), resume=True))
        assert server.seen == [] and again.episodes == 0 and again.skipped == 4
    assert sorted(r["seed"] for r in _records(tmp_path / "t.jsonl")) == [0, 1, 2, 3]


LONG_FORM_HASH = "d9adbf089f3c"
"""The records' config_hash of ``--teacher openai --model m`` (everything else default), as the code before the two
spellings were made one computed it: files written then must still resume."""


def test_both_spellings_of_a_model_make_one_run_that_resumes_either_way(tmp_path: Path, openai_key: str, run_cli) -> None:
    """``--teacher openai --model m`` and ``--teacher openai:m`` are the same teacher: one file takes both in turn on
    ``--resume``, every record carries the long form's hash (unchanged from before), the sidecar records that form."""
    out = tmp_path / "rs.jsonl"
    with FakeOpenAI(api_key=KEY) as server:
        for teacher, seeds in ((["--teacher", "openai", "--model", "m"], "0"), (["--teacher", "openai:m"], "0-1"),
                               (["--teacher", "OpenAI", "--model", "m"], "0-2")):
            code, _, err = run_cli("generate", *teacher, "--base-url", server.base_url, "--seeds", seeds, "-o", str(out),
                                   "--quiet", *(["--resume"] if seeds != "0" else []))
            assert code == 0, err
            sidecar = yaml.safe_load((tmp_path / "rs.jsonl.config.yaml").read_text())
            assert (sidecar["teacher"], sidecar["llm"]["model"]) == ("openai", "m")
            assert sidecar["_provenance"]["config_hash"] == LONG_FORM_HASH
    assert len(server.seen) == 3 * 28
    assert [(r["seed"], r["config_hash"]) for r in _records(out)] == [(s, LONG_FORM_HASH) for s in range(3)]


def test_a_file_written_with_the_short_spelling_before_it_was_made_one_still_resumes(tmp_path: Path, openai_key: str,
                                                                                   run_cli) -> None:
    """Weeks written by the code before :func:`canonical` with ``--teacher openai:m`` carry that spelling's hash
    (3812742eb83a, as that code computed it): a resume in the same spelling goes on, it is not refused."""
    out = tmp_path / "old.jsonl"
    with FakeOpenAI(api_key=KEY) as server:
        args = ["generate", "--teacher", "openai:m", "--base-url", server.base_url, "-o", str(out), "--quiet"]
        assert run_cli(*args, "--seeds", "0")[0] == 0
        out.write_bytes(b"".join(orjson.dumps({**r, "config_hash": "3812742eb83a"}) + b"\n" for r in _records(out)))
        code, _, err = run_cli(*args, "--seeds", "0-1", "--resume")
    assert code == 0, err
    assert [r["seed"] for r in _records(out)] == [0, 1] and len(server.seen) == 2 * 28


def test_azure_name_spellings_hash_alike_and_the_long_form_as_before() -> None:
    from rhythm.teacher.output import data_hash

    endpoint = "llm.endpoint=https://r.openai.azure.com"
    long_form = load_config(GenerateConfig, None, ["teacher=azure", "llm.deployment=d", endpoint])
    assert data_hash(long_form) == "74d3710a9371"  # as computed before the spellings were made one
    assert data_hash(load_config(GenerateConfig, None, ["teacher=azure:d", endpoint])) == data_hash(long_form)
    assert data_hash(load_config(GenerateConfig, None, ["teacher=azure:e", endpoint])) != data_hash(long_form)


def test_budget_stops_cleanly_via_the_cli(tmp_path: Path, openai_key: str, run_cli) -> None:
    out = tmp_path / "b.jsonl"
    with FakeOpenAI(api_key=KEY, usage=(100, 0)) as server:  # $100 per 1M input tokens: $0.01 a request
        code, stdout, err = run_cli(
            "generate", "--teacher", "openai", "--model", "m", "--base-url", server.base_url, "--seeds", "0-2",
            "--output", str(out), "--max-cost-usd", "0.395", "--quiet", "--set", "llm.prices={m: {input: 100.0, output: 0.0}}")
    assert code == 1
    assert len(server.seen) == 40  # seed 0: 28 requests; seed 1 stops once $0.40 >= $0.395 was spent
    assert [r["seed"] for r in _records(out)] == [0]
    assert "budget reached" in err and "2 episodes not written" in err and "cost $0.4000 of $0.3950 budget" in err
    _no_secret_anywhere(tmp_path, KEY, text=err + stdout)


@pytest.mark.slow  # > 3 s on 2 cores
def test_server_sees_n_requests_in_flight_at_concurrency_n(tmp_path: Path, openai_key: str) -> None:
    holder: list[FakeOpenAI] = []
    with FakeOpenAI(api_key=KEY, handler=_hold_until_in_flight(holder, 3)) as server:
        holder.append(server)
        summary = _run(dataclasses.replace(_cfg(server, tmp_path, seeds="0-3"), concurrency=3))
    assert summary.episodes == 4 and 1 < server.max_in_flight <= 3  # requests overlapped, never past the cap


@pytest.mark.slow  # > 3 s on 2 cores
def test_ctrl_c_leaves_only_whole_lines_and_resume_finishes(tmp_path: Path, openai_key: str) -> None:
    out = tmp_path / "c.jsonl"
    with FakeOpenAI(api_key=KEY, latency=0.005) as server:
        cmd = [sys.executable, "-m", "rhythm.cli.main", "generate", "--teacher", "openai", "--model", "m",
               "--base-url", server.base_url, "--seeds", "0-7", "--concurrency", "2", "--output", str(out), "--quiet"]
        # a shell's background job ignores SIGINT, and Python keeps an ignored SIGINT ignored: restore the default
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.time() + 30
        while time.time() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 2):
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130 and "Traceback" not in err and KEY not in err
        written = _records(out)
        assert 2 <= len(written) < 8
        summary = _run(dataclasses.replace(_cfg(server, tmp_path, seeds="0-7"), output=str(out), resume=True))
    assert summary.skipped == len(written)
    assert sorted(r["seed"] for r in _records(out)) == list(range(8))


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_api_eval_says_one_line_and_leaves_no_pending_requests(tmp_path: Path, openai_key: str,
                                                                              sig: int, code: int) -> None:
    """Ctrl-C (or SIGTERM) while an API agent's requests are in flight: the agent's requests are cancelled before its
    event loop closes, so the run ends on its one line, with no asyncio tracebacks after it."""
    out = tmp_path / "e.json"
    with FakeOpenAI(api_key=KEY, latency=0.05) as server:
        cmd = [sys.executable, "-m", "rhythm.cli.main", "eval", "--agent", "openai:m", "--base-url", server.base_url,
               "--condition", "discrete", "--seeds", "0-3", "--concurrency", "1", "--output", str(out), "--quiet",
               "--set", "references=[]"]
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.time() + 300  # a loaded machine (CI beside other suites) starts the CLI slowly
        while time.time() < deadline and len(server.seen) < 3:
            time.sleep(0.02)
        assert len(server.seen) >= 3, "the eval sent no requests to interrupt"  # a signal during start-up tests nothing
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rhythm: "), err


# ---------------------------------------------------------------------------------------------------
# The CLI: wrong key, missing settings


def test_wrong_key_is_one_clear_line_and_nonzero_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli) -> None:
    wrong = "sk-wrong-key-9876543210SECRET"
    monkeypatch.setenv("OPENAI_API_KEY", wrong)
    out = tmp_path / "w.jsonl"
    with FakeOpenAI(api_key=KEY) as server:
        code, stdout, err = run_cli("generate", "--teacher", "openai", "--model", "m", "--base-url", server.base_url,
                                    "--seeds", "0-9", "--concurrency", "2", "--output", str(out), "--quiet")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rhythm: error:")
    assert "401 Unauthorized" in lines[0] and "check OPENAI_API_KEY" in lines[0]
    assert len(server.seen) <= 2  # 401 is not retried, and no further episode starts
    assert _records(out) == []
    _no_secret_anywhere(tmp_path, wrong, KEY, text=err + stdout)


@pytest.mark.parametrize(
    "args, env, needle",
    [
        (["--teacher", "openai"], {"OPENAI_API_KEY": KEY}, "needs --model NAME"),
        (["--teacher", "openai", "--model", "m"], {}, "OPENAI_API_KEY is not set"),
        (["--teacher", "openai:a", "--model", "b"], {"OPENAI_API_KEY": KEY}, "disagrees"),
        (["--teacher", "openai:m"], {"OPENAI_API_KEY": "sk-test\u2013abc"}, "OPENAI_API_KEY holds a line break"),
        (["--teacher", "openai:m", "--base-url", "http://127.0.0.1:9/v1"], {"OPENAI_API_KEY": KEY + "\n"},
         "OPENAI_API_KEY holds a line break, a space at an end or a character outside ASCII"),
        (["--teacher", "azure:d", "--endpoint", "https://x.openai.azure.com"], {"AZURE_OPENAI_API_KEY": " " + KEY},
         "AZURE_OPENAI_API_KEY holds a line break"),
        (["--teacher", "openai:m", "--max-cost-usd", "1"], {"OPENAI_API_KEY": KEY}, "needs a price for 'm'"),
        (["--teacher", "azure", "--deployment", "d"], {}, "needs --endpoint"),
        (["--teacher", "azure:d", "--endpoint", "https://x.openai.azure.com", "--set", "llm.auth=key"], {}, "AZURE_OPENAI_API_KEY is not set"),
        (["--teacher", "openai:m", "--set", "llm.reasoning_effort=huge"], {"OPENAI_API_KEY": KEY}, "unknown reasoning_effort"),
        (["--teacher", "openai:m", "--set", "llm.history_turns=0"], {"OPENAI_API_KEY": KEY}, "llm.history_turns=0: input should be greater than or equal to 1"),
        (["--teacher", "openai:m", "--base-url", "127.0.0.1:8000"], {"OPENAI_API_KEY": KEY},
         "--base-url (llm.base_url) must be an http:// or https:// URL with a host, got '127.0.0.1:8000' (e.g. http://127.0.0.1:8000)"),
        (["--teacher", "openai:m"], {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": "localhost:8000/v1"}, "OPENAI_BASE_URL must be an http://"),
        (["--teacher", "azure:d", "--endpoint", "res.openai.azure.com"], {"AZURE_OPENAI_API_KEY": KEY},
         "--endpoint (llm.endpoint) must be an http:// or https:// URL with a host, got 'res.openai.azure.com'"),
        (["--teacher", "openai:m", "--base-url", "http://127.0.0.1:99999/v1"], {"OPENAI_API_KEY": KEY},
         "--base-url (llm.base_url) 'http://127.0.0.1:99999/v1' names no valid port (a number in 0-65535)"),
        (["--teacher", "azure:d", "--endpoint", "https://res.openai.azure.com:abc"], {"AZURE_OPENAI_API_KEY": KEY},
         "--endpoint (llm.endpoint) 'https://res.openai.azure.com:abc' names no valid port"),
    ],
)
def test_missing_settings_fail_before_anything_is_sent(tmp_path, monkeypatch, run_cli, args, env, needle) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, _, err = run_cli("generate", *args, "--output", str(tmp_path / "n.jsonl"), "--quiet")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "n.jsonl").exists()


def test_a_key_that_is_not_sent_is_not_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under Entra ID auth the Azure key is not used: a stray one in the environment is no reason to refuse."""
    from rhythm.model.llm_client import resolve_target

    monkeypatch.setenv("AZURE_OPENAI_API_KEY", " not-a-key\n")
    llm = LLMConfig(endpoint="https://x.openai.azure.com", api_version="2025-04-01-preview", auth="entra")
    assert resolve_target("azure", "d", llm).name == "d"
    with pytest.raises(RhythmError, match="AZURE_OPENAI_API_KEY holds a line break"):
        resolve_target("azure", "d", dataclasses.replace(llm, auth="key"))


def test_history_turns_keeps_the_last_k_steps(tmp_path: Path, openai_key: str) -> None:
    with FakeOpenAI(api_key=KEY) as server:
        _run(_cfg(server, tmp_path, seeds="0-1", history_turns=3))
    recs = _records(tmp_path / "t.jsonl")
    assert len(server.seen) == 56 and max(len(s.messages) for s in server.seen) == 1 + 2 * 3 - 1
    assert_requests_carry_the_conversations(server.seen, recs, max_turns=3)


def test_generate_dispatches_api_teachers(tmp_path: Path, openai_key: str) -> None:
    with FakeOpenAI(api_key=KEY) as server:
        summary = generate(dataclasses.replace(_cfg(server, tmp_path), teacher="openai:m",
                                               llm=LLMConfig(base_url=server.base_url)))
    assert summary.episodes == 1 and len(server.seen) == 28


# ---------------------------------------------------------------------------------------------------
# rhythm eval --agent openai:MODEL


def test_an_api_agents_week_records_the_usage_an_api_teachers_week_does(tmp_path: Path, openai_key: str) -> None:
    """One definition of a step's usage and a week's: the same model on the same person, played by ``rhythm generate``
    and by ``rhythm eval``, records the same counts and cost (a reply without usage included), the time apart."""
    from rhythm.eval.evaluate import EvalConfig, evaluate

    def handler(seen):  # the second step's reply comes without usage: its week's cost is unknown
        return Reply(protocol_reply(seen.observation), usage=None) if seen.n % 28 == 1 else None

    prices = {"m": Price(input=2.0, output=10.0)}
    with FakeOpenAI(api_key=KEY, handler=handler) as server:
        _run(_cfg(server, tmp_path, prices=prices))
        played: list = []
        evaluate(EvalConfig(agent="openai:m", condition="in-dist", split="train", seeds="0", references=["random"],
                            llm=LLMConfig(base_url=server.base_url, prices=prices)),
                 on_records=lambda name, condition, records: played.extend(r.to_dict() for r in records if name == "openai:m"))
    (taught,), (evaluated,) = _records(tmp_path / "t.jsonl"), played
    assert [s["action"] for s in taught["steps"]] == [s["action"] for s in evaluated["steps"]]
    assert {k: v for k, v in taught["usage"].items() if k != "seconds"} == {k: v for k, v in evaluated["usage"].items() if k != "seconds"}
    assert taught["usage"]["cost_usd"] is None and taught["usage"]["usage_missing"] == 1 and taught["usage"]["requests"] == 28


def test_an_eval_closes_its_api_agent_also_when_it_fails(tmp_path: Path, openai_key: str) -> None:
    """``run_eval`` twice in one process (a notebook): no client, event loop or thread of an earlier one is left."""
    import threading

    from rhythm.eval.evaluate import EvalConfig, run_eval

    def agent_threads() -> int:
        return sum(t.name == "rhythm-llm-agent" and t.is_alive() for t in threading.enumerate())

    before = agent_threads()
    with FakeOpenAI(api_key=KEY) as server:
        cfg = EvalConfig(agent="openai:m", condition="in-dist", split="train", seeds="0", references=["random"],
                         llm=LLMConfig(base_url=server.base_url, max_retries=0), output=str(tmp_path / "e.json"))
        for i in range(2):
            run_eval(dataclasses.replace(cfg, output=str(tmp_path / f"e{i}.json")))
            assert agent_threads() == before
    with pytest.raises(RhythmError, match="a request failed for good"):  # the server is gone
        run_eval(dataclasses.replace(cfg, output=str(tmp_path / "gone.json")))
    assert agent_threads() == before


@pytest.mark.slow  # > 3 s on 2 cores
def test_eval_openai_agent_sends_each_steps_requests_concurrently(tmp_path: Path, openai_key: str, run_cli) -> None:
    out = tmp_path / "eval.json"
    holder: list[FakeOpenAI] = []
    with FakeOpenAI(api_key=KEY, handler=_hold_until_in_flight(holder, 2)) as server:
        holder.append(server)
        code, stdout, err = run_cli(
            "eval", "--agent", "openai:m", "--condition", "discrete", "--episodes", "3", "--output", str(out), "--quiet",
            "--set", f"llm.base_url={server.base_url}", "--set", "llm.concurrency=2", "--set", "references=[random]")
    assert code == 0, err
    assert len(server.seen) == 3 * 28 and 1 < server.max_in_flight <= 2  # overlapped, never past the cap
    results = orjson.loads(out.read_bytes())
    cond = results["conditions"]["discrete"]
    assert cond["episodes"] == 3 and cond["parse_failure_rate"] == 0.0
    recs = _records(out.with_name("eval.episodes.jsonl"))
    assert {(r["agent"], r["model"], r["split"]) for r in recs} == {("openai", "m", "eval")}
    assert all(r["usage"]["prompt_tokens"] == 28 * 100 and r["usage"]["requests"] == 28 for r in recs)
    assert_requests_carry_the_conversations(server.seen, recs)
    _no_secret_anywhere(tmp_path, KEY, text=err + stdout)


@pytest.mark.slow  # > 3 s on 2 cores
def test_a_killed_openai_eval_resumes_without_asking_again(tmp_path: Path, openai_key: str, run_cli) -> None:
    """An LLM agent's weeks are written batch by batch (4 x concurrency weeks); the server failing for good in the
    second batch stops the run with one line, and ``--resume`` sends only the weeks not yet written."""
    out = tmp_path / "eval.json"
    args = ("eval", "--agent", "openai:m", "--condition", "discrete", "--episodes", "6", "--output", str(out),
            "--quiet", "--set", "llm.concurrency=1", "--set", "llm.max_retries=0", "--set", "references=[random]")
    with FakeOpenAI(api_key=KEY, handler=lambda seen: Fail(500, "down") if seen.n >= 4 * 28 else None) as server:
        code, _, err = run_cli(*args, "--set", f"llm.base_url={server.base_url}")
    assert code == 2 and "a request failed for good" in err, err
    partial = out.with_name("eval.episodes.jsonl.partial")
    assert [r["seed"] for r in _records(partial)] == [0, 1, 2, 3] and not out.exists()
    with FakeOpenAI(api_key=KEY) as server:
        code, _, err = run_cli(*args, "--set", f"llm.base_url={server.base_url}", "--resume")
    assert code == 0, err
    recs = _records(out.with_name("eval.episodes.jsonl"))
    assert [r["seed"] for r in recs] == list(range(6)) and not partial.exists()
    assert len(server.seen) == 2 * 28  # weeks 4 and 5 only
    assert_requests_carry_the_conversations(server.seen, recs[4:])
    assert orjson.loads(out.read_bytes())["conditions"]["discrete"]["episodes"] == 6


def test_eval_openai_agent_history_turns_trims_each_request(openai_key: str) -> None:
    from rhythm.agents.llm import LLMAgent

    with FakeOpenAI(api_key=KEY) as server:
        agent = LLMAgent("openai", "m", LLMConfig(base_url=server.base_url, history_turns=2))
        try:
            recs = [r.to_dict() for r in play_batch(agent, "discrete", "eval", [0, 1])]
        finally:
            agent.close()
    assert len(server.seen) == 2 * 28 and max(len(s.messages) for s in server.seen) == 1 + 2 * 2 - 1
    assert_requests_carry_the_conversations(server.seen, recs, max_turns=2)


@pytest.mark.parametrize("spelt", ["OpenAI:m", " openai : m"])
def test_an_agent_name_in_another_case_or_with_spaces_plays_with_its_settings(spelt: str, openai_key: str) -> None:
    """The registry reads ``OpenAI:m`` as ``openai:m``; the eval's settings lookup did not, so the agent played with
    none of its llm settings (temperature, history, the spending cap) while the results recorded them."""
    with FakeOpenAI(api_key=KEY) as server:
        results = evaluate(EvalConfig(agent=spelt, condition="discrete", seeds="0", references=["random"],
                                      llm=LLMConfig(base_url=server.base_url, temperature=0.3, history_turns=2)))
    assert len(server.seen) == 28 and {s.body.get("temperature") for s in server.seen} == {0.3}
    assert max(len(s.messages) for s in server.seen) == 1 + 2 * 2 - 1
    assert results.agent == results.config["agent"] == "openai:m"


def test_an_eval_records_the_server_that_answered_also_when_the_environment_names_it(
        tmp_path: Path, openai_key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from rhythm.eval.evaluate import run_eval

    with FakeOpenAI(api_key=KEY) as server:
        url = server.base_url
        monkeypatch.setenv("OPENAI_BASE_URL", url)  # the config names no base_url
        results, path, episodes = run_eval(EvalConfig(agent="openai:m", condition="discrete", seeds="0", references=[],
                                                      output=str(tmp_path / "e.json")))
    assert results.config["llm"]["base_url"] is None
    assert orjson.loads(path.read_bytes())["endpoints"] == {"openai:m": url}
    assert url in Path(str(episodes) + ".config.yaml").read_text()


def test_an_api_evals_results_and_table_sum_its_usage_and_cost(tmp_path: Path, openai_key: str, run_cli) -> None:
    """What an API eval asked and spent, over every week: in the results (per condition) and on the terminal; a
    scripted agent's results have none."""
    out = tmp_path / "e.json"
    with FakeOpenAI(api_key=KEY) as server:
        code, _, err = run_cli("eval", "--agent", "openai:m", "--base-url", server.base_url, "--condition", "discrete",
                               "--seeds", "0-1", "--output", str(out), "--set", "references=[]",
                               "--set", "llm.prices={m: {input: 1.0, output: 2.0}}")
    assert code == 0, err
    weeks = _records(out.with_name("e.episodes.jsonl"))
    usage = orjson.loads(out.read_bytes())["conditions"]["discrete"]["usage"]
    for key in ("prompt_tokens", "completion_tokens", "requests"):
        assert usage[key] == sum(w["usage"][key] for w in weeks) > 0
    assert usage["requests"] == 2 * 28
    assert usage["cost_usd"] == pytest.approx(sum(w["usage"]["cost_usd"] for w in weeks)) and usage["cost_usd"] > 0
    assert f"usage: discrete {usage['prompt_tokens']:,} prompt + {usage['completion_tokens']:,} completion tokens, 56 requests" in " ".join(err.split())
    code, _, err = run_cli("eval", "--agent", "heuristic", "--condition", "discrete", "--seeds", "0",
                           "--output", str(tmp_path / "h.json"), "--set", "references=[]")
    assert code == 0 and "usage:" not in err
    assert orjson.loads((tmp_path / "h.json").read_bytes())["conditions"]["discrete"]["usage"] is None


def test_an_agent_refuses_another_stages_settings() -> None:
    from rhythm.agents.llm import LLMAgent
    from rhythm.agents.teachers import TeacherConfig

    with pytest.raises(TypeError, match="LLMConfig"):
        LLMAgent("openai", "m", TeacherConfig())


def test_eval_agent_stops_on_a_request_that_fails_for_good(openai_key: str) -> None:
    from rhythm.agents.llm import LLMAgent

    # Both first steps are held until they are in flight together, then fail: without that, the first
    # failure cancels its sibling, which then may or may not have reached the server.
    holder: list[FakeOpenAI] = []
    hold = _hold_until_in_flight(holder, 2)

    def handler(seen):
        hold(seen)
        return Fail(500, "down")

    with FakeOpenAI(api_key=KEY, handler=handler) as server:
        holder.append(server)
        agent = LLMAgent("openai", "m", LLMConfig(base_url=server.base_url, max_retries=0, concurrency=2))
        try:
            with pytest.raises(RhythmError, match="a request failed for good"):
                play_batch(agent, "discrete", "eval", [0, 1])
        finally:
            agent.close()
    assert 1 < server.max_in_flight <= 2  # both episodes' first step, sent together
    assert len(server.seen) == 2  # and no retry (max_retries 0)


# ---------------------------------------------------------------------------------------------------
# Pieces


def test_retry_after_is_read_as_the_client_reads_it() -> None:
    from email.utils import formatdate

    from rhythm.model.llm_client import _retry_after_s

    assert _retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert _retry_after_s({"retry-after": "3600"}) == 3600.0
    assert 3590 < _retry_after_s({"retry-after": formatdate(time.time() + 3600, usegmt=True)}) <= 3600
    assert _retry_after_s({}) is None and _retry_after_s({"retry-after": "soon"}) is None
    # a literal infinity is no wait to the client (it backs off and retries); a number past a float's range is a wait
    # beyond its cap (it does not retry)
    assert _retry_after_s({"retry-after": "inf"}) is None and _retry_after_s({"retry-after": "Infinity"}) is None
    assert _retry_after_s({"retry-after": "1e400"}) == float("inf")


def test_an_attempt_waits_timeout_s_for_the_server_and_the_clients_own_limit_to_connect() -> None:
    """A host that never answers costs 5 s an attempt (the openai client's default), not timeout_s: at the default
    600 s and 5 retries that was an hour a request."""
    from rhythm.model.llm_client import ChatClient, resolve_target

    for timeout_s, connect in ((600.0, 5.0), (2.0, 2.0)):
        llm = LLMConfig(model="m", base_url="http://127.0.0.1:9/v1", timeout_s=timeout_s)
        timeout = ChatClient(resolve_target("openai", "", llm), llm).client.timeout
        assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (connect, timeout_s, timeout_s, timeout_s)


def test_redaction_of_keys_tokens_and_urls() -> None:
    r = Redactor()
    r.add("my-very-own-key")
    text = r.redact("key my-very-own-key; other sk-abcdef1234567890; Authorization: Bearer eyJhbGciOi.abc.def")
    assert "my-very-own-key" not in text and "sk-abcdef" not in text and "eyJhbGciOi" not in text
    assert redact_url("https://user:pw@host/v1?api-version=1&sig=abc") == "https://***@host/v1?api-version=1&sig=%2A%2A%2A"


def test_config_file_documents_every_field_and_loads_to_the_defaults() -> None:
    path = REPO / "rhythm" / "configs" / "generate.yaml"
    assert load_config(GenerateConfig, path) == GenerateConfig()
    data = yaml.safe_load(path.read_text())

    def check(obj, section, where):
        for f in dataclasses.fields(obj):
            assert f.name in section, f"configs/generate.yaml lacks {where}{f.name}"
            if dataclasses.is_dataclass(getattr(obj, f.name)):
                check(getattr(obj, f.name), section[f.name], f"{where}{f.name}.")

    check(GenerateConfig(), data, "")
