"""``--set RULE.PARAM=VALUE``: change a rule parameter for one run, validated against its unit (the
loader's ``override:`` and a pack's parameter defaults are checked by the same :func:`set_parameter`
and :func:`check_bounds`)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from analyzer.errors import ParameterError, truncate
from analyzer.rules.expr import ExprError, check_pattern
from analyzer.rules.model import Parameter, Rule, RulePack
from analyzer.rules.units import UnitError, format_quantity, parse_quantity


#: the most of a RULE.PARAM=VALUE an error message quotes
SHOWN_CHARS = 200


def parse_set(text: str) -> tuple[str, str, str]:
    """``"gpu-idle-gaps.min_gap=2ms"`` -> ``("gpu-idle-gaps", "min_gap", "2ms")``."""
    target, sep, value = text.partition("=")
    rule, dot, param = target.strip().rpartition(".")
    if not sep or not dot or not rule or not param or not value.strip():
        raise ParameterError(f"--set {truncate(text, SHOWN_CHARS)!r}: expected RULE.PARAM=VALUE, e.g. "
                             "gpu-idle-gaps.min_gap=2ms")
    return rule, param.strip(), value.strip()


def apply_overrides(pack: RulePack, sets: Iterable[str], *, origin: str = "--set") -> RulePack:
    """A new pack with each ``RULE.PARAM=VALUE`` applied (RULE: name or id, enabled or not). Raises
    ParameterError naming the known rules/parameters (with did-you-mean) or the expected unit;
    ``origin`` names where the values were written (``--set``, ``pyproject.toml:9``)."""
    for text in sets:
        try:
            rule_name, param_name, raw = parse_set(text)
        except ParameterError as err:
            if origin == "--set":
                raise
            raise ParameterError(f"{origin}: set {truncate(text, SHOWN_CHARS)!r}: expected RULE.PARAM=VALUE, e.g. "
                                 "gpu-idle-gaps.min_gap=2ms") from err
        try:
            rule = pack.get(rule_name)
            param = set_parameter(rule, param_name, raw)
        except ParameterError as err:
            shown = truncate(text, SHOWN_CHARS)  # a 5,000-digit value must not push the reason off the line
            where = f"{origin} {shown}" if origin == "--set" else f"{origin}: set {shown}"
            raise ParameterError(f"{where}: {err.message}", hint=err.hint) from None
        pack = pack.replace_rule(rule.with_parameter(param))
    return pack


def set_parameter(rule: Rule, name: str, raw: Any) -> Parameter:
    """``rule``'s parameter ``name`` set to ``raw`` (text such as ``2ms``, or a YAML/TOML number),
    checked against its unit, its min/max and, for regex parameters, the pattern guard. Raises
    :class:`ParameterError` (with did-you-mean for unknown names)."""
    param = rule.parameter(name)
    try:
        value = parse_quantity(raw, param.unit)
    except UnitError as err:
        raise ParameterError(str(err)) from None
    problem = check_bounds(param, value)
    if problem:
        raise ParameterError(problem)
    if param.regex:
        try:
            check_pattern(str(value))
        except ExprError as err:
            raise ParameterError(err.message, hint=err.hint) from None
    return replace(param, value=value, text=str(raw))


def check_bounds(param: Parameter, value: Any) -> str | None:
    """A message if ``value`` is outside the parameter's min/max, else None."""
    if param.minimum is not None and value < param.minimum:
        return f"{format_quantity(value, param.unit)} is below the minimum {format_quantity(param.minimum, param.unit)}"
    if param.maximum is not None and value > param.maximum:
        return f"{format_quantity(value, param.unit)} is above the maximum {format_quantity(param.maximum, param.unit)}"
    return None
