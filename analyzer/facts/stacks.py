"""Code locations: the line of the user's program behind a CUDA call, and what the host was doing
while the GPU sat idle, from the call stacks and CPU samples a trace holds when they were recorded.

A stack (``trace.stacks``, depth 0 = innermost frame) is folded to one *location*:

* Python frames (torch.profiler ``with_stack``, source ``python``): the innermost frame in the user's
  own code, as ``file.py:line in function``; frames of the standard library, of installed packages
  (``site-packages``/``dist-packages``) and of PyTorch itself are folded away.
* Native frames (nsys ``--cudabacktrace``, source ``cuda``): nsys 2025.3 exports no Python frames, so
  the location is the PyTorch entry point the Python code called: the outermost frame of
  ``libtorch_python`` (``torch::autograd::THPVariable_item`` -> ``item()``) with the ATen operator under it
  (``at::_ops::item::call`` -> ``aten::item``). A program without PyTorch gets its innermost resolved
  frame outside the CUDA runtime, driver, profiler, C library and interpreter (``myapp::step``).

Locations label the rows of ``sync_calls``, ``alloc_calls`` and ``copy_throughput`` (column
``code_location``) and the idle gaps' ``host_activity``; the ``code_locations`` fact ranks them.
Without stacks every location is ``""`` and the reports say how to record them (:data:`RECORD_HINT`).
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from analyzer.facts._util import text
from analyzer.facts.registry import FactContext, fact

#: How to record what this module reads (shown where a trace has no stacks).
RECORD_HINT = ("record call stacks with `nsys profile --cudabacktrace=all --python-backtrace=cuda -s process-tree "
               "--python-sampling=true` (PyTorch entry point of each CUDA call, CPU samples in idle gaps) or "
               "with torch.profiler `profile(with_stack=True)` (the Python file and line)")

_SYSTEM = re.compile(
    r"^(libcupti|libcuda\.so|libcudart|libToolsInjection|libnvToolsExt|libnvtx|libc\.so|libc-|libm\.so|"
    r"libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl|python\d|libpython|\[)")
_TORCH_NATIVE = re.compile(r"^(libtorch|libc10|libcublas|libcudnn|libnccl|libnvrtc)")
_BINDING = re.compile(r"(?:^|::)THC?P(?:Variable|Module|Function|Engine|Stream|Event|Size|Generator)?_(\w+)")
#: well-known PyTorch bindings -> the Python spelling users write
_PYTHON_NAMES = {
    "item": "Tensor.item()", "cpu": "Tensor.cpu()", "to": "Tensor.to()", "tolist": "Tensor.tolist()",
    "numpy": "Tensor.numpy()", "cuda": "Tensor.cuda()", "copy_": "Tensor.copy_()",
    "is_nonzero": "bool(tensor)", "bool_scalar": "bool(tensor)", "nonzero": "nonzero()",
    "cudaSynchronize": "torch.cuda.synchronize()", "cuda_synchronize": "torch.cuda.synchronize()",
    "empty_cache": "torch.cuda.empty_cache()", "emptyCache": "torch.cuda.empty_cache()",
    "hostEmptyCache": "torch._C._host_emptyCache()",
}
_ATEN_CALL = re.compile(r"^at::_ops::(\w+)::call\b")
_PY_LIBRARY = re.compile(r"(^<frozen |^<string>|/site-packages/|/dist-packages/|/lib/python\d[\d.]*/|"
                         r"^torch/|/torch/)")


def short_symbol(symbol: str, limit: int = 80) -> str:
    """A C++ symbol without its argument list and template arguments: ``at::native::copy_``."""
    s = str(symbol)
    depth, out = 0, []
    for ch in s:
        if ch == "<":
            depth += 1
            if depth == 1:
                out.append("<>")
            continue
        if ch == ">" and depth:
            depth -= 1
            continue
        if depth:
            continue
        if ch == "(":
            break
        out.append(ch)
    short = "".join(out).strip() or s
    return short if len(short) <= limit else short[: limit - 3] + "..."


def module_name(module: str) -> str:
    return str(module).rsplit("/", 1)[-1]


def native_location(symbols: list[str], modules: list[str], unresolved: list[int]) -> str:
    """The location of one native stack (frames innermost first)."""
    binding = op = ""
    first_user = ""
    for sym, mod, bad in zip(symbols, modules, unresolved):
        base = module_name(mod)
        if bad or not sym or sym.startswith("0x"):
            continue
        m = _ATEN_CALL.match(sym)
        if m:
            op = m.group(1)  # keep the outermost one seen (closest to Python)
        if base.startswith("libtorch_python"):
            b = _BINDING.search(sym)
            if b:
                binding = b.group(1)
        elif not first_user and not _SYSTEM.match(base) and not _TORCH_NATIVE.match(base):
            first_user = f"{short_symbol(sym)} ({base})"
    if binding:
        label = _PYTHON_NAMES.get(binding, f"{binding}()")
        return f"{label} [aten::{op}]" if op and op != binding else label
    if op:
        return f"aten::{op}"
    return first_user


_BUILTIN_METHOD = re.compile(r"^<built-in method (\w+) of (\w+) object")
_BUILTIN_FUNCTION = re.compile(r"^<built-in (?:function|method) (\w+)")
_MODULE_CALL = re.compile(r"^nn\.Module: (\w+?)(?:_\d+)?$")


def python_call(file: str, function: str) -> str:
    """How the user's code spelled a call, from the callee's frame: ``<built-in method item of Tensor
    object at 0x..>`` -> ``Tensor.item()``, ``nn.Module: Linear_2`` -> ``Linear(...)``,
    ``torch/cuda/__init__.py`` ``synchronize`` -> ``torch.cuda.synchronize()``."""
    m = _BUILTIN_METHOD.match(function)
    if m:
        return f"{m.group(2)}.{m.group(1)}()" if m.group(2) in ("Tensor", "TensorBase") else f"{m.group(1)}()"
    m = _BUILTIN_FUNCTION.match(function)
    if m:
        return f"{m.group(1)}()"
    m = _MODULE_CALL.match(function)
    if m:
        return f"{m.group(1)}(...)"
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in file:
            file = file.split(marker, 1)[1]
    if file.endswith(".py") and not file.startswith(("<", "/")):
        dotted = file[:-3].replace("/", ".").removesuffix(".__init__")
        return f"{dotted}.{function}()"
    return f"{function}()" if function else ""


def python_location(files: list[str], functions: list[str], lines: list[int]) -> str:
    """The innermost user frame of one Python stack (innermost first), with the call it made:
    ``Tensor.item() in step_sync() defined at train.py:51``.

    torch.profiler names each Python frame by its function's first line, not the line executing, so
    the location says which call the function made (the frame inside it) and where the function is."""
    for i, (path, func, line) in enumerate(zip(files, functions, lines)):
        if path and not _PY_LIBRARY.search(str(path)):
            where = f"{path}:{line}" if line is not None and int(line) >= 0 else str(path)
            call = python_call(str(files[i - 1]), str(functions[i - 1])) if i else ""
            head = f"{call} in " if call else ""
            return f"{head}{func}() defined at {where}" if func else f"{head}{where}"
    return ""


def chain_locations(stacks: pd.DataFrame, source: str) -> dict[int, str]:
    """``chain_id -> location`` for every chain of ``source`` in ``stacks``."""
    part = stacks.loc[text(stacks["source"]) == source] if len(stacks) else stacks
    if part.empty:
        return {}
    part = part.sort_values(["chain_id", "depth"], kind="stable")
    ids = part["chain_id"].to_numpy()
    syms = text(part["symbol"]).to_numpy()
    mods = text(part["module"]).to_numpy()
    lines = part["line"].to_numpy()
    bad = part["unresolved"].to_numpy()
    bounds = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1], True])
    out: dict[int, str] = {}
    for a, b in zip(bounds[:-1], bounds[1:]):
        if source == "python":
            out[int(ids[a])] = python_location(list(mods[a:b]), list(syms[a:b]), list(lines[a:b]))
        else:
            out[int(ids[a])] = native_location(list(syms[a:b]), list(mods[a:b]), list(bad[a:b]))
    return out


def api_location_table(store: Any) -> pd.DataFrame:
    """Every API call with a stack (whole trace): ``pid, correlation_id, start, name, code_location``;
    computed once per store. A call with Python and native stacks keeps the Python location."""
    cache = getattr(store, "_api_locations", None)
    if cache is not None:
        return cache
    trace = store.trace
    calls = trace.api_stacks
    if calls.empty:
        table = pd.DataFrame({"pid": pd.Series(dtype="int64"), "correlation_id": pd.Series(dtype="int64"),
                              "start": pd.Series(dtype="int64"), "name": pd.Series(dtype=object),
                              "code_location": pd.Series(dtype=object)})
    else:
        src = text(calls["source"]).to_numpy()
        loc = np.full(len(calls), "", dtype=object)
        for source in np.unique(src):
            lookup = chain_locations(trace.stacks, str(source))
            rows = src == source
            loc[rows] = [lookup.get(int(c), "") for c in calls["chain_id"].to_numpy()[rows]]
        table = pd.DataFrame({
            "pid": calls["pid"].to_numpy(dtype=np.int64),
            "correlation_id": calls["correlation_id"].to_numpy(dtype=np.int64),
            "start": calls["start"].to_numpy(dtype=np.int64),
            "name": text(calls["name"]).to_numpy(), "code_location": loc,
            "_python": src == "python",
        }).sort_values("_python", ascending=False, kind="stable")
        table = table.drop_duplicates(["pid", "correlation_id", "start"]).drop(columns="_python")
        table = table.sort_values("start", kind="stable", ignore_index=True)
    store._api_locations = table
    return table


def attach_locations(frame: pd.DataFrame, store: Any, *, pid: str = "pid",
                     correlation_id: str = "correlation_id", start: str = "start") -> pd.DataFrame:
    """``frame`` plus ``code_location`` (``""`` without a stack), joined on process and correlation
    id; where a process reused a correlation id (they are 32-bit), the stack nearest in time wins
    (nsys puts the stack on a companion row ~0.1 us before the call)."""
    frame = frame.copy()
    table = api_location_table(store)
    if table.empty or frame.empty or pid not in frame or correlation_id not in frame:
        frame["code_location"] = ""
        return frame
    left = pd.DataFrame({"_p": frame[pid].to_numpy(dtype=np.int64),
                         "_c": frame[correlation_id].to_numpy(dtype=np.int64),
                         "_s": frame[start].to_numpy(dtype=np.int64) if start in frame else 0,
                         "_row": np.arange(len(frame))})
    key = table.rename(columns={"pid": "_p", "correlation_id": "_c", "start": "_ks"})[
        ["_p", "_c", "_ks", "code_location"]]
    joined = left.merge(key, how="inner", on=["_p", "_c"])
    loc = np.full(len(frame), "", dtype=object)
    if len(joined):
        joined["_d"] = (joined["_s"] - joined["_ks"]).abs()
        best = joined.sort_values(["_row", "_d"], kind="stable").drop_duplicates("_row")
        loc[best["_row"].to_numpy()] = best["code_location"].to_numpy(dtype=object)
    frame["code_location"] = loc
    return frame


# -- what the host was doing in a time span ----------------------------------------------------------------

def host_activity(trace: Any, spans: pd.DataFrame, *, top: int = 3) -> list[str]:
    """For each span (``start``, ``end``, ``host_pid``, ``host_tid``): the CPU samples and OS-runtime
    calls of that thread inside it, as one line, e.g. ``"CPU samples: array_astype (numpy) 4/8,
    random_bounded_uint8_fill 3/8; OS calls: read 2.1 ms"``; ``""`` when the trace recorded neither."""
    samples, osrt = trace.cpu_samples, trace.osrt
    if (samples.empty and osrt.empty) or spans.empty:
        return [""] * len(spans)
    s_start = samples["start"].to_numpy() if len(samples) else np.empty(0, dtype=np.int64)
    s_tid = samples["tid"].to_numpy() if len(samples) else np.empty(0, dtype=np.int64)
    s_src = text(samples["source"]).to_numpy() if len(samples) else np.empty(0, dtype=object)
    s_chain = samples["chain_id"].to_numpy() if len(samples) else np.empty(0, dtype=np.int64)
    leaves = {src: _sample_leaves(trace.stacks, str(src)) for src in np.unique(s_src)}
    o_start = osrt["start"].to_numpy() if len(osrt) else np.empty(0, dtype=np.int64)
    o_end = osrt["end"].to_numpy() if len(osrt) else np.empty(0, dtype=np.int64)
    o_tid = osrt["tid"].to_numpy() if len(osrt) else np.empty(0, dtype=np.int64)
    o_name = text(osrt["name"]).to_numpy() if len(osrt) else np.empty(0, dtype=object)
    by_thread: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def thread_calls(tid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, starts, reach)`` of the OS-runtime calls of thread ``tid``: their rows by start, those
        starts, and the running maximum of their ends (made once per thread)."""
        if tid not in by_thread:
            rows = np.flatnonzero(o_tid == tid)
            starts = o_start[rows]
            if len(rows) > 1 and not bool((starts[1:] >= starts[:-1]).all()):
                order = np.argsort(starts, kind="stable")
                rows, starts = rows[order], starts[order]
            by_thread[tid] = (rows, starts, np.maximum.accumulate(o_end[rows]) if len(rows) else starts)
        return by_thread[tid]

    out = []
    for a, b, tid in zip(spans["start"].to_numpy(), spans["end"].to_numpy(), spans["host_tid"].to_numpy()):
        parts = []
        if len(s_start):
            lo, hi = np.searchsorted(s_start, [a, b])
            sel = np.arange(lo, hi)
            if tid >= 0:
                sel = sel[s_tid[sel] == tid]
            if len(sel):
                counts = Counter(leaves.get(s_src[i], {}).get(int(s_chain[i]), "?") for i in sel)
                shown = ", ".join(f"{name} {n}/{len(sel)}" for name, n in counts.most_common(top))
                parts.append(f"CPU samples: {shown}")
        if len(o_start):
            if tid >= 0:
                # the thread's calls starting before b, from the first whose running maximum of ends
                # passes a (every call before it ended by a), those ending after a, in row order
                rows, starts, reach = thread_calls(int(tid))
                cand = rows[np.searchsorted(reach, a, side="right"):np.searchsorted(starts, b, side="left")]
                hit = np.sort(cand[o_end[cand] > a])
            else:
                hit = np.flatnonzero((o_start < b) & (o_end > a))
            if len(hit):
                dur = np.minimum(o_end[hit], b) - np.maximum(o_start[hit], a)
                per = pd.Series(dur).groupby(o_name[hit]).sum().sort_values(ascending=False)
                per = per[per >= max(100_000, 0.01 * (b - a))]  # drop calls under 0.1 ms / 1% of the span
                if len(per):
                    parts.append("OS calls: " + ", ".join(f"{n} {v / 1e6:.1f} ms" for n, v in per.head(top).items()))
        out.append("; ".join(parts))
    return out


def _sample_leaves(stacks: pd.DataFrame, source: str) -> dict[int, str]:
    """``chain_id -> the sample's leaf``: the innermost frame of the program or its libraries (not the
    interpreter or the C library), with its module; Python samples give the user frame."""
    part = stacks.loc[text(stacks["source"]) == source] if len(stacks) else stacks
    if part.empty:
        return {}
    if source == "python":
        return chain_locations(stacks, "python")
    part = part.sort_values(["chain_id", "depth"], kind="stable")
    ids = part["chain_id"].to_numpy()
    syms = text(part["symbol"]).to_numpy()
    mods = text(part["module"]).to_numpy()
    bad = part["unresolved"].to_numpy()
    bounds = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1], True])
    out: dict[int, str] = {}
    for a, b in zip(bounds[:-1], bounds[1:]):
        label = ""
        fallback = ""
        for sym, mod, unres in zip(syms[a:b], mods[a:b], bad[a:b]):
            base = module_name(mod)
            if unres or not sym or str(sym).startswith("0x"):
                continue
            if not fallback:
                fallback = f"{short_symbol(sym, 60)} ({_package(mod)})"
            if not _SYSTEM.match(base):
                label = f"{short_symbol(sym, 60)} ({_package(mod)})"
                break
        out[int(ids[a])] = label or fallback or "unresolved"
    return out


def _package(module: str) -> str:
    """``.../site-packages/numpy/random/_pcg64.cpython-312-x86_64-linux-gnu.so`` -> ``numpy``."""
    m = re.search(r"(?:site|dist)-packages/([^/]+)/", str(module))
    if m:
        return m.group(1)
    return module_name(module).split(".cpython")[0]


@fact(
    "code_locations",
    columns={
        "kind": "sync | alloc | copy | launch | other: what the calls do",
        "code_location": "where in the program the calls come from (see analyzer.facts.stacks)",
        "name": "the most frequent CUDA API at that location",
        "calls": "API calls with a stack in the window",
        "api_ns": "their summed duration (ns)",
        "nvtx_path": "the most frequent NVTX path open at those calls",
    },
    scope_keys=("kind", "code_location"),
)
def code_locations(ctx: FactContext) -> pd.DataFrame:
    """CUDA API calls in the window that carry a stack, grouped by code location and kind, most
    expensive first."""
    cols = ["kind", "code_location", "name", "calls", "api_ns", "nvtx_path"]
    empty = pd.DataFrame({c: pd.Series(dtype=object if c in ("kind", "code_location", "name", "nvtx_path")
                                       else "int64") for c in cols})
    if api_location_table(ctx.store).empty:
        return empty
    api, w = ctx.trace.api, ctx.window
    st = api["start"].to_numpy()
    rows = api.loc[(st >= w.start_ns) & (st < w.end_ns), ["pid", "correlation_id", "start", "duration", "name"]
                   + (["nvtx_path"] if "nvtx_path" in api else [])]
    rows = attach_locations(rows.reset_index(drop=True), ctx.store)
    rows = rows.loc[rows["code_location"] != ""]
    if rows.empty:
        return empty
    rows = rows.assign(name=text(rows["name"]).to_numpy(),
                       nvtx_path=text(rows["nvtx_path"]).to_numpy() if "nvtx_path" in rows else "")
    rows["kind"] = [_kind(n) for n in rows["name"]]
    g = rows.groupby(["kind", "code_location"], sort=False)
    out = g.agg(calls=("duration", "size"), api_ns=("duration", "sum")).reset_index()
    out["name"] = g["name"].agg(lambda s: s.value_counts().index[0]).to_numpy()
    out["nvtx_path"] = g["nvtx_path"].agg(lambda s: s.value_counts().index[0]).to_numpy()
    out["api_ns"] = out["api_ns"].astype(np.int64)
    return out.sort_values(["api_ns", "calls"], ascending=False, ignore_index=True)[cols]


def _kind(name: str) -> str:
    from analyzer.loading.api_names import cuda_equivalent

    n = cuda_equivalent(str(name))  # HIP calls by their CUDA equivalents (one table)
    if "Synchronize" in n or n.startswith("cudaEventQuery") or n.startswith("cudaStreamQuery"):
        return "sync"
    if "Malloc" in n or "Free" in n or "MemAlloc" in n or "HostAlloc" in n or "HostRegister" in n:
        return "alloc"
    if "Memcpy" in n or "Memset" in n:
        return "copy"
    if "Launch" in n:
        return "launch"
    return "other"
