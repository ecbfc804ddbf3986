"""Test helpers for the team's real traces under ``tests/data/`` (see ``tests/data/MANIFEST.md``).

``real_trace("small_training_ctx128")`` decompresses ``tests/data/small_training_ctx128.sqlite.xz``
once per test session into a temporary folder and returns the ``.sqlite`` path; a test calling it
is skipped, with the reason, when the file is absent (the data lands later, or a slim checkout).
``real_file(name)`` returns a file stored beside the traces or under ``stats/`` (``nsys stats`` CSVs).
"""
from __future__ import annotations

import atexit
import lzma
import os
import shutil
import tempfile
from pathlib import Path

#: ``tests/data`` of the checkout; ``ANALYZER_TEST_DATA=/some/dir`` points the helpers elsewhere (e.g. at
#: a freshly unpacked device-suite bundle, before it is committed).
# Real exports from other people's projects, beside the checkout (not ours to copy into the repo).
PUBLIC_DIR = Path(
    os.environ.get("ANALYZER_PUBLIC_TRACES") or Path(__file__).resolve().parents[2] / "shared" / "traces-public"
)
DATA_DIR = Path(os.environ.get("ANALYZER_TEST_DATA") or Path(__file__).resolve().parents[1] / "tests" / "data")
_CACHE: dict[str, Path] = {}
_TMP: Path | None = None


def _skip(reason: str) -> None:
    import pytest

    pytest.skip(reason)


def _tmpdir() -> Path:
    global _TMP
    if _TMP is None:
        _TMP = Path(tempfile.mkdtemp(prefix="analyzer-real-traces-"))
        atexit.register(shutil.rmtree, _TMP, True)
    return _TMP


def real_trace(name: str) -> Path:
    """Path of the decompressed ``tests/data/<name>.sqlite.xz`` (or of ``<name>.sqlite`` when stored
    uncompressed). Skips the calling test when neither exists."""
    stem = name.removesuffix(".xz").removesuffix(".sqlite")
    if stem in _CACHE and _CACHE[stem].is_file():
        return _CACHE[stem]
    plain = DATA_DIR / f"{stem}.sqlite"
    packed = DATA_DIR / f"{stem}.sqlite.xz"
    if plain.is_file():
        _CACHE[stem] = plain
        return plain
    if not packed.is_file():
        _skip(f"real trace {packed.name} not in {DATA_DIR} (see tests/data/MANIFEST.md)")
    target = _tmpdir() / f"{stem}.sqlite"
    target.parent.mkdir(parents=True, exist_ok=True)  # stems may name a subfolder ("ddp/...")
    partial = target.with_suffix(".partial")
    with lzma.open(packed) as src, open(partial, "wb") as dst:
        shutil.copyfileobj(src, dst, length=1 << 20)
    partial.replace(target)
    _CACHE[stem] = target
    return target


def trace_file(name: str) -> Path:
    """Path of the committed trace ``tests/data/<name>``, ready to load: an ``.sqlite.xz`` export
    decompressed (:func:`real_trace`), any other file as it is (the loaders read compressed JSON
    themselves). Skips the calling test when it is absent."""
    if name.endswith(".sqlite.xz"):
        return real_trace(name.removesuffix(".sqlite.xz"))
    path = DATA_DIR / name
    if not path.is_file():
        _skip(f"{name} not in {DATA_DIR} (see tests/data/MANIFEST.md)")
    return path


def real_file(name: str) -> Path:
    """Path of ``tests/data/<name>``, else ``tests/data/stats/<name>`` (where the ``nsys stats`` CSVs
    such as ``small_training_ctx128_nvtx_sum.csv`` are kept); skips when absent."""
    for path in (DATA_DIR / name, DATA_DIR / "stats" / name):
        if path.is_file():
            return path
    _skip(f"{name} not in {DATA_DIR} nor its stats/ (see tests/data/MANIFEST.md)")
    raise AssertionError("unreachable")  # pytest.skip raises


def available(pattern: str = "*.sqlite.xz") -> list[str]:
    """Names (without ``.sqlite.xz``) of the real traces present, for parametrizing tests."""
    if not DATA_DIR.is_dir():
        return []
    return sorted(p.name.removesuffix(".xz").removesuffix(".sqlite") for p in DATA_DIR.glob(pattern))
