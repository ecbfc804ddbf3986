"""Optional NVTX annotations.

Uses the `nvtx` package when it is importable, else PyTorch's ``torch.cuda.nvtx`` bindings when
they work (a CUDA build of PyTorch), else no-ops. Workloads therefore run anywhere (CPU CI), and
produce NVTX ranges on a GPU machine even when the `nvtx` wheel was not installed.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

_push: Callable[[str], object]
_pop: Callable[[], object]
_mark: Callable[[str], object]
BACKEND = "none"


def _noop(*_args: object) -> None:
    return None


try:  # the real NVTX package (python bindings to libnvToolsExt / NVTX3)
    import nvtx as _nvtx_pkg

    _push = lambda name: _nvtx_pkg.push_range(message=name)
    _pop = lambda: _nvtx_pkg.pop_range()
    _mark = lambda name: _nvtx_pkg.mark(message=name)
    BACKEND = "nvtx"
except Exception:  # pragma: no cover - depends on the environment
    _push, _pop, _mark = _noop, _noop, _noop
    try:
        import torch

        if torch.cuda.is_available():
            _push = torch.cuda.nvtx.range_push
            _pop = torch.cuda.nvtx.range_pop
            _mark = torch.cuda.nvtx.mark
            BACKEND = "torch.cuda.nvtx"
    except Exception:
        pass


def push(name: str) -> None:
    """Open an NVTX push/pop range called ``name`` on the calling thread."""
    _push(name)


def pop() -> None:
    """Close the innermost NVTX range opened with :func:`push` on the calling thread."""
    _pop()


def mark(name: str) -> None:
    """Emit an instantaneous NVTX marker."""
    _mark(name)


#: Mirror ranges as torch.profiler ``record_function`` ranges (see :mod:`workloads._torchprof`).
_MIRROR_TORCH = bool(os.environ.get("WORKLOADS_TORCH_TRACE_DIR"))


def disable() -> None:
    """Switch every annotation off for the rest of the process (``--bare``: the program is
    recorded as people record theirs, without NVTX or mirrored ``record_function`` ranges)."""
    global _push, _pop, _mark, _MIRROR_TORCH, BACKEND
    _push, _pop, _mark = _noop, _noop, _noop
    _MIRROR_TORCH = False
    BACKEND = "none"


@contextlib.contextmanager
def range(name: str) -> Iterator[None]:
    """Context manager: an NVTX range around the body (no-op without NVTX); also a torch.profiler
    ``record_function`` range when torch.profiler recording is switched on."""
    _push(name)
    try:
        if _MIRROR_TORCH:
            import torch.profiler

            with torch.profiler.record_function(name):
                yield
        else:
            yield
    finally:
        _pop()
