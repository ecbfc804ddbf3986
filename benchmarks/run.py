"""End-to-end benchmark: ``analyze`` on million-kernel traces against the floor and ``nsys analyze``.

    python benchmarks/run.py [--sizes 1M,5M,10M] [--source tests/data/small_training_ctx128.sqlite.xz]
                             [--workdir /tmp/bench] [--rules PACK.yaml] [--repeat 1] [--only NAME ...]

1. Builds one big trace per size by replaying a real committed export back to back
   (:mod:`make_big_trace`: kernels, API calls, copies, NVTX ranges shifted in time and correlation id).
   Built files are cached in ``--workdir`` next to a ``.json`` stamp naming the source and size.
2. Runs every contender on every size, each in its own subprocess, and measures the whole process:
   wall time, user+system CPU time and peak RSS (``os.wait4`` returns the child's own rusage, so peak
   RSS is that contender's alone, children it waited for included; a small launcher process starts
   each one, so the benchmark's own memory does not leak into the number). Contenders:

   ``analyze``        the real CLI with the rule pack and HTML output, a first run (the columnar
                      trace cache emptied before it, so it loads the file and writes the cache):
                      ``python -m analyzer.cli BIG.sqlite -o out.html -q [--rules PACK]``
   ``analyze cached`` a re-analysis with a new window (``--window full``): the same command run
                      again, the trace served from the trace cache that ``analyze`` wrote (written
                      first, unmeasured, when ``analyze`` is not run), its facts computed (the fact
                      cache emptied before each repeat: that window's facts are new)
   ``analyze cached facts`` a re-analysis with settings that keep the facts (Markdown instead of HTML
                      and a rule parameter ``--set``): the trace and every fact the rules and report
                      read served from the caches the first run wrote (analyzer/facts/cache.py)
   ``analyze no-cache`` the same first run with ``--no-cache`` (what the cache costs a first run)
   ``load cached``    ``load_trace`` served from that cache alone (imports included): the part of a
                      re-analysis that replaces the loader
   ``load_trace``     our loader alone (full :class:`~analyzer.loading.model.Trace`, attribution included)
   ``sqlite3 fetch``  the floor: Python's ``sqlite3`` fetching just the tables and columns the loader
                      reads (streamed with ``fetchmany`` and dropped, so it measures the fetch, not a
                      list of tuples; its RSS is therefore not comparable)
   ``nsys analyze``   NVIDIA's expert system (``nsys analyze BIG.sqlite``, all its rules) on a private
                      copy of the file (it may add tables), when ``find_nsys()`` finds nsys

3. Prints a table (time, CPU, peak RSS, kernels/s, time and memory ratios against ``analyze``, HTML
   size) and the growth from the smallest to the largest size (log-log fit exponents of time and
   memory), optionally checks that the largest HTML report opens in headless Chromium, and writes the
   same to ``benchmarks/RESULTS.md`` with the machine description and date.

Every process includes interpreter start-up and imports: that is what a user waits for. The page
cache is warmed (the file read once) before the contenders run, and the package byte-compiled (as
installing it does). ``--repeat N`` keeps the fastest run.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import lzma
import math
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
CONTENDERS = ("analyze", "analyze cached", "analyze cached facts", "analyze no-cache", "load cached", "load_trace", "sqlite3 fetch",
              "nsys analyze")
DEFAULT_SOURCE = "tests/data/small_training_ctx128.sqlite.xz"


@dataclass
class Result:
    contender: str
    size: str
    kernels: int
    wall_s: float = math.nan
    cpu_s: float = math.nan
    maxrss_kb: int = 0
    rc: int = 0
    html_bytes: int | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not math.isnan(self.wall_s)


# ------------------------------------------------------------------------------------------ sizes
def parse_size(text: str) -> int:
    """``1M`` -> 1_000_000, ``500k`` -> 500_000, ``2500000`` -> 2_500_000."""
    t = text.strip().lower().replace("_", "")
    mult = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in ("k", "m") else t
    try:
        value = float(num) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad size {text!r}; write e.g. 1M, 500k or 2000000") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"size {text!r} must be positive")
    return int(value)


def size_label(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


# ------------------------------------------------------------------------------------------ traces
def source_sqlite(source: Path, workdir: Path) -> Path:
    """The source export as a plain SQLite file (an ``.xz`` is decompressed once into ``workdir``)."""
    if source.suffix != ".xz":
        return source
    out = workdir / source.with_suffix("").name
    stamp = out.with_name(out.name + ".json")
    ident = {"source": str(source.resolve()), "size": source.stat().st_size, "mtime": source.stat().st_mtime_ns}
    if out.exists() and stamp.exists() and json.loads(stamp.read_text()) == ident:
        return out
    tmp = out.with_name(out.name + ".part")
    with lzma.open(source) as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    tmp.replace(out)
    stamp.write_text(json.dumps(ident))
    return out


def big_trace(src: Path, kernels: int, workdir: Path) -> Path:
    """``workdir/big_<size>.sqlite`` with at least ``kernels`` kernels, built once and reused while its
    stamp (source identity, size) matches."""
    sys.path.insert(0, str(HERE))
    from make_big_trace import build

    out = workdir / f"big_{size_label(kernels)}.sqlite"
    stamp = out.with_name(out.name + ".json")
    st = src.stat()
    ident = {"source": str(src.resolve()), "size": st.st_size, "mtime": st.st_mtime_ns, "kernels": kernels}
    if out.exists() and stamp.exists():
        try:
            if json.loads(stamp.read_text()).get("ident") == ident:
                return out
        except (json.JSONDecodeError, AttributeError):
            pass
    need = kernels * 200  # about 180 bytes per kernel with its API calls, twice for the copy step
    free = shutil.disk_usage(workdir).free
    if free < need:
        raise SystemExit(f"error: {workdir} has {free / 1e9:.1f} GB free; the {size_label(kernels)} trace "
                         f"needs about {need / 1e9:.1f} GB; use --workdir elsewhere")
    counts = build(src, out, kernels)
    stamp.write_text(json.dumps({"ident": ident, "counts": counts}))
    return out


def trace_counts(path: Path) -> dict[str, int]:
    stamp = path.with_name(path.name + ".json")
    if stamp.exists():
        counts = json.loads(stamp.read_text()).get("counts")
        if counts:
            return counts
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
                for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")}
    finally:
        conn.close()


def warm_cache(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


# ------------------------------------------------------------------------------------------ children
def child_load_trace(path: str) -> None:
    sys.path.insert(0, str(REPO))
    from analyzer.loading import load_trace

    trace = load_trace(path)
    print(json.dumps({"kernels": len(trace.kernels), "api": len(trace.api)}))


def child_load_cached(path: str) -> None:
    """``load_trace`` through the trace cache (``$ANALYZER_CACHE_DIR``); fails unless it was a hit."""
    sys.path.insert(0, str(REPO))
    from analyzer.loading import load_trace
    from analyzer.loading.cache import TraceCache

    cache = TraceCache()
    trace = load_trace(path, cache=cache)
    if not cache.hits:
        raise SystemExit("not served from the trace cache")
    print(json.dumps({"kernels": len(trace.kernels), "api": len(trace.api)}))


def child_sqlite3_fetch(path: str) -> None:
    """Fetch every value our loader reads through Python's ``sqlite3`` and drop it (the floor)."""
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(HERE))
    from bench_load import _fetch_plan, _present, _sql

    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    rows = 0
    for table, cols, where in _present(conn, _fetch_plan()):
        cur = conn.execute(_sql(table, cols, where))
        while True:
            chunk = cur.fetchmany(65536)
            if not chunk:
                break
            rows += len(chunk)
    print(json.dumps({"rows": rows}))


# Linux keeps the high-water RSS of the address space a process had before exec(): a child spawned
# straight from this (big, after building traces) process would report at least our own peak. So each
# contender is started by a small launcher process, whose wait4 gives the contender's own numbers.
_LAUNCHER = """
import json, os, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.Popen(sys.argv[2:])
_, status, ru = os.wait4(proc.pid, 0)
json.dump({"wall": time.perf_counter() - t0, "cpu": ru.ru_utime + ru.ru_stime, "maxrss": ru.ru_maxrss,
           "rc": os.waitstatus_to_exitcode(status)}, open(sys.argv[1], "w"))
"""


def measure(cmd: list[str], timeout: float, cwd: Path = REPO,
            env: dict[str, str] | None = None) -> tuple[float, float, int, int, str]:
    """Run ``cmd``; return (wall s, user+sys CPU s, peak RSS KB, exit status, last output line)."""
    with tempfile.TemporaryFile() as log, tempfile.NamedTemporaryFile(suffix=".json") as stats:
        cmd = [sys.executable, "-c", _LAUNCHER, stats.name, *cmd]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env=env)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        cpu, maxrss, rc = usage.ru_utime + usage.ru_stime, usage.ru_maxrss, os.waitstatus_to_exitcode(status)
        try:
            inner = json.loads(Path(stats.name).read_text() or "{}")
        except (OSError, json.JSONDecodeError):
            inner = {}
        if inner:  # the contender's own numbers (without the launcher's start-up)
            wall, cpu, maxrss, rc = inner["wall"], inner["cpu"], inner["maxrss"], inner["rc"]
        log.seek(0)
        lines = log.read().decode(errors="replace").strip().splitlines()
    if time.perf_counter() - t0 > timeout:
        rc = 124
    return wall, cpu, maxrss, rc, (lines[-1] if lines else "")


def run_contender(name: str, big: Path, kernels: int, size: str, args: argparse.Namespace,
                  workdir: Path) -> Result:
    res = Result(name, size, kernels)
    copy: Path | None = None
    html = workdir / f"big_{size}.html"
    cache_dir = workdir / f"cache_{size}"  # this size's own trace cache, never the user's
    env = dict(os.environ, ANALYZER_CACHE_DIR=str(cache_dir))
    env.pop("ANALYZER_NO_CACHE", None)
    fresh_cache = False  # empty the cache before each run
    fresh_facts = False  # empty the fact cache (analyzer/facts/cache.py) before each run
    analyze = [sys.executable, "-m", "analyzer.cli", str(big), "-q", *(["--rules", str(args.rules)] if args.rules else [])]
    if name == "analyze":
        cmd = [*analyze, "-o", str(html)]
        fresh_cache = True
        html.unlink(missing_ok=True)
    elif name == "analyze no-cache":
        cmd = [*analyze, "-o", str(workdir / f"big_{size}_nocache.html"), "--no-cache"]
    elif name in ("analyze cached", "analyze cached facts", "load cached"):
        fresh = getattr(args, "cache_fresh", set())
        if size not in fresh:
            # not written by this run's `analyze`: write (or confirm) it now, unmeasured; an entry left
            # by an earlier run of other code is a miss (its loader signature differs) and would
            # otherwise be measured as a "cached" run
            measure([*analyze, "-o", str(workdir / f"big_{size}_warmup.json")], args.timeout, env=env)
            args.cache_fresh = fresh | {size}
        if name == "analyze cached":
            cmd = [*analyze, "-o", str(workdir / f"big_{size}_cached.html"), "--window", "full"]
            fresh_facts = True
        elif name == "analyze cached facts":
            # the first run's settings, unmeasured (its facts stored, or found: "analyze cached" may have
            # emptied the fact cache), then another format and a rule parameter: the same facts
            measure([*analyze, "-o", str(workdir / f"big_{size}_warmup.json")], args.timeout, env=env)
            cmd = [*analyze, "-o", str(workdir / f"big_{size}_cached.md"), "--set", "gpu-idle-gaps.min_gap=0.2ms"]
        else:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "load_cached", str(big)]
    elif name == "load_trace":
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "load_trace", str(big)]
    elif name == "sqlite3 fetch":
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "sqlite3", str(big)]
    elif name == "nsys analyze":
        sys.path.insert(0, str(REPO))
        from analyzer.loading.nsys_rep import find_nsys

        nsys = find_nsys()
        if nsys is None:
            res.note = "skipped: nsys not found"
            res.rc = -1
            return res
        copy = workdir / f"nsys_copy_{size}.sqlite"  # nsys may add tables to its input
        shutil.copyfile(big, copy)
        warm_cache(copy)
        cmd = [str(nsys), "analyze", str(copy)]
        res.extra["nsys"] = str(nsys)
    else:
        raise SystemExit(f"unknown contender {name}")
    best: tuple[float, float, int, int, str] | None = None
    try:
        for _ in range(max(1, args.repeat)):
            if fresh_cache:
                shutil.rmtree(cache_dir, ignore_errors=True)
            if fresh_facts:
                shutil.rmtree(cache_dir / "facts", ignore_errors=True)
            got = measure(cmd, args.timeout, env=env)
            if got[3] != 0:
                best = got
                break
            if best is None or got[0] < best[0]:
                best = got
    finally:
        if copy is not None:
            copy.unlink(missing_ok=True)
    assert best is not None
    res.wall_s, res.cpu_s, res.maxrss_kb, res.rc, tail = best
    if res.rc == 124:
        res.note = f"timed out after {args.timeout:.0f} s"
    elif res.rc != 0:
        res.note = f"exit {res.rc}: {tail[:100]}"
    if name == "analyze" and html.exists():
        res.html_bytes = html.stat().st_size
    if name == "analyze" and res.ok:
        args.cache_fresh = getattr(args, "cache_fresh", set()) | {size}
        entries = list(cache_dir.glob("traces/*/meta.json"))
        cached = sum(f.stat().st_size for e in entries for f in e.parent.iterdir())
        res.note = f"cache entry {cached / 1e6:,.0f} MB" if entries else "no cache entry written"
    return res


# ------------------------------------------------------------------------------------------ report
def loglog_exponent(xs: list[float], ys: list[float]) -> float:
    """Slope of the least-squares line through (log x, log y): 1.0 is linear growth."""
    if len(xs) < 2:
        return math.nan
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / den if den else math.nan


def machine() -> str:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 ** 2:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs ({cpu}){mem}; Python "
            f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}")


def table_lines(results: list[Result]) -> list[str]:
    head = (f"| {'size':>4} | {'contender':<16} | {'wall s':>7} | {'CPU s':>7} | {'peak MB':>7} | "
            f"{'kernels/s':>10} | {'time/analyze':>12} | {'mem/analyze':>11} | {'HTML':>8} | notes |")
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    by_size: dict[str, Result] = {r.size: r for r in results if r.contender == "analyze" and r.ok}
    for r in results:
        ours = by_size.get(r.size)
        if not r.ok:
            lines.append(f"| {r.size:>4} | {r.contender:<16} | {'-':>7} | {'-':>7} | {'-':>7} | {'-':>10} | "
                         f"{'':>12} | {'':>11} | {'':>8} | {r.note} |")
            continue
        tr = f"{r.wall_s / ours.wall_s:.2f}" if ours else "-"
        mr = f"{r.maxrss_kb / ours.maxrss_kb:.2f}" if ours and ours.maxrss_kb else "-"
        html = f"{r.html_bytes / 1e6:.2f} MB" if r.html_bytes is not None else ""
        note = r.note
        if r.contender == "sqlite3 fetch":
            note = note or "streamed, RSS not comparable"
        lines.append(
            f"| {r.size:>4} | {r.contender:<16} | {r.wall_s:7.2f} | {r.cpu_s:7.2f} | {r.maxrss_kb / 1024:7.0f} | "
            f"{r.kernels / r.wall_s:10,.0f} | {tr:>12} | {mr:>11} | {html:>8} | {note} |")
    return lines


def growth_lines(results: list[Result]) -> list[str]:
    out = []
    for name in CONTENDERS:
        rs = sorted((r for r in results if r.contender == name and r.ok), key=lambda r: r.kernels)
        if len(rs) < 2:
            continue
        xs = [r.kernels for r in rs]
        te = loglog_exponent(xs, [r.wall_s for r in rs])
        me = loglog_exponent(xs, [r.maxrss_kb for r in rs])
        first, last = rs[0], rs[-1]
        out.append(
            f"- {name}: {first.size} -> {last.size} ({last.kernels / first.kernels:.1f}x kernels): time "
            f"x{last.wall_s / first.wall_s:.2f}, peak RSS x{last.maxrss_kb / first.maxrss_kb:.2f}; "
            f"log-log exponent over {', '.join(r.size for r in rs)}: time {te:.2f}, memory {me:.2f}")
    return out


def chromium_check(html: Path, timeout: float = 120) -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        return "skipped (no chromium)"
    with tempfile.TemporaryDirectory() as profile:
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                 "--dump-dom", html.resolve().as_uri()],
                capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return f"FAILED: no answer in {timeout:.0f} s"
    took = time.perf_counter() - t0
    if proc.returncode != 0 or b"</html>" not in proc.stdout.lower():
        return f"FAILED: exit {proc.returncode}, {len(proc.stdout):,} bytes of DOM"
    return f"ok: DOM of {len(proc.stdout) / 1e6:.2f} MB dumped in {took:.1f} s"


def write_results(path: Path, lines: list[str], args: argparse.Namespace, header: str) -> None:
    today = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    text = "\n".join([
        "# End-to-end benchmark results",
        "",
        f"Written by `python benchmarks/run.py {' '.join(args.argv)}` on {today}.",
        "",
        f"Machine: {machine()}.",
        "",
        header,
        "",
        ("Every number is one whole process (interpreter start-up and imports included), wall time, "
         "the best of `--repeat` runs; peak RSS from `wait4`. `time/analyze` > 1 means slower than our "
         "`analyze` run. The machine is shared with other jobs: wall times vary by 20-50% between runs; "
         "compare contenders within one size (they ran back to back); CPU time is steadier."),
        "",
        *lines,
        "",
    ])
    path.write_text(text, encoding="utf-8")


# ------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1M,5M,10M", help="kernel counts, comma-separated (default 1M,5M,10M)")
    ap.add_argument("--source", type=Path, default=REPO / DEFAULT_SOURCE, help="a real nsys export to replay")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench"), help="where big traces are cached")
    ap.add_argument("--rules", type=Path, default=None, help="rule pack for analyze (default: the built-in)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per contender; the fastest is kept")
    ap.add_argument("--only", nargs="*", choices=CONTENDERS, help="run only these contenders")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per contender run")
    ap.add_argument("--no-chromium", action="store_true", help="skip opening the largest report in Chromium")
    ap.add_argument("--results", type=Path, default=HERE / "RESULTS.md", help="markdown file to write")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.argv = argv
    if args.child:
        children = {"load_trace": child_load_trace, "load_cached": child_load_cached, "sqlite3": child_sqlite3_fetch}
        children[args.child[0]](args.child[1])
        return 0
    sizes = sorted({parse_size(s) for s in args.sizes.split(",") if s.strip()})
    args.workdir.mkdir(parents=True, exist_ok=True)
    if not args.source.exists():
        ap.error(f"no such source trace: {args.source}")
    if args.rules is None:
        sys.path.insert(0, str(REPO))
        from analyzer.pipeline import default_rules_path

        if not default_rules_path().exists():
            ap.error(f"the built-in pack {default_rules_path()} does not exist yet; pass --rules")
    src = source_sqlite(args.source, args.workdir)
    traces = {n: big_trace(src, n, args.workdir) for n in sizes}
    header_parts = []
    for n, path in traces.items():
        c = trace_counts(path)
        header_parts.append(
            f"`{path.name}` ({path.stat().st_size / 1e6:,.0f} MB): {c.get('CUPTI_ACTIVITY_KIND_KERNEL', 0):,} "
            f"kernels, {c.get('CUPTI_ACTIVITY_KIND_RUNTIME', 0):,} runtime API calls")
    rules = f"`{args.rules}`" if args.rules else "the built-in default pack"
    header = (f"Traces built from `{args.source.name}` replayed back to back "
              f"(`benchmarks/make_big_trace.py`): " + "; ".join(header_parts) + f". Rules: {rules}.")
    print(header, flush=True)
    # byte-compile the package first, as installing it does: an editable checkout run with
    # PYTHONDONTWRITEBYTECODE (or read-only) would otherwise compile every module from source in
    # every contender process (0.2-0.3 s of start-up that no installed copy pays)
    import compileall

    compileall.compile_dir(str(REPO / "analyzer"), quiet=1)
    results: list[Result] = []
    for n, path in traces.items():
        warm_cache(path)
        kernels = trace_counts(path).get("CUPTI_ACTIVITY_KIND_KERNEL", n)
        for name in args.only or CONTENDERS:
            print(f"  {size_label(n)}: {name} ...", end=" ", flush=True)
            r = run_contender(name, path, kernels, size_label(n), args, args.workdir)
            print(f"{r.wall_s:.2f} s, {r.maxrss_kb / 1024:.0f} MB {r.note}".rstrip(), flush=True)
            results.append(r)
    lines = table_lines(results)
    growth = growth_lines(results)
    if growth:
        lines += ["", "Growth:", "", *growth]
    html_done = [r for r in results if r.contender == "analyze" and r.html_bytes]
    if html_done and not args.no_chromium:
        biggest = max(html_done, key=lambda r: r.kernels)
        verdict = chromium_check(args.workdir / f"big_{biggest.size}.html")
        lines += ["", (f"Headless Chromium on the {biggest.size} report "
                       f"({biggest.html_bytes / 1e6:.2f} MB): {verdict}")]
    print()
    print("\n".join(lines))
    write_results(args.results, lines, args, header)
    print(f"\nwritten: {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
