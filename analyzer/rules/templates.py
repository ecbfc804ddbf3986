"""Finding messages: Jinja2 templates in an immutable sandbox with a fixed filter set.

A message may only print names (``{{ idle_ns }}``), pipe them through the filters below, and use
``{% if %}`` / ``x if c else y`` with comparisons. Every other construct (attribute or item access,
calls, ``include``/``import``/``extends``, ``set``, loops, macros, arithmetic) is refused when the rule
is loaded, before any trace is read; the sandbox is a second line of defence at render time.
Autoescape is off: reports escape what they embed.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from analyzer.rules.expr import ExprError, did_you_mean

#: the longest message template a rule may have (a bound on what a pack makes the engine parse; the
#: built-in launch-bound message, with its compiled, graph-break and optimizer variants, is about 2,200)
MAX_TEMPLATE_CHARS = 3000


class _Missing:
    """A value the trace could not give (None, NaN): prints ``n/a``, is false, and every comparison
    with it is false, so ``{% if gain_ns > 0 %}`` reads "no" instead of failing the whole analysis
    when a damaged or partial input leaves ``gain_ns`` undefined."""

    __slots__ = ()

    def __str__(self) -> str:
        return "n/a"

    __repr__ = __str__

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return other is None or isinstance(other, _Missing)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __lt__(self, other: object) -> bool:
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __hash__(self) -> int:
        return 0


MISSING = _Missing()


def _template_value(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return value


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, (str, _Missing)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _scaled(scale: float, suffix: str) -> Any:
    def render(value: Any, digits: int = 1) -> str:
        number = _number(value)
        return "n/a" if number is None else f"{number / scale:,.{int(digits)}f} {suffix}"

    return render


def _pct(value: Any, digits: int = 1) -> str:
    number = _number(value)
    return "n/a" if number is None else f"{number * 100:.{int(digits)}f}%"


def _bytes(value: Any) -> str:
    number = _number(value)
    if number is None:
        return "n/a"
    for suffix, scale in (("GiB", 1024.0**3), ("MiB", 1024.0**2), ("KiB", 1024.0)):
        if abs(number) >= scale:
            return f"{number / scale:.1f} {suffix}"
    return f"{number:.0f} B"


def _num(value: Any, digits: int | None = None) -> str:
    number = _number(value)
    if number is None:
        return "n/a" if value is None or not isinstance(value, str) else value
    if digits is None:
        digits = 0 if number == int(number) else 2
    return f"{number:,.{int(digits)}f}"


def _round(value: Any, digits: int = 0) -> Any:
    number = _number(value)
    return "n/a" if number is None else round(number, int(digits))


def _duration(value: Any) -> str:
    number = _number(value)
    if number is None:
        return "n/a"
    for suffix, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(number) >= scale:
            return f"{number / scale:.1f} {suffix}"
    return f"{number:.0f} ns"


def _ratio(value: Any) -> str:
    """A ratio with the digits that matter: ``40.6`` -> ``41x``, ``2.04`` -> ``2.0x``, ``0.043`` ->
    ``0.043x`` (never ``0.0x``)."""
    number = _number(value)
    if number is None:
        return "n/a"
    size = abs(number)
    if size >= 10 or size == 0:
        return f"{number:,.0f}x"
    if size >= 1:
        return f"{number:.1f}x"
    if size >= 0.001:
        return f"{number:.2g}x"
    return "<0.001x"


FILTERS: dict[str, Any] = {
    "ratio": _ratio,
    "ms": _scaled(1e6, "ms"),
    "us": _scaled(1e3, "us"),
    "s": _scaled(1e9, "s"),
    "duration": _duration,
    "pct": _pct,
    "bytes": _bytes,
    "num": _num,
    "round": _round,
}

_ALLOWED = (
    nodes.Template, nodes.Output, nodes.TemplateData, nodes.Name, nodes.Const, nodes.Filter, nodes.If,
    nodes.CondExpr, nodes.Compare, nodes.Operand, nodes.And, nodes.Or, nodes.Not, nodes.Concat,
)
_ENV = ImmutableSandboxedEnvironment(autoescape=False, undefined=jinja2.StrictUndefined)
_ENV.filters = dict(FILTERS)
_ENV.tests = {}
_ENV.globals = {}  # no range, cycler, joiner, namespace, lipsum, dict


class MessageTemplate:
    """A checked message template, compiled to Python on its first :meth:`render`: a pack has dozens
    of messages and a run renders only those of the rules that fire (compiling all of them cost about
    0.2 s of every run). Pickles as its source."""

    __slots__ = ("source", "_compiled", "_tree")

    def __init__(self, source: str, tree: nodes.Template | None = None) -> None:
        self.source = source
        self._compiled: jinja2.Template | None = None
        self._tree = tree  # the tree checked at load: compiled from it (a quarter of the cost is the parse)

    def render(self, values: Mapping[str, Any]) -> str:
        if self._compiled is None:
            self._compiled = _ENV.from_string(self._tree if self._tree is not None else self.source)
            self._tree = None
        return self._compiled.render(values)

    def __getstate__(self) -> str:
        return self.source

    def __setstate__(self, state: str) -> None:
        self.source, self._compiled, self._tree = state, None, None


def compile_template(source: object, allowed_names: Iterable[str]) -> MessageTemplate:
    """Check a message template (parsed now, compiled when first rendered); raises :class:`ExprError`
    (``unsafe`` where it is)."""
    if not isinstance(source, str):
        raise ExprError(f"expected text, got {type(source).__name__}")
    if len(source) > MAX_TEMPLATE_CHARS:
        raise ExprError(f"message is over {MAX_TEMPLATE_CHARS} characters")
    try:
        tree = _ENV.parse(source)
    except jinja2.TemplateSyntaxError as err:
        raise ExprError(f"template syntax error (template line {err.lineno}): {err.message}") from None
    allowed = set(allowed_names)
    for node in tree.find_all(nodes.Node):
        if not isinstance(node, _ALLOWED):
            raise ExprError(_forbidden(node), "a message may print names, filter them and use {% if %}",
                            unsafe=True)
        if isinstance(node, nodes.Name):
            if node.name.startswith("_"):
                raise ExprError(f'name "{node.name}" is not allowed', unsafe=True)
            if node.name not in allowed:
                raise ExprError(f'unknown name "{node.name}"', did_you_mean(node.name, allowed))
        if isinstance(node, nodes.Filter):
            if node.name not in FILTERS:
                raise ExprError(f'unknown filter "{node.name}"',
                                did_you_mean(node.name, FILTERS) or f"filters: {', '.join(FILTERS)}")
            if node.kwargs or node.dyn_args or node.dyn_kwargs or not all(
                isinstance(a, nodes.Const) for a in node.args
            ):
                raise ExprError(f"filter {node.name!r} takes only literal arguments, e.g. round(2)")
    return MessageTemplate(source, tree)


def _forbidden(node: nodes.Node) -> str:
    if isinstance(node, (nodes.Getattr, nodes.Getitem)):
        return "attribute and item access are not allowed in messages"
    if isinstance(node, (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        return "include / import / extends are not allowed in messages"
    if isinstance(node, nodes.Call):
        return "calls are not allowed in messages"
    return f"template construct {type(node).__name__} is not allowed in messages"


def recompile(source: str) -> MessageTemplate:
    """The template of a message that :func:`compile_template` already checked (an unpickled rule's)."""
    return MessageTemplate(source)


def render(template: MessageTemplate, values: Mapping[str, Any]) -> str:
    """Render with plain Python values; raises ExprError on a failure (missing value...)."""
    try:
        return template.render({k: _template_value(v) for k, v in values.items()}).strip()
    except (jinja2.TemplateError, TypeError, ValueError) as err:
        raise ExprError(f"message failed to render: {err}") from None
