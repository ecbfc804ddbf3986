"""Stages and the per-trace watchdog: when an analysis runs past its time limit, say which stage ran away.

The pipeline marks what it is doing with :func:`stage` (``loading``, ``fact gpu_gaps``, ``rule GPU001``,
``report``); progress messages refine it (``reading kernels (1,023,456 rows)``). :class:`Watchdog` runs a
timer beside one trace's analysis. When the limit passes it interrupts the main thread, and the
analysis ends with one :class:`~analyzer.errors.StageTimeoutError` line naming the trace, the limit and
the stage (``trace.sqlite: analysis ran past 60 s in stage 'fact gpu_gaps' ...``). A stage stuck inside C
code that never returns to Python cannot be interrupted: after a grace period the watchdog prints the
same line itself and ends the process (exit 2), so the user still learns where it hung.
"""
from __future__ import annotations

import _thread
import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import TracebackType

from analyzer.errors import EXIT_USAGE, ParameterError, StageTimeoutError

#: seconds the watchdog waits, after interrupting, before it ends a process stuck in C code
GRACE_SECONDS = 15.0

_lock = threading.Lock()
_stages: dict[int, list[str]] = {}  # per thread (ident): its stages, outermost first
_detail: list[str] = [""]
_limits: list[float] = []  # the time limits of the main thread's active watchdogs, outermost first


def active_limit() -> float | None:
    """The time limit (s) of the innermost watchdog now bounding the main thread's analysis, or None:
    a child process the analysis runs (the ``nsys export``) takes it for its own limit."""
    with _lock:
        return _limits[-1] if _limits else None


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Mark the calling thread as being in stage ``name`` (nested stages read ``outer > inner``)."""
    ident = threading.get_ident()
    with _lock:
        _stages.setdefault(ident, []).append(name)
        _detail[0] = ""
    try:
        yield
    finally:
        with _lock:
            mine = _stages.get(ident)
            if mine and mine[-1] == name:
                mine.pop()
            if not mine:
                _stages.pop(ident, None)
            _detail[0] = ""


def note(message: str) -> None:
    """A finer-grained position inside the current stage (the last progress message)."""
    with _lock:
        _detail[0] = message


def current_stage() -> str:
    """Where the main thread is (``rules > rule GPU001 (gpu-idle-gaps) > fact gpu_gaps``), and what
    another thread computing for it is doing (``...; meanwhile fact phases``)."""
    main = threading.main_thread().ident or 0
    with _lock:
        where = " > ".join(_stages.get(main, ())) or "starting"
        where = f"{where} ({_detail[0]})" if _detail[0] else where
        others = [stack[-1] for ident, stack in _stages.items() if ident != main and stack]
    return f"{where}; meanwhile {', '.join(others)}" if others else where


class Watchdog:
    """``with Watchdog(seconds, label):`` bounds one analysis; ``seconds`` None or <= 0: no limit."""

    def __init__(self, seconds: float | None, label: str, *, grace: float = GRACE_SECONDS) -> None:
        if seconds is not None and not (math.isfinite(seconds) and seconds <= threading.TIMEOUT_MAX / 2):
            raise ParameterError(f"timeout {seconds!r} s is not a finite number of seconds",
                                 hint="give --timeout a number of seconds, e.g. 600")
        self.seconds = seconds if seconds and seconds > 0 else None
        self.label = label
        self.grace = grace
        self.fired_in: str | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._old_sigint: object = None

    def message(self) -> str:
        return (f"{self.label}: analysis ran past {self.seconds:g} s in stage '{self.fired_in}'; "
                "analyze a shorter window (--window), raise --timeout, or report the trace if it is small")

    def _watch(self) -> None:
        assert self.seconds is not None
        if self._done.wait(self.seconds):
            return
        with self._lock:  # never fire once the block has ended (__exit__ holds the lock to end it)
            if self._done.is_set():
                return
            self.fired_in = current_stage()
            _thread.interrupt_main()
        if self._done.wait(self.grace):
            return
        sys.stderr.write(f"error: {self.message()} (it did not stop; ended)\n")
        sys.stderr.flush()
        os._exit(EXIT_USAGE)

    def __enter__(self) -> Watchdog:
        if self.seconds is not None and threading.current_thread() is threading.main_thread():
            self._started = time.monotonic()
            # interrupt_main() does nothing while SIGINT is ignored or left to the OS (pytest-xdist
            # workers, some launchers): Python's own handler is installed for the watched block
            handler = signal.getsignal(signal.SIGINT)
            if handler in (signal.SIG_IGN, signal.SIG_DFL, None):
                self._old_sigint = handler
                signal.signal(signal.SIGINT, signal.default_int_handler)
            self._thread = threading.Thread(target=self._watch, name="analyzer-watchdog", daemon=True)
            self._thread.start()
            with _lock:
                _limits.append(self.seconds)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._thread is not None:
            with _lock:
                if _limits:
                    _limits.pop()
        try:
            with self._lock:
                self._done.set()
            if self.fired_in is not None and exc_type is None:
                # the watchdog fired but its interrupt has not landed yet: let it land here, not later
                # in the caller (where it would read as the user's Ctrl-C). It lands at the next
                # bytecode this thread runs; on a loaded machine (other threads holding the GIL) that
                # can take longer than a few sleeps, so wait for it up to a bound
                deadline = time.monotonic() + 5.0
                while time.monotonic() < deadline:
                    time.sleep(0.001)
        except KeyboardInterrupt:
            if self.fired_in is None:
                raise
        if self._old_sigint is not None:
            signal.signal(signal.SIGINT, self._old_sigint)  # type: ignore[arg-type]
            self._old_sigint = None
        # the interrupt may also arrive late, after the block finished: absorbed here too
        if self.fired_in is not None and (exc_type is None or issubclass(exc_type, KeyboardInterrupt)):
            raise StageTimeoutError(self.message()) from None
