"""Pack profiling outputs into ``.tar.xz`` files that each stay under a size limit.

Everything in ``src`` except report binaries (``*.nsys-rep``, ``*.ncu-rep``, ``*.qdstrm``; a
few named ones may be kept) goes into ``dest/<prefix>.tar.xz`` when that fits under
``max_bytes``; otherwise files are split by category (pathology traces, transformer traces per
model size) into ``<prefix>_<category>.tar.xz``, halving a category further by trace until each
archive fits. At most ``max_files`` archives are written; what does not fit is listed as skipped.
Compression is ``xz -6 -T0`` through ``tar`` (multi-threaded, reproducible enough).
"""
from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

BINARY_SUFFIXES = (".nsys-rep", ".ncu-rep", ".qdstrm")
_TRANSFORMER = re.compile(r"^(small|medium|large|xl|2\.7B)_")


#: What follows a trace's name in the files written for it (longest first).
_TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".nvidia-smi.csv", ".pytime.json",
                   ".power.csv", ".analyze.txt", ".post.log", ".nsys-rep", ".ncu-rep", ".sqlite",
                   ".qdstrm", ".csv", ".txt", ".log")


def trace_of(path: Path) -> str:
    """Trace a file belongs to: its name without the suffixes above (trace names may hold dots,
    ``2.7B_forward_ctx128``) or a stats ``_<report>.csv``."""
    stem = path.name
    for suffix in _TRACE_SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    else:
        stem = stem.split(".", 1)[0]
    return re.sub(r"_(nvtx_sum|cuda_gpu_kern_sum|cuda_api_sum|cuda_gpu_mem_time_sum|"
                  r"cuda_gpu_mem_size_sum)$", "", stem)


def category_of(path: Path) -> str:
    m = _TRANSFORMER.match(trace_of(path))
    return f"transformer_{m.group(1)}" if m else "pathologies"


def select_files(src: Path, keep_reps: Iterable[str]) -> list[Path]:
    keep = set(keep_reps)
    return sorted(p for p in src.iterdir() if p.is_file()
                  and (not p.name.endswith(BINARY_SUFFIXES) or p.name in keep))


def compress(src: Path, files: Sequence[Path], out: Path) -> int:
    """``tar -C src -cf - FILES | xz -6 -T0 > out``; returns the archive size in bytes."""
    with open(out, "wb") as fh:
        tar = subprocess.Popen(["tar", "-C", str(src), "-cf", "-", *[f.name for f in files]],
                               stdout=subprocess.PIPE)
        xz = subprocess.run(["xz", "-6", "-T0", "-c"], stdin=tar.stdout, stdout=fh, check=True)
        tar.stdout.close()  # type: ignore[union-attr]
        if tar.wait() != 0 or xz.returncode != 0:
            raise RuntimeError(f"packing {out} failed")
    return out.stat().st_size


def _split_by_trace(files: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    traces = sorted({trace_of(f) for f in files})
    first = set(traces[: max(1, len(traces) // 2)])
    return [f for f in files if trace_of(f) in first], [f for f in files if trace_of(f) not in first]


def _pack_group(src: Path, dest: Path, name: str, files: list[Path], max_bytes: int,
                written: list[Path], skipped: list[str]) -> None:
    out = dest / f"{name}.tar.xz"
    size = compress(src, files, out)
    if size <= max_bytes:
        written.append(out)
        print(f"[pack] {out.name}: {len(files)} files, {size / 2**20:.1f} MiB", flush=True)
        return
    out.unlink()
    if len({trace_of(f) for f in files}) <= 1:
        big = [f for f in files if f.suffix == ".sqlite"]
        rest = [f for f in files if f.suffix != ".sqlite"]
        skipped.extend(f.name for f in big)
        print(f"[pack] {name}: too large even alone; dropping {[f.name for f in big]}", flush=True)
        if rest and big:
            _pack_group(src, dest, name, rest, max_bytes, written, skipped)
        elif not big:
            skipped.extend(f.name for f in rest)
        return
    a, b = _split_by_trace(files)
    _pack_group(src, dest, f"{name}_1", a, max_bytes, written, skipped)
    _pack_group(src, dest, f"{name}_2", b, max_bytes, written, skipped)


def pack(src: Path, dest: Path, *, prefix: str = "nsys_traces", keep_reps: Sequence[str] = (),
         max_bytes: int = int(15.5 * 2**20), max_files: int = 6) -> int:
    """Pack ``src`` into ``dest``; returns 0, or 1 when something had to be skipped."""
    dest.mkdir(parents=True, exist_ok=True)
    files = select_files(src, keep_reps)
    if not files:
        print(f"[pack] nothing to pack in {src}", flush=True)
        return 1
    written: list[Path] = []
    skipped: list[str] = []
    single = dest / f"{prefix}.tar.xz"
    size = compress(src, files, single)
    if size <= max_bytes:
        print(f"[pack] {single.name}: {len(files)} files, {size / 2**20:.1f} MiB", flush=True)
        return 0
    single.unlink()
    print(f"[pack] one archive would be {size / 2**20:.1f} MiB; splitting by category", flush=True)
    groups: dict[str, list[Path]] = {}
    for f in files:
        groups.setdefault(category_of(f), []).append(f)
    for cat, members in groups.items():
        _pack_group(src, dest, f"{prefix}_{cat}", members, max_bytes, written, skipped)
    while len(written) > max_files:
        victim = written.pop()
        skipped.append(victim.name)
        victim.unlink()
    if skipped:
        print(f"[pack] SKIPPED (over size/count limits): {', '.join(skipped)}", flush=True)
    return 1 if skipped else 0
