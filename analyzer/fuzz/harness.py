"""Running one fuzz case the way the CLI would, and judging its outcome."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import resource
import time
from collections import Counter
from types import MappingProxyType
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyzer.cli import guarded

#: wall-clock limit of one case, enforced by the pipeline's watchdog (a hang is a failure); generous,
#: because this shared machine stalls at times
CASE_TIMEOUT_S = 300.0
#: CPU seconds one case may use (these inputs take 0.1-3 s): more is a runaway stage
CASE_CPU_S = 30.0
#: peak resident memory (MiB) no case on these small inputs may reach
MAX_RSS_MB = 3072


class OutOfTime(BaseException):
    """A run's ``--max-seconds`` are spent. A BaseException, so hypothesis ends the run at once instead of
    taking it for a failure to shrink; :mod:`analyzer.fuzz.__main__` catches it."""


class FuzzFailure(AssertionError):
    """A case ended in a way the product promises never happens."""


@dataclass
class Outcome:
    rc: int
    stderr: str
    stdout: str
    seconds: float
    rss_mb: float
    rss_grew: bool = False
    cpu_s: float = 0.0

    @property
    def message(self) -> str:
        return self.stderr.strip()


def run_guarded(run: Callable[[], object]) -> Outcome:
    """``run`` under :func:`analyzer.cli.guarded` with stdout/stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = guarded(run)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return Outcome(rc, err.getvalue(), out.getvalue(), seconds, after / 1024, after > before, cpu)


def settle(outcomes: dict[str, tuple[int, str]], seen: list[str], outcome: Outcome) -> tuple[Outcome, bool]:
    """A guarded run that stopped early because its loaded input's fingerprint (``seen[0]``) is in
    ``outcomes`` gets that earlier case's exit code and stderr (its own time and memory kept), and True;
    a finished run with a fingerprint is recorded under it. ``seen`` is empty when the run failed
    before fingerprinting, ``['']`` when its input has no fingerprint."""
    if seen and seen[0] in outcomes:
        rc, stderr = outcomes[seen[0]]
        return Outcome(rc, stderr, "", outcome.seconds, outcome.rss_mb, outcome.rss_grew, outcome.cpu_s), True
    if seen and seen[0]:
        outcomes[seen[0]] = (outcome.rc, outcome.stderr)
    return outcome, False


def analyze_reusing(runner: Any, trace: Path, output: Path, load: Callable[[], Any],
                    whole: Callable[[], bool] | None = None) -> Outcome:
    """One case through the pipeline as ``analyze TRACE --format json -o OUTPUT`` runs it: ``load()``
    under the watchdog, the trace analyzed with ``runner.pack`` and ``runner.options``, the JSON report
    written. A case whose loaded trace (:func:`trace_fingerprint`) equals one already analyzed reuses that
    outcome (``runner.outcomes``; counted in ``runner.reused``): the rest of the pipeline is a
    deterministic function of the loaded trace. ``runner.loaded`` is the loaded trace (None when loading
    failed). ``whole()``, when given, runs first and returns True when it handled the case itself."""
    from analyzer.fileio import atomic_write
    from analyzer.pipeline import analyze_trace
    from analyzer.reports import build_report, render
    from analyzer.watchdog import Watchdog, stage

    runner.loaded = None
    seen: list[str] = []

    def run() -> None:
        if whole is not None and whole():
            return
        with Watchdog(runner.options.timeout, str(trace)):
            with stage("loading"):
                loaded = load()
            runner.loaded = loaded
            key = trace_fingerprint(loaded)
            if key is not None and key in runner.outcomes:
                seen.append(key)
                return
            analysis = analyze_trace(trace, runner.pack, options=runner.options, trace=loaded)
            seen.append(key or "")
        atomic_write(output, render(build_report([analysis]), "json"))

    outcome, reused = settle(runner.outcomes, seen, run_guarded(run))
    runner.reused += reused
    return outcome


def check_outcome(outcome: Outcome, *, names: Iterable[str], quiet: bool = True,
                  time_limit: float = CASE_TIMEOUT_S, cpu_limit: float = CASE_CPU_S) -> None:
    """Raise :class:`FuzzFailure` unless ``outcome`` is one the product allows: exit 0/1 (with nothing on
    stderr when ``quiet``), or exit 2 with one ``error:`` line naming one of ``names`` (the damaged
    input's path or file name)."""
    text = outcome.stderr
    if "Traceback (most recent call last)" in text:
        raise FuzzFailure(f"traceback on stderr: {text[-2000:]}")
    if outcome.rc not in (0, 1, 2):
        raise FuzzFailure(f"exit {outcome.rc}: {text.strip()[:2000]}")
    if outcome.seconds > time_limit:
        raise FuzzFailure(f"took {outcome.seconds:.1f} s (limit {time_limit:g} s)")
    if outcome.cpu_s > cpu_limit:
        raise FuzzFailure(f"used {outcome.cpu_s:.1f} CPU seconds (limit {cpu_limit:g} s)")
    if outcome.rss_grew and outcome.rss_mb > MAX_RSS_MB:
        raise FuzzFailure(f"peak memory {outcome.rss_mb:.0f} MiB (limit {MAX_RSS_MB} MiB)")
    if outcome.rc == 2:
        lines = text.splitlines()
        if len(lines) != 1:
            raise FuzzFailure(f"exit 2 with {len(lines)} lines on stderr: {text[:2000]!r}")
        line = lines[0]
        if not line.startswith("error: "):
            raise FuzzFailure(f"exit 2 without an 'error: ' line: {line[:2000]!r}")
        wanted = [n for n in names if n]
        if wanted and not any(n in line for n in wanted):
            raise FuzzFailure(f"exit 2 but the message does not name the input ({wanted[0]}): {line[:2000]!r}")
        if "out of memory" in line or "ran past" in line:
            raise FuzzFailure(f"resource limit hit on a small input: {line[:2000]!r}")
    elif quiet and text.strip():
        raise FuzzFailure(f"exit {outcome.rc} but stderr is not empty: {text[:2000]!r}")


def damage_json_text(data: bytes, damage: tuple[str, float] | None) -> bytes:
    """JSON text damaged the way files get damaged: ``damage`` is (kind, where as a fraction of the length);
    kinds: truncate, flip (16 bytes), invalid-utf8, bom, deep-nesting (10,000 levels added inside the
    top-level object), trailing-garbage, empty. None leaves ``data`` as it is."""
    if damage is None:
        return data
    kind, where = damage
    at = int(len(data) * where)
    if kind == "truncate":
        return data[:at]
    if kind == "flip":
        return data[:at] + bytes(b ^ 0x20 for b in data[at:at + 16]) + data[at + 16:]
    if kind == "invalid-utf8":
        return data[:at] + b"\xff\xfe\xc3" + data[at:]
    if kind == "bom":
        return b"\xef\xbb\xbf" + data
    if kind == "deep-nesting" and data.rstrip().endswith(b"}"):
        return data.rstrip()[:-1] + b', "deep": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    if kind == "trailing-garbage":
        return data + b"\n{not json"
    if kind == "empty":
        return b""
    return data


def trace_fingerprint(loaded: Any) -> str | None:
    """A digest of everything a loader produced (a :class:`~analyzer.loading.model.Trace`, an
    :class:`~analyzer.loading.ncu.NcuReport`): every field, recursively; frames with their columns,
    dtypes, index, values and ``attrs``; paths by their file name (equal cases sit in different
    folders). Two cases with one fingerprint get the same analysis: the pipeline after loading is a
    deterministic function of what was loaded. None when some part cannot be hashed (then the case
    runs in full)."""
    digest = hashlib.sha256()
    try:
        _feed(digest, "loaded", loaded, 0)
    except Exception:  # noqa: BLE001 - something unhashable: run the case in full
        return None
    return digest.hexdigest()


def _feed(digest: Any, label: str, value: Any, depth: int) -> None:
    import dataclasses

    import numpy as np
    import pandas as pd

    if depth > 12:
        raise ValueError("nested too deep to fingerprint")
    digest.update(f"|{label}:{type(value).__name__}:".encode())
    if isinstance(value, pd.DataFrame):
        digest.update(f"{list(value.columns)}:{list(map(str, value.dtypes))}:{len(value)}".encode())
        if len(value):
            digest.update(pd.util.hash_pandas_object(value, index=True).to_numpy().tobytes())
        _feed(digest, "attrs", dict(value.attrs), depth + 1)
    elif isinstance(value, pd.Series):
        digest.update(f"{value.name!r}:{value.dtype}:{len(value)}".encode())
        if len(value):
            digest.update(pd.util.hash_pandas_object(value, index=True).to_numpy().tobytes())
    elif isinstance(value, np.ndarray):
        digest.update(f"{value.dtype}:{value.shape}".encode())
        if value.dtype == object:
            digest.update(pd.util.hash_array(value.ravel()).tobytes())
        else:
            digest.update(np.ascontiguousarray(value).tobytes())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _feed(digest, f.name, getattr(value, f.name), depth + 1)
    elif isinstance(value, (dict, MappingProxyType)):
        for key in sorted(value, key=repr):
            _feed(digest, repr(key), value[key], depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _feed(digest, str(i), item, depth + 1)
    elif isinstance(value, (set, frozenset)):
        for i, item in enumerate(sorted(value, key=repr)):
            _feed(digest, str(i), item, depth + 1)
    elif isinstance(value, Path):
        digest.update(repr(value.name).encode("utf-8", "surrogatepass"))
    elif value is None or isinstance(value, (str, bytes, int, float, bool, complex, np.generic)):
        digest.update(repr(value).encode("utf-8", "surrogatepass"))
    else:
        raise TypeError(f"cannot fingerprint a {type(value).__name__}")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def error_kind(message: str, names: Iterable[str] = ()) -> str:
    """An error line with the file names, numbers and quoted values taken out (for counting kinds)."""
    import re

    text = message.removeprefix("error: ")
    for n in names:
        if n:
            text = text.replace(n, "FILE")
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\([^()]*\)", "…", text)
    text = re.sub(r"\d[\d,._]*", "N", text)
    return text[:160]


@dataclass
class Stats:
    """What one harness run did: cases, exit codes, kinds of errors, failures, time."""

    harness: str
    seed: int = 0
    cases: int = 0
    exit_codes: Counter[int] = field(default_factory=Counter)
    error_kinds: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    slowest_case_s: float = 0.0
    max_case_cpu_s: float = 0.0
    #: CPU seconds (all threads) inside the cases' guarded runs, summed
    cpu_s: float = 0.0
    #: ``time.process_time()`` when the harness started (imports done, base inputs not yet read): the
    #: CPU of the whole process per case, harness work included, is measured from here
    started_cpu: float | None = None
    peak_rss_mb: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    #: where to write the numbers every 100 cases (a long run that is stopped still leaves them)
    checkpoint: Path | None = None
    #: ``time.time()`` after which no further case starts (``--max-seconds``)
    deadline: float | None = None

    def stop_if_out_of_time(self) -> None:
        """Raise :class:`OutOfTime` once the deadline has passed (called before each case)."""
        import time as _time

        if self.deadline is not None and _time.time() >= self.deadline:
            self.extra["stopped_at_deadline"] = True
            raise OutOfTime

    def record(self, outcome: Outcome, names: Iterable[str] = ()) -> None:
        self.cases += 1
        self.exit_codes[outcome.rc] += 1
        self.seconds += outcome.seconds
        self.slowest_case_s = max(self.slowest_case_s, outcome.seconds)
        self.max_case_cpu_s = max(self.max_case_cpu_s, outcome.cpu_s)
        self.cpu_s += outcome.cpu_s
        if self.started_cpu is not None:
            now = time.process_time()
            if self.cases == 1:  # reading the base inputs and building the runner, before any case
                self.extra["setup_cpu_s"] = round(now - self.started_cpu - outcome.cpu_s, 2)
            self.extra["process_cpu_s"] = round(now - self.started_cpu, 2)
        self.peak_rss_mb = max(self.peak_rss_mb, outcome.rss_mb)
        if outcome.rc == 2:
            self.error_kinds[error_kind(outcome.message, names)] += 1
        if self.checkpoint is not None and self.cases % 100 == 0:
            self.dump(self.checkpoint)

    def cpu_per_case(self) -> float | None:
        """Mean CPU seconds of the whole process per case (all threads; the case, building its input,
        the checks, hypothesis), setup left out: what a long run costs per case on a busy core."""
        total, setup = self.extra.get("process_cpu_s"), self.extra.get("setup_cpu_s", 0.0)
        if total is None or not self.cases:
            return None
        return round((total - setup) / self.cases, 4)

    def as_dict(self) -> dict[str, Any]:
        return {
            "harness": self.harness, "seed": self.seed, "cases": self.cases,
            "exit_codes": {str(k): v for k, v in sorted(self.exit_codes.items())},
            "distinct_errors": len(self.error_kinds),
            "top_errors": self.error_kinds.most_common(12),
            "failures": self.failures, "seconds": round(self.seconds, 1),
            "slowest_case_s": round(self.slowest_case_s, 2), "max_case_cpu_s": round(self.max_case_cpu_s, 2),
            "cpu_s": round(self.cpu_s, 2), "cpu_per_case_s": self.cpu_per_case(),
            "peak_rss_mb": round(self.peak_rss_mb),
            **self.extra,
        }

    def dump(self, path: Path) -> None:
        from analyzer.fileio import atomic_write

        atomic_write(path, json.dumps(self.as_dict(), indent=2) + "\n")
