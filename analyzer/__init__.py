"""GPU-profile expert system: diagnoses Nsight Systems and torch.profiler traces (and Nsight Compute
metrics).

    import analyzer
    result = analyzer.analyze("trace.sqlite")   # analyzer.api: findings, verdict, facts, reports

Layers, each importing only those below it (the contracts in setup.cfg, checked by ``lint-imports``):

- ``analyzer.loading``   formats (nsys SQLite / .nsys-rep, Kineto JSON, ncu CSV / .ncu-rep) -> one trace model
- ``analyzer.facts``     derived tables (busy intervals, categories, occupancy, phase index, NVTX projection ...)
- ``analyzer.rules``     the safe YAML rule engine and the default rule pack
- ``analyzer.reports``   view models and HTML / Markdown / JSON renderings
- ``analyzer.trace_analysis``, ``analyzer.job``, ``analyzer.pipeline``  one trace, a multi-GPU job, the inputs
- ``analyzer.api``, ``analyzer.cli``, ``analyzer.diff``, ``analyzer.phases``  the Python API and the commands
"""
from __future__ import annotations

from typing import Any

from analyzer._version import __version__

__all__ = ["AnalysisResult", "__version__", "analyze"]


def __getattr__(name: str) -> Any:
    """``analyzer.analyze`` and ``analyzer.AnalysisResult``, imported on first use: every ``import
    analyzer.x`` runs this package first, and the loaders and the CLI must not pay for the whole
    analysis stack."""
    if name in ("analyze", "AnalysisResult"):
        from analyzer import api

        return getattr(api, name)
    raise AttributeError(f"module 'analyzer' has no attribute {name!r}")
