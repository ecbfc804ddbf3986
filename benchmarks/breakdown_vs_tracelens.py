"""Cross-check of the ``timeline_breakdown`` busy/idle split against TraceLens' GPU timeline.

    python benchmarks/breakdown_vs_tracelens.py            # print the table
    python benchmarks/breakdown_vs_tracelens.py --write    # and write docs/breakdown-vs-tracelens.md
    python benchmarks/breakdown_vs_tracelens.py --check    # exit 1 when the file differs from the table

Run from the repository root (the checkout's ``analyzer`` is imported). TraceLens' numbers are not
computed here: they are TraceLens' own ``gpu_timeline.csv`` reports, committed in its repository next to
the traces we copied into ``tests/data/public/`` (:data:`TRACELENS`: the report's path at
AMD-AGI/TraceLens @ 171dd74721ca, and its rows in ms as written). TraceLens is not installed.

TraceLens' GPU timeline (``TraceLens.PerfModel``/``TreePerfAnalyzer.get_df_gpu_timeline``) takes the GPU
events it links to a CPU launch, over the span from the first one's start to the last one's end:
``computation_time`` = the union of the non-communication kernels, ``exposed_comm_time`` = communication
kernels with no computation beside them, ``exposed_memcpy_time`` = copies and memsets with neither,
``idle_time`` = the rest. Ours (``timeline_segments`` of the ``full`` window: the whole GPU activity
span) partitions the same way (``compute``, ``exposed_comm``, ``exposed_copy``, and idle = every other
cause) with two differences of definition, both shown in the table:

* ours counts the time between two kernels of one CUDA graph replay as ``compute`` (detail ``CUDA graph
  (between nodes)``: the graph's own GPU time, as nsys' graph-level trace counts it); TraceLens sees each
  kernel of the replay alone, so that time is its idle. We compare ``compute - graph node gaps`` with
  its computation and ``idle + graph node gaps`` with its idle;
* ours keeps GPU operations whose launch call the trace lacks (ROCm's tracer records ops queued before
  the profiler's CPU side started: the first 968 ops, 30 ms, of the ResNet rank-0 trace); TraceLens
  drops them and its span starts later. Such traces are listed with both totals and not compared.

Tolerance: TraceLens parses timestamps as float64 microseconds and writes ms with float noise; we keep
exact integer nanoseconds. :data:`TOL_MS` per quantity (1 us) covers it on these traces.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._docfile import doc_main  # noqa: E402

PUBLIC = ROOT / "tests" / "data" / "public"
DOC = ROOT / "docs" / "breakdown-vs-tracelens.md"
#: largest accepted |ours - TraceLens| per quantity, ms
TOL_MS = 0.001
#: our trace file -> (TraceLens' report at AMD-AGI/TraceLens @ 171dd74721ca, its rows in ms:
#: computation_time, exposed_comm_time, exposed_memcpy_time, idle_time, total_time)
TRACELENS: dict[str, tuple[str, tuple[float, float, float, float, float]]] = {
    "tracelens_bert_small_mi300x.pt.trace.json.xz": (
        "tests/traces/mi300/gaunernst_bert-small-uncased__1016001_perf_report_csvs/gpu_timeline.csv",
        (0.3883447265625, 0.0, 0.00240380859375, 3.1052275390625, 3.49597607421875)),
    "tracelens_vit_nsfw_mi300x.pt.trace.json.xz": (
        "tests/traces/mi300/Falconsai_nsfw_image_detection__1016002_perf_report_csvs/gpu_timeline.csv",
        (1.716298828125, 0.0, 0.0, 5.15255029296875, 6.86884912109375)),
    "tracelens_gpu_only_mi210.pt.trace.json.xz": (
        "tests/traces/mi210/gpu_only_trace/gpu_only_trace_perf_report_csvs/gpu_timeline.csv",
        (5.3433701171875, 0.0, 0.0, 0.6361328125, 5.9795029296875)),
    "tracelens_sglang_decode_mi300x.pt.trace.json.xz": (
        "tests/traces/inference/sglang_decode/perf_csvs/gpu_timeline.csv",
        (9.759751953125, 0.0, 0.0131767578125, 463.9770146484375, 473.749943359375)),
    "tracelens_sglang_prefill_mi300x.pt.trace.json.xz": (
        "tests/traces/inference/sglang_prefilldecode/perf_csvs/gpu_timeline.csv",
        (492.76889453125, 0.0, 0.0379697265625, 494.4820224609375, 987.28888671875)),
    "tracelens_vllm_decode_graph_mi300x.pt.trace.json.gz": (
        "tests/traces/inference/vllm_decode_full/perf_csvs/gpu_timeline.csv",
        (10.6745068359375, 0.0, 0.0431904296875, 0.025484375, 10.743181640625)),
    "tracelens_vllm_piecewise_mi300x.pt.trace.json.xz": (
        "tests/traces/inference/vllm_prefilldecode_piecewise/perf_csvs/gpu_timeline.csv",
        (156.0084013671875, 0.0, 0.0773974609375, 0.3806171875, 156.466416015625)),
    "tracelens_xdit_flux_mi300x.pt.trace.json.xz": (
        "tests/traces/inference/xdit_flux.1_aiter_sage/perf_csvs/gpu_timeline.csv",
        (201.15163330078124, 0.0, 0.20012255859375, 25.243927734375, 226.59568359375)),
    "tracelens_torch_compile_mi300x.pt.trace.json.gz": (
        "tests/traces/torch_compile_triton/trace_perf_report_csvs/gpu_timeline.csv",
        (12.54902099609375, 0.0, 0.0, 1.123046875e-05, 12.5490322265625)),
    # TraceLens' report splits this one by activation recompute; its non-recompute total (56.52 ms) is
    # the span of the ops whose launch call is in the trace
    "tracelens_resnet_act_checkpoint_mi300x.pt.trace.json.xz": (
        "tests/traces/mi300/resnet_act_checkpoint_recompute_perf_report_csvs/gpu_timeline.csv",
        (15.11189404296875, 38.3431845703125, 1.5836318359375, 1.478892578125, 56.51760302734375)),
}
QUANTITIES = ("compute", "exposed_comm", "exposed_copy", "idle", "total")
BUSY = ("compute", "exposed_comm", "exposed_copy")


@dataclass(frozen=True)
class Row:
    trace: str
    tracelens: tuple[float, ...]  # ms, in QUANTITIES order
    ours: tuple[float, ...]  # ms, in QUANTITIES order, graph node gaps moved from compute to idle
    graph_gaps_ms: float
    unlaunched_ops: int  # GPU operations whose launch call the trace lacks (TraceLens drops them)

    @property
    def comparable(self) -> bool:
        return self.unlaunched_ops == 0

    def differences(self) -> tuple[float, ...]:
        return tuple(o - t for o, t in zip(self.ours, self.tracelens))


def measure(name: str) -> Row:
    from analyzer.facts import FactStore, load_all
    from analyzer.facts.breakdown import GRAPH_NODE_GAPS
    from analyzer.loading import load_trace
    from analyzer.window import choose_window

    trace = load_trace(PUBLIC / name)
    load_all()
    seg = FactStore(trace, choose_window(trace, "full"), {}).get("timeline_segments")
    dur = (seg["end"] - seg["start"]).to_numpy()
    cause = seg["cause"].astype(str).to_numpy()
    per = {c: float(dur[cause == c].sum()) / 1e6 for c in BUSY}
    total = float(dur.sum()) / 1e6
    gaps = float(dur[(cause == "compute") & (seg["detail"].astype(str) == GRAPH_NODE_GAPS).to_numpy()].sum()) / 1e6
    idle = total - sum(per.values())
    ours = (per["compute"] - gaps, per["exposed_comm"], per["exposed_copy"], idle + gaps, total)
    unlaunched = sum(int((f["api_name"].astype(str) == "").sum()) for f in (trace.kernels, trace.memcpy, trace.memset))
    return Row(name.split(".")[0], TRACELENS[name][1], ours, gaps, unlaunched)


def rows() -> list[Row]:
    return [measure(name) for name in TRACELENS if (PUBLIC / name).is_file()]


def table(rs: list[Row]) -> str:
    lines = [
        "# Timeline breakdown vs TraceLens' GPU timeline",
        "",
        "Generated by `python benchmarks/breakdown_vs_tracelens.py --write` (definitions and tolerance: that",
        "script's docstring; checked by `tests/test_breakdown_vs_tracelens.py`). Public ROCm torch.profiler",
        "traces (`tests/data/public/`); TraceLens' numbers are its own `gpu_timeline.csv` reports on the same",
        "traces, committed in AMD-AGI/TraceLens @ 171dd74721ca. Ours: the `full` window (whole GPU activity",
        "span); the time between the kernels of one graph replay moved from our compute to idle, as TraceLens",
        "counts it. Times in ms, TraceLens / ours.",
        "",
        "| trace | compute | exposed comm | exposed copy | idle | total | our graph node gaps | ops without launch call |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rs:
        cells = [f"{t:,.3f} / {o:,.3f}" for t, o in zip(r.tracelens, r.ours)]
        note = f"{r.unlaunched_ops:,} (TraceLens drops them: not compared)" if r.unlaunched_ops else "0"
        lines.append(f"| {r.trace} | " + " | ".join(cells) + f" | {r.graph_gaps_ms:,.3f} | {note} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return doc_main(argv, description=__doc__.split("\n\n")[0], doc=DOC, script="benchmarks/breakdown_vs_tracelens.py",
                    make_text=lambda: table(rows()))


if __name__ == "__main__":
    sys.exit(main())
