"""``python -m analyzer.fuzz [--harness NAME]... [--cases N] [--seed S] [--out DIR]`` (``make fuzz``).

Runs each harness for ``--cases`` hypothesis-generated cases (seeded, so a run is reproducible),
prints a summary and writes ``DIR/fuzz-<harness>.json`` (cases, exit codes, kinds of one-line errors,
slowest case, peak memory, failures). A failure stops its harness after hypothesis has shrunk it to a
minimal case, printed with the ``@reproduce_failure`` blob to replay it; the exit code is 1 then.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HARNESSES = ("nsys", "ncu", "rules", "kineto", "diff")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analyzer.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--harness", action="append", choices=HARNESSES + ("all",), default=None)
    parser.add_argument("--cases", type=int, default=1000, help="cases per harness (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("fuzz-results"))
    parser.add_argument("--summary", action="store_true",
                        help="print the Markdown table of every run kept in --out (for docs/robustness.md)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="processes per harness, seeds SEED..SEED+JOBS-1, cases split between them")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="start no case after this many seconds (a long run on a lent machine ends in time "
                             "and keeps every finished case)")
    args = parser.parse_args(argv)
    names = HARNESSES if not args.harness or "all" in args.harness else tuple(args.harness)
    if args.summary:
        print(summary_table(args.out))
        return 0
    if args.jobs > 1:
        return _parallel(names, args)
    from analyzer.fuzz.harness import OutOfTime, Stats

    deadline = None if args.max_seconds is None else time.time() + args.max_seconds
    failed = False
    for name in names:
        module = importlib.import_module(f"analyzer.fuzz.{name}")
        stats = Stats(name, seed=args.seed, checkpoint=args.out / f"fuzz-{name}-seed{args.seed}.json",
                      deadline=deadline, started_cpu=time.process_time())
        stats.extra["environment"] = _environment()
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"fuzz-{name}-") as work:
            try:
                module.run_cases(args.cases, args.seed, Path(work), stats=stats)
            except OutOfTime:
                pass
            except Exception as exc:  # noqa: BLE001 - a failure found: report it, go on with the next harness
                if stats.extra.get("stopped_at_deadline") and _is_hypothesis_error(exc):
                    # hypothesis, replaying a known prefix, saw the run stop at its deadline and called its
                    # data generation inconsistent: the end of the run, not a finding
                    pass
                else:
                    failed = True
                    stats.failures.append(f"{type(exc).__name__}: {exc}")
                    traceback.print_exc()
        stats.extra["wall_s"] = round(time.perf_counter() - started, 1)
        stats.extra["finished"] = True
        stats.dump(args.out / f"fuzz-{name}-seed{args.seed}.json")
        summary = stats.as_dict()
        print(f"{name}: {summary['cases']} cases, exit codes {summary['exit_codes']}, "
              f"{summary['distinct_errors']} kinds of one-line error, slowest {summary['slowest_case_s']} s, "
              f"peak {summary['peak_rss_mb']} MiB, failures {len(summary['failures'])}, "
              f"{summary['wall_s']} s, CPU per case {summary['cpu_per_case_s']} s "
              f"(setup {summary.get('setup_cpu_s')} s)", flush=True)
    _totals(args.out)
    return 1 if failed else 0


def _is_hypothesis_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("hypothesis")


def _environment() -> dict[str, str]:
    """Python and library versions of a run: hypothesis draws other cases for a seed in another version."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    env = {"python": platform.python_version(), "machine": platform.machine()}
    for dist in ("hypothesis", "pandas", "numpy", "pyarrow", "adbc-driver-sqlite", "msgspec", "google-re2"):
        try:
            env[dist] = version(dist)
        except PackageNotFoundError:
            env[dist] = "missing"
    return env


def _parallel(names: tuple[str, ...], args: argparse.Namespace) -> int:
    """One process per seed and harness, ``args.jobs`` at a time."""
    import subprocess

    per_job = -(-args.cases // args.jobs)
    failed = False
    for name in names:
        limit = [] if args.max_seconds is None else ["--max-seconds", str(args.max_seconds)]
        procs = [subprocess.Popen([sys.executable, "-m", "analyzer.fuzz", "--harness", name, "--cases",
                                   str(per_job), "--seed", str(args.seed + i), "--out", str(args.out), *limit])
                 for i in range(args.jobs)]
        failed |= any(p.wait() != 0 for p in procs)
    _totals(args.out)
    return 1 if failed else 0


@dataclass
class _Row:
    seeds: list[str] = field(default_factory=list)
    cases: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    kinds: int = 0
    failures: int = 0
    cpu: float = 0.0
    rss: int = 0
    seconds: float = 0.0
    process_cpu: float = 0.0
    cpu_cases: int = 0


def summary_table(out: Path) -> str:
    """Per harness: seeds, cases, exit codes, kinds of one-line errors, failures, time, memory."""
    rows: dict[str, _Row] = {}
    for path in sorted(out.glob("fuzz-*-seed*.json")):
        data = json.loads(path.read_text())
        if not data["cases"]:
            continue
        row = rows.setdefault(data["harness"], _Row())
        row.seeds.append(str(data["seed"]))
        row.cases += data["cases"]
        row.codes.update(data["exit_codes"])
        row.kinds = max(row.kinds, data["distinct_errors"])
        row.failures += len(data["failures"])
        row.cpu = max(row.cpu, data.get("max_case_cpu_s", 0.0))
        row.rss = max(row.rss, data["peak_rss_mb"])
        row.seconds += data["seconds"]
        if data.get("cpu_per_case_s") is not None:
            row.process_cpu += data["cpu_per_case_s"] * data["cases"]
            row.cpu_cases += data["cases"]
    lines = ["| harness | seeds | cases | exit 0 / 1 / 2 | kinds of one-line error (largest run) | failures | "
             "mean case (wall) | mean CPU per case (process) | most CPU in one case | peak memory |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {', '.join(r.seeds)} | {r.cases:,} | {r.codes['0']:,} / {r.codes['1']:,} / "
                     f"{r.codes['2']:,} | {r.kinds} | {r.failures} | {r.seconds / max(1, r.cases):.2f} s | "
                     f"{f'{r.process_cpu / r.cpu_cases:.3f} s' if r.cpu_cases else '-'} | "
                     f"{r.cpu:.1f} s | {r.rss} MiB |")
    if rows and all(r.cpu_cases for r in rows.values()):
        per_set = sum(r.process_cpu / r.cpu_cases for r in rows.values())
        lines += ["", f"CPU for 10,000 cases of each harness above: {per_set * 10_000 / 3600:.1f} core-hours "
                      f"({per_set * 10_000 / 2 / 60:.0f} minutes on 2 cores, one process per core)"]
    return "\n".join(lines)


def _totals(out: Path) -> dict[str, int]:
    """Cases per harness over every result file in ``out`` (all seeds, all runs)."""
    totals: dict[str, int] = {}
    for path in sorted(out.glob("fuzz-*-seed*.json")):
        data = json.loads(path.read_text())
        totals[data["harness"]] = totals.get(data["harness"], 0) + data["cases"]
    print("cases so far in", out, json.dumps(totals), flush=True)
    return totals


if __name__ == "__main__":
    sys.exit(main())
