"""Multi-GPU jobs: per-rank analyses (the single-trace pipeline) plus cross-rank facts.

- :mod:`analyzer.job.ranks`: one multi-process report -> per-rank traces; rank numbering.
- :mod:`analyzer.job.cross`: matching collectives across ranks, clock alignment, waits.
- :mod:`analyzer.job.rank`: the two phases of one rank (prepare; finish with the job's facts).
- :mod:`analyzer.facts.job`: the job tables job rules read (facts, registered with the others).
- :mod:`analyzer.job.run`: the whole job, serially or on Dask.
"""
from __future__ import annotations
