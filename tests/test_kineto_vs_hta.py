"""Our numbers on the committed torch.profiler GPU traces agree with Holistic Trace Analysis (HTA).

Per rank: HTA's temporal breakdown (idle, compute, non-compute and kernel time), kernel time per kernel
type (COMPUTATION, COMMUNICATION, MEMORY) and per kernel name, computed by HTA (the ``hta`` extra,
test-only) and from our loader's trace; see ``benchmarks/hta_crosscheck.py`` for the definitions, and
for the tolerance: exact for integer-microsecond traces, 1 ns per GPU operation for nanosecond traces
(HTA holds timestamps as float64 microseconds, we parse the text to integer nanoseconds; HTA's default
rounding of ns traces to whole microseconds is switched off for the comparison).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("hta")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.hta_crosscheck import check_traces, jobs_in  # noqa: E402

KINETO = REPO / "tests" / "data" / "kineto"
# a representative subset (every file of tests/data/kineto agrees: python benchmarks/hta_crosscheck.py
# tests/data/kineto/*.json.* tests/data/ddp/kineto): the biggest trace (host_sync, 56k ranges), one with
# idle gaps, a gzipped one written by torch itself, the transformer with its autograd thread
SUBSET = ("host_sync.pt.trace.json.xz", "dataloader_starved.pt.trace.json.xz", "alloc_churn.pt.trace.json.gz",
          "small_training_ctx128.pt.trace.json.xz")
GPU_TRACES = [KINETO / n for n in SUBSET if (KINETO / n).is_file()]
DDP = REPO / "tests" / "data" / "ddp" / "kineto"
JOBS = jobs_in(DDP.glob("*.json*")) if DDP.is_dir() else {}


@pytest.mark.slow
@pytest.mark.parametrize("trace", GPU_TRACES, ids=[p.name.split(".")[0] for p in GPU_TRACES])
def test_single_rank_agrees_with_hta(trace):
    diffs = check_traces([trace])
    bad = [d for d in diffs if not d.ok]
    assert diffs and not bad, "\n".join(
        f"rank {d.rank} {d.quantity}: ours {d.ours_us:.3f} us, HTA {d.hta_us:.3f} us (tolerance {d.tolerance_us})"
        for d in bad)


@pytest.mark.slow
@pytest.mark.parametrize("job", sorted(JOBS))
def test_rank_traces_of_a_job_agree_with_hta(job):
    files = JOBS[job]
    if len(files) < 2:
        pytest.skip("fewer than two rank traces")
    diffs = check_traces(files)
    assert {d.rank for d in diffs} == set(range(len(files)))
    bad = [d for d in diffs if not d.ok]
    assert not bad, "\n".join(f"rank {d.rank} {d.quantity}: ours {d.ours_us:.3f}, HTA {d.hta_us:.3f}" for d in bad)

