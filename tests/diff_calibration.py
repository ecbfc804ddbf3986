"""Calibration of ``analyze diff``'s significance rule on the committed traces: no false alarm on any
repeated run, and detection of every pathology/twin pair whose step-time distributions separate.

    .venv/bin/python tests/diff_calibration.py --write [--reports DIR]   # analyze, store, write the doc
    .venv/bin/python tests/diff_calibration.py --check                   # what the test does

``--write`` analyzes every committed run below (or reads ``DIR/<name>.json``, the JSON reports that
``analyze TRACE --format json`` wrote for them, ``<name>.torch.json`` for the torch.profiler traces)
and stores what the step-time verdict reads (step durations, GPU busy time, window, devices) in
``tests/data/diff_calibration.json``; from that file it derives :data:`analyzer.diff.stats.HOST_RUN_TO_RUN`
and writes ``docs/diff-calibration.md``, the verdict of every pair. ``--check`` rebuilds the document from
the stored file and fails when it differs from the committed one or when the constant in the code is
not the one the repeats give.

The pairs: every *repeat pair* (the same program and variant run twice: ``X`` / ``X_run2`` / ``X_run3``,
both orders) must be "no significant change"; every *pathology/twin pair* (``X`` or ``X_run2`` against
``X_fixed`` or its repeats, both directions; the DDP jobs as one report) must be significant, faster
from the pathology to the twin, whenever the two step-time distributions do not overlap and the change
is larger than ``--min-effect`` (3%; below it GPU-bound reruns move on their own).
"""
from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
STORE = DATA / "diff_calibration.json"
DOC = REPO / "docs" / "diff-calibration.md"
_REPEAT = re.compile(r"^(?P<base>.+?)(?:_run(?P<n>\d+))?$")


@dataclass(frozen=True)
class Run:
    name: str  # e.g. "round3/optimizer_loop_run2", "round3/decode_eager.torch", "ddp/ddp_straggler_2gpu"
    path: Path


#: committed runs left out of this calibration, by name prefix, and why (stated in the document)
EXCLUDED = {
    "round3/host_sync_balanced": (
        "host_sync's `balanced` and `gpu` shapes (2026-11-27, H200) calibrate the timeline breakdown's "
        "synchronization refill (docs/breakdown-calibration.md), not `analyze diff`: the host's pace changed "
        "between their two recordings (the twin `host_sync_balanced_fixed` 52.4 ms/step with the GPU busy 90% "
        "of its window, its repeat 59.4 ms with 78%, kernel time within 3%), a 12.8% swing of host-bound time "
        "that a code change would show the same way. Taking them into `HOST_RUN_TO_RUN` raises it from 0.402 "
        "to 0.644 and loses five of the twin pairs below, optimizer_loop among them; a diff between "
        "recordings of a loop whose host and GPU take turns says as much (its host share sets the floor)"),
    "round3/host_sync_gpu": "as `round3/host_sync_balanced`",
}


def runs() -> list[Run]:
    """Every committed run that belongs to a pair (see the module docstring), but :data:`EXCLUDED`."""
    out = [Run(p.name.removesuffix(".sqlite.xz"), p) for p in sorted(DATA.glob("*.sqlite.xz"))]
    r3 = DATA / "round3"
    out += [Run("round3/" + p.name.removesuffix(".sqlite.xz"), p) for p in sorted(r3.glob("*.sqlite.xz"))]
    out += [Run("round3/" + p.name.removesuffix(".pt.trace.json.gz") + ".torch", p)
            for p in sorted(r3.glob("*.pt.trace.json.gz"))]
    ddp = DATA / "ddp"
    out += [Run("ddp/" + n, ddp / f"{n}.sqlite.xz") for n in
            ("ddp_straggler_2gpu", "ddp_straggler_fixed_2gpu", "ddp_exposed_comm_2gpu", "ddp_exposed_comm_fixed_2gpu")]
    return [r for r in out if not r.name.startswith(tuple(EXCLUDED))]


def _split(name: str) -> tuple[str, str]:
    """``round3/optimizer_loop_fixed_run2.torch`` -> (program, variant): ("round3/optimizer_loop.torch",
    "fixed"); variants: pathology, fixed, fixed_node (the twin recorded with node-level graph tracing) and
    node (the pathology recorded that way, ``round3/compile_graph_break_node``)."""
    suffix = ".torch" if name.endswith(".torch") else ""
    m = _REPEAT.match(name.removesuffix(suffix))
    assert m is not None
    stem, variant = m.group("base"), "pathology"
    if stem.endswith("_fixed_node"):
        stem, variant = stem.removesuffix("_fixed_node"), "fixed_node"
    elif stem.endswith("_fixed"):
        stem, variant = stem.removesuffix("_fixed"), "fixed"
    elif "_fixed_" in stem:  # ddp/ddp_straggler_fixed_2gpu
        stem, variant = stem.replace("_fixed_", "_", 1), "fixed"
    elif stem.endswith("_node"):
        stem, variant = stem.removesuffix("_node"), "node"
    return stem + suffix, variant


def pairs(names: list[str]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(repeat pairs, pathology -> twin pairs), ordered; repeat pairs in both orders. A pathology pairs with
    both twins (graph-level and node-level tracing); one recorded with node-level tracing, with the
    node-level twin only."""
    groups: dict[tuple[str, str], list[str]] = {}
    for n in names:
        groups.setdefault(_split(n), []).append(n)
    repeats = [(a, b) for g in groups.values() for a in g for b in g if a != b]
    twins = []
    for (program, variant), g in sorted(groups.items()):
        for twin in {"pathology": ("fixed", "fixed_node"), "node": ("fixed_node",)}.get(variant, ()):
            twins += [(a, b) for a in g for b in groups.get((program, twin), [])]
    return sorted(repeats), twins


def paired(names: list[str]) -> set[str]:
    repeats, twins = pairs(names)
    return {n for pair in (*repeats, *twins) for n in pair}


# -- the stored numbers --------------------------------------------------------------------------------


def _record(summary: Any) -> dict[str, Any]:
    s = summary.steps
    return {"source": s.source, "stem": s.stem, "ops_per_step": s.ops_per_step, "names": list(s.names),
            "durations_ns": list(s.durations_ns), "gpu_busy_ns": summary.gpu_busy_ns,
            "analyzed_ns": summary.analyzed_ns, "device_count": summary.device_count}


def collect(reports: Path | None, only: list[str] | None = None, old: dict[str, Any] | None = None) -> dict[str, Any]:
    """The stored numbers of every paired run; with ``only`` (name prefixes), those runs analyzed again and
    the others' taken from ``old`` (runs no longer paired or committed are dropped)."""
    from analyzer.diff.inputs import load_run
    from analyzer.pipeline import AnalysisOptions

    out = {}
    present = [r for r in runs() if r.path.is_file()]
    keep = paired([r.name for r in present])
    for run in present:
        if run.name not in keep:
            continue
        if only is not None and not run.name.startswith(tuple(only)) and old is not None and run.name in old:
            out[run.name] = old[run.name]
            continue
        source = run.path
        if reports is not None:
            candidate = reports / (run.name.split("/")[-1] + ".json")
            if candidate.is_file():
                source = candidate
        print(f"  {run.name} <- {source.name}", file=sys.stderr)
        out[run.name] = _record(load_run(source, AnalysisOptions()))
    return out


# -- the table -----------------------------------------------------------------------------------------


def _steps(rec: dict[str, Any]) -> Any:
    from analyzer.reports.baseline import Steps

    return Steps(rec["source"], rec["source"], tuple(rec["durations_ns"]), tuple(rec["names"]),
                 rec["ops_per_step"], len(rec["durations_ns"]))


def _host(rec: dict[str, Any]) -> float | None:
    from analyzer.diff import stats

    return stats.host_share(rec["gpu_busy_ns"], rec["analyzed_ns"], rec["device_count"])


def verdict(base: dict[str, Any], head: dict[str, Any]) -> Any:
    from analyzer.diff.compare import DiffSettings, compare_step_times

    return compare_step_times(_steps(base), _steps(head), _host(base), _host(head), DiffSettings(), [])


def calibrate(store: dict[str, Any]) -> tuple[float, str]:
    """(the run-to-run constant the repeats give, the pair that sets it): per repeat pair that the other
    floors (--min-effect, each run's drift) do not cover, |log HL ratio| / the larger host share; the
    largest, times :data:`analyzer.diff.stats.HEADROOM`."""
    from analyzer.diff import stats
    from analyzer.diff.compare import DEFAULT_MIN_EFFECT_PCT

    repeats, _ = pairs(sorted(store))
    best, which = 0.0, ""
    for a, b in repeats:
        x = [h for h in (_host(store[a]), _host(store[b])) if h is not None]
        da, db = store[a]["durations_ns"], store[b]["durations_ns"]
        if not x or not da or not db:
            continue
        moved = abs(math.log(stats.compare_steps(da, db).ratio))
        others = [stats.log_floor(DEFAULT_MIN_EFFECT_PCT)]
        others += [abs(math.log1p(d)) for d in (stats.drift(da), stats.drift(db)) if d is not None and d > -1]
        if moved <= max(others):
            continue
        per_host = moved / max(max(x), 1e-9)
        if per_host > best:
            best, which = per_host, f"{a} -> {b}"
    return round(best * stats.HEADROOM, 3), which


def _ms(ns: float | None) -> str:
    return "—" if ns is None else f"{ns / 1e6:,.2f}"


def expected(v: Any, base: dict[str, Any] | None = None, head: dict[str, Any] | None = None) -> str:
    """What a pathology -> twin pair must give: detected when the distributions separate and the change
    is beyond --min-effect. Runs without step marks whose repeating op sequences differ in length (the
    fix changed the ops of an iteration: compile_graph_break_bare) are not the same unit of work to the
    diff, which must say so rather than compare them."""
    from analyzer.diff.compare import DEFAULT_MIN_EFFECT_PCT

    if base is not None and head is not None and "periodic" in (base["source"], head["source"]) and (
            base["source"] != head["source"] or base["ops_per_step"] != head["ops_per_step"]):
        return "no step marks, different op sequences"
    if v.n_base < 5 or v.n_head < 5:
        return "too few steps"
    if v.separated == 0:
        return "overlapping"
    if v.change_pct is not None and abs(v.change_pct) < DEFAULT_MIN_EFFECT_PCT:
        return f"separated, below {DEFAULT_MIN_EFFECT_PCT:g}%"
    return "separated"


def document(store: dict[str, Any]) -> str:
    from analyzer.diff import stats
    from analyzer.reports.format import fmt_pct

    k, which = calibrate(store)
    repeats, twins = pairs(sorted(store))
    lines = [
        "# Calibration of `analyze diff` on the committed traces",
        "",
        "Generated by `tests/diff_calibration.py --write` from `tests/data/diff_calibration.json` (the step",
        "times, GPU busy time and window of every committed run, as the analyzer measures them); a test checks",
        "that this page and the constant in `analyzer/diff/stats.py` are current.",
        "",
        "The rule (`analyzer/diff/stats.py`): a step-time change is significant when each run has at least",
        f"{stats.MIN_STEPS} steps, the Mann-Whitney test rejects at p < 0.05, and the Hodges-Lehmann ratio HEAD/BASE is",
        "beyond the noise floor, the largest of `--min-effect` (3%), each run's drift within itself and the",
        "run-to-run variation of host-bound time: `HOST_RUN_TO_RUN` x the larger host share (the share of the",
        "window the GPU sat idle), on the log scale.",
        "",
        f"**HOST_RUN_TO_RUN = {k:g}**: the largest |log HL ratio| / host share over the repeat pairs that "
        f"`--min-effect` and the runs' drift do not cover ({k / stats.HEADROOM:.3f}, `{which}`), times a "
        f"headroom of {stats.HEADROOM:g}. A loop whose GPU idles "
        f"90% of the step gets a floor of {fmt_pct(stats.floor_pct(k * 0.9))}; one whose GPU idles 5%, "
        f"{fmt_pct(stats.floor_pct(k * 0.05))} (then `--min-effect` rules).",
        "",
        "## Repeat pairs: the same program run twice (must be no significant change)",
        "",
        "| BASE -> HEAD | steps | median ms | change | p | host share | floor | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    alarms = 0
    for a, b in repeats:
        v = verdict(store[a], store[b])
        alarms += v.significant
        lines.append(_row(a, b, v))
    lines += ["", f"False alarms: **{alarms}** of {len(repeats)} ordered repeat pairs.", "",
              "## Pathology -> twin pairs (must be significant where the distributions separate)", "",
              "| BASE -> HEAD | steps | median ms | change | p | host share | floor | distributions | verdict |",
              "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    missed = 0
    must = 0
    for a, b in twins:
        v = verdict(store[a], store[b])
        exp = expected(v, store[a], store[b])
        if exp == "separated":
            must += 1
            missed += not (v.significant and v.status == "faster")
        lines.append(_row(a, b, v, exp))
    lines += ["", f"Detected: **{must - missed}** of {must} pairs whose distributions separate by more than "
              "--min-effect (the reverse directions are the same tests with the sign flipped).", "",
              "## Left out", ""]
    lines += [f"- `{name}*`: {why}." for name, why in EXCLUDED.items()]
    lines.append("")
    return "\n".join(lines)


def _row(a: str, b: str, v: Any, exp: str | None = None) -> str:
    from analyzer.reports.format import fmt_pct

    host = [x for x in (v.host_base_pct, v.host_head_pct) if x is not None]
    cells = [f"{a} -> {b}", f"{v.n_base} / {v.n_head}", f"{_ms(v.base_median_ns)} -> {_ms(v.head_median_ns)}",
             "—" if v.change_pct is None else f"{v.change_pct:+.1f}%",
             "—" if v.p_value is None else f"{v.p_value:.2g}",
             "—" if not host else fmt_pct(max(host)), f"{fmt_pct(v.noise_floor_pct)} ({v.floor_source})"]
    if exp is not None:
        cells.append(exp)
    cells.append(v.status)
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    ap.add_argument("--reports", type=Path, default=None, help="folder of JSON reports of the runs (by name)")
    ap.add_argument("--from-store", action="store_true", help="with --write: only rewrite the document")
    ap.add_argument("--only", action="append", metavar="PREFIX",
                    help="with --write: analyze only the runs whose name starts with PREFIX (and those not "
                         "yet stored), keep the others' stored numbers (repeatable)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from analyzer.diff import stats

    if args.write:
        if args.from_store:
            store = json.loads(STORE.read_text(encoding="utf-8"))
        else:
            old = json.loads(STORE.read_text(encoding="utf-8")) if args.only and STORE.is_file() else None
            store = collect(args.reports, args.only, old)
            STORE.write_text(json.dumps(store, indent=0, sort_keys=True) + "\n", encoding="utf-8")
        DOC.write_text(document(store), encoding="utf-8")
        print(f"wrote {STORE.relative_to(REPO)} and {DOC.relative_to(REPO)}")
        return 0
    store = json.loads(STORE.read_text(encoding="utf-8"))
    ok = True
    k, which = calibrate(store)
    if k != stats.HOST_RUN_TO_RUN:
        print(f"HOST_RUN_TO_RUN is {stats.HOST_RUN_TO_RUN:g} in the code; the repeats give {k:g} ({which})")
        ok = False
    text = document(store)
    old = DOC.read_text(encoding="utf-8") if DOC.is_file() else ""
    if text != old:
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), str(DOC), "generated"))
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
