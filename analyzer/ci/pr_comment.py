"""Post a Markdown report on a GitHub pull request as one *sticky* comment: created the first time,
updated in place afterwards, so a pull request that is pushed to ten times has one diff comment, not ten.

    python -m analyzer.ci.pr_comment --body-file diff.md [--pr N] [--id NAME] [--best-effort]

The comment starts with a hidden marker (``<!-- gpu-trace-analyzer:diff:NAME -->``); the comment to update
is the first one *starting* with it (a reply quoting it does not). Several diffs on one pull request use
different ``--id`` values.

Everything comes from the environment GitHub Actions provides: ``GITHUB_TOKEN`` (or ``GH_TOKEN``),
``GITHUB_REPOSITORY`` (``owner/name``), ``GITHUB_API_URL`` (GitHub Enterprise, or a test server) and
``GITHUB_EVENT_PATH`` (the pull request number, unless ``--pr`` is given). Only the standard library is
used. Transient failures (HTTP 5xx, 429, secondary rate limits) are retried; with ``--best-effort`` a
failure to comment (e.g. the read-only token of a pull request from a fork) is a warning and exit 0.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MARKER_PREFIX = "gpu-trace-analyzer:diff"
MAX_BODY = 65_536  # GitHub's limit on a comment body, in characters
USER_AGENT = "gpu-trace-analyzer-pr-comment"
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="next"')
_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class CommentError(Exception):
    """A failure to read or write the comment; ``str()`` is one line."""


def marker(comment_id: str = "default") -> str:
    if not _ID.match(comment_id):
        raise CommentError(f"comment id {comment_id!r}: use 1-64 letters, digits, '.', '_' or '-'")
    return f"<!-- {MARKER_PREFIX}:{comment_id} -->"


@dataclass(frozen=True)
class Result:
    action: str  # "created" | "updated"
    comment_id: int
    url: str


Sleep = Callable[[float], None]


class GitHub:
    """The few REST calls the sticky comment needs, with retries on transient errors."""

    def __init__(self, api_url: str, token: str, *, retries: int = 3, sleep: Sleep = time.sleep,
                 timeout: float = 30.0) -> None:
        if not api_url.startswith(("https://", "http://")):
            raise CommentError(f"GITHUB_API_URL {api_url!r} is not an http(s) URL")
        self.api = api_url.rstrip("/")
        self.token = token
        self.retries = retries
        self.sleep = sleep
        self.timeout = timeout

    def request(self, method: str, url: str, body: Mapping[str, Any] | None = None) -> tuple[Any, Mapping[str, str]]:
        if not url.startswith(("https://", "http://")):
            url = self.api + url
        data = json.dumps(body).encode("utf-8") if body is not None else None
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": USER_AGENT,
        }
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if data is not None:
            headers["Content-Type"] = "application/json; charset=utf-8"
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # http(s) only, checked above
                    raw = resp.read()
                    return (json.loads(raw.decode("utf-8")) if raw else None), dict(resp.headers.items())
            except urllib.error.HTTPError as err:
                text = err.read().decode("utf-8", "replace")
                wait = _retry_after(err.code, err.headers, text, attempt)
                if wait is not None and attempt < self.retries:
                    self.sleep(wait)
                    continue
                raise CommentError(f"GitHub API {method} {_path(url)}: HTTP {err.code} {_message(text)}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                if attempt < self.retries:
                    self.sleep(2.0 ** attempt)
                    continue
                reason = getattr(err, "reason", err)
                raise CommentError(f"GitHub API {method} {_path(url)}: {reason}") from None
            except json.JSONDecodeError:
                raise CommentError(f"GitHub API {method} {_path(url)}: the answer is not JSON") from None
        raise CommentError(f"GitHub API {method} {_path(url)}: gave up")  # pragma: no cover

    def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        """All comments of the issue/pull request, following the ``Link: rel="next"`` pages."""
        url: str | None = f"/repos/{repo}/issues/{number}/comments?per_page=100"
        out: list[dict[str, Any]] = []
        for _ in range(1000):  # 100,000 comments at most
            if url is None:
                break
            page, headers = self.request("GET", url)
            if not isinstance(page, list):
                raise CommentError(f"GitHub API GET {_path(url)}: expected a list of comments")
            out.extend(c for c in page if isinstance(c, dict))
            m = _NEXT.search(headers.get("Link", "") or headers.get("link", ""))
            url = m.group(1) if m else None
        return out


def _path(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return parts.path or url


def _message(text: str) -> str:
    try:
        doc = json.loads(text)
        msg = doc.get("message", "") if isinstance(doc, dict) else ""
    except json.JSONDecodeError:
        msg = text
    return " ".join(str(msg).split())[:200]


def _retry_after(code: int, headers: Any, text: str, attempt: int) -> float | None:
    """Seconds to wait before retrying, or None when the error is not transient."""
    after = headers.get("Retry-After") if headers is not None else None
    if code == 429 or (code == 403 and (after or "rate limit" in text.lower())):
        try:
            return min(60.0, float(after)) if after else 2.0 ** attempt * 5
        except ValueError:
            return 2.0 ** attempt * 5
    if code >= 500:
        return 2.0 ** attempt
    return None


def sticky_comment(gh: GitHub, repo: str, number: int, body: str, comment_id: str = "default") -> Result:
    """Create or update the one comment of ``comment_id`` on pull request ``number``."""
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+/[A-Za-z0-9_.\-]+", repo):
        raise CommentError(f"GITHUB_REPOSITORY {repo!r} is not owner/name")
    mark = marker(comment_id)
    text = f"{mark}\n{body}"
    if len(text) > MAX_BODY:
        note = "\n\n_(cut to fit a GitHub comment; the full report is in the job's artifacts)_\n"
        text = text[: MAX_BODY - len(note)] + note
    mine = [c for c in gh.comments(repo, number) if str(c.get("body", "")).lstrip().startswith(mark)]
    if mine:
        target = min(mine, key=lambda c: int(c.get("id", 0)))
        doc, _ = gh.request("PATCH", f"/repos/{repo}/issues/comments/{int(target['id'])}", {"body": text})
        action = "updated"
    else:
        doc, _ = gh.request("POST", f"/repos/{repo}/issues/{number}/comments", {"body": text})
        action = "created"
    if not isinstance(doc, dict) or "id" not in doc:
        raise CommentError("GitHub API: the answer has no comment id")
    return Result(action, int(doc["id"]), str(doc.get("html_url", "")))


def pr_number(explicit: str | None, event_path: str | None) -> int:
    """``--pr``, else the pull request of the workflow's event (``pull_request`` or a comment on one)."""
    if explicit:
        if not explicit.isdigit() or int(explicit) <= 0:
            raise CommentError(f"--pr {explicit!r} is not a pull request number")
        return int(explicit)
    if not event_path:
        raise CommentError("no pull request: give --pr N (GITHUB_EVENT_PATH is not set)")
    try:
        with open(event_path, encoding="utf-8") as fh:
            event = json.load(fh)
    except (OSError, json.JSONDecodeError) as err:
        raise CommentError(f"cannot read the event file {event_path}: {err}") from None
    for key in ("pull_request", "issue"):
        number = event.get(key, {}).get("number") if isinstance(event.get(key), dict) else None
        if isinstance(number, int) and number > 0:
            return number
    if isinstance(event.get("number"), int):
        return int(event["number"])
    raise CommentError("the workflow event is not a pull request; give --pr N or run on pull_request")


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None, sleep: Sleep = time.sleep) -> int:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog="python -m analyzer.ci.pr_comment", description=__doc__.split("\n\n")[0])
    parser.add_argument("--body-file", required=True, help="Markdown to post (e.g. analyze diff --format md)")
    parser.add_argument("--pr", default=None, help="pull request number (default: from GITHUB_EVENT_PATH)")
    parser.add_argument("--id", default="default", help="which sticky comment, when a PR has several diffs")
    parser.add_argument("--repo", default=None, help="owner/name (default: GITHUB_REPOSITORY)")
    parser.add_argument("--best-effort", action="store_true",
                        help="a failure to comment is a warning (exit 0), e.g. for pull requests from forks")
    args = parser.parse_args(argv)
    try:
        try:
            with open(args.body_file, encoding="utf-8") as fh:
                body = fh.read()
        except OSError as err:
            raise CommentError(f"cannot read {args.body_file}: {err.strerror or err}") from None
        token = env.get("GITHUB_TOKEN") or env.get("GH_TOKEN") or ""
        if not token:
            raise CommentError("no token: set GITHUB_TOKEN (the action passes github.token)")
        repo = args.repo or env.get("GITHUB_REPOSITORY", "")
        number = pr_number(args.pr, env.get("GITHUB_EVENT_PATH"))
        gh = GitHub(env.get("GITHUB_API_URL", "https://api.github.com"), token, sleep=sleep)
        result = sticky_comment(gh, repo, number, body, args.id)
    except CommentError as err:
        if args.best_effort:
            print(f"::warning title=PR comment not posted::{err}", file=sys.stderr)
            return 0
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{result.action} comment {result.comment_id} on #{number}" + (f": {result.url}" if result.url else ""))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
