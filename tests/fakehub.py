"""A fake Hugging Face Hub on 127.0.0.1 for the real ``huggingface_hub`` client (2.4).

It implements just what rhythm's Hub code calls, the way the Hub answers it:

- ``POST /api/repos/create`` (409 with the url when the repo exists)
- ``POST /api/validate-yaml`` (README front matter)
- ``POST /api/{type}s/{ns}/{name}/preupload/{rev}`` (every file "regular": no LFS, no xet)
- ``POST /api/{type}s/{ns}/{name}/commit/{rev}`` (NDJSON: a header line, then base64 files; a
  ``parentCommit`` that is no longer the head is refused with 412, as the Hub does)
- ``GET /api/{type}s/{ns}/{name}[/revision/{rev}]`` (repo info: head ``sha`` and ``siblings``)
- ``GET /api/{type}s/{ns}/{name}/commits/{rev}`` (the commits, newest first)
- ``HEAD|GET /[{type}s/]{ns}/{name}/resolve/{rev}/{path}`` (downloads, for ``hf_hub_download``)
- ``GET /api/whoami-v2``
- ``POST /api/jobs/{ns}`` and ``GET /api/jobs/{ns}/{id}`` (Jobs: the spec is stored as received)

Every request is recorded (method, path, headers, body) so a test can assert what the client sent,
and which token it sent. :meth:`FakeHub.fail` makes requests to a route answer an error status instead,
as a Hub that is down, rate-limiting or refusing would. Point the client at it with ``HF_ENDPOINT`` *before* ``huggingface_hub`` is
imported (it reads the variable once), plus ``HF_HUB_DISABLE_TELEMETRY=1``, ``HF_HUB_DISABLE_XET=1``,
a temp ``HF_HOME`` and ``NO_PROXY=127.0.0.1``: :meth:`FakeHub.env` returns exactly that.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

USER = "tester"
TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    snapshots: dict[str, dict[str, bytes]] = field(default_factory=dict)
    head: str = ""
    commits: list[dict[str, Any]] = field(default_factory=list)

    @property
    def files(self) -> dict[str, bytes]:
        return self.snapshots.get(self.head, {})


class FakeHub:
    """Start with ``with FakeHub() as hub:``; ``hub.url`` is the endpoint."""

    def __init__(self, token: str = "hf_fake_token_0123456789abcdef") -> None:
        self.token = token
        self.role = "write"
        """The token's role whoami reports (``read`` for a read-only token)."""
        self.requests: list[Request] = []
        self.repos: dict[tuple[str, str], Repo] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.faults: list[list[Any]] = []  # [fragment, method, status, message, times left (None: all), headers]
        self.drops: list[tuple[str, str | None]] = []
        self.lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                req = Request(self.command, unquote(parts.path), parts.query, {k.lower(): v for k, v in self.headers.items()}, body)
                with hub.lock:
                    hub.requests.append(req)
                if any(f in req.path and m in (None, req.method) for f, m in hub.drops):
                    self.close_connection = True  # no answer at all: the client sees the connection end
                    return
                try:
                    status, headers, payload = hub.route(req)
                except Exception as err:  # a bug in the fake: make it loud in the client
                    status, headers, payload = 500, {}, json.dumps({"error": f"fakehub: {err!r}"}).encode()
                self.send_response(status)
                headers = {"Content-Type": "application/json", **headers}
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def env(self, home: Path, *, token: bool = True) -> dict[str, str]:
        """Environment for a process that should talk to this Hub (and only to it)."""
        env = {
            "HF_ENDPOINT": self.url,
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_HUB_ETAG_TIMEOUT": "5",
            "HF_HOME": str(home),
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
        if token:
            env["HF_TOKEN"] = self.token
        return env

    # ---------------------------------------------------------------- helpers
    def repo(self, repo_id: str, repo_type: str = "model") -> Repo:
        return self.repos[(repo_type, repo_id)]

    def requests_to(self, fragment: str, method: str | None = None) -> list[Request]:
        return [r for r in self.requests if fragment in r.path and (method is None or r.method == method)]

    def fail(self, fragment: str, status: int, message: str, method: str | None = None, times: int | None = None,
             headers: dict[str, str] | None = None) -> None:
        """From now on, answer requests whose path contains ``fragment`` (and method, if given) with
        ``status``, ``headers`` and the Hub's JSON error body: the next ``times`` such requests (None: all)."""
        self.faults.append([fragment, method, status, message, times, headers or {}])

    def drop(self, fragment: str, method: str | None = None) -> None:
        """From now on, close the connection of requests whose path contains ``fragment`` (and method,
        if given) without an answer, as a Hub that went away would."""
        self.drops.append((fragment, method))

    def _authorized(self, req: Request) -> bool:
        return req.headers.get("authorization") == f"Bearer {self.token}"

    @staticmethod
    def _json(status: int, obj: Any, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        return status, headers or {}, json.dumps(obj).encode()

    def _repo_url(self, repo_type: str, repo_id: str) -> str:
        return f"{self.url}/{'' if repo_type == 'model' else repo_type + 's/'}{repo_id}"

    # ---------------------------------------------------------------- routes
    def route(self, req: Request) -> tuple[int, dict[str, str], bytes]:
        p = req.path
        with self.lock:  # a fault that answers N times counts them across the server's threads
            for fault in self.faults:
                fragment, method, status, message, times, headers = fault
                if fragment in p and method in (None, req.method) and times != 0:
                    if times is not None:
                        fault[4] = times - 1
                    return self._json(status, {"error": message}, headers)
        if p == "/api/whoami-v2":
            if not self._authorized(req):
                return self._json(401, {"error": "Invalid credentials in Authorization header"})
            return self._json(200, {"type": "user", "name": USER, "auth": {"type": "access_token", "accessToken": {"role": self.role}}})
        if p == "/api/validate-yaml":
            return self._json(200, {"errors": [], "warnings": []})
        if p == "/api/repos/create" and req.method == "POST":
            return self._create_repo(req)
        if p.startswith("/api/jobs/"):
            return self._jobs(req)
        segs = p.strip("/").split("/")
        if len(segs) >= 5 and segs[0] == "api" and segs[1] in TYPES and segs[4] in ("preupload", "commit"):
            repo_type, repo_id, action = TYPES[segs[1]], f"{segs[2]}/{segs[3]}", segs[4]
            repo = self.repos.get((repo_type, repo_id))
            if repo is None:
                return self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            if not self._authorized(req):
                return self._json(401, {"error": "Invalid credentials"})
            return self._preupload(req) if action == "preupload" else self._commit(req, repo)
        if req.method == "GET" and len(segs) == 6 and segs[0] == "api" and segs[1] in TYPES and segs[4] == "commits":
            return self._commits(TYPES[segs[1]], f"{segs[2]}/{segs[3]}")
        if req.method == "GET" and len(segs) in (4, 6) and segs[0] == "api" and segs[1] in TYPES and segs[4:5] in ([], ["revision"]):
            return self._info(req, TYPES[segs[1]], f"{segs[2]}/{segs[3]}", segs[5] if len(segs) == 6 else None)
        if "resolve" in segs:
            return self._resolve(req, segs)
        return self._json(404, {"error": f"fakehub has no route for {req.method} {p}"})

    def _create_repo(self, req: Request):
        if not self._authorized(req):
            return self._json(401, {"error": "Invalid credentials"})
        data = req.json()
        repo_type = data.get("type") or "model"
        repo_id = f"{data.get('organization') or USER}/{data['name']}"
        url = self._repo_url(repo_type, repo_id)
        with self.lock:
            if (repo_type, repo_id) in self.repos:
                return self._json(409, {"error": "You already created this repo", "url": url})
            private = data.get("visibility", "public") == "private" or bool(data.get("private"))
            repo = Repo(repo_type, repo_id, private)
            sha = hashlib.sha1(f"init {repo_type} {repo_id}".encode()).hexdigest()
            repo.snapshots[sha] = {".gitattributes": b"*.safetensors filter=lfs\n"}
            repo.head = sha
            self.repos[(repo_type, repo_id)] = repo
        return self._json(200, {"url": url, "name": repo_id, "id": repo_id})

    def _preupload(self, req: Request):
        files = req.json()["files"]
        return self._json(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None} for f in files]})

    def _info(self, req: Request, repo_type: str, repo_id: str, revision: str | None):
        repo = self.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and not self._authorized(req)):
            return self._json(404 if repo is None else 401, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
        sha = repo.head if revision in (None, "main") else revision
        files = repo.snapshots.get(sha)
        if files is None:
            return self._json(404, {"error": "Revision not found"}, {"X-Error-Code": "RevisionNotFound"})
        siblings = [{"rfilename": name, "size": len(content)} for name, content in sorted(files.items())]
        return self._json(200, {"id": repo_id, "sha": sha, "private": repo.private, "siblings": siblings})

    def _commits(self, repo_type: str, repo_id: str):
        """The repo's commits, newest first (the one that created it last), as ``list_repo_commits`` reads them."""
        repo = self.repos.get((repo_type, repo_id))
        if repo is None:
            return self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
        made = [(c["sha"], c["summary"] or "") for c in reversed(repo.commits)] + [(next(iter(repo.snapshots)), "initial commit")]
        return self._json(200, [{"id": sha, "title": title, "message": "", "authors": [{"user": USER}],
                                 "date": "2026-01-01T00:00:00.000Z"} for sha, title in made])

    def _commit(self, req: Request, repo: Repo):
        lines = [json.loads(line) for line in req.body.splitlines() if line.strip()]
        header = next(line["value"] for line in lines if line["key"] == "header")
        if header.get("parentCommit") not in (None, repo.head):
            return self._json(412, {"error": "A commit has happened since. Please refresh and try again."})
        with self.lock:
            files = dict(repo.files)
            for line in lines:
                if line["key"] == "file":
                    value = line["value"]
                    content = value["content"]
                    files[value["path"]] = base64.b64decode(content) if value.get("encoding") == "base64" else content.encode()
                elif line["key"] == "deletedFile":
                    files.pop(line["value"]["path"], None)
                elif line["key"] != "header":
                    return self._json(400, {"error": f"fakehub does not take {line['key']!r} commit lines"})
            sha = hashlib.sha1(f"{repo.head}{len(repo.commits)}{sorted(files)}".encode()).hexdigest()
            repo.snapshots[sha] = files
            repo.head = sha
            repo.commits.append({"sha": sha, "summary": header.get("summary"), "paths": [ln["value"]["path"] for ln in lines if ln["key"] == "file"]})
        return self._json(200, {"commitUrl": f"{self._repo_url(repo.repo_type, repo.repo_id)}/commit/{sha}", "commitOid": sha,
                                "success": True, "pullRequestUrl": None})

    def _resolve(self, req: Request, segs: list[str]):
        i = segs.index("resolve")
        if segs[0] in TYPES and i == 3:
            repo_type, repo_id = TYPES[segs[0]], f"{segs[1]}/{segs[2]}"
        elif i == 2:
            repo_type, repo_id = "model", f"{segs[0]}/{segs[1]}"
        else:
            return self._json(404, {"error": "bad resolve path"})
        revision, path = segs[i + 1], "/".join(segs[i + 2 :])
        repo = self.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and not self._authorized(req)):
            return self._json(404 if repo is None else 401, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
        sha = repo.head if revision == "main" else revision
        files = repo.snapshots.get(sha)
        if files is None:
            return self._json(404, {"error": "Revision not found"}, {"X-Error-Code": "RevisionNotFound"})
        if path not in files:
            return self._json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
        content = files[path]
        headers = {"Content-Type": "application/octet-stream", "X-Repo-Commit": sha,
                   "ETag": '"' + hashlib.sha1(content).hexdigest() + '"'}
        return 200, headers, content

    def _jobs(self, req: Request):
        segs = req.path.strip("/").split("/")  # api jobs ns [id]
        if not self._authorized(req):
            return self._json(401, {"error": "Invalid credentials"})
        namespace = segs[2]
        if req.method == "POST" and len(segs) == 3:
            spec = req.json()
            job_id = hashlib.sha1(f"{time.time_ns()}{len(self.jobs)}".encode()).hexdigest()[:24]
            info = {
                "id": job_id,
                "createdAt": "2026-11-22T00:00:00.000Z",
                "dockerImage": spec.get("dockerImage"),
                "spaceId": spec.get("spaceId"),
                "command": spec.get("command"),
                "arguments": spec.get("arguments", []),
                "environment": spec.get("environment", {}),
                "secrets": {k: None for k in spec.get("secrets", {})},  # the Hub never echoes secret values
                "flavor": spec.get("flavor"),
                "labels": spec.get("labels"),
                "volumes": spec.get("volumes"),
                "status": {"stage": "RUNNING", "message": None},
                "owner": {"id": "0" * 24, "name": namespace, "type": "user"},
            }
            with self.lock:
                self.jobs[job_id] = {"spec": spec, "info": info}
            return self._json(200, info)
        if req.method == "GET" and len(segs) == 4 and segs[3] in self.jobs:
            return self._json(200, self.jobs[segs[3]]["info"])
        return self._json(404, {"error": "job not found"})
