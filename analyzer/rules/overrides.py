"""``--set RULE.PARAM=VALUE``: change a rule parameter for one run, validated against its unit."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from analyzer.errors import ParameterError
from analyzer.rules.expr import ExprError, check_pattern
from analyzer.rules.loader import check_bounds
from analyzer.rules.model import RulePack
from analyzer.rules.units import UnitError, parse_quantity


def parse_set(text: str) -> tuple[str, str, str]:
    """``"gpu-idle-gaps.min_gap=2ms"`` -> ``("gpu-idle-gaps", "min_gap", "2ms")``."""
    target, sep, value = text.partition("=")
    rule, dot, param = target.strip().rpartition(".")
    if not sep or not dot or not rule or not param or not value.strip():
        raise ParameterError(f"--set {text!r}: expected RULE.PARAM=VALUE, e.g. gpu-idle-gaps.min_gap=2ms")
    return rule, param.strip(), value.strip()


def apply_overrides(pack: RulePack, sets: Iterable[str]) -> RulePack:
    """A new pack with each ``RULE.PARAM=VALUE`` applied (RULE: name or id). Raises ParameterError
    naming the known rules/parameters (with did-you-mean) or the expected unit."""
    for text in sets:
        rule_name, param_name, raw = parse_set(text)
        try:
            rule = pack.get(rule_name)
            param = rule.parameter(param_name)
        except ParameterError as err:
            raise ParameterError(f"--set {text}: {err.message}", hint=err.hint) from None
        try:
            value = parse_quantity(raw, param.unit)
        except UnitError as err:
            raise ParameterError(f"--set {text}: {err}") from None
        problem = check_bounds(param, value)
        if problem:
            raise ParameterError(f"--set {text}: {problem}")
        if param.regex:
            try:
                check_pattern(str(value))
            except ExprError as err:
                raise ParameterError(f"--set {text}: {err.message}", hint=err.hint) from None
        pack = pack.replace_rule(rule.with_parameter(replace(param, value=value, text=raw)))
    return pack
