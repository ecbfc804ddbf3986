"""Multi-GPU jobs: per-rank analyses (the single-trace pipeline) plus cross-rank facts.

- :mod:`analyzer.job.ranks`: one multi-process report -> per-rank traces; rank numbering.
- :mod:`analyzer.job.cross`: matching collectives across ranks, clock alignment, waits.
- :mod:`analyzer.job.rank`: the two phases of one rank (prepare; finish with the job's facts).
- :mod:`analyzer.job.facts`: the job tables job rules read.
- :mod:`analyzer.job.run`: the whole job, serially or on Dask.
"""
from __future__ import annotations

from typing import Any


def step_spans(window: Any) -> tuple[tuple[int, int], ...]:
    """(start, end) of each NVTX step instance of ``window`` (``Window.steps`` when the window came
    from the user's NVTX steps; empty otherwise), in time order."""
    steps = getattr(window, "steps", None)
    if steps is None or getattr(steps, "source", "") != "nvtx":
        return ()
    return tuple(zip((int(s) for s in steps.starts), (int(e) for e in steps.ends)))
