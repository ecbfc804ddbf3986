"""Which rules run: selectors (``NAME | ID | CATEGORY``, globs allowed) and selection layers, like ruff's
``select`` / ``extend-select`` / ``ignore``.

A selector matches a rule when it equals the rule's name, its id (any case) or its category, when it
is an id prefix (``NCU`` matches ``NCU001``..``NCU010``, ``GPU00`` matches ``GPU001``), or, with ``*``,
``?`` or ``[...]`` in it, when it matches the name, the id or the category as a glob (``ncu-*``,
``NCU00?``, ``*-measured``).

Layers apply in order (a pack's ``disable:``, then the project configuration, then the command
line): a layer's ``select`` replaces the set of enabled rules, ``extend_select`` adds to it and
``ignore`` removes from it, so ``--ignore`` on the command line adds to the configuration's
``ignore`` while ``--select`` starts over.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from analyzer.errors import ParameterError, RuleError, did_you_mean
from analyzer.rules.model import CATEGORIES, Rule, RulePack
from analyzer.rules.overrides import apply_overrides
from analyzer.saferegex import PatternError, UserPattern, compile_glob

_GLOB = re.compile(r"[*?\[]")
_ID_PREFIX = re.compile(r"^[A-Za-z]{2,5}[0-9]{0,2}$")


@functools.lru_cache(maxsize=256)
def _glob(selector: str) -> UserPattern:
    """A selector glob, matched in linear time (RE2, :mod:`analyzer.saferegex`)."""
    try:
        return compile_glob(selector, what="rule selector")
    except PatternError as err:
        raise ParameterError(str(err), hint=err.hint) from None


def split_selectors(values: Iterable[str]) -> tuple[str, ...]:
    """``["a,b", " c "]`` -> ``("a", "b", "c")``: selectors may be given comma-separated, as in ruff."""
    return tuple(part.strip() for value in values for part in str(value).split(",") if part.strip())


def matches(selector: str, rule: Rule) -> bool:
    """True when ``selector`` (name, id, category, id prefix or glob) picks ``rule``."""
    if _GLOB.search(selector):
        return (_glob(selector).search(rule.name) or _glob(selector.upper()).search(rule.id)
                or _glob(selector).search(rule.category))
    if selector in (rule.name, rule.category) or selector.upper() == rule.id:
        return True
    return bool(_ID_PREFIX.match(selector)) and rule.id.startswith(selector.upper())


def resolve(selectors: Sequence[str], rules: Sequence[Rule], where: str) -> set[str]:
    """Ids of the rules the selectors pick. A selector without a glob that picks nothing and is not a
    known category is an error (naming ``where``, with a did-you-mean): a typo must not silently switch
    nothing off. A glob that picks nothing is fine (a shared configuration may name rules of a pack
    that this run does not load)."""
    picked: set[str] = set()
    for selector in selectors:
        hit = {r.id for r in rules if matches(selector, r)}
        if not hit and not _GLOB.search(selector) and selector not in CATEGORIES:
            candidates = [*(r.name for r in rules), *(r.id for r in rules), *CATEGORIES]
            raise SelectorError(
                f'{where}: "{selector}" is not a rule name, id or category of this pack',
                hint=did_you_mean(selector, candidates) or "see `analyze rules list`",
            )
        picked |= hit
    return picked


class SelectorError(RuleError):
    """A ``--select`` / ``--ignore`` / ``disable:`` selector names nothing."""


@dataclass(frozen=True)
class RuleSettings:
    """One layer of rule settings (the project configuration, the command line): parameter values
    (``sets``, ``RULE.PARAM=VALUE``) and selection. ``select`` None keeps the rules enabled so far.
    ``origin`` says, per field (``sets``, ``select``, ``extend_select``, ``ignore``), where the values
    were written (``pyproject.toml:12``; default: the command-line option), for errors and for
    ``analyze config``."""

    sets: tuple[str, ...] = ()
    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    origin: Mapping[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.sets) or self.select is not None or bool(self.extend_select) or bool(self.ignore)

    def where(self, key: str) -> str:
        return self.origin.get(key) or ("--set" if key == "sets" else f"--{key.replace('_', '-')}")


def apply_settings(pack: RulePack, layers: Iterable[RuleSettings]) -> RulePack:
    """``pack`` with each layer's parameter values applied and its enabled rules chosen by the layers'
    selection, in order (see the module docstring). Disabled rules stay defined (``pack.disabled``)
    with the reason in ``pack.reasons``."""
    layers = list(layers)
    for layer in layers:
        if layer.sets:
            pack = apply_overrides(pack, layer.sets, origin=layer.where("sets"))
    every = pack.all_rules
    enabled = {r.id for r in pack.rules}
    reasons: dict[str, str] = dict(pack.reasons)
    for layer in layers:
        if layer.select is not None:
            chosen = resolve(layer.select, every, layer.where("select"))
            for rid in enabled - chosen:
                reasons[rid] = f"not in select ({layer.where('select')})"
            enabled = chosen
        added = resolve(layer.extend_select, every, layer.where("extend_select"))
        enabled |= added
        for selector in layer.ignore:
            for rid in resolve((selector,), every, layer.where("ignore")):
                if rid in enabled:
                    reasons[rid] = f"ignore {selector} ({layer.where('ignore')})"
                enabled.discard(rid)
    return pack.with_enabled(enabled, reasons)
