"""The rule language and its safe engine.

Rules are data (YAML, see ``docs/writing-rules.md``): :func:`load_pack` validates a pack against the
registered facts before any trace is read, :func:`apply_overrides` applies ``--set`` values, and
:func:`evaluate` turns facts into ranked, linked :class:`~analyzer.findings.Finding` objects.
"""
from __future__ import annotations

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
