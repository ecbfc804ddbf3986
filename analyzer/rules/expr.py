"""Rule expressions: a tiny, whitelisted, vectorized language on top of Python's expression syntax.

Safety argument (the whole file is the audit surface):

1. The text is parsed with ``ast.parse(mode="eval")``; nothing is ever compiled or executed by Python.
2. :func:`compile_expr` walks the tree once and refuses every node type not listed in
   ``_ALLOWED_NODES`` (no attributes, subscripts, lambdas, comprehensions, f-strings, keywords...),
   every name that is not a known column / parameter / built-in / let, every function that is not in
   the tables below, names starting with ``_``, ``**`` with anything but a small literal exponent,
   regexes with back-references (all regexes run on RE2, in linear time), and trees that are too big
   or too deep.
3. :func:`evaluate` walks the same tree again and maps each allowed node to a numpy/pandas operation;
   it raises on anything else (defense in depth), and refuses arithmetic on text.

Two levels: *row* expressions (``where`` and aggregate arguments) are evaluated as pandas Series over
the rows of the rule's source fact; *group* expressions (``let``, ``condition``, ``impact``) are
evaluated as Series with one value per scope group (aggregates turn rows into groups).
"""
from __future__ import annotations

import ast
import builtins
import functools
import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analyzer.errors import closest_name, did_you_mean
from analyzer.rules.units import BYTE_UNITS, DURATION_UNITS, literal_value
from analyzer.saferegex import PatternError, UserPattern, compile_regex

MAX_SOURCE_CHARS = 2000
MAX_NODES = 400
MAX_DEPTH = 40
MAX_EXPONENT = 64
MAX_STRING_CHARS = 500
MAX_PATTERN_CHARS = 200

#: aggregate -> (min args, max args). ``min``/``max`` with one argument are aggregates, with two they
#: are the element-wise minimum/maximum.
AGGREGATES: dict[str, tuple[int, int]] = {
    "count": (0, 0),
    "sum": (1, 1),
    "mean": (1, 1),
    "median": (1, 1),
    "min": (1, 1),
    "max": (1, 1),
    "p": (2, 2),
    "any": (1, 1),
    "all": (1, 1),
    "share": (1, 1),
    "nunique": (1, 1),
    "first": (1, 1),
    "top": (1, 2),
}
_ELEMENTWISE: dict[str, tuple[int, Callable[..., Any]]] = {
    "abs": (1, np.abs),
    "sqrt": (1, np.sqrt),
    "log10": (1, np.log10),
    "clip": (3, np.clip),
    "min": (2, np.minimum),
    "max": (2, np.maximum),
}
#: f(value, "text"): the second argument is a string literal or a ``text`` parameter.
TEXT_FUNCTIONS: tuple[str, ...] = ("matches", "startswith", "contains")
#: Other facts, aggregated over the rows that share the group's scope keys (whole fact otherwise).
FACT_FUNCTIONS: dict[str, int] = {"fact_count": 1, "fact_sum": 2, "fact_min": 2, "fact_max": 2, "fact_mean": 2,
                                  "fact_first": 2}

_BINOPS: dict[type, Callable[..., Any]] = {
    ast.Add: np.add,
    ast.Sub: np.subtract,
    ast.Mult: np.multiply,
    ast.Div: np.true_divide,
    ast.FloorDiv: np.floor_divide,
    ast.Mod: np.mod,
    ast.Pow: np.power,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_ALLOWED_NODES = (
    ast.Expression, ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare,
    ast.Call, ast.IfExp, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd,
    *_BINOPS, *_COMPARE,
)

_NUM = r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_UNIT_NAMES = "|".join(sorted({*DURATION_UNITS, *BYTE_UNITS}, key=len, reverse=True))
_LITERALS = re.compile(
    rf"""(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    |(?<![\w.])(?P<num>{_NUM})(?P<unit>{_UNIT_NAMES})(?!\w)
    |(?<![\w.])(?P<pnum>{_NUM})%(?=\s*(?:$|[)\],<>=!+\-*/]|and\b|or\b|if\b|else\b))""",
    re.VERBOSE,
)


class ExprError(Exception):
    """An expression is invalid (``unsafe`` when it tried something a rule may never do)."""

    def __init__(self, message: str, hint: str | None = None, *, unsafe: bool = False) -> None:
        super().__init__(message)
        self.message, self.hint, self.unsafe = message, hint, unsafe


@dataclass(frozen=True)
class Names:
    """What an expression may read. ``consts``: parameters, built-ins, scalars (one value)."""

    columns: frozenset[str] = frozenset()
    consts: frozenset[str] = frozenset()
    text_params: frozenset[str] = frozenset()
    lets: frozenset[str] = frozenset()
    keys: frozenset[str] = frozenset()
    facts: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Expr:
    """A checked expression. ``text`` is ``source`` with unit literals rewritten to numbers."""

    source: str
    text: str
    tree: ast.Expression = field(compare=False, repr=False)
    level: str  # "row" | "group"
    names: frozenset[str] = frozenset()
    facts: frozenset[str] = frozenset()
    regex_params: frozenset[str] = frozenset()  # text parameters used as matches() patterns
    fact_columns: frozenset[tuple[str, str]] = frozenset()  # (fact, column) read by fact_*() calls


def rewrite_units(source: str) -> str:
    """``1ms`` -> ``1000000.0``, ``64KiB`` -> ``65536.0``, ``50%`` -> ``0.5`` (strings untouched).

    A number directly followed by ``%`` is a percent unless an operand follows (``x % 2`` and
    ``50 % 3`` stay modulo)."""

    def replace(match: re.Match[str]) -> str:
        if match["str"] is not None:
            return match["str"]
        if match["num"] is not None:
            return repr(literal_value(match["num"], match["unit"]))
        return repr(literal_value(match["pnum"], "%"))

    return _LITERALS.sub(replace, source)


def check_pattern(pattern: str) -> UserPattern:
    """Compile a user regex for linear-time matching (RE2, see :mod:`analyzer.saferegex`): no pattern
    can backtrack catastrophically; back-references and look-around are refused."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ExprError(f"regex is {len(pattern)} characters, over the limit of {MAX_PATTERN_CHARS}")
    try:
        return _compiled_pattern(pattern)
    except PatternError as err:
        raise ExprError(str(err), err.hint, unsafe=err.unsafe) from None


@functools.lru_cache(maxsize=256)
def _compiled_pattern(pattern: str) -> UserPattern:
    return compile_regex(pattern, what="regex")


# ---------------------------------------------------------------------------------------------------
# static checking


def compile_expr(source: object, level: str, names: Names) -> Expr:
    """Parse and check ``source`` for ``level`` ("row": a ``where``; "group": let/condition/impact)."""
    if isinstance(source, bool):
        source = "True" if source else "False"
    if not isinstance(source, (str, int, float)):
        raise ExprError(f"expected an expression, got {type(source).__name__}")
    source = str(source)
    if len(source) > MAX_SOURCE_CHARS:
        raise ExprError(f"expression is {len(source)} characters, over the limit of {MAX_SOURCE_CHARS}")
    text = rewrite_units(source)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise ExprError(f"syntax error in {source.strip()!r}: {err.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ExprError("expression is too deeply nested", unsafe=True) from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ExprError(f"expression has more than {MAX_NODES} parts; split it into lets", unsafe=True)
    checker = _Checker(names)
    checker.check(tree.body, row=level == "row", in_aggregate=False, depth=0)
    return Expr(source=source, text=text, tree=tree, level=level,
                names=frozenset(checker.used), facts=frozenset(checker.facts),
                regex_params=frozenset(checker.regex_params), fact_columns=frozenset(checker.fact_columns))


class _Checker:
    def __init__(self, names: Names) -> None:
        self.names = names
        self.used: set[str] = set()
        self.facts: set[str] = set()
        self.regex_params: set[str] = set()
        self.fact_columns: set[tuple[str, str]] = set()

    def check(self, node: ast.AST, *, row: bool, in_aggregate: bool, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise ExprError(f"expression is nested more than {MAX_DEPTH} levels deep", unsafe=True)
        if not isinstance(node, _ALLOWED_NODES):
            raise ExprError(_describe_forbidden(node), unsafe=True)
        if isinstance(node, ast.Constant):
            _check_constant(node.value)
        elif isinstance(node, ast.Name):
            self._check_name(node.id, row=row, in_aggregate=in_aggregate)
        elif isinstance(node, ast.Call):
            self._check_call(node, row=row, in_aggregate=in_aggregate, depth=depth)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            self.check(node.left, row=row, in_aggregate=in_aggregate, depth=depth + 1)
            exponent = node.right
            if isinstance(exponent, ast.UnaryOp) and isinstance(exponent.op, (ast.USub, ast.UAdd)):
                exponent = exponent.operand
            value = _literal_number(exponent)
            if value is None or abs(value) > MAX_EXPONENT:
                raise ExprError(f"the exponent of ** must be a number literal between -{MAX_EXPONENT} "
                                f"and {MAX_EXPONENT}", unsafe=True)
        else:
            for child in ast.iter_child_nodes(node):
                if not isinstance(child, (ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.Load)):
                    self.check(child, row=row, in_aggregate=in_aggregate, depth=depth + 1)
                elif not isinstance(child, _ALLOWED_NODES):
                    raise ExprError(_describe_forbidden(child), unsafe=True)

    def _check_name(self, name: str, *, row: bool, in_aggregate: bool) -> None:
        n = self.names
        if name.startswith("_"):
            raise ExprError(f"name {name!r} is not allowed (names starting with _ are reserved)", unsafe=True)
        if name in n.consts or (row and name in n.columns) or (not row and name in n.keys | n.lets):
            self.used.add(name)
            return
        if row and in_aggregate and name in n.lets | n.keys:
            self.used.add(name)
            return
        if not row and name in n.columns:
            raise ExprError(f'column "{name}" must be inside an aggregate here', f"e.g. sum({name}) or max({name})")
        if row and name in n.lets:
            raise ExprError(f'let "{name}" cannot be used in where (where filters rows before lets exist)')
        visible = set(n.consts) | (set(n.columns) if row else set(n.keys | n.lets))
        if in_aggregate:
            visible |= n.lets | n.keys
        best = closest_name(name, visible | set(n.columns))
        kind = "column" if best in n.columns else "name"
        raise ExprError(f'unknown {kind} "{name}"', f'did you mean "{best}"?' if best else None)

    def _check_call(self, node: ast.Call, *, row: bool, in_aggregate: bool, depth: int) -> None:
        if not isinstance(node.func, ast.Name):
            raise ExprError("only plain function calls such as sum(x) are allowed", unsafe=True)
        if node.keywords:
            raise ExprError(f"{node.func.id}() takes no keyword arguments", unsafe=True)
        name, args = node.func.id, node.args
        if name.startswith("_"):
            raise ExprError(f"function {name!r} is not allowed", unsafe=True)
        nargs = len(args)
        if name in AGGREGATES and AGGREGATES[name][0] <= nargs <= AGGREGATES[name][1]:
            if in_aggregate:
                raise ExprError(f"aggregate {name}() inside another aggregate")
            if row:
                raise ExprError(f"aggregate {name}() is not allowed in where (where filters single rows)")
            if name == "p":
                q = _literal_number(args[1])
                if q is None or not 0 <= q <= 100:
                    raise ExprError("p(x, q): q must be a number literal between 0 and 100")
                args = args[:1]
            for arg in args:
                self.check(arg, row=True, in_aggregate=True, depth=depth + 1)
            return
        if name in _ELEMENTWISE and _ELEMENTWISE[name][0] == nargs:
            for arg in args:
                self.check(arg, row=row, in_aggregate=in_aggregate, depth=depth + 1)
            return
        if name in TEXT_FUNCTIONS and nargs == 2:
            self.check(args[0], row=row, in_aggregate=in_aggregate, depth=depth + 1)
            pattern = args[1]
            if isinstance(pattern, ast.Name) and pattern.id in self.names.text_params:
                self.used.add(pattern.id)
                if name == "matches":
                    self.regex_params.add(pattern.id)
            elif isinstance(pattern, ast.Constant) and isinstance(pattern.value, str):
                _check_constant(pattern.value)
                if name == "matches":
                    check_pattern(pattern.value)
            else:
                raise ExprError(f"{name}(x, text): text must be a string literal or a text parameter")
            return
        if name in FACT_FUNCTIONS and nargs == FACT_FUNCTIONS[name]:
            if row:
                raise ExprError(f"{name}() is not allowed in where")
            if not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args):
                raise ExprError(f"{name}() takes string literals, e.g. fact_sum(\"gpu_busy\", \"duration\")")
            fact_name = args[0].value  # type: ignore[attr-defined]
            if fact_name not in self.names.facts:
                raise ExprError(f'unknown fact "{fact_name}" in {name}()', did_you_mean(fact_name, self.names.facts))
            if nargs == 2:
                column = args[1].value  # type: ignore[attr-defined]
                if column not in self.names.facts[fact_name]:
                    raise ExprError(f'fact "{fact_name}" has no column "{column}"',
                                    did_you_mean(column, self.names.facts[fact_name]))
                self.fact_columns.add((fact_name, column))
            self.facts.add(fact_name)
            return
        known = set(AGGREGATES) | set(_ELEMENTWISE) | set(TEXT_FUNCTIONS) | set(FACT_FUNCTIONS)
        if name in known:
            raise ExprError(f"{name}() called with {nargs} argument(s)", "see docs/writing-rules.md for signatures")
        # a Python built-in (open, eval, getattr...) is an attempt to run code, not a typo
        raise ExprError(f'unknown function "{name}"', did_you_mean(name, known), unsafe=hasattr(builtins, name))


def _check_constant(value: object) -> None:
    if isinstance(value, str):
        if len(value) > MAX_STRING_CHARS:
            raise ExprError(f"string literal over {MAX_STRING_CHARS} characters")
    elif not _is_number(value):
        raise ExprError(f"literal {value!r} is not allowed (numbers, strings, True, False)", unsafe=True)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        raise ExprError(f"number literal {_short_number(value)} is out of range")  # before math.isfinite:
    elif isinstance(value, float) and (not math.isfinite(value) or abs(value) >= 2**63):  # 10**400 overflows it
        raise ExprError(f"number literal {value!r} is out of range")


def _short_number(value: int) -> str:
    """A huge integer literal for a message: its first digits and its length, not 400 digits."""
    digits = str(abs(value)) if value.bit_length() < 4000 else ""
    if digits and len(digits) <= 24:
        return str(value)
    return f"{'-' if value < 0 else ''}{digits[:6]}... ({len(digits)} digits)" if digits else "(thousands of digits)"


def _is_number(value: object) -> bool:
    return isinstance(value, (bool, int, float))


def _literal_number(node: ast.AST) -> float | None:
    """The value of a number literal node, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    return None


def _describe_forbidden(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"attribute access (.{node.attr}) is not allowed in rule expressions"
    if isinstance(node, ast.Subscript):
        return "indexing (x[...]) is not allowed in rule expressions"
    return f"{type(node).__name__} is not allowed in rule expressions"


# ---------------------------------------------------------------------------------------------------
# evaluation


class EvalError(Exception):
    """An expression failed on this data (wrong types, a missing scalar...)."""


@dataclass
class Env:
    """Values an expression reads. ``rows`` are the (filtered) source rows with a 0..n-1 index;
    ``codes[i]`` is row i's group; ``keys`` holds one row per group (canonical key names)."""

    consts: Mapping[str, Any]
    rows: pd.DataFrame
    codes: np.ndarray | None = None
    keys: pd.DataFrame | None = None
    lets: dict[str, Any] = field(default_factory=dict)
    fact: Callable[[str], pd.DataFrame] | None = None
    #: columns of ``rows`` already read, with the frame they were read from (lookups read them once)
    columns: dict[str, tuple[pd.DataFrame, pd.Series]] = field(default_factory=dict, repr=False)

    @property
    def ngroups(self) -> int:
        return 0 if self.keys is None else len(self.keys)


def evaluate(expr: Expr, env: Env) -> Any:
    """Value of ``expr``: a Series (per row or per group) or a scalar (broadcast by the caller)."""
    with np.errstate(all="ignore"):
        try:
            return _eval(expr.tree.body, env, expr.level == "row")
        except EvalError:
            raise
        except (TypeError, ValueError, KeyError, OverflowError, ZeroDivisionError) as err:
            raise EvalError(f"{type(err).__name__}: {err}") from err  # the cause tells a damaged trace (overflow)


def _eval(node: ast.AST, env: Env, row: bool) -> Any:
    if isinstance(node, ast.Constant) and (_is_number(node.value) or isinstance(node.value, str)):
        return node.value
    if isinstance(node, ast.Name):
        return _lookup(node.id, env, row)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env, row)
        if isinstance(node.op, ast.Not):
            return np.logical_not(value)
        if isinstance(node.op, ast.USub):
            return np.negative(_numeric(value))
        if isinstance(node.op, ast.UAdd):
            return _numeric(value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left = _numeric(_eval(node.left, env, row))
        right = _numeric(_eval(node.right, env, row))
        if isinstance(node.op, ast.Pow):
            left = left.astype(float) if isinstance(left, pd.Series) else float(left)
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.BoolOp):
        combine = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
        result = _eval(node.values[0], env, row)
        for value in node.values[1:]:
            result = combine(result, _eval(value, env, row))
        return result
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, row)
        if len(node.ops) == 1:  # one comparison: a numpy-bool Series is its own logical_and with True
            value = _COMPARE[type(node.ops[0])](left, _eval(node.comparators[0], env, row))
            if isinstance(value, pd.Series) and value.dtype == np.bool_:
                return value
            return np.logical_and(True, value)
        chain: Any = True
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, env, row)
            chain = np.logical_and(chain, _COMPARE[type(op)](left, right))
            left = right
        return chain
    if isinstance(node, ast.IfExp):
        test = _eval(node.test, env, row)
        if not isinstance(test, pd.Series):
            return _eval(node.body if test else node.orelse, env, row)
        body, orelse = _eval(node.body, env, row), _eval(node.orelse, env, row)
        return pd.Series(np.where(test.fillna(False).astype(bool), body, orelse), index=test.index)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return _call(node.func.id, node.args, env, row)
    raise EvalError(_describe_forbidden(node))  # unreachable for checked expressions


def _lookup(name: str, env: Env, row: bool) -> Any:
    if name.startswith("_"):
        raise EvalError(f"name {name!r} is not allowed")
    if row and name in env.rows.columns:
        cached = env.columns.get(name)
        if cached is None or cached[0] is not env.rows:  # a column read again (the rows unchanged): one Series
            cached = env.columns[name] = (env.rows, _wide(env.rows[name]))
        return cached[1]
    if not row and env.keys is not None and name in env.keys.columns:
        return _wide(env.keys[name])
    if name in env.lets:
        value = env.lets[name]
        if row and isinstance(value, pd.Series):  # a group value read inside an aggregate
            return pd.Series(value.to_numpy()[env.codes], index=env.rows.index)
        return value
    if name in env.consts:
        return env.consts[name]
    raise EvalError(f"no value for {name!r} (a per-trace scalar the analysis did not provide?)")


def _wide(column: pd.Series) -> pd.Series:
    """Integer columns in 64 bits: facts keep ids and launch dimensions in int32 (the trace model's
    compact dtypes), where a rule's ``grid_x * grid_y * grid_z * block_x`` would wrap around."""
    if column.dtype.kind in "iu" and column.dtype.itemsize < 8:
        return column.astype(np.int64)
    return column


def _numeric(value: Any) -> Any:
    if isinstance(value, str) or (
        isinstance(value, pd.Series) and not pd.api.types.is_numeric_dtype(value.dtype)
    ):
        raise EvalError("arithmetic on text is not allowed")
    return value


def _call(name: str, args: list[ast.expr], env: Env, row: bool) -> Any:
    if name in AGGREGATES and AGGREGATES[name][0] <= len(args) <= AGGREGATES[name][1] and not row:
        values = [_eval(a, env, True) for a in args[:1]]
        q = float(args[1].value) / 100.0 if name == "p" else 0.0  # type: ignore[attr-defined]
        weight = _eval(args[1], env, True) if name == "top" and len(args) == 2 else None
        return _aggregate(name, values[0] if values else None, q, env, weight)
    if name in _ELEMENTWISE and _ELEMENTWISE[name][0] == len(args):
        return _ELEMENTWISE[name][1](*(_numeric(_eval(a, env, row)) for a in args))
    if name in TEXT_FUNCTIONS and len(args) == 2:
        value = _eval(args[0], env, row)
        text = _eval(args[1], env, row)
        if not isinstance(text, str):
            raise EvalError(f"{name}(): the second argument must be text")
        return _text_test(name, value, text)
    if name in FACT_FUNCTIONS and len(args) == FACT_FUNCTIONS[name] and env.fact is not None:
        return _fact_aggregate(name, [a.value for a in args], env)  # type: ignore[attr-defined]
    raise EvalError(f"function {name}() is not allowed here")


_EMPTY_GROUP = {"sum": 0, "count": 0, "any": False, "all": True}


def _aggregate(name: str, values: Any, q: float, env: Env, weight: Any = None) -> pd.Series:
    assert env.codes is not None
    codes, ngroups = env.codes, env.ngroups
    if name == "count":
        return pd.Series(np.bincount(codes, minlength=ngroups)[:ngroups])
    if not isinstance(values, pd.Series):
        values = pd.Series(np.full(len(codes), values))
    if name in ("any", "all", "share"):
        values = values.fillna(False).astype(bool)
    if name == "top":  # the most frequent non-empty value ("" when none), ties to the first seen; with a
        # weight, the value holding the largest sum of it (e.g. the range holding the most time)
        texts = values.astype(object).where(values.notna(), "").astype(str)
        frame = pd.DataFrame({"g": codes, "v": texts.to_numpy()})
        if weight is not None:
            w = _numeric(weight)
            frame["w"] = np.nan_to_num(np.broadcast_to(np.asarray(w, dtype=np.float64), (len(codes),)), nan=0.0)
        frame = frame[frame["v"] != ""]
        grouped = frame.groupby(["g", "v"], sort=False)
        counts = (grouped["w"].sum() if weight is not None else grouped.size()).reset_index(name="n")
        best = counts.sort_values("n", ascending=False, kind="stable").drop_duplicates("g")
        return pd.Series(best.set_index("g")["v"]).reindex(range(ngroups), fill_value="").reset_index(drop=True)
    whole = _one_group(name, values, codes, ngroups)
    if whole is not None:
        return whole
    if name == "nunique" and isinstance(values.dtype, pd.CategoricalDtype):
        distinct = _categorical_nunique(values, codes, ngroups)
        if distinct is not None:
            return distinct
    grouped = values.groupby(codes)
    if name == "p":
        result = grouped.quantile(q)
    else:
        method = {"share": "mean"}.get(name, name)
        result = getattr(grouped, method)()
    if len(result) != ngroups or not result.index.equals(pd.RangeIndex(ngroups)):  # groups without rows
        result = result.reindex(range(ngroups), fill_value=_EMPTY_GROUP.get(name, np.nan))
    return result.reset_index(drop=True)


def _one_group(name: str, values: pd.Series, codes: np.ndarray, ngroups: int) -> pd.Series | None:
    """The aggregate of one group holding every row (trace scope, or one device), without a groupby
    over the rows, where the whole-column reduction is the groupby's value exactly: integer and
    boolean sums, means and shares (exact integer sums in float64), extrema, any/all, distinct counts.
    None otherwise (float sums round differently; medians, percentiles, first and top keep the groupby)."""
    if ngroups != 1 or not len(values) or len(codes) != len(values) or not isinstance(values.dtype, np.dtype):
        return None
    kind = values.dtype.kind
    if name in ("sum", "mean", "share") and not (
            kind in "biu" and (kind == "b" or float(np.abs(values.to_numpy()).sum(dtype=np.float64)) < 2.0 ** 52)):
        return None
    if name not in ("sum", "mean", "share", "min", "max", "any", "all", "nunique", "median") or kind not in "biuf":
        return None
    if name == "median" and kind not in "iu":  # (the groupby skips NaN; integers have none)
        return None
    if codes.min() != 0 or codes.max() != 0:
        return None
    if name == "sum":
        if values.dtype not in (np.int64, np.bool_):  # the groupby keeps other integer widths
            return None
        value: Any = values.to_numpy().sum(dtype=np.int64)
    elif name in ("mean", "share"):
        value = float(values.to_numpy().sum(dtype=np.int64)) / len(values)
    elif name == "nunique":
        value = np.int64(values.nunique())
    elif name == "median":
        # the groupby's median: the values as float64, the middle one or the mean of the middle two;
        # numpy's median of the integers picks the same elements and averages them in float64
        value = np.float64(np.median(values.to_numpy()))
    else:
        value = getattr(values, name)()
    return pd.Series([value], name=values.name)


def _categorical_nunique(values: pd.Series, codes: np.ndarray, ngroups: int) -> pd.Series | None:
    """``values.groupby(codes).nunique()`` of a categorical ``values`` (distinct non-missing values per
    group) from its integer codes, without the groupby's hashing; None when a group has no rows (the
    groupby leaves it out)."""
    if not len(values) or len(codes) != len(values) or int(codes.min()) < 0:
        return None
    rows_per_group = np.bincount(codes, minlength=ngroups)
    if len(rows_per_group) != ngroups or not rows_per_group.all():
        return None
    cat = np.asarray(values.cat.codes)
    ncat = len(values.cat.categories)
    valid = cat >= 0
    if not valid.all():
        cat, group = cat[valid], codes[valid]
    else:
        group = codes
    if ngroups * max(ncat, 1) <= 1 << 24:  # a table of (group, category) seen
        seen = np.zeros((ngroups, max(ncat, 1)), dtype=bool)
        seen[group, cat] = True
        counts = seen.sum(axis=1, dtype=np.int64)
    else:
        pairs = np.unique(group.astype(np.int64) * ncat + cat)
        counts = np.bincount(pairs // ncat, minlength=ngroups).astype(np.int64)
    return pd.Series(counts, name=values.name)


def _text_test(name: str, value: Any, text: str) -> Any:
    if name == "matches":
        pattern = check_pattern(text)
        test: Callable[[str], bool] = pattern.search
    elif name == "startswith":
        test = lambda s: s.startswith(text)
    else:
        test = lambda s: text in s
    if not isinstance(value, pd.Series):
        return test(str(value))
    # each distinct value tested once (kernel names repeat a lot), then one gather by code (-1, a
    # missing value, reads the False appended at the end)
    if isinstance(value.dtype, pd.CategoricalDtype):  # the loader's text columns: their own codes
        codes, uniques = value.cat.codes.to_numpy(), value.cat.categories
    else:
        from analyzer.loading.columns import factorize_objects  # lazy: the expression layer stays fact-free

        codes, uniques = factorize_objects(value)
    hits = np.append(np.fromiter((test(str(u)) for u in uniques), dtype=bool, count=len(uniques)), False)
    return pd.Series(hits[codes], index=value.index)


def _fact_aggregate(name: str, args: list[str], env: Env) -> Any:
    assert env.fact is not None and env.keys is not None
    other = env.fact(args[0])
    how = name.removeprefix("fact_")
    common = [k for k in env.keys.columns if k in other.columns]
    fill: Any = 0 if how in ("count", "sum") else ("" if how == "first" else np.nan)
    if not common:
        if how == "count":
            total = len(other)
        elif how == "first":
            total = other[args[1]].iloc[0] if len(other) else fill
        else:
            column = other[args[1]]
            total = getattr(column, how)() if len(column) else fill
        return pd.Series([total] * env.ngroups)
    grouped = other.groupby(common)
    agg = grouped.size() if how == "count" else getattr(grouped[args[1]], how)()
    joined = env.keys[common].merge(agg.rename("_value").reset_index(), on=common, how="left")
    result = joined["_value"].fillna(fill).reset_index(drop=True)
    if how in ("count", "sum") and pd.api.types.is_integer_dtype(agg.dtype):
        result = result.astype("int64")  # the left join's NaN made it float
    return result
