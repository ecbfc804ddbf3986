"""Many rank traces of one job: the job analysis serially and on a local Dask cluster of 1 and 2 workers.

    python benchmarks/bench_jobs.py [--sizes 8,32,64,128] [--workers 1,2] [--serial-up-to 8]
                                    [--modes plain,spill] [--spill-mb 1] [--memory-limit BYTES]
                                    [--timeout 1800] [--workdir /tmp/bench_jobs] [--out benchmarks/JOBS.md]

1. Builds an N-rank job from the real 2-GPU straggler job (tests/data/ddp/ddp_straggler_2gpu_rank*):
   N - 1 copies of rank 0's trace (a healthy rank that waits in every collective) and one copy of
   rank 1's trace (the straggler: its loader is slower, it arrives ~40 ms late at each step's first
   all-reduce), placed at rank N/3, files ``job_rank<R>.sqlite``. Every copy gets its own session
   clock: ``TARGET_INFO_SESSION_START_TIME`` moved by a random skew of up to +-25 ms (the real per-rank
   reports here disagreed by 2-34 ms), so ranks must be aligned on their collectives as real ones are.
   The copies are the real exports otherwise (same kernels, NVTX, API calls).
2. Runs ``analyze job_rank*.sqlite --format json`` in a fresh client process per configuration: serially
   (up to ``--serial-up-to`` ranks: every trace passes through the client) and on a local Dask cluster of
   W single-threaded worker processes (``--workers``) that this script starts for the configuration and
   hands to ``analyze --scheduler tcp://...`` (a fresh cluster each time; its start-up is timed apart).
   Modes (``--modes``): ``plain`` (each worker's memory limit Dask's default, the machine's memory / W,
   or ``--memory-limit``) and ``spill``: the same limit, but the workers' spill thresholds
   (``distributed.worker.memory.target`` and ``.spill``) set to ``--spill-mb`` MB, so every result a
   worker holds is written to disk as it arrives and read back from there (what once failed to
   pickle); pausing and termination stay at Dask's defaults. Measured: wall time of the client, the
   client's peak RSS (``os.wait4``: the ``analyze`` process alone), each worker's peak RSS, and what
   the workers wrote to disk (Dask's own spill counters); a run past ``--timeout`` is a failure.
3. Checks that the report names the planted straggler at every size, measures the bytes of one rank's
   summary and result as Dask pickles them, and writes a Markdown table with the machine, date and
   commit to ``--out``, plus an estimate for 1,024 ranks on a cluster derived from these measurements.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import lzma
import os
import pickle
import platform
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DDP = REPO / "tests" / "data" / "ddp"
# this checkout's analyzer, here and in the Dask workers this script starts (they inherit sys.path and
# PYTHONPATH): an installed analyzer of another version would run the tasks otherwise
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])


def _unpack(src: Path, dst: Path) -> None:
    with lzma.open(src) as f, open(dst, "wb") as g:
        shutil.copyfileobj(f, g, length=1 << 20)


def build_job(n: int, workdir: Path, seed: int = 11) -> tuple[Path, int]:
    """The N-rank job's folder and the straggler's rank."""
    folder = workdir / f"job{n}"
    straggler = n // 3
    stamp = folder / "stamp.json"
    if stamp.exists() and json.loads(stamp.read_text()) == {"n": n, "seed": seed, "straggler": straggler}:
        return folder, straggler
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    base = workdir / "base"
    base.mkdir(exist_ok=True)
    healthy, late = base / "rank0.sqlite", base / "rank1.sqlite"
    if not healthy.exists():
        _unpack(DDP / "ddp_straggler_2gpu_rank0.sqlite.xz", healthy)
        _unpack(DDP / "ddp_straggler_2gpu_rank1.sqlite.xz", late)
    rng = random.Random(seed)
    for r in range(n):
        target = folder / f"job_rank{r}.sqlite"
        shutil.copyfile(late if r == straggler else healthy, target)
        skew = rng.randint(-25_000_000, 25_000_000)
        con = sqlite3.connect(target)
        con.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", (skew,))
        con.commit()
        con.close()
    stamp.write_text(json.dumps({"n": n, "seed": seed, "straggler": straggler}))
    return folder, straggler


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True,
                              timeout=30).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def _rank_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("job_rank*.sqlite"), key=lambda p: int(p.stem.rsplit("rank", 1)[1]))


def _worker_stats(dask_worker: object) -> dict:
    """On a worker: its peak RSS and what it spilled to disk (Dask's cumulative spill counters)."""
    import resource

    metrics = getattr(getattr(dask_worker, "data", None), "cumulative_metrics", {}) or {}
    return {"rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "spilled": int(metrics.get(("disk-write", "count"), 0)),
            "spilled_bytes": int(metrics.get(("disk-write", "bytes"), 0)),
            "memory_limit": int(getattr(getattr(dask_worker, "memory_manager", None), "memory_limit", 0) or 0)}


def start_cluster(workers: int, mode: str, spill_mb: float, memory_limit: str | None) -> tuple:
    """A local cluster of ``workers`` single-threaded processes: (client, cluster, start-up seconds)."""
    import dask
    from dask.utils import parse_bytes
    from distributed import Client, LocalCluster
    from distributed.system import MEMORY_LIMIT

    limit = parse_bytes(memory_limit) if memory_limit else MEMORY_LIMIT // workers  # Dask's "auto"
    config: dict[str, object] = {}
    if mode == "spill":
        fraction = min(0.5, spill_mb * 1e6 / limit)
        config = {"distributed.worker.memory.target": fraction, "distributed.worker.memory.spill": fraction}
    t0 = time.perf_counter()
    with dask.config.set(config):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                               memory_limit=limit, silence_logs=50)
        client = Client(cluster)
    return client, cluster, time.perf_counter() - t0


def run(folder: Path, workers: int | None, out: Path, *, mode: str = "plain", spill_mb: float = 1.0,
        memory_limit: str | None = None, timeout: float = 1800.0) -> dict:
    """One configuration in a fresh client process: wall time, client peak RSS, the straggler found; on
    Dask also the cluster's start-up, the workers' peak RSS and what they spilled."""
    files = _rank_files(folder)
    cmd = [sys.executable, "-m", "analyzer.cli", *map(str, files), "--format", "json", "-o", str(out), "-q"]
    client = cluster = None
    start_s = 0.0
    if workers:
        client, cluster, start_s = start_cluster(workers, mode, spill_mb, memory_limit)
        cmd += ["--scheduler", cluster.scheduler_address]
    else:
        cmd += ["--scheduler", "none"]  # in the client process (8+ files default to a local cluster)
    env = dict(os.environ)  # PYTHONPATH: this checkout first (above)
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=REPO)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                proc.wait()
                raise SystemExit(f"analyze ran past {timeout:g} s (a hang?): {' '.join(cmd[:6])} ...")
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        if code not in (0, 1):
            raise SystemExit(f"analyze failed (exit {code}) on {len(files)} ranks, "
                             f"{workers or 0} worker(s), mode {mode}")
        stats = list(client.run(_worker_stats).values()) if client is not None else []
    finally:
        if client is not None:
            client.close()
            cluster.close()
    doc = json.loads(out.read_text())
    stragglers = [f["scope"].get("rank") for f in doc["job"]["findings"] if f["rule"] == "straggler"]
    return {"wall_s": wall, "client_rss_mb": usage.ru_maxrss / 1024, "straggler": stragglers,
            "culprit": doc["job"]["culprit_rank"], "size_kb": out.stat().st_size / 1024, "start_s": start_s,
            "worker_rss_mb": max((w["rss_peak_mb"] for w in stats), default=None),
            "spilled": sum(w["spilled"] for w in stats) if stats else None,
            "spilled_mb": sum(w["spilled_bytes"] for w in stats) / 1e6 if stats else None,
            "worker_limit_mb": max((w["memory_limit"] for w in stats), default=0) / 1e6 if stats else None}


def summary_bytes(folder: Path) -> dict:
    """Bytes of what travels per rank, pickled as Dask pickles task results (protocol 5): phase 1's
    summary and phase 2's result (as a task returns it) of the straggler rank and a healthy one (in this
    process), for a rank shown in full (``result``: its report section and swimlanes) and for one shown
    as its row of the rank table (``row``: findings and numbers)."""
    from analyzer.facts.comm import JobRankContext
    from analyzer.job.rank import RankJobInput, finish_rank, prepare_file
    from analyzer.job.remote import to_client
    from analyzer.trace_analysis import AnalysisOptions, load_rules

    import pandas as pd

    options = AnalysisOptions()
    pack = load_rules(options)
    files = _rank_files(folder)
    sizes: dict[str, list[int]] = {"summary": [], "result": [], "row": []}
    for path in sorted({files[0], files[len(files) // 3]}):  # a healthy rank and the straggler (one file at 2 ranks)
        for full in (True, False):
            fs = prepare_file(str(path), 0, options)
            for s, st in zip(fs.summaries, fs.states):
                inp = RankJobInput(rank=0, world_size=2, how="file name", context=JobRankContext(rank=0, world_size=2),
                                   late_intervals=pd.DataFrame({"inst": [], "start": [], "end": []}, dtype="int64"),
                                   lane_span=None, section_index=1, full=full)
                if full:
                    sizes["summary"].append(len(pickle.dumps(s, protocol=5)))
                size = len(pickle.dumps(to_client(finish_rank(st, s, pack, inp)), protocol=5))
                sizes["result" if full else "row"].append(size)
    return {k: max(v) for k, v in sizes.items()}


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares line y = a + b x (b = 0 from one point)."""
    if len(xs) < 2:
        return (ys[0] if ys else 0.0), 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def estimate(rows: list[dict], sizes: dict, ranks: int = 1024) -> list[str]:
    """The 1,024-rank estimate from this run's numbers (see the text it returns)."""
    plain = [r for r in rows if r["mode_key"] == "plain" and r["workers"]] or [r for r in rows if r["workers"]]
    one = sorted((r for r in plain if r["workers"] == 1), key=lambda r: r["ranks"])
    most = max((r["workers"] for r in plain), default=0)
    many = sorted((r for r in plain if r["workers"] == most), key=lambda r: r["ranks"])
    if not one:
        return [f"## Estimate for {ranks:,} ranks on a cluster", "", "(no Dask run on one worker: no estimate)"]
    a1, b1 = _fit([r["ranks"] for r in one], [r["wall_s"] for r in one])  # fixed s + s per rank, one worker
    ac, bc = _fit([r["ranks"] for r in plain], [r["client_rss_mb"] for r in plain])  # client MB + MB per rank
    aw, bw = _fit([r["ranks"] for r in one], [r["worker_rss_mb"] or 0.0 for r in one])  # worker MB per rank held
    serial8 = next((r for r in rows if not r["workers"] and r["ranks"] == (one[0]["ranks"])), None)
    eff = None
    if most > 1 and many:
        top = max(r["ranks"] for r in many)
        w1 = next((r["wall_s"] for r in one if r["ranks"] == top), None)
        wn = next(r["wall_s"] for r in many if r["ranks"] == top)
        if w1:
            eff = (w1 / wn) / most  # parallel efficiency at the largest size
    per_rank_kb = (sizes["summary"] + sizes["row"]) / 1024
    lines = [
        f"## Estimate for {ranks:,} ranks on a cluster (from this run)", "",
        f"- **Per-rank work**: a line through the one-worker runs gives {b1:.3f} s per rank on one worker "
        f"process plus {a1:.1f} s fixed (client start, imports, the job's cross-rank analysis, the report);"
        + (f" {most} workers ran the largest job at {eff:.0%} parallel efficiency." if eff is not None else ""),
        f"- **Bytes per rank** that travel to the client: summary {sizes['summary'] / 1024:.0f} KB + result "
        f"{sizes['row'] / 1024:.0f} KB for a rank shown as its table row, {sizes['result'] / 1024:.0f} KB for "
        "one of the 8 shown in full (pickled, the larger of a healthy and the straggler rank): "
        f"{ranks * per_rank_kb / 1024:.0f} MB for {ranks:,} ranks, one message per task, two tasks per rank "
        f"({2 * ranks:,} tasks; Dask's documentation puts a task's overhead at about 1 ms, "
        "https://distributed.dask.org/: seconds of scheduling, not minutes).",
        f"- **Client memory**: {ac:.0f} MB + {bc:.2f} MB per rank (fit over the Dask runs) -> about "
        f"{ac + bc * ranks:,.0f} MB at {ranks:,} ranks: the client never holds a trace; it holds each "
        "rank's summary (its communication kernels only until phase 2 is sent, the reference rank's after), "
        "its findings and its row of the rank table, and the sections of the 8 ranks shown in full "
        "(`--rank-sections`); the JSON report is written one section at a time.",
        f"- **Worker memory**: a worker keeps each rank it prepared between the two phases; {bw:.1f} MB per "
        f"rank held (one-worker runs) over {aw:.0f} MB idle: {ranks:,} ranks on W workers need about "
        f"{aw:.0f} + {bw:.1f} x {ranks}/W MB per worker (W = 64: {aw + bw * ranks / 64:,.0f} MB; W = 16: "
        f"{aw + bw * ranks / 16:,.0f} MB).",
    ]
    for w in (16, 64, 128):
        par = (eff or 1.0)
        lines.append(f"- **{w} workers** (one core each, the rank files on a shared file system read at "
                     f"local-disk speed): about {a1 + b1 * ranks / (w * par):,.0f} s wall "
                     f"({a1:.0f} s fixed + {ranks} x {b1:.3f} s / ({w} x {par:.2f})).")
    if serial8 is not None:
        d = next(r for r in one if r["ranks"] == serial8["ranks"])
        lines.append(f"- Dask's own cost at {serial8['ranks']} ranks (one worker vs the client alone): "
                     f"{d['wall_s'] - serial8['wall_s']:+.1f} s.")
    lines += ["", "Not measured here: a real network (each rank's summary and result cross it once), a "
              "shared file system's read rate, and the client at 1,024 ranks itself (the fit above covers it "
              "up to this run's largest job; what grows with the ranks is each rank's summary, findings and "
              "table row, and the job tables' rows)."]
    return lines


def main(argv: list[str] | None = None) -> int:
    # the workers this script starts run as those of `analyze`'s own local cluster: they inherit the
    # command's NUMPY_MADVISE_HUGEPAGE=0 where the kernel compacts memory synchronously (set before numpy is
    # imported; see analyzer.resources.avoid_hugepage_stalls)
    from analyzer.resources import avoid_hugepage_stalls

    avoid_hugepage_stalls()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8,32,64,128")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--serial-up-to", type=int, default=8)
    ap.add_argument("--modes", default="plain,spill", help="plain, spill or both (comma-separated)")
    ap.add_argument("--spill-mb", type=float, default=1.0,
                    help="spill mode: the workers' spill thresholds in MB (every result goes to disk)")
    ap.add_argument("--memory-limit", default=None,
                    help="each worker's memory limit (e.g. 4GB; default Dask's: the machine's memory / W)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one analyze run may take")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench_jobs"))
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "JOBS.md")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in ("plain", "spill") for m in modes):
        ap.error("--modes takes plain and/or spill")
    args.workdir.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc)
    load_before = os.getloadavg()
    rows = []
    for n in sizes:
        folder, straggler = build_job(n, args.workdir)
        configs = ([(None, "plain")] if n <= args.serial_up_to else []) + [(w, m) for m in modes for w in workers]
        for w, mode in configs:
            res = run(folder, w, args.workdir / f"report{n}_{w or 0}_{mode}.json", mode=mode,
                      spill_mb=args.spill_mb, memory_limit=args.memory_limit, timeout=args.timeout)
            found = res["straggler"] == [straggler]
            label = (f"Dask, {w} worker{'s' if w > 1 else ''}" + (", spilling" if mode == "spill" else "")) if w \
                else "serial"
            rows.append({"ranks": n, "workers": w or 0, "mode_key": mode, "mode": label, "planted": straggler,
                         "found": found, **res})
            extra = "" if not w else (f"  workers peak {res['worker_rss_mb']:6.0f} MB  spilled {res['spilled']} "
                                      f"({res['spilled_mb']:.1f} MB)  cluster start {res['start_s']:.1f} s")
            print(f"{n:4d} ranks  {label:26s} {res['wall_s']:7.1f} s  client peak {res['client_rss_mb']:6.0f} MB"
                  f"{extra}  straggler {res['straggler']} (planted {straggler})", flush=True)
    load_after = os.getloadavg()
    sizes_b = summary_bytes(build_job(sizes[0], args.workdir)[0])
    lines = [
        "# Multi-GPU job analysis: many ranks, serial and on Dask", "",
        f"Measured {started:%Y-%m-%d %H:%M} UTC on {platform.node()} ({os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}), commit {_git_commit()}: "
        f"`python benchmarks/bench_jobs.py {' '.join(argv if argv is not None else sys.argv[1:])}`; "
        f"load average (1 min) {load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end "
        f"({os.cpu_count()} cores: above that, other processes shared the cores).", "",
        "Each N-rank job is N - 1 copies of the real rank 0 of tests/data/ddp/ddp_straggler_2gpu_rank* "
        "plus its rank 1 (the straggler) at rank N/3, each copy with its own session clock skewed by up "
        "to +-25 ms (a 3.9 MB SQLite file, 17k kernels, per rank). Wall time of the whole `analyze` "
        "process (JSON report); its cluster is a fresh local one per row, started before the clock starts "
        "(start-up in its own column). Client peak RSS is the `analyze` process alone; workers' peak is "
        "the largest worker process. *Spilling*: the workers' spill thresholds set to "
        f"{args.spill_mb:g} MB, so every result they hold went to disk (the spilled column counts Dask's "
        "own disk writes).", "",
        "| Ranks | Mode | Wall | Client peak RSS | Workers' peak RSS | Spilled to disk | Cluster start | "
        "Straggler found (planted) | Report |",
        "|---:|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        dask_cols = (f"{r['worker_rss_mb']:.0f} MB | {r['spilled']} ({r['spilled_mb']:.1f} MB) | {r['start_s']:.1f} s"
                     if r["workers"] else "- | - | -")
        lines.append(f"| {r['ranks']} | {r['mode']} | {r['wall_s']:.1f} s | {r['client_rss_mb']:.0f} MB | {dask_cols} | "
                     f"{'yes' if r['found'] else 'NO'}: rank {r['straggler']} ({r['planted']}) | "
                     f"{r['size_kb']:.0f} KB |")
    speedups = []
    for m in modes:
        for n in sizes:
            w1 = next((r["wall_s"] for r in rows if r["ranks"] == n and r["workers"] == 1 and r["mode_key"] == m), None)
            w2 = next((r["wall_s"] for r in rows if r["ranks"] == n and r["workers"] == 2 and r["mode_key"] == m), None)
            if w1 and w2:
                speedups.append(f"{n} ranks{' spilling' if m == 'spill' else ''}: {w1 / w2:.2f}x")
    if speedups:
        lines += ["", "Speed-up from 1 to 2 workers: " + ", ".join(speedups) + "."]
    lines += ["", *estimate(rows, sizes_b)]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0 if all(r["found"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
