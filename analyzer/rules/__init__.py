"""The rule language and its safe engine.

Rules are data (YAML, see ``docs/writing-rules.md``): :func:`load_pack` validates a pack against the
registered facts before any trace is read, :func:`apply_overrides` applies ``--set`` values, and
:func:`evaluate` turns facts into ranked, linked :class:`~analyzer.findings.Finding` objects.

The names below are imported on first use (:func:`__getattr__`), so that importing one light
submodule (``analyzer.rules.units`` for ``analyze --help``) does not import the engine and pandas.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from analyzer.lazyimport import lazy_attributes

if TYPE_CHECKING:
    from analyzer.rules.engine import evaluate
    from analyzer.rules.loader import DEFAULT_PACK, load_pack, validate_pack
    from analyzer.rules.model import (
        BUILTINS,
        SCALARS,
        SCOPES,
        Evidence,
        Parameter,
        Rule,
        RuleEvaluationError,
        RulePack,
        RuleTest,
    )
    from analyzer.rules.overrides import apply_overrides, parse_set

_WHERE = {
    "evaluate": "engine",
    "DEFAULT_PACK": "loader", "load_pack": "loader", "validate_pack": "loader",
    "BUILTINS": "model", "SCALARS": "model", "SCOPES": "model", "Evidence": "model", "Parameter": "model",
    "Rule": "model", "RuleEvaluationError": "model", "RulePack": "model", "RuleTest": "model",
    "apply_overrides": "overrides", "parse_set": "overrides",
}

__all__ = [
    "BUILTINS",
    "DEFAULT_PACK",
    "SCALARS",
    "SCOPES",
    "Evidence",
    "Parameter",
    "Rule",
    "RuleEvaluationError",
    "RulePack",
    "RuleTest",
    "apply_overrides",
    "evaluate",
    "load_pack",
    "parse_set",
    "validate_pack",
]

if not TYPE_CHECKING:  # type checkers read the imports above (see analyzer.lazyimport)
    __getattr__ = lazy_attributes(__name__, globals(), {name: f"{__name__}.{module}" for name, module in _WHERE.items()})
