"""torch.profiler (Kineto) recording for the common run loop, switched on by the environment.

``WORKLOADS_TORCH_TRACE_DIR=DIR`` makes :func:`workloads._common.run_steps` record the run with
``torch.profiler`` the way the seeds' profiling lab does: a schedule that skips the warmup steps
(``warmup=`` steps of profiler warmup, not recorded) and records the measured ones, one
``ProfilerStep#N`` per step, CPU and CUDA activities, input shapes, and
``tensorboard_trace_handler(DIR)`` writing one Chrome-trace JSON per process. Every NVTX range the
workloads open (:mod:`workloads._nvtx`) is mirrored as a ``record_function`` range, so
``step_N``/``forward``/``backward`` appear as ``user_annotation`` events.

Other variables: ``WORKLOADS_TORCH_GZIP=1`` writes ``.json.gz``; ``WORKLOADS_TORCH_WORKER=NAME``
names the file (``NAME.<ms>.pt.trace.json``; ``_rank<RANK>`` is appended when ``RANK`` is set, so
the ranks of a ``torchrun`` job each write their own); ``WORKLOADS_TORCH_STACK=1`` adds Python stacks;
``WORKLOADS_TORCH_MEMORY=1`` records the caching allocator's allocations and frees
(``profile_memory=True``: ``[memory]`` instant events with bytes, address, device and the totals).

A ``--bare`` run (:mod:`workloads._common`) records with ``scheduled=False``: no schedule and no
``prof.step()`` (no ``ProfilerStep#N``), one profile around the measured steps, the way people
wrap their loop in ``with torch.profiler.profile(...)``; nothing is mirrored (no ranges).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

ENV_DIR = "WORKLOADS_TORCH_TRACE_DIR"
ENV_GZIP = "WORKLOADS_TORCH_GZIP"
ENV_WORKER = "WORKLOADS_TORCH_WORKER"
ENV_STACK = "WORKLOADS_TORCH_STACK"
ENV_MEMORY = "WORKLOADS_TORCH_MEMORY"


def trace_dir() -> str | None:
    """The output directory when torch.profiler recording is switched on, else None."""
    return os.environ.get(ENV_DIR) or None


def worker_name() -> str | None:
    """File stem for this process: ``$WORKLOADS_TORCH_WORKER`` (+ ``_rank<RANK>``), or torch's default."""
    base = os.environ.get(ENV_WORKER)
    rank = os.environ.get("RANK")
    if base and rank is not None:
        return f"{base}_rank{rank}"
    return base


@contextlib.contextmanager
def recording(warmup_steps: int, measured_steps: int, cuda: bool,
              *, scheduled: bool = True) -> Iterator[Callable[[], None]]:
    """Yield a ``step()`` to call after every warmup and measured step; a no-op when switched off.

    The schedule is ``wait=0, warmup=warmup_steps, active=measured_steps, repeat=1``: the trace holds
    ``ProfilerStep#<warmup_steps>`` .. ``ProfilerStep#<warmup_steps + measured_steps - 1>``.
    ``scheduled=False``: no schedule, everything inside the ``with`` is recorded and the yielded
    ``step()`` does nothing (no ``ProfilerStep#N``); the trace is written when the block ends.
    """
    out = trace_dir()
    if out is None:
        yield lambda: None
        return
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    handler = tensorboard_trace_handler(out, worker_name=worker_name(),
                                        use_gzip=os.environ.get(ENV_GZIP) == "1")
    prof = profile(
        activities=activities,
        schedule=(schedule(wait=0, warmup=warmup_steps, active=measured_steps, repeat=1)
                  if scheduled else None),
        on_trace_ready=handler,
        record_shapes=True,
        with_stack=os.environ.get(ENV_STACK) == "1",
        profile_memory=os.environ.get(ENV_MEMORY) == "1",
    )
    with prof:
        yield prof.step if scheduled else (lambda: None)
    if cuda:
        torch.cuda.synchronize()
