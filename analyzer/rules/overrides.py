"""``--set RULE.PARAM=VALUE``: change a rule parameter for one run, validated against its unit."""
from __future__ import annotations

from collections.abc import Iterable

from analyzer.errors import ParameterError
from analyzer.rules.loader import set_parameter
from analyzer.rules.model import RulePack


def parse_set(text: str) -> tuple[str, str, str]:
    """``"gpu-idle-gaps.min_gap=2ms"`` -> ``("gpu-idle-gaps", "min_gap", "2ms")``."""
    target, sep, value = text.partition("=")
    rule, dot, param = target.strip().rpartition(".")
    if not sep or not dot or not rule or not param or not value.strip():
        raise ParameterError(f"--set {text!r}: expected RULE.PARAM=VALUE, e.g. gpu-idle-gaps.min_gap=2ms")
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
            raise ParameterError(f"{origin}: set {text!r}: expected RULE.PARAM=VALUE, e.g. "
                                 "gpu-idle-gaps.min_gap=2ms") from err
        try:
            rule = pack.get(rule_name)
            param = set_parameter(rule, param_name, raw)
        except ParameterError as err:
            where = f"{origin} {text}" if origin == "--set" else f"{origin}: set {text}"
            raise ParameterError(f"{where}: {err.message}", hint=err.hint) from None
        pack = pack.replace_rule(rule.with_parameter(param))
    return pack
