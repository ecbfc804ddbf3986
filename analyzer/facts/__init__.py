"""Facts: derived tables computed from the trace model (see :mod:`analyzer.facts.registry`).

Every module listed in ``_MODULES`` registers its facts on import.
"""
from __future__ import annotations

import importlib

from analyzer.facts.registry import FactContext, FactSpec, FactStore, all_specs, fact, get_spec

__all__ = ["FactContext", "FactSpec", "FactStore", "all_specs", "fact", "get_spec", "load_all"]

# Fact modules; each registers its facts with @fact on import.
_MODULES: tuple[str, ...] = (
    "analyzer.facts.intervals",
    "analyzer.facts.nvtx",
    "analyzer.facts.categories",
    "analyzer.facts.occupancy",
    "analyzer.facts.api",
    "analyzer.phases.facts",
    "analyzer.facts.ncu",
    "analyzer.facts.hardware",
    "analyzer.facts.periods",
    "analyzer.facts.steps",
    "analyzer.facts.comm",
    "analyzer.job.facts",
    "analyzer.facts.stacks",
    "analyzer.facts.gpumetrics",
    "analyzer.facts.energy",
    "analyzer.facts.memory",
    "analyzer.facts.breakdown",
)


def load_all() -> None:
    for module in _MODULES:
        importlib.import_module(module)
