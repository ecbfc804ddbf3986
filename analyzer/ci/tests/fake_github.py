"""A local HTTP server that plays the part of the GitHub REST API for issue comments: list (paginated,
``Link: rel="next"``), create, update; records every request; can be told to fail. For testing the
pull-request comment script without the network."""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "ghs_test_token"
BOT = "github-actions[bot]"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased (HTTP header names are case-insensitive)
    body: Any


@dataclass
class FakeGitHub:
    repo: str = "octo/gpu-app"
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)  # id -> {id, issue, body, user}
    requests: list[Recorded] = field(default_factory=list)
    failures: list[tuple[str, int, dict[str, str], str]] = field(default_factory=list)  # (method, code, headers, body)
    writable: bool = True  # False: a fork's read-only token (403 on writes)
    next_id: int = 1000
    server: ThreadingHTTPServer | None = None

    # -- helpers for tests -------------------------------------------------------------------------
    def add(self, issue: int, body: str, user: str = "someone") -> int:
        self.next_id += 1
        self.comments[self.next_id] = {"id": self.next_id, "issue": issue, "body": body, "user": user}
        return self.next_id

    def on(self, issue: int) -> list[dict[str, Any]]:
        return [c for c in sorted(self.comments.values(), key=lambda c: c["id"]) if c["issue"] == issue]

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}"

    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method in ("POST", "PATCH", "DELETE")]

    # -- serving -----------------------------------------------------------------------------------
    def __enter__(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _answer(self, code: int, doc: Any, headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body: Any = json.loads(raw) if raw else {}
                fake.requests.append(Recorded(method, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                if fake.failures and fake.failures[0][0] == method:
                    _m, code, headers, text = fake.failures.pop(0)
                    return self._answer(code, {"message": text}, headers)
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._answer(401, {"message": "Bad credentials"})
                parts = urlsplit(self.path)
                owner_repo = re.escape(fake.repo)
                m = re.fullmatch(rf"/repos/{owner_repo}/issues/(\d+)/comments", parts.path)
                if m and method == "GET":
                    q = parse_qs(parts.query)
                    per = int(q.get("per_page", ["30"])[0])
                    page = int(q.get("page", ["1"])[0])
                    items = fake.on(int(m.group(1)))
                    chunk = items[(page - 1) * per: page * per]
                    headers = {}
                    if page * per < len(items):
                        headers["Link"] = (f'<{fake.url}{parts.path}?per_page={per}&page={page + 1}>; rel="next", '
                                           f'<{fake.url}{parts.path}?per_page={per}&page=1>; rel="first"')
                    return self._answer(200, [self._public(c) for c in chunk], headers)
                if m and method == "POST":
                    if not fake.writable:
                        return self._answer(403, {"message": "Resource not accessible by integration"})
                    cid = fake.add(int(m.group(1)), body["body"], BOT)
                    return self._answer(201, self._public(fake.comments[cid]))
                m = re.fullmatch(rf"/repos/{owner_repo}/issues/comments/(\d+)", parts.path)
                if m and method == "PATCH":
                    c = fake.comments.get(int(m.group(1)))
                    if c is None:
                        return self._answer(404, {"message": "Not Found"})
                    if not fake.writable or c["user"] != BOT:
                        return self._answer(403, {"message": "Resource not accessible by integration"})
                    c["body"] = body["body"]
                    return self._answer(200, self._public(c))
                return self._answer(404, {"message": "Not Found"})

            def _public(self, c: dict[str, Any]) -> dict[str, Any]:
                return {"id": c["id"], "body": c["body"], "user": {"login": c["user"]},
                        "html_url": f"https://github.com/{fake.repo}/pull/{c['issue']}#issuecomment-{c['id']}"}

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()
