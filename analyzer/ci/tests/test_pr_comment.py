"""The pull-request comment script against a local server playing the GitHub REST API: one sticky
comment per pull request (created, then updated, never duplicated), pagination, quoting users left
alone, retries, forks' read-only tokens, the pull request number from the event file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.ci import pr_comment
from analyzer.ci.tests.fake_github import BOT, TOKEN, FakeGitHub


def env(fake: FakeGitHub, tmp_path: Path, number: int = 7, **extra: str) -> dict[str, str]:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "synchronize", "number": number, "pull_request": {"number": number}}))
    return {"GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": fake.repo, "GITHUB_API_URL": fake.url,
            "GITHUB_EVENT_PATH": str(event), **extra}


def post(fake: FakeGitHub, tmp_path: Path, text: str, *args: str, number: int = 7) -> int:
    body = tmp_path / "diff.md"
    body.write_text(text)
    return pr_comment.main(["--body-file", str(body), *args], env=env(fake, tmp_path, number), sleep=lambda s: None)


def test_first_run_creates_then_updates_the_same_comment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeGitHub() as fake:
        fake.add(7, "LGTM")
        assert post(fake, tmp_path, "# diff 1\nHEAD is 55% faster") == 0
        assert "created comment" in capsys.readouterr().out
        assert post(fake, tmp_path, "# diff 2\nHEAD is 3% slower") == 0
        assert "updated comment" in capsys.readouterr().out
        assert post(fake, tmp_path, "# diff 3") == 0
        ours = [c for c in fake.on(7) if c["user"] == BOT]
        assert len(ours) == 1 and ours[0]["body"] == f"{pr_comment.marker()}\n# diff 3"
        assert [r.method for r in fake.writes()] == ["POST", "PATCH", "PATCH"]
        first = fake.requests[0]
        assert first.headers["authorization"] == f"Bearer {TOKEN}"
        assert first.headers["x-github-api-version"] == "2022-11-28"
        assert first.headers["accept"] == "application/vnd.github+json"


def test_the_marker_is_found_on_a_later_page(tmp_path: Path) -> None:
    with FakeGitHub() as fake:
        for i in range(130):
            fake.add(7, f"comment {i}")
        ours = fake.add(7, f"{pr_comment.marker()}\nold diff", user=BOT)
        for i in range(90):
            fake.add(7, f"later {i}")
        assert post(fake, tmp_path, "new diff") == 0
        gets = [r for r in fake.requests if r.method == "GET"]
        assert len(gets) == 3  # 221 comments, 100 per page
        assert [r.method for r in fake.writes()] == ["PATCH"] and fake.writes()[0].path.endswith(f"/{ours}")
        assert fake.comments[ours]["body"].endswith("new diff")


def test_separate_ids_and_pull_requests_get_separate_comments(tmp_path: Path) -> None:
    with FakeGitHub() as fake:
        assert post(fake, tmp_path, "training diff", "--id", "training") == 0
        assert post(fake, tmp_path, "inference diff", "--id", "inference") == 0
        assert post(fake, tmp_path, "training again", "--id", "training") == 0
        assert post(fake, tmp_path, "other PR", "--id", "training", number=8) == 0
        assert sorted(c["body"].split("\n")[1] for c in fake.on(7)) == ["inference diff", "training again"]
        assert len(fake.on(8)) == 1


def test_a_reply_quoting_the_comment_is_not_touched(tmp_path: Path) -> None:
    with FakeGitHub() as fake:
        quote = fake.add(7, f"> {pr_comment.marker()}\n> HEAD is 55% faster\nnice!")
        assert post(fake, tmp_path, "diff") == 0
        assert fake.comments[quote]["body"].endswith("nice!")
        assert [r.method for r in fake.writes()] == ["POST"]


def test_transient_errors_are_retried(tmp_path: Path) -> None:
    with FakeGitHub() as fake:
        fake.failures = [("GET", 502, {}, "Bad gateway"), ("POST", 429, {"Retry-After": "1"}, "slow down")]
        assert post(fake, tmp_path, "diff") == 0
        assert len(fake.on(7)) == 1


def test_a_forks_read_only_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeGitHub(writable=False) as fake:
        assert post(fake, tmp_path, "diff") == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: GitHub API POST /repos/octo/gpu-app/issues/7/comments: HTTP 403")
        assert "Resource not accessible by integration" in err and len(err.splitlines()) == 1
        assert post(fake, tmp_path, "diff", "--best-effort") == 0
        assert capsys.readouterr().err.startswith("::warning title=PR comment not posted::GitHub API POST")


def test_bad_setup_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeGitHub() as fake:
        body = tmp_path / "b.md"
        body.write_text("x")
        e = env(fake, tmp_path)
        e["GITHUB_TOKEN"] = "wrong"
        assert pr_comment.main(["--body-file", str(body)], env=e, sleep=lambda s: None) == 1
        assert "HTTP 401 Bad credentials" in capsys.readouterr().err
        e = env(fake, tmp_path)
        push = tmp_path / "push.json"
        push.write_text(json.dumps({"ref": "refs/heads/main"}))
        e["GITHUB_EVENT_PATH"] = str(push)
        assert pr_comment.main(["--body-file", str(body)], env=e) == 1
        assert "not a pull request" in capsys.readouterr().err
        assert pr_comment.main(["--body-file", str(body), "--id", "a b"], env=env(fake, tmp_path)) == 1
        assert "comment id" in capsys.readouterr().err
        assert not fake.writes()


def test_long_bodies_are_cut_to_the_comment_limit(tmp_path: Path) -> None:
    with FakeGitHub() as fake:
        assert post(fake, tmp_path, "x" * 70_000) == 0
        [c] = fake.on(7)
        assert len(c["body"]) <= pr_comment.MAX_BODY and "cut to fit" in c["body"]
