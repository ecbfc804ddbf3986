"""Many rank traces of one job: the job analysis serially and on a local Dask cluster of 1 and 2 workers.

    python benchmarks/bench_jobs.py [--sizes 8,32,64] [--workers 1,2] [--serial-up-to 8]
                                    [--spill FRACTION] [--workdir /tmp/bench_jobs] [--out benchmarks/JOBS.md]

1. Builds an N-rank job from the real 2-GPU straggler job (tests/data/ddp/ddp_straggler_2gpu_rank*):
   N - 1 copies of rank 0's trace (a healthy rank that waits in every collective) and one copy of
   rank 1's trace (the straggler: its loader is slower, it arrives ~40 ms late at each step's first
   all-reduce), placed at rank N/3, files ``job_rank<R>.sqlite``. Every copy gets its own session
   clock: ``TARGET_INFO_SESSION_START_TIME`` moved by a random skew of up to +-25 ms (the real per-rank
   reports here disagreed by 2-34 ms), so ranks must be aligned on their collectives as real ones are.
   The copies are the real exports otherwise (same kernels, NVTX, API calls).
2. Runs ``analyze job_rank*.sqlite --format json`` in a fresh subprocess per configuration: serially
   (up to ``--serial-up-to`` ranks: every trace passes through the client) and with
   ``--scheduler local --workers W`` (with ``--spill F``: Dask's workers spill what they hold to disk
   above F of their memory limit, ``distributed.worker.memory.target/spill``, to show that nothing a
   job leaves with Dask needs to stay in memory). Measures wall time and the client's peak RSS (``os.wait4`` on
   the client process: its own, the Dask workers are separate processes and not counted).
3. Checks that the report names the planted straggler at every size, and writes a Markdown table with
   the machine and date to ``--out``, plus an estimate for 1,024 ranks.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import lzma
import os
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


def run(folder: Path, workers: int | None, out: Path, spill: float | None = None) -> dict:
    """One configuration in a fresh client process: wall time, client peak RSS, the straggler found."""
    files = sorted(folder.glob("job_rank*.sqlite"), key=lambda p: int(p.stem.rsplit("rank", 1)[1]))
    cmd = [sys.executable, "-m", "analyzer.cli", *map(str, files), "--format", "json", "-o", str(out), "-q"]
    if workers:
        cmd += ["--scheduler", "local", "--workers", str(workers)]
    else:
        cmd += ["--scheduler", "none"]  # in the client process (8+ files default to a local cluster)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if spill is not None:  # Dask's own configuration, through its environment variables
        env["DASK_DISTRIBUTED__WORKER__MEMORY__TARGET"] = env["DASK_DISTRIBUTED__WORKER__MEMORY__SPILL"] = str(spill)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"analyze failed ({status}): {' '.join(cmd)}")
    doc = json.loads(out.read_text())
    stragglers = [f["scope"].get("rank") for f in doc["job"]["findings"] if f["rule"] == "straggler"]
    return {"wall_s": wall, "client_rss_mb": usage.ru_maxrss / 1024, "straggler": stragglers,
            "culprit": doc["job"]["culprit_rank"], "size_kb": out.stat().st_size / 1024}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8,32,64")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--serial-up-to", type=int, default=8)
    ap.add_argument("--spill", type=float, default=None,
                    help="Dask workers spill to disk above this fraction of their memory limit (e.g. 0.01)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench_jobs"))
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "JOBS.md")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in sizes:
        folder, straggler = build_job(n, args.workdir)
        configs = ([None] if n <= args.serial_up_to else []) + workers
        for w in configs:
            res = run(folder, w, args.workdir / f"report{n}_{w or 0}.json", args.spill if w else None)
            found = res["straggler"] == [straggler]
            rows.append({"ranks": n, "mode": f"Dask, {w} worker{'s' if w > 1 else ''}" if w else "serial",
                         "straggler": straggler, "found": found, **res})
            print(f"{n:4d} ranks  {rows[-1]['mode']:16s} {res['wall_s']:7.1f} s  client peak "
                  f"{res['client_rss_mb']:7.0f} MB  straggler {res['straggler']} (planted {straggler})",
                  flush=True)
    lines = [
        "# Multi-GPU job analysis: many ranks, serial and on Dask", "",
        f"Measured {dt.date.today().isoformat()} on {platform.node()} ({os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}), "
        "`python benchmarks/bench_jobs.py`.", "",
        "Each N-rank job is N - 1 copies of the real rank 0 of tests/data/ddp/ddp_straggler_2gpu_rank* "
        "plus its rank 1 (the straggler) at rank N/3, each copy with its own session clock skewed by up "
        "to +-25 ms (a 3.9 MB SQLite file, 17k kernels, per rank). Wall time of the whole `analyze` "
        "process (JSON report); client peak RSS is the `analyze` process alone (Dask workers are "
        "separate processes)."
        + (f" Dask workers spill to disk above {args.spill:g} of their memory limit (`--spill`)." if args.spill
           is not None else ""), "",
        "| Ranks | Mode | Wall | Client peak RSS | Straggler found (planted) | Report |",
        "|---:|---|---:|---:|---|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['ranks']} | {r['mode']} | {r['wall_s']:.1f} s | {r['client_rss_mb']:.0f} MB | "
                     f"{'yes' if r['found'] else 'NO'}: rank {r['straggler']} | {r['size_kb']:.0f} KB |")
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0 if all(r["found"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
