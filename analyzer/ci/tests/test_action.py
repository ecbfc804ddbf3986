"""The composite GitHub Action (``action.yml``) run step by step as the runner would: its shell steps with
the environment GitHub gives them (inputs through ``env:``, ``$GITHUB_OUTPUT``, ``$GITHUB_ENV``,
``$GITHUB_STEP_SUMMARY``), the pull-request comment going to a local server playing the GitHub API.

Not run: the ``uses:`` steps (actions/setup-python, actions/upload-artifact: GitHub's own) and the
install step (a ``pip install`` of this repository; the test runs with the analyzer already installed).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from analyzer.ci.tests.fake_github import BOT, TOKEN, FakeGitHub
from analyzer.testing import real_trace

REPO = Path(__file__).resolve().parents[3]
ACTION = REPO / "action.yml"
_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def load_action() -> dict[str, Any]:
    with open(ACTION, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def test_action_is_a_composite_with_documented_inputs() -> None:
    action = load_action()
    assert action["runs"]["using"] == "composite"
    assert {"base", "head", "fail-on-regression", "comment", "github-token"} <= set(action["inputs"])
    text = ACTION.read_text()
    for name in action["inputs"]:
        assert f"inputs.{name}" in text, f"input {name} is never used"
    # inputs reach scripts through env: only (never spliced into the script text: no injection)
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step["name"]


class Runner:
    """Runs the composite's steps: evaluates ``${{ }}`` in ``env``/``if``/``with`` from the contexts."""

    def __init__(self, inputs: dict[str, str], event_name: str, workdir: Path, env: dict[str, str]) -> None:
        action = load_action()
        self.steps = action["runs"]["steps"]
        self.inputs = {k: str(v.get("default", "")) for k, v in action["inputs"].items()}
        self.inputs["github-token"] = TOKEN
        self.inputs.update(inputs)
        self.event_name = event_name
        self.outputs: dict[str, dict[str, str]] = {}
        self.workdir = workdir
        self.base_env = env
        self.github_env: dict[str, str] = {"GPU_TRACE_ANALYZER_BIN": str(Path(sys.executable).parent)}
        self.summary = workdir / "summary.md"
        self.ran: list[str] = []
        self.failed: tuple[str, int] | None = None
        self.stdout = ""

    def value(self, expr: str) -> str:
        if expr.startswith("inputs."):
            return self.inputs[expr[len("inputs."):]]
        if expr == "github.action_path":
            return str(REPO)
        if expr == "github.token":
            return TOKEN
        if expr == "github.event_name":
            return self.event_name
        m = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expr)
        if m:
            return self.outputs.get(m.group(1), {}).get(m.group(2), "")
        raise AssertionError(f"unknown expression {expr!r}")

    def render(self, text: str) -> str:
        return _EXPR.sub(lambda m: self.value(m.group(1)), text)

    def condition(self, expr: str) -> bool:
        # the grammar used in action.yml: a == 'x', a != '', &&, ||, parentheses
        py = re.sub(r"[a-z_]+(?:\.[\w-]+)+", lambda m: repr(self.value(m.group(0))), expr)
        py = py.replace("&&", " and ").replace("||", " or ")
        return bool(eval(py, {"__builtins__": {}}, {}))  # our own action.yml, not user input

    def run(self) -> Runner:
        for step in self.steps:
            name = step["name"]
            if self.failed:
                break  # later steps run only on success (none use always())
            if "if" in step and not self.condition(step["if"]):
                continue
            if "uses" in step or name == "Install the analyzer":
                continue
            out_file = self.workdir / f"out-{len(self.ran)}.txt"
            env_file = self.workdir / f"env-{len(self.ran)}.txt"
            out_file.write_text("")
            env_file.write_text("")
            env = {**self.base_env, **self.github_env,
                   **{k: self.render(str(v)) for k, v in step.get("env", {}).items()},
                   "GITHUB_OUTPUT": str(out_file), "GITHUB_ENV": str(env_file),
                   "GITHUB_STEP_SUMMARY": str(self.summary), "RUNNER_TEMP": str(self.workdir)}
            proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], env=env, cwd=self.workdir,
                                  capture_output=True, text=True, timeout=600, check=False)
            self.ran.append(name)
            self.stdout += proc.stdout
            if "id" in step:
                pairs = (line.partition("=") for line in out_file.read_text().splitlines())
                self.outputs[step["id"]] = {k: v for k, sep, v in pairs if sep}
            for line in env_file.read_text().splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    self.github_env[key] = value
            if proc.returncode:
                self.failed = (name, proc.returncode)
                self.stderr = proc.stderr
        return self


@pytest.fixture()
def github(tmp_path: Path):
    with FakeGitHub() as fake:
        event = tmp_path / "event.json"
        event.write_text(json.dumps({"pull_request": {"number": 12}}))
        yield fake, {
            "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp_path)),
            "GITHUB_API_URL": fake.url, "GITHUB_REPOSITORY": fake.repo, "GITHUB_EVENT_PATH": str(event),
            "PYTHONPATH": str(REPO),
        }


def test_pull_request_run_comments_once_and_keeps_the_reports(tmp_path: Path, github: Any) -> None:
    fake, env = github
    inputs = {"base": str(real_trace("dataloader_starved")), "head": str(real_trace("dataloader_starved_fixed")),
              "fail-on-regression": "5%"}
    r = Runner(inputs, "pull_request", tmp_path, env).run()
    assert r.failed is None, r.failed
    assert r.ran == ["Diff", "Comment on the pull request", "Gate"]
    out = r.outputs["diff"]
    assert out["status"] == "faster" and out["regression"] == "false" and out["exit-code"] == "0"
    assert out["verdict"].startswith("HEAD is 55% faster per step")
    report_dir = Path(out["report-dir"])
    assert {p.name for p in report_dir.iterdir()} >= {"diff.md", "diff.html", "diff.json"}
    assert r.summary.read_text().startswith("# GPU trace diff")
    [comment] = fake.on(12)
    assert comment["user"] == BOT and "HEAD is 55% faster" in comment["body"]
    # pushed again: the same comment is updated, not duplicated
    r2 = Runner(inputs, "pull_request", tmp_path / "again", env)
    (tmp_path / "again").mkdir()
    assert r2.run().failed is None
    assert len(fake.on(12)) == 1 and [w.method for w in fake.writes()] == ["POST", "PATCH"]


def test_regression_fails_the_job_after_commenting(tmp_path: Path, github: Any) -> None:
    fake, env = github
    inputs = {"base": str(real_trace("dataloader_starved_fixed")), "head": str(real_trace("dataloader_starved")),
              "fail-on-regression": "5"}
    r = Runner(inputs, "pull_request", tmp_path, env).run()
    assert r.failed == ("Gate", 1)
    assert r.outputs["diff"]["regression"] == "true" and r.outputs["diff"]["status"] == "slower"
    assert "::error title=GPU step-time regression::HEAD is 2.2x slower per step" in r.stdout
    [comment] = fake.on(12)
    assert "new: low-gpu-utilization, gpu-idle-gaps" in comment["body"]


def test_push_event_does_not_comment_and_bad_input_fails(tmp_path: Path, github: Any) -> None:
    fake, env = github
    good = str(real_trace("dataloader_starved"))
    r = Runner({"base": good, "head": good, "args": "--window 'step_*'"}, "push", tmp_path, env).run()
    assert r.failed is None and "Comment on the pull request" not in r.ran and not fake.requests
    missing = tmp_path / "nope.sqlite"
    (tmp_path / "b").mkdir()
    r = Runner({"base": str(missing), "head": good}, "pull_request", tmp_path / "b", env).run()
    assert r.failed == ("Diff", 2) and "no such file" in r.stdout + r.stderr
    assert not fake.requests


def test_job_diff_in_the_comment_and_the_gate(tmp_path: Path, github: Any) -> None:
    """Two multi-GPU jobs, each given as a glob of its rank files (torch.profiler, tests/data/ddp/kineto):
    the comment carries the job diff (the straggler, the per-rank table) and the gate fails on the job's
    slower step."""
    from analyzer.testing import DATA_DIR

    kineto = DATA_DIR / "ddp" / "kineto"
    if not list(kineto.glob("ddp_straggler_2gpu_rank*.pt.trace.json.xz")):
        pytest.skip("tests/data/ddp/kineto not here")
    fake, env = github
    inputs = {"base": str(kineto / "ddp_straggler_fixed_2gpu_rank*.pt.trace.json.xz"),
              "head": str(kineto / "ddp_straggler_2gpu_rank*.pt.trace.json.xz"), "fail-on-regression": "5%"}
    r = Runner(inputs, "pull_request", tmp_path, env).run()
    assert r.failed == ("Gate", 1), (r.failed, r.stdout)
    assert r.outputs["diff"]["regression"] == "true"
    [comment] = fake.on(12)
    body = comment["body"]
    assert "job: new straggler: the others wait 33.6 ms per step for rank 1 in HEAD" in body
    assert "## Job: per rank, per step (2 ranks \u2192 2)" in body and "| Rank | Step BASE | Step HEAD |" in body
