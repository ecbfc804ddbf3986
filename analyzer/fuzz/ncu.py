"""Fuzzing the Nsight Compute CSV reader (and the join, facts, rules and report behind it).

A case is a real ncu export (raw or details page, ``tests/data/ncu`` and the public details CSV)
damaged by one to four mutations: structure-aware ones on the parsed CSV (columns dropped, renamed,
duplicated or reordered; cells set to empty, ``n/a``, text, thousands-separated, negative, 1e400,
NaN/inf, 100 kB or non-UTF-8 values, embedded quotes and newlines; units changed; launch dimensions
garbled; rows dropped, duplicated, made ragged; the header removed or repeated) and byte-level ones
(truncation, flipped bytes, a BOM, CRLF, NULs, Latin-1 text). The damaged file is joined to a real
nsys trace and analyzed with the default pack; the trace-only facts are computed once per base
trace and shared, and so are the fired groups of the rules that read only them (neither reads ncu data:
each is the same on every case); everything that reads the ncu report (reading, joining, every ncu
fact and every rule reading one, linking and ranking all findings, the JSON report) runs per case.
"""
from __future__ import annotations

import copy
import csv
import dataclasses
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzer.fuzz.harness import CASE_TIMEOUT_S, FuzzFailure, Outcome, check_outcome, run_guarded, settle, sha256

CELLS = ["", "n/a", "N/A", "abc", "1,234,567", "-5", "-0", "1e400", "nan", "inf", "-inf", "0", "0.0",
         "99999999999999999999999", "(1, 1, 1)", "(0, 0, 0)", "(-1, 2, 3)", "(1, 1)", "(a, b, c)",
         "\"quoted\"", "line\nbreak", "x" * 100_000, "caf\udcc3\udca9", "<script>x</script>", "\x00", "9.0",
         "10.0.1", "%", "void k<int>(int)"]
UNITS = ["", "bogus", "%", "byte", "Kbyte", "Mbyte", "Gbyte", "Tbyte", "byte/second", "Gbyte/second",
         "Tbyte/s", "nsecond", "usecond", "msecond", "second", "cycle", "inst", "warp", "register/thread",
         "Kbyte/block", "sector", "ratio", "Ghz", "hz", "block", "thread"]


@dataclass(frozen=True)
class CsvMutation:
    op: str
    arg: Any = None
    where: float = 0.0  # which row / column / offset, as a fraction

    def __str__(self) -> str:
        return f"{self.op}:{self.arg!r}@{self.where:.3f}"


def _split(text: str) -> tuple[list[str], list[list[str]]]:
    """(preamble lines, CSV rows from the header on)."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), 0)
    rows = list(csv.reader(io.StringIO("".join(lines[start:]))))
    return lines[:start], rows


def _join(pre: list[str], rows: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return "".join(pre) + out.getvalue()


def _pick(n: int, where: float) -> int:
    return min(n - 1, max(0, int(n * where))) if n else 0


def apply_rows(rows: list[list[str]], m: CsvMutation) -> list[list[str]]:
    if not rows:
        return rows
    header, body = rows[0], rows[1:]
    ncol = len(header)
    col = _pick(ncol, m.where)
    row = _pick(len(body), m.where) if body else 0
    if m.op == "drop-column":
        return [r[:col] + r[col + 1:] for r in rows]
    if m.op == "rename-column":
        return [header[:col] + [m.arg] + header[col + 1:], *body]
    if m.op == "duplicate-column":
        return [r[:col + 1] + r[col:col + 1] + r[col + 1:] for r in rows]
    if m.op == "swap-columns":
        other = _pick(ncol, 1 - m.where)
        out = []
        for r in rows:
            r = list(r)
            if col < len(r) and other < len(r):
                r[col], r[other] = r[other], r[col]
            out.append(r)
        return out
    if m.op == "set-cell":  # arg: (value, all rows?)
        value, every = m.arg
        targets = range(len(body)) if every else [row]
        for i in targets:
            if i < len(body) and col < len(body[i]):
                body[i][col] = value
        return [header, *body]
    if m.op == "set-named":  # a named column (units, values, dims, names) for some rows
        name, value, stride = m.arg
        if name in header:
            c = header.index(name)
            for i in range(row % max(1, stride), len(body), max(1, stride)):
                if c < len(body[i]):
                    body[i][c] = value
        return [header, *body]
    if m.op == "drop-rows":
        stride = max(1, int(m.arg))
        return [header, *[r for i, r in enumerate(body) if i % stride != row % stride]]
    if m.op == "duplicate-rows":
        return [header, *body, *body[row:row + int(m.arg)]]
    if m.op == "ragged-row":
        if body:
            body[row] = body[row][: int(len(body[row]) * m.arg)] if m.arg < 1 else body[row] + ["x"] * 9
        return [header, *body]
    if m.op == "no-body":
        return [header]
    if m.op == "repeat-header":
        return [header, *body[:row], header, *body[row:]]
    if m.op == "no-header":
        return body
    raise ValueError(m.op)


def apply_text(text: str, m: CsvMutation) -> str:
    if m.op == "bom":
        return "\ufeff" + text
    if m.op == "crlf":
        return text.replace("\n", "\r\n")
    if m.op == "noise":
        return "==PROF== Connected to process 1\nWARNING: something\n" + text + "\n==PROF== Disconnected\n"
    if m.op == "insert":
        at = _pick(len(text), m.where)
        return text[:at] + m.arg + text[at:]
    return text


def apply_bytes(data: bytes, m: CsvMutation) -> bytes:
    if m.op == "truncate":
        return data[: int(len(data) * m.where)]
    if m.op == "flip":
        at = _pick(len(data), m.where)
        return data[:at] + bytes(b ^ 0x5A for b in data[at:at + int(m.arg)]) + data[at + int(m.arg):]
    if m.op == "latin1":
        return data.decode("utf-8", "replace").encode("latin-1", "replace")
    if m.op == "nul":
        at = _pick(len(data), m.where)
        return data[:at] + b"\x00" * int(m.arg) + data[at:]
    return data


ROW_OPS = ("drop-column", "rename-column", "duplicate-column", "swap-columns", "set-cell", "set-named",
           "drop-rows", "duplicate-rows", "ragged-row", "no-body", "repeat-header", "no-header")
TEXT_OPS = ("bom", "crlf", "noise", "insert")
BYTE_OPS = ("truncate", "flip", "latin1", "nul")


def build_case(base: Path, target: Path, mutations: list[CsvMutation]) -> None:
    pre, rows = _split(base.read_text(encoding="utf-8"))
    rows = copy.deepcopy(rows)
    for m in mutations:
        if m.op in ROW_OPS:
            rows = apply_rows(rows, m)
    text = _join(pre, rows)
    for m in mutations:
        if m.op in TEXT_OPS:
            text = apply_text(text, m)
    data = text.encode("utf-8", "surrogateescape")
    for m in mutations:
        if m.op in BYTE_OPS:
            data = apply_bytes(data, m)
    target.write_bytes(data)


def mutation_strategy() -> Any:
    from hypothesis import strategies as st

    frac = st.floats(0.0, 0.999)
    names = st.sampled_from(["ID", "Kernel Name", "Block Size", "Grid Size", "Device", "CC", "Metric Name",
                             "Metric Unit", "Metric Value", "Section Name", "Rule Name", "Estimated Speedup",
                             "Process ID", "Context", "Stream", "Estimated Speedup Type", "Rule Type",
                             "gpu__time_duration.sum", "launch__grid_size", "launch__block_size",
                             "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                             "dram__bytes_read.sum", "launch__registers_per_thread"])
    cell = st.one_of(st.sampled_from(CELLS), st.sampled_from(UNITS), st.text(max_size=20))
    return st.one_of(
        st.builds(CsvMutation, st.sampled_from(["drop-column", "duplicate-column", "swap-columns"]), where=frac),
        st.builds(CsvMutation, st.just("rename-column"), st.one_of(names, st.text(max_size=12)), frac),
        st.builds(CsvMutation, st.just("set-cell"), st.tuples(cell, st.booleans()), frac),
        st.builds(CsvMutation, st.just("set-named"), st.tuples(names, cell, st.integers(1, 7)), frac),
        st.builds(CsvMutation, st.just("set-named"),
                  st.tuples(st.just("Metric Unit"), st.sampled_from(UNITS), st.integers(1, 5)), frac),
        st.builds(CsvMutation, st.sampled_from(["drop-rows", "duplicate-rows"]), st.integers(1, 50), frac),
        st.builds(CsvMutation, st.just("ragged-row"), st.sampled_from([0.0, 0.3, 0.9, 2.0]), frac),
        st.builds(CsvMutation, st.sampled_from(["no-body", "repeat-header", "no-header"]), where=frac),
        st.builds(CsvMutation, st.sampled_from(["bom", "crlf", "noise"])),
        st.builds(CsvMutation, st.just("insert"), st.sampled_from(['"', '\n', ',', '""', '\r', '\x00', '\ufffd']),
                  frac),
        st.builds(CsvMutation, st.just("truncate"), where=frac),
        st.builds(CsvMutation, st.sampled_from(["flip", "nul"]), st.integers(1, 40), frac),
        st.builds(CsvMutation, st.just("latin1")),
    )


def base_exports() -> list[Path]:
    from analyzer.testing import DATA_DIR, PUBLIC_DIR

    bases = sorted((DATA_DIR / "ncu").glob("*.csv"))
    public = PUBLIC_DIR / "CodeGandee__llm-perf-opt__ncu.details.csv"
    if public.is_file():
        bases.append(public)
    return bases


class Runner:
    """A real trace loaded once, its trace-only facts computed once; per case the damaged ncu file is
    read, joined over the analysis window, and every ncu fact, all rules and the report run."""

    def __init__(self, workdir: Path, trace_name: str = "tiny_kernels_fixed",
                 timeout: float = CASE_TIMEOUT_S, share_trace_rules: bool = True, reuse: bool = True) -> None:
        from analyzer.facts import FactStore
        from analyzer.facts.registry import dependency_graph
        from analyzer.loading import load_trace
        from analyzer.pipeline import AnalysisOptions, load_rules
        from analyzer.testing import real_trace
        from analyzer.window import choose_window

        self.workdir = workdir
        self.timeout = timeout
        self.reuse = reuse
        self.outcomes: dict[str, tuple[int, str]] = {}  # read-report fingerprint -> (exit code, stderr)
        self.reused = 0
        self.options = AnalysisOptions(timeout=timeout)
        self.pack = load_rules(self.options)
        self.trace_path = real_trace(trace_name)
        self.trace = load_trace(self.trace_path)
        self.window = choose_window(self.trace, None, exclude=self.options.exclude_ranges)
        graph = dependency_graph()
        ncu_facts = {n for n in graph if n.startswith("ncu")}
        for n in list(ncu_facts):
            ncu_facts |= set(__import__("networkx").descendants(graph, n))
        self.ncu_facts = ncu_facts
        store = FactStore(self.trace, self.window, self._fact_options())
        for name in graph:
            if name not in ncu_facts:
                try:
                    store.get(name)
                except Exception:  # noqa: BLE001 - a fact this trace cannot give is simply not shared
                    pass
        self.shared = {k: v for k, v in store._cache.items() if k not in ncu_facts}
        # rules that read no ncu fact fire the same groups on every case: evaluated once, here, on the
        # shared facts (analyzer.rules.engine.evaluate(known=...) links and ranks them with the rest)
        self.known: dict[str, Any] = {}
        # the scalars those rules saw: a case whose own differ (ncu_softmax_launches reads the ncu data)
        # evaluates every rule
        self.known_scalars: dict[str, float] = {}
        if share_trace_rules:
            from analyzer.facts.scalars import trace_scalars
            from analyzer.rules.engine import fire

            store = FactStore(self.trace, self.window, self._fact_options(), _cache=dict(self.shared))
            scalars = self.known_scalars = trace_scalars(store)
            for rule in self.pack.rules:
                if ncu_facts.isdisjoint(rule.reads):
                    try:
                        self.known[rule.id] = fire(rule, store, self.window, scalars)
                    except Exception:  # noqa: BLE001 - a rule this trace cannot run runs per case (and fails there)
                        pass

    def _fact_options(self) -> dict[str, Any]:
        return {"exclude_ranges": self.options.exclude_ranges, "only_ranges": self.options.only_ranges}

    def analyze(self, ncu_path: Path, output: Path) -> Outcome:
        """The damaged file read, joined over the window, every ncu fact, all rules, the JSON report. A
        case whose read report equals one already analyzed (:func:`~analyzer.fuzz.harness.trace_fingerprint`:
        a mutation of what the reader does not use) reuses that outcome: the rest is a deterministic
        function of the read report."""
        from analyzer.analysis import Analysis
        from analyzer.facts import FactStore
        from analyzer.facts.scalars import trace_scalars
        from analyzer.fileio import atomic_write
        from analyzer.fuzz.harness import trace_fingerprint
        from analyzer.loading.ncu import join_ncu, load_ncu
        from analyzer.reports import build_report, render
        from analyzer.rules import evaluate
        from analyzer.watchdog import Watchdog

        seen: list[str] = []

        def run() -> None:
            with Watchdog(self.timeout, str(ncu_path)):
                report = load_ncu([ncu_path])
                key = trace_fingerprint(report) if self.reuse else None
                if key is not None and key in self.outcomes:
                    seen.append(key)
                    return
                window = (self.window.start_ns, self.window.end_ns)
                trace = dataclasses.replace(self.trace, ncu=join_ncu(report, self.trace, window=window))
                store = FactStore(trace, self.window, self._fact_options(), _cache=dict(self.shared))
                scalars = trace_scalars(store)
                known = self.known if _same_scalars(scalars, self.known_scalars) else None
                findings = evaluate(self.pack, store, self.window, scalars, known=known)
                analysis = Analysis(trace=trace, window=self.window, findings=findings, facts=store,
                                    rules_file="default", parameters={}, ncu=trace.ncu)
                seen.append(key or "")
                atomic_write(output, render(build_report([analysis]), "json"))

        outcome, reused = settle(self.outcomes, seen, run_guarded(run))
        self.reused += reused
        return outcome

    def case(self, base: Path, mutations: list[CsvMutation], index: int = 0) -> Outcome:
        folder = self.workdir / f"ncu{index % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{base.name.removesuffix('.csv')}-damaged.csv"
        build_case(base, target, mutations)
        before = sha256(target)
        listing = sorted(os.listdir(folder))
        outcome = self.analyze(target, self.workdir / "ncu-report.json")
        try:
            check_outcome(outcome, names=[str(target), target.name])
            if sha256(target) != before:
                raise FuzzFailure("the input file changed")
            if sorted(os.listdir(folder)) != listing:
                raise FuzzFailure("files appeared next to the input")
        except FuzzFailure as err:
            raise FuzzFailure(f"{err} [base {base.name}; mutations {[str(m) for m in mutations]}]") from None
        return outcome


def _same_scalars(a: dict[str, float], b: dict[str, float]) -> bool:
    """Equal scalars (NaN equal to NaN)."""
    return a.keys() == b.keys() and all(a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in a)


def run_cases(n: int, seed: int, workdir: Path, *, stats: Any = None, derandomize: bool = False) -> Any:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    from analyzer.fuzz.harness import Stats

    stats = stats or Stats("ncu", seed=seed)
    bases = base_exports()
    runner = Runner(workdir)

    @settings(max_examples=n, deadline=None, derandomize=derandomize, database=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(bases), st.lists(mutation_strategy(), min_size=1, max_size=4))
    def one(base: Path, mutations: list[CsvMutation]) -> None:
        stats.stop_if_out_of_time()
        outcome = runner.case(base, mutations, stats.cases)
        stats.record(outcome, names=[f"{base.name.removesuffix('.csv')}-damaged.csv"])
        stats.extra["same_read_report_as_an_earlier_case"] = runner.reused

    if not derandomize:
        one = hseed(seed)(one)
    one()
    return stats

