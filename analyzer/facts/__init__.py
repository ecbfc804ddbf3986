"""Facts: derived tables computed from the trace model (see :mod:`analyzer.facts.registry`).

Every module listed in :data:`analyzer.facts.registry.FACT_MODULES` registers its facts on import.
"""
from __future__ import annotations

from analyzer.facts.registry import (
    FactContext,
    FactSpec,
    FactStore,
    UnknownFactError,
    all_specs,
    fact,
    get_spec,
    load_all,
)

__all__ = ["FactContext", "FactSpec", "FactStore", "UnknownFactError", "all_specs", "fact", "get_spec", "load_all"]
