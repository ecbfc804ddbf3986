"""Facts: derived tables computed from the trace model (see :mod:`analyzer.facts.registry`).

Every module listed in :data:`analyzer.facts.registry.FACT_MODULES` registers its facts on import.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from analyzer.lazyimport import lazy_attributes

if TYPE_CHECKING:  # imported on first use: the command line's option modules read no pandas
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
if not TYPE_CHECKING:  # type checkers read the imports above (see analyzer.lazyimport)
    __getattr__ = lazy_attributes(__name__, globals(), {name: "analyzer.facts.registry" for name in __all__})
