"""Cross-check of the ``timeline_breakdown`` idle causes against HTA's idle-time breakdown.

    python benchmarks/breakdown_vs_hta.py            # print the table
    python benchmarks/breakdown_vs_hta.py --write    # and write docs/breakdown-vs-hta.md
    python benchmarks/breakdown_vs_hta.py --check    # exit 1 when the file differs from the table

Run from the repository root (the checkout's ``analyzer`` is imported). Traces: the round-3
torch.profiler pairs (``tests/data/round3/*.pt.trace.json.gz`` of :data:`PAIRS`), then the public ROCm
traces of :data:`PUBLIC_TRACES` (MI250, MI210, MI300X; ``.xz`` ones decompressed for HTA); one HTA cannot
parse is listed as skipped.

HTA (``TraceAnalysis.get_idle_time_breakdown``) works per CUDA stream: over the stream's span (first op
start to last op end, of the kernels, copies and memsets whose launching call is in the trace and, with
two ProfilerStep ranges or more, launched before the last one: HTA drops the last step) each gap between
consecutive ops is ``host_wait`` when the next op's launch call *started* after the gap began, else
``kernel_wait`` when the gap is under 30 us, else ``other``. Ours partitions a device's window by cause.

To make the definitions coincide we restrict **ours to HTA's span** (not HTA's to ours: HTA returns
stream totals, not intervals, so its numbers cannot be clipped). The fact is computed with the ``full``
window (the whole GPU activity span, which contains HTA's) and its ``timeline_segments`` are clipped to
the *compute stream*'s span (the stream with the most op time), found from our loaded trace with HTA's op
rule above; the op count per stream must equal HTA's, so both sides look at the same ops.

* **idle**: ours = span time not ``compute`` / ``exposed_copy`` / ``exposed_comm``, plus the ``compute``
  time between two kernels of one CUDA graph execution (detail ``CUDA graph (between nodes)``: ours counts a
  graph execution busy from its first kernel to its last, as nsys' graph-level trace does; HTA sees each
  kernel of a replay on its own, so the gaps between them are its ``kernel_wait``); HTA = the compute
  stream's host_wait + kernel_wait + other. With one stream they are the same quantity (the device is idle
  exactly when its only stream is): agreement within 1 ns per op (float64 microseconds in HTA, see
  ``benchmarks/hta_crosscheck.py``). With several streams ours counts the device idle only when *no*
  stream runs, so ours <= HTA's (the other streams fill some of the compute stream's gaps).
* **host share** (of idle): ours = ``launch_bound + host_sync + host_work`` over our idle time less
  ``setup`` (with the ``full`` window, the time before the first detected step, the warmup step
  included, is ``setup`` and not classified further, so it cannot be compared); HTA = ``host_wait`` over
  its idle total (warmup included: the warmup step's gaps are the same kind as the later steps'). They
  cannot coincide exactly: HTA gives a whole gap to the host when the next launch call began inside it;
  we split the gap: up to the launch call's start is host time (dispatch, host work or a sync), inside
  the call and its launch latency is ``launch_bound``, and a tail longer than ``dispatch_gap_ns`` after
  the submission is ``wait_other``; a gap whose next launch call began before it is HTA's ``other`` or
  ``kernel_wait`` but ours ``launch_bound`` while the call is still running (a slow or blocking launch).
  HTA's ``kernel_wait`` and ``other`` have no one counterpart: ours puts that time in ``launch_bound``
  (launch latency, a call still running) or ``wait_other`` (work queued behind another stream or an
  event). So we check (a) per trace: the host shares within :data:`SHARE_TOL` on single-stream traces
  (with several streams HTA's stream gaps include time another stream filled, ours does not); (b) per
  pair whose HTA shares differ by more than :data:`ORDER_MIN_GAP`: the pathology's host share ranks
  against its twin's the same way in both tools (closer pairs can swap within the tolerance).
"""
from __future__ import annotations

import logging
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._docfile import doc_main  # noqa: E402

ROUND3 = ROOT / "tests" / "data" / "round3"
DOC = ROOT / "docs" / "breakdown-vs-hta.md"
PAIRS = ("decode_eager", "optimizer_loop", "host_work_in_range", "copy_on_compute_stream", "host_sync_balanced")
PUBLIC = ROOT / "tests" / "data" / "public"
#: public ROCm torch.profiler traces recorded by others (tests/data/MANIFEST.md), after the round-3 pairs
PUBLIC_TRACES = (
    "hta_mi250_minitoy_rocm62.pt.trace.json.gz", "tracelens_gpu_only_mi210.pt.trace.json.xz",
    "tracelens_bert_small_mi300x.pt.trace.json.xz", "tracelens_vit_nsfw_mi300x.pt.trace.json.xz",
    "tracelens_sglang_decode_mi300x.pt.trace.json.xz", "tracelens_sglang_prefill_mi300x.pt.trace.json.xz",
    "tracelens_vllm_decode_graph_mi300x.pt.trace.json.gz", "tracelens_vllm_piecewise_mi300x.pt.trace.json.xz",
    "tracelens_xdit_flux_mi300x.pt.trace.json.xz", "tracelens_torch_compile_mi300x.pt.trace.json.gz",
    "tracelens_resnet_act_checkpoint_mi300x.pt.trace.json.xz",
)
#: largest |our host share - HTA's host share| (of idle time) accepted on a single-stream trace
SHARE_TOL = 0.10
#: pairs whose HTA host shares differ by more than this must rank the same way in ours
ORDER_MIN_GAP = 0.05
BUSY = ("compute", "exposed_copy", "exposed_comm")


@dataclass(frozen=True)
class Row:
    trace: str
    streams: int  # streams with ops (HTA's op rule)
    ops: int  # ops on the compute stream
    span_us: float
    hta_idle_us: float
    our_idle_us: float
    hta_host_us: float
    our_host_us: float
    our_wait_other_us: float
    our_setup_us: float
    our_graph_gaps_us: float = 0.0  # ours: compute between a graph replay's kernels (HTA: idle)
    skipped: str = ""

    @property
    def hta_host_share(self) -> float:
        return self.hta_host_us / self.hta_idle_us if self.hta_idle_us else 0.0

    @property
    def our_host_share(self) -> float:
        classified = self.our_idle_us - self.our_setup_us
        return self.our_host_us / classified if classified > 0 else 0.0

    @property
    def idle_tolerance_us(self) -> float:
        return 0.001 * (self.ops + 1)


def _hta_idle(path: Path) -> pd.DataFrame:
    """HTA's idle-time breakdown rows (stream, idle_category, idle_time in us) for one trace."""
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory(prefix="hta-idle-") as tmp:
        if path.suffix == ".xz":  # HTA reads .json and .json.gz only
            import lzma
            import shutil

            with lzma.open(path) as src, open(Path(tmp) / path.name.removesuffix(".xz"), "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            (Path(tmp) / path.name).symlink_to(path.resolve())
        ta = TraceAnalysis(trace_dir=tmp)
        df, _ = ta.get_idle_time_breakdown(visualize=False)
        trace = ta.t.get_trace(0)
        sym = ta.t.symbol_table.get_sym_id_map()
        cats = [sym.get(c, -1000) for c in ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy")]
        ops = trace[trace["stream"].ne(-1) & trace["cat"].isin(cats)]
        counts = ops.groupby("stream").size()
    df = df.copy()
    df["ops"] = df["stream"].map(counts).fillna(0).astype(int)
    return df


def _our_ops(trace) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    """The loaded trace's ops under HTA's rule: launched by a call in the trace, before the last
    ProfilerStep when there are two or more."""
    parts = [f[["start", "end", "device", "stream", "api_name", "api_start"]] for f in (trace.kernels, trace.memcpy, trace.memset)
             if len(f)]
    ops = pd.concat(parts, ignore_index=True)
    ops = ops[ops["api_name"] != ""]
    nv = trace.nvtx
    steps = nv[nv["text"].str.startswith("ProfilerStep")]
    if len(steps) >= 2:
        ops = ops[ops["api_start"] < int(steps["start"].max())]
    return ops


def measure(path: Path) -> Row:
    from analyzer.errors import InputError
    from analyzer.facts import FactStore, load_all
    from analyzer.facts.breakdown import GRAPH_NODE_GAPS, HOST_CAUSES
    from analyzer.loading import load_trace
    from analyzer.window import choose_window

    name = path.name.split(".")[0]
    try:
        hta = _hta_idle(path)
    except Exception as err:  # noqa: BLE001 - any HTA failure means: HTA cannot parse this trace
        return Row(name, 0, 0, 0, 0, 0, 0, 0, 0, 0, skipped=f"HTA: {type(err).__name__}")
    try:
        trace = load_trace(path)
    except InputError as err:
        return Row(name, 0, 0, 0, 0, 0, 0, 0, 0, 0, skipped=f"ours: {err}")
    load_all()
    ops = _our_ops(trace)
    ops = ops.assign(dur=ops["end"] - ops["start"])
    per_stream = ops.groupby("stream").agg(n=("start", "size"), busy=("dur", "sum"), lo=("start", "min"),
                                           hi=("end", "max"))
    stream = int(per_stream["busy"].idxmax())
    lo, hi = int(per_stream.at[stream, "lo"]), int(per_stream.at[stream, "hi"])
    h = hta[hta["stream"].astype(int) == stream]
    if h.empty or int(h["ops"].iloc[0]) != int(per_stream.at[stream, "n"]):
        raise SystemExit(f"{name}: stream {stream} has {int(per_stream.at[stream, 'n'])} ops here, "
                         f"{int(h['ops'].iloc[0]) if len(h) else 0} in HTA: not the same ops, no comparison")
    by_cat = h.groupby("idle_category")["idle_time"].sum()

    st = FactStore(trace, choose_window(trace, "full"), {})
    seg = st.get("timeline_segments")
    device = int(ops.loc[ops["stream"] == stream, "device"].iloc[0])
    seg = seg[seg["device"] == device]
    s = np.clip(seg["start"].to_numpy(np.int64), lo, hi)
    e = np.clip(seg["end"].to_numpy(np.int64), lo, hi)
    clipped = pd.Series(e - s).groupby(seg["cause"].to_numpy()).sum()
    graph_ns = int((e - s)[(seg["cause"] == "compute").to_numpy() & (seg["detail"] == GRAPH_NODE_GAPS).to_numpy()].sum())
    idle_ns = int(clipped.drop(list(BUSY), errors="ignore").sum()) + graph_ns
    host_ns = int(clipped.reindex(list(HOST_CAUSES)).fillna(0).sum())
    return Row(name, len(per_stream), int(per_stream.at[stream, "n"]), (hi - lo) / 1000.0,
               float(by_cat.sum()), idle_ns / 1000.0, float(by_cat.get("host_wait", 0.0)), host_ns / 1000.0,
               float(clipped.get("wait_other", 0)) / 1000.0, float(clipped.get("setup", 0)) / 1000.0,
               graph_ns / 1000.0)


def rows() -> list[Row]:
    out = []
    for base in PAIRS:
        for name in (base, base + "_fixed"):
            path = ROUND3 / f"{name}.pt.trace.json.gz"
            if path.is_file():
                out.append(measure(path))
    for name in PUBLIC_TRACES:
        if not (PUBLIC / name).is_file():
            continue
        try:
            out.append(measure(PUBLIC / name))
        except SystemExit as err:  # HTA picks other ops than ours: listed, not compared
            out.append(Row(name.split(".")[0], 0, 0, 0, 0, 0, 0, 0, 0, 0, skipped=str(err).split(": ", 1)[-1]))
    return out


def table(rs: list[Row]) -> str:
    lines = [
        "# Timeline breakdown vs HTA's idle-time breakdown",
        "",
        "Generated by `python benchmarks/breakdown_vs_hta.py --write` (definitions and tolerances: that",
        "script's docstring; checked by `tests/test_breakdown_vs_hta.py`). Round-3 torch.profiler traces, then",
        "public ROCm traces recorded by others (`tests/data/public/`, HTA's and TraceLens' test data);",
        "ours restricted to HTA's span of the compute stream (the stream with the most op time); times in us.",
        "Our idle includes the time between the kernels of a CUDA graph replay (ours: the graph's own GPU time),",
        "shown on its own as our graph node gaps.",
        "",
        "| trace | streams | ops | span | HTA idle | our idle | HTA host_wait | our host (launch+sync+work) "
        "| our wait_other | our setup | our graph node gaps | HTA host share | our host share |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rs:
        if r.skipped:
            lines.append(f"| {r.trace} | skipped: {r.skipped} |" + " |" * 11)
            continue
        lines.append(f"| {r.trace} | {r.streams} | {r.ops} | {r.span_us:,.1f} | {r.hta_idle_us:,.1f} | "
                     f"{r.our_idle_us:,.1f} | {r.hta_host_us:,.1f} | {r.our_host_us:,.1f} | {r.our_wait_other_us:,.1f} | "
                     f"{r.our_setup_us:,.1f} | {r.our_graph_gaps_us:,.1f} | "
                     f"{r.hta_host_share:.1%} | {r.our_host_share:.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return doc_main(argv, description=__doc__.split("\n\n")[0], doc=DOC, script="benchmarks/breakdown_vs_hta.py",
                    make_text=lambda: table(rows()))


if __name__ == "__main__":
    sys.exit(main())
