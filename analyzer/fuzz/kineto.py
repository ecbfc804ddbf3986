"""Fuzzing the torch.profiler (Kineto) JSON reader with damaged copies of real traces.

A case is a real Kineto trace from ``tests/data/kineto`` (the smallest ones) with one to four
mutations of the parsed document -- on events of a chosen category (``kernel``, ``cuda_runtime``,
``cpu_op``, ``user_annotation``, ``gpu_memcpy``, flow events ``ac2g``...): keys dropped, values set to
null, text, negative, huge, NaN-like strings, nested lists, 100 kB or unpaired-surrogate strings;
``ts``/``dur`` negated, swapped, shifted; correlation and flow ids dangling or duplicated; events
dropped or duplicated; top-level keys (``traceEvents``, ``deviceProperties``, ``baseTimeNanoseconds``,
``distributedInfo``) removed or retyped -- then written as JSON (sometimes truncated, with bytes
flipped, as invalid UTF-8 or 10,000-deep nesting) and analyzed through the whole pipeline like any
trace. Runs only where the Kineto loader (issue 13) is installed; before that a JSON file is simply
"not a trace" and there is nothing to fuzz.
"""
from __future__ import annotations

import copy
import decimal
import gzip
import json
import lzma
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzer.fuzz.harness import (
    CASE_TIMEOUT_S,
    FuzzFailure,
    Outcome,
    analyze_reusing,
    check_outcome,
    damage_json_text,
    sha256,
)

CATEGORIES = ("kernel", "cuda_runtime", "cuda_driver", "cpu_op", "user_annotation", "gpu_user_annotation",
              "gpu_memcpy", "gpu_memset", "ac2g", "python_function", None)
KEYS = ("ts", "dur", "name", "ph", "pid", "tid", "cat", "id", "args")
ARG_KEYS = ("correlation", "External id", "device", "stream", "grid", "block", "registers per thread",
            "shared memory", "Python id", "Python parent id", "bytes", "Memcpy Kind")
VALUES: dict[str, Any] = {
    "null": None, "text": "abc", "numeric-text": "123.5", "negative": -5, "zero": 0, "huge": 1e308,
    "bigint": 2**70, "minus-bigint": -(2**70), "float": 0.5, "list": [1, 2], "dict": {"a": 1},
    "bool": True, "empty": "", "long-text": "k" * 100_000, "surrogate": "x\udcff", "nan-text": "NaN",
}


def is_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("analyzer.loading.kineto") is not None


@dataclass(frozen=True)
class JsonMutation:
    op: str
    category: str | None = None
    key: str = ""
    arg: Any = None
    stride: int = 1

    def __str__(self) -> str:
        return f"{self.op}:{self.category}:{self.key}:{self.arg!r}/{self.stride}"


def _events(doc: dict[str, Any], m: JsonMutation) -> list[dict[str, Any]]:
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        return []
    chosen = [e for e in events if isinstance(e, dict) and (m.category is None or e.get("cat") == m.category)]
    return chosen[:: max(1, m.stride)]


def apply(doc: dict[str, Any], m: JsonMutation) -> dict[str, Any]:
    if m.op == "drop-key":
        for e in _events(doc, m):
            e.pop(m.key, None)
    elif m.op == "set-key":
        for e in _events(doc, m):
            e[m.key] = copy.deepcopy(VALUES[m.arg])
    elif m.op == "set-arg":
        for e in _events(doc, m):
            if isinstance(e.get("args"), dict):
                e["args"][m.key] = copy.deepcopy(VALUES[m.arg])
    elif m.op == "drop-arg":
        for e in _events(doc, m):
            if isinstance(e.get("args"), dict):
                e["args"].pop(m.key, None)
    elif m.op == "shift":
        for e in _events(doc, m):
            if isinstance(e.get(m.key), (int, float)):
                e[m.key] = e[m.key] + m.arg
    elif m.op == "negate":
        for e in _events(doc, m):
            if isinstance(e.get(m.key), (int, float)):
                e[m.key] = -e[m.key]
    elif m.op == "same-arg":  # duplicated correlation / flow ids
        for e in _events(doc, m):
            if isinstance(e.get("args"), dict):
                e["args"][m.key] = 1
            if m.key == "id":
                e["id"] = 1
    elif m.op == "drop-events":
        chosen = {id(e) for e in _events(doc, m)}
        if isinstance(doc.get("traceEvents"), list):  # an earlier mutation may have replaced the list
            doc["traceEvents"] = [e for e in doc["traceEvents"] if id(e) not in chosen]
    elif m.op == "duplicate-events":
        if isinstance(doc.get("traceEvents"), list):
            doc["traceEvents"] = doc["traceEvents"] + copy.deepcopy(_events(doc, m))
    elif m.op == "top-key":
        if m.arg == "drop":
            doc.pop(m.key, None)
        else:
            doc[m.key] = copy.deepcopy(VALUES[m.arg])
    return doc


def serialize(doc: Any, damage: tuple[str, float] | None) -> bytes:
    return damage_json_text(json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass"), damage)


def mutation_strategy() -> Any:
    from hypothesis import strategies as st

    cats = st.sampled_from(CATEGORIES)
    strides = st.sampled_from([1, 1, 2, 3, 7, 50])
    values = st.sampled_from(list(VALUES))
    return st.one_of(
        st.builds(JsonMutation, st.just("set-key"), cats, st.sampled_from(KEYS), values, strides),
        st.builds(JsonMutation, st.just("set-arg"), cats, st.sampled_from(ARG_KEYS), values, strides),
        st.builds(JsonMutation, st.sampled_from(["drop-key"]), cats, st.sampled_from(KEYS), stride=strides),
        st.builds(JsonMutation, st.just("drop-arg"), cats, st.sampled_from(ARG_KEYS), stride=strides),
        st.builds(JsonMutation, st.just("shift"), cats, st.sampled_from(["ts", "dur"]),
                  st.sampled_from([-1e12, -1e6, -1.0, 1e6, 1e15, 0.5]), strides),
        st.builds(JsonMutation, st.just("negate"), cats, st.sampled_from(["ts", "dur"]), stride=strides),
        st.builds(JsonMutation, st.just("same-arg"), cats, st.sampled_from(["correlation", "External id", "id"]),
                  stride=strides),
        st.builds(JsonMutation, st.sampled_from(["drop-events", "duplicate-events"]), cats, stride=strides),
        st.builds(JsonMutation, st.just("top-key"), key=st.sampled_from(
            ["traceEvents", "deviceProperties", "baseTimeNanoseconds", "distributedInfo", "schemaVersion",
             "displayTimeUnit"]), arg=st.sampled_from(["drop", *VALUES])),
    )


def json_kernel_totals(data: bytes) -> tuple[int, int] | None:
    """(kernels, total kernel time in ns) of a Chrome trace as Python's own ``json`` reads it (numbers
    exact, as ``Decimal``): complete (``X``) events of a kernel category whose ``ts`` is a number from 0
    to 2^63 ns (truncated to the nanosecond), each ``dur`` in ns rounded to even, a negative one or one
    past 2^63 ns counted as 0 (the loader's data-quality rule). None when ``json`` cannot read the
    text, it is no trace, or a kernel's ``dur`` is text (which the loader reads as a number where it
    can: nothing exact to compare)."""
    from analyzer.loading.kineto.document import KERNEL_CATS

    try:
        doc = json.loads(data.decode("utf-8"), parse_float=decimal.Decimal, parse_int=decimal.Decimal)
    except (ValueError, RecursionError):
        return None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        return None
    n = total = 0
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or not isinstance(e.get("cat"), str) \
                or e.get("cat") not in KERNEL_CATS:  # a list or object "cat" is no kernel's (nor hashable)
            continue
        ts = e.get("ts")
        if not isinstance(ts, decimal.Decimal) or not ts.is_finite():
            continue
        if not 0 <= int(ts * 1000) < 2**63:
            continue
        dur = e.get("dur")
        if isinstance(dur, str):
            return None
        us = float(dur) if isinstance(dur, (decimal.Decimal, bool)) else float("nan")
        ns = 0.0 if us != us else us * 1000.0
        n += 1
        total += 0 if ns < 0 or ns >= 2.0**63 else round(ns)
    return n, total


def base_traces() -> list[Path]:
    from analyzer.testing import DATA_DIR

    folder = DATA_DIR / "kineto"
    files = sorted(folder.glob("*.pt.trace.json*"), key=lambda p: p.stat().st_size) if folder.is_dir() else []
    return files[:3]


def _read(path: Path) -> bytes:
    """The base trace's JSON text (decompressed once per process; each case parses its own copy)."""
    opener = gzip.open if path.suffix == ".gz" else lzma.open if path.suffix == ".xz" else open
    with opener(path, "rb") as fh:
        return fh.read()


class Runner:
    def __init__(self, workdir: Path, timeout: float = CASE_TIMEOUT_S) -> None:
        from analyzer.pipeline import AnalysisOptions, load_rules

        self.workdir = workdir
        self.options = AnalysisOptions(timeout=timeout)
        self.pack = load_rules(self.options)
        self.texts: dict[Path, bytes] = {}
        self.loaded: Any = None  # the last case's loaded trace (None when the run refused it)
        self.compared = 0  # cases whose kernel totals were checked against Python's json
        self.outcomes: dict[str, tuple[int, str]] = {}  # loaded-trace fingerprint -> (exit code, stderr)
        self.reused = 0

    def analyze(self, trace: Path, output: Path) -> Outcome:
        """The pipeline as ``analyze TRACE --format json -o OUTPUT`` runs it (``analyze_paths``: the input
        recognised, loaded under the watchdog, analyzed, the report written). A case whose loaded trace
        equals one already analyzed (:func:`~analyzer.fuzz.harness.trace_fingerprint`: a mutation of
        events or keys the loader does not read) reuses that outcome: the rest of the pipeline is a
        deterministic function of the loaded trace. The property check runs on every case."""
        from analyzer.fileio import atomic_write
        from analyzer.loading import load_trace
        from analyzer.pipeline import analyze_paths, split_inputs, trace_cache
        from analyzer.reports import build_report, render

        def whole() -> bool:
            traces, ncu_paths = split_inputs([trace], self.options)
            if traces != [trace] or ncu_paths:  # not one trace (read as ncu): the whole path as it is
                analyses = analyze_paths([trace], self.options, pack=self.pack)
                atomic_write(output, render(build_report(analyses), "json"))
                return True
            return False

        return analyze_reusing(self, trace, output, lambda: load_trace(trace, cache=trace_cache(self.options)),
                               whole)

    def case(self, base: Path, mutations: list[JsonMutation], damage: tuple[str, float] | None,
             index: int = 0) -> Outcome:
        if base not in self.texts:
            self.texts[base] = _read(base)
        doc = json.loads(self.texts[base])  # a fresh copy: parsing is several times faster than deepcopy
        for m in mutations:
            doc = apply(doc, m)
        folder = self.workdir / f"kineto{index % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        trace = folder / "damaged.pt.trace.json"
        trace.write_bytes(serialize(doc, damage))
        before, listing = sha256(trace), sorted(os.listdir(folder))
        outcome = self.analyze(trace, self.workdir / "kineto-report.json")
        try:
            check_outcome(outcome, names=[str(trace), trace.name])
            if outcome.rc in (0, 1) and self.loaded is not None:
                self.compared += check_kernels_as_json_reads_them(trace.read_bytes(), self.loaded)
            if sha256(trace) != before or sorted(os.listdir(folder)) != listing:
                raise FuzzFailure("the input file or its folder changed")
        except FuzzFailure as err:
            raise FuzzFailure(f"{err} [base {base.name}; mutations {[str(m) for m in mutations]}; "
                              f"damage {damage}]") from None
        return outcome


def check_kernels_as_json_reads_them(data: bytes, trace: Any) -> int:
    """The property that matters (issue 33): a trace the run accepted has the kernel count and total
    kernel time Python's ``json`` reads from the same text (:func:`json_kernel_totals`). Returns 1 when
    compared, 0 when there is nothing exact to compare. Raises :class:`FuzzFailure`."""
    want = json_kernel_totals(data)
    if want is None:
        return 0
    k = trace.kernels
    got = (len(k), int(k["duration"].astype("int64").sum()) if len(k) else 0)
    if got != want:
        raise FuzzFailure(f"kernels {got[0]:,} and {got[1]:,} ns where Python's json reads {want[0]:,} and "
                          f"{want[1]:,} ns")
    return 1


def run_cases(n: int, seed: int, workdir: Path, *, stats: Any = None, derandomize: bool = False) -> Any:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    from analyzer.fuzz.harness import Stats

    stats = stats or Stats("kineto", seed=seed)
    bases = base_traces()
    if not is_available() or not bases:
        stats.extra["skipped"] = "no Kineto loader (issue 13) or no Kineto trace in tests/data/kineto"
        return stats
    runner = Runner(workdir)
    damage = st.one_of(st.none(), st.none(), st.none(), st.tuples(
        st.sampled_from(["truncate", "flip", "invalid-utf8", "deep-nesting", "trailing-garbage"]),
        st.floats(0, 0.999)))

    @settings(max_examples=n, deadline=None, derandomize=derandomize, database=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(bases), st.lists(mutation_strategy(), min_size=1, max_size=4), damage)
    def one(base: Path, mutations: list[JsonMutation], dmg: tuple[str, float] | None) -> None:
        stats.stop_if_out_of_time()
        outcome = runner.case(base, mutations, dmg, stats.cases)
        stats.record(outcome, names=["damaged.pt.trace.json"])
        stats.extra["kernel_totals_checked_against_json"] = runner.compared
        stats.extra["same_loaded_trace_as_an_earlier_case"] = runner.reused

    if not derandomize:
        one = hseed(seed)(one)
    one()
    return stats
