"""Jobs on Dask never hang (issue 34): the same report as the serial path on one local worker process,
only plain summaries travel, and a task that raises, a result or argument that cannot be serialized, a
worker that dies between the phases and a cluster where nothing finishes each end in one line, quickly.

Real jobs: the 2-GPU DDP straggler (tests/data/ddp, both layouts) and PARAM's 8-rank DLRM
(tests/data/public/param_dlrm_8rank, torch.profiler). One local cluster of one worker (processes) per
module; the test that kills a worker starts its own.
"""
from __future__ import annotations

import difflib
import json
import os
import pickle
import signal
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from analyzer.errors import ClusterError
from analyzer.pipeline import AnalysisOptions, analyze_inputs
from analyzer.testing import DATA_DIR

distributed = pytest.importorskip("distributed")

WHEN = datetime(2026, 1, 1, tzinfo=timezone.utc)
JOBS = {
    "ddp rank files": ("ddp", "ddp_straggler_2gpu_rank*.sqlite.xz"),
    "ddp one report": ("ddp", "ddp_straggler_2gpu.sqlite.xz"),
    "param dlrm 8 ranks": ("public", "param_dlrm_8rank"),
}
#: a failure must end the run well before any default time limit (seconds, on a loaded 2-core machine)
QUICK_S = 60


def _paths(name: str) -> list[Path]:
    folder, pattern = JOBS[name]
    paths = sorted((DATA_DIR / folder).glob(pattern))
    if not paths:
        pytest.skip(f"no {pattern} in {DATA_DIR / folder} (see tests/data/MANIFEST.md)")
    return paths


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=50) as cluster, distributed.Client(cluster) as c:
        yield c


@pytest.mark.parametrize("name", JOBS)
def test_one_worker_gives_the_serial_report(client, name):
    from analyzer.reports import render
    from analyzer.reports.jobview import build_job_report

    serial = analyze_inputs(_paths(name), AnalysisOptions())
    dask = analyze_inputs(_paths(name), AnalysisOptions(), scheduler=client)
    assert serial.job is not None and dask.job is not None
    assert dask.job.world_size == serial.job.world_size >= 2
    for fmt in ("md", "json", "html"):
        ours, theirs = (render(build_job_report(o.job, created=WHEN), fmt) for o in (dask, serial))
        diff = list(difflib.unified_diff(theirs.splitlines(), ours.splitlines(), "serial", "dask", n=0, lineterm=""))
        assert not diff, "\n".join(diff[:30])
    # what came back from the worker is plain data: no trace, fact store or lock anywhere inside
    for r in dask.job.ranks:
        _assert_plain(r.summary)
        _assert_plain(r)


def test_inputs_that_are_not_one_job_give_the_serial_reports(client):
    """Two single-GPU runs and an Nsight Compute export among the inputs: Dask finds no job, and each
    trace is analyzed on its own where it was prepared, with the ncu data the inputs gave (sent to the
    workers), as the serial path does: the same report, and the client process never loads a trace
    (it analyzed every input again itself before)."""
    from analyzer.api import AnalysisResult
    from analyzer.facts import FactStore
    from analyzer.loading.model import Trace
    from analyzer.reports import render
    from analyzer.testing import real_file, real_trace

    inputs = [real_trace("naive_attention"), real_trace("tiny_kernels"), real_file("ncu/naive_attention.raw.csv")]
    serial = analyze_inputs(inputs, AnalysisOptions())
    before = (_live(Trace), _live(FactStore))
    dask = analyze_inputs(inputs, AnalysisOptions(), scheduler=client)
    assert (_live(Trace), _live(FactStore)) == before
    assert serial.job is None and len(serial.analyses or ()) == 2 and (serial.analyses or [])[0].ncu is not None
    assert dask.job is None and dask.analyses is None and len(dask.alone or ()) == 2
    _assert_plain(dask.alone)
    assert [f.key for f in dask.findings] == [f.key for f in serial.findings]
    for fmt in ("md", "json"):
        ours, theirs = (render(AnalysisResult(o, created=WHEN).report(), fmt) for o in (dask, serial))
        diff = list(difflib.unified_diff(theirs.splitlines(), ours.splitlines(), "serial", "dask", n=0, lineterm=""))
        assert not diff, "\n".join(diff[:30])
    assert "ncu" in json.loads(render(AnalysisResult(dask, created=WHEN).report(), "json"))["traces"][0]["overview"]


def test_accepted_findings_of_inputs_analyzed_on_dask(client, tmp_path):
    """Every finding of two traces analyzed on Dask (not one job) recorded, then marked as accepted in
    the sections the workers built."""
    from analyzer.accepted import load_accepted, write_accepted
    from analyzer.api import AnalysisResult
    from analyzer.reports import render
    from analyzer.testing import real_trace

    inputs = [real_trace("naive_attention"), real_trace("tiny_kernels")]
    dask = analyze_inputs(inputs, AnalysisOptions(), scheduler=client)
    path = tmp_path / "accepted.yaml"
    assert write_accepted(path, dask.finding_sources(), None) > 0
    dask.mark_accepted(load_accepted(path))
    assert all(not f.counts for f in dask.findings)
    doc = json.loads(render(AnalysisResult(dask, created=WHEN).report(), "json"))
    assert all(t["summary"]["accepted"] == t["findings_total"] > 0 for t in doc["traces"])


def _live(kind: type) -> int:
    """How many objects of ``kind`` this process holds (after a collection)."""
    import gc

    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, kind))


def test_the_client_holds_summaries_only(client):
    """A job of 8 real ranks (PARAM's DLRM) on Dask, 3 shown in full (``--rank-sections 3``): the client
    process gains no trace and no fact store (they stay on the worker), the outcome is plain data, the
    5 other ranks come back without a report section or swimlanes, only the reference rank keeps its
    communication kernels, and the report shows 3 rank sections and all 8 rows; the serial path gives
    the same bytes."""
    from analyzer.facts import FactStore
    from analyzer.loading.model import Trace
    from analyzer.reports import render
    from analyzer.reports.jobview import build_job_report
    from analyzer.reports.viewmodel import TraceSection

    paths = _paths("param dlrm 8 ranks")
    options = AnalysisOptions(rank_sections=3)
    before = (_live(Trace), _live(FactStore), _live(TraceSection))
    dask = analyze_inputs(paths, options, scheduler=client)
    assert (_live(Trace), _live(FactStore), _live(TraceSection)) == before
    serial = analyze_inputs(paths, options)
    for outcome in (dask, serial):
        job = outcome.job
        assert job is not None and len(job.ranks) == 8
        full = [r.rank for r in job.ranks if r.full]
        assert len(full) == 3
        assert all(not any(r.lanes.values()) for r in job.ranks if not r.full)
        assert [r.rank for r in job.ranks if len(r.summary.comm)] == [min(job.offsets)]
        assert all(r.lateness.empty for r in job.ranks)  # the job's lateness table holds them
        _assert_plain(job)
        report = build_job_report(job, created=WHEN)
        assert len(report.traces) == 3 and report.job.record["ranks_in_full"] == full
        assert len(report.job.record["ranks"]) == 8 and len(report.job.lanes) == 3
        assert any("3 of 8 ranks shown in full" in n for n in report.job.notes)
    assert [r.rank for r in dask.job.ranks if r.full] == [r.rank for r in serial.job.ranks if r.full]
    for fmt in ("md", "json", "html"):
        ours, theirs = (render(build_job_report(o.job, created=WHEN), fmt) for o in (dask, serial))
        assert ours == theirs, fmt


class _Plain(pickle.Pickler):
    def reducer_override(self, obj):  # noqa: ANN001, ANN201
        from analyzer.facts import FactStore
        from analyzer.loading.model import Trace

        if isinstance(obj, (Trace, FactStore)) or type(obj).__name__ in ("RLock", "lock"):
            raise AssertionError(f"{type(obj).__name__} inside a Dask result")
        return NotImplemented


def _assert_plain(obj: object) -> None:
    import io

    _Plain(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL).dump(obj)


def test_a_task_that_raises_is_one_line(client, tmp_path, capsys):
    """A rank file cut short: its phase-1 task raises on the worker; the run ends with that file's own
    message (and the CLI with one line, exit 2)."""
    from analyzer.cli import main

    good, other = _paths("ddp rank files")
    bad = tmp_path / other.name
    bad.write_bytes(other.read_bytes()[: 2000])
    t = time.monotonic()
    with pytest.raises(ClusterError) as err:
        analyze_inputs([good, bad], AnalysisOptions(), scheduler=client)
    assert bad.name in str(err.value) and "\n" not in str(err.value)
    capsys.readouterr()
    rc = main([str(good), str(bad), "--scheduler", client.scheduler.address, "-q", "-o", str(tmp_path / "x.md")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and bad.name in lines[0], lines
    assert time.monotonic() - t < QUICK_S


def test_what_cannot_be_serialized_is_one_line(client):
    from analyzer.job.remote import wait_for
    from analyzer.job.run import analyze_job

    t = time.monotonic()
    # a task result holding a lock (what a task result holding a whole trace did)
    future = client.submit(threading.RLock, pure=False)
    with pytest.raises(ClusterError, match="lock") as err:
        wait_for(client, [future], lambda i: "returning a lock", stall_s=QUICK_S)
    assert "\n" not in str(err.value)
    # an argument holding a lock: refused when sent, before anything waits
    with pytest.raises(ClusterError, match="could not be sent"):
        analyze_job(_paths("ddp rank files"), AnalysisOptions(fact_options={"lock": threading.RLock()}),
                    scheduler=client)
    assert time.monotonic() - t < QUICK_S


def test_nothing_finishing_is_one_line_after_the_time_limit(client, monkeypatch):
    from analyzer.job.remote import TIMEOUT_ENV, stall_timeout, wait_for

    monkeypatch.setenv(TIMEOUT_ENV, "1")
    assert stall_timeout() == 1.0
    future = client.submit(time.sleep, 30, pure=False)
    t = time.monotonic()
    with pytest.raises(ClusterError, match=r"no Dask task finished in 1 s, still sleeping; 1 of 1 task\(s\) pending"):
        wait_for(client, [future], lambda i: "sleeping", stall_s=stall_timeout())
    assert time.monotonic() - t < 10
    future.cancel()
    monkeypatch.setenv(TIMEOUT_ENV, "soon")
    with pytest.raises(ClusterError, match=TIMEOUT_ENV):
        stall_timeout()
    monkeypatch.delenv(TIMEOUT_ENV)
    assert stall_timeout(AnalysisOptions(timeout=7200)) == 7200 and stall_timeout() == 600


def test_a_scheduler_that_stops_answering_is_not_waited_for(client, monkeypatch):
    """Which workers are alive is asked of the scheduler within a time limit: a scheduler that keeps
    its connection open but never answers leaves the decision to the stall timeout, never blocks it."""
    import asyncio

    from analyzer.job import remote

    assert remote._alive(client) == set(client.scheduler_info()["workers"])

    async def never(**_kw):  # noqa: ANN202
        await asyncio.sleep(3600)

    monkeypatch.setattr(remote, "ASK_S", 0.5)
    monkeypatch.setattr(client.scheduler, "identity", never, raising=False)
    t = time.monotonic()
    assert remote._alive(client) is None and remote._paused(client) == []
    assert time.monotonic() - t < 10


def test_a_worker_killed_between_the_phases_is_one_line(tmp_path):
    """The worker holding the ranks' traces dies after phase 1 (SIGKILL, as the kernel's OOM killer
    does): the run ends at once naming it, instead of waiting for phase-2 tasks no worker can run."""
    paths = _paths("ddp rank files")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=50) as cluster, distributed.Client(cluster) as c:
        pids = c.run(os.getpid)

        def kill_between_phases(note: str) -> None:
            if "matching collectives" in note:
                for pid in pids.values():
                    os.kill(pid, signal.SIGKILL)

        t = time.monotonic()
        with pytest.raises(ClusterError, match="left") as err:
            analyze_inputs(paths, AnalysisOptions(), scheduler=c, progress=kill_between_phases)
        assert "\n" not in str(err.value) and "ddp_straggler_2gpu_rank" in str(err.value)
        assert time.monotonic() - t < QUICK_S


def test_a_worker_over_its_memory_limit_is_one_line_from_the_cli(tmp_path):
    """``analyze rank*.sqlite --scheduler local``, with Dask configured (its own environment variables)
    to kill a worker above 190 MB (an idle worker holds about 100 MB; preparing a DDP rank takes more)
    and to give up on a task at the first death: the worker dies while preparing a rank; the command
    prints one line and exits 2."""
    import subprocess
    import sys

    from distributed.system import MEMORY_LIMIT  # a local worker's limit: this machine's memory

    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0",
           "DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE": f"{190e6 / MEMORY_LIMIT:.6f}",
           "ANALYZER_DASK_TIMEOUT": str(QUICK_S)}
    env.pop("ANALYZER_DEBUG", None)
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "analyzer.cli", *map(str, _paths("ddp rank files")),
                           "--scheduler", "local", "--workers", "1", "-q", "-o", str(tmp_path / "job.md")],
                          capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[1],
                          timeout=2 * QUICK_S)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    # which phase the limit catches (a rank's preparation or its finishing pass) depends on when the
    # nanny's memory check runs: either is one line naming the rank
    assert lines[0].startswith(("error: a Dask worker died while preparing ddp_straggler_2gpu_rank",
                                "error: a Dask worker died while finishing ddp_straggler_2gpu_rank")), lines
    assert not (tmp_path / "job.md").exists() and time.monotonic() - t < QUICK_S + 30
