"""Kernel categories (gemm, attention, softmax, ...) from a user-editable YAML table, and the kernel
summaries built on them (``category_summary``, ``top_kernels``).

The table (``categories.yaml`` next to this module, or the file named by the ``categories_file``
option) is an ordered list of ``{name, patterns, args}``; the first category with a regular expression
found in the kernel's own function name (demangled or short, never its template arguments: a fused MLP
whose template argument names an activation is no activation kernel), or with an ``args`` pattern found
in the template arguments of a launcher that wraps the real kernel, wins, else ``other``. Patterns run once per distinct name,
not per kernel, so millions of launches of a few hundred kernels classify in milliseconds.

Window: kernels whose start lies in the window.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer.errors import InputError
from analyzer.facts._util import factorize_objects, starts_in_window, text_array, text_codes
from analyzer.facts.registry import FactContext, fact
from analyzer.loading.columns import categorical
from analyzer.loading.kernel_names import kernel_function_name, split_kernel_name
from analyzer.loading.model import KERNEL_COLUMNS
from analyzer.saferegex import PatternError, UserPattern, compile_regex

DEFAULT_CATEGORIES_FILE = Path(__file__).with_name("categories.yaml")
OTHER = "other"
#: the category of a whole CUDA graph execution recorded as one row (nsys ``--cuda-graph-trace=graph``:
#: ``CUDA graph <id>``, ``in_graph`` = GRAPH_EXECUTION): its kernels are not in the trace, so no name
#: pattern can say what it computes; it is a graph replay, never ``other``
GRAPH_CATEGORY = "cuda_graph"


def opaque_graph_share(totals: Iterable[tuple[str, int]], other_ns: int = 0) -> float:
    """The share of kernel time that ran in CUDA graphs traced without their kernels (nsys' default
    graph-level tracing): :data:`GRAPH_CATEGORY`'s time over all kernel time, from ``(category, total_ns)``
    pairs as ``category_summary`` gives them (``other_ns``: kernel time of categories a table left out).
    The one measure of "graphs whose kernels the trace lacks": ``analyze diff``'s note that kernel tables
    hold graphs, not kernels, and the rules a run cannot judge (a run summary's ``graph_hidden_rules``),
    for a trace and for a JSON report alike. 0 without kernel time."""
    total = other_ns
    graphs = 0
    for category, ns in totals:
        total += ns
        graphs += ns if category == GRAPH_CATEGORY else 0
    return graphs / total if total > 0 else 0.0


@dataclass(frozen=True)
class Category:
    name: str
    patterns: tuple[UserPattern, ...]  # linear-time (RE2): a categories file may come from a user
    #: patterns searched in the template arguments: for launchers that wrap the real kernel
    #: (``cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>``, ``ck_tile::kentry<Rmsnorm2dFwd<...>>``)
    args: tuple[UserPattern, ...] = ()


@lru_cache(maxsize=8)
def load_categories(path: str | Path | None = None) -> tuple[Category, ...]:
    """Read and compile a category table; a bad file raises :class:`InputError` naming the problem."""
    file = Path(path) if path else DEFAULT_CATEGORIES_FILE
    from analyzer.errors import RuleError
    from analyzer.yamlsafe import load_yaml

    try:  # the rule files' safe reader: no aliases (no billion laughs), no tags, at most 1 MiB
        doc = load_yaml(file, "category table")
    except RuleError as err:
        detail = str(err).removeprefix(f"{file}:").lstrip("0123456789: ")
        raise InputError(file, f"category table is not valid YAML ({detail})") from None
    entries = doc.get("categories") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise InputError(file, "category table needs a top-level 'categories:' list",
                         hint="see analyzer/facts/categories.yaml for the format")
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InputError(file, f"categories[{i}] needs a 'name' string and a 'patterns' list")
        pats = entry.get("patterns") or []
        if not isinstance(pats, list):
            raise InputError(file, f"category {entry['name']!r}: 'patterns' must be a list")
        arg_pats = entry.get("args") or []
        if not isinstance(arg_pats, list):
            raise InputError(file, f"category {entry['name']!r}: 'args' must be a list")
        compiled: list[UserPattern] = []
        compiled_args: list[UserPattern] = []
        for pat, into in [(p, compiled) for p in pats] + [(p, compiled_args) for p in arg_pats]:
            try:
                into.append(compile_regex(str(pat), what="category pattern"))
            except PatternError as err:
                raise InputError(file, f"category {entry['name']!r}: bad pattern ({err})", hint=err.hint) from None
        out.append(Category(entry["name"], tuple(compiled), tuple(compiled_args)))
    return tuple(out)


def categorize(name: str, short_name: str, table: tuple[Category, ...]) -> str:
    """The category of one kernel: the first category with a pattern found in its own function name
    (demangled name and short name, template arguments and parameters stripped:
    :func:`analyzer.loading.kernel_names.split_kernel_name`) or one of its ``args`` patterns found in the
    template arguments; else ``other``."""
    function, args = split_kernel_name(name)
    short = kernel_function_name(short_name) if short_name else ""
    for c in table:
        if any(p.search(function) or (short and p.search(short)) for p in c.patterns) \
                or (args and any(p.search(args) for p in c.args)):
            return c.name
    return OTHER


def classify_names(names: pd.Series, short_names: pd.Series, table: tuple[Category, ...]) -> np.ndarray:
    """Category per row, matching each distinct (name, short name) pair once."""
    codes, categories = classify_codes(names, short_names, table)
    return categories[codes]


def classify_codes(names: pd.Series, short_names: pd.Series,
                   table: tuple[Category, ...]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`classify_names` as ``(codes, categories)``: the category of row i is
    ``categories[codes[i]]`` (one code per distinct demangled name)."""
    if len(names) == 0:
        return np.empty(0, dtype=np.intp), np.empty(0, dtype=object)
    # a code per row over the distinct texts (a categorical column's own codes: no per-row strings),
    # then one code per distinct text (two categories may read the same, e.g. missing and "")
    row_codes, labels = text_codes(names)
    label_codes, uniq_names = factorize_objects(labels)
    name_codes = label_codes[row_codes]
    # the short name of each distinct demangled name present (its first occurrence; hashed, not sorted)
    first = pd.Series(name_codes).drop_duplicates()
    present, first_row = first.to_numpy(), first.index.to_numpy()
    short_codes, short_labels = text_codes(short_names)
    shorts = short_labels[short_codes[first_row]]
    result = np.full(len(uniq_names), OTHER, dtype=object)
    known = _known_categories(table)
    for code, name, short in zip(present, uniq_names[present], shorts):  # distinct names, never per launch
        key = (str(name), str(short) if isinstance(short, str) else "")
        category = known.get(key)
        if category is None:
            category = categorize(key[0], key[1], table)
            if len(key[0]) + len(key[1]) <= _KNOWN_NAME_CHARS and len(known) < _KNOWN_NAMES:
                known[key] = category
        result[code] = category
    return name_codes, result


#: categories already found per table (``load_categories`` keeps its tables): the kernels of the next
#: trace of a diff, a job's ranks or a sweep are mostly the same names, each matched against ~130 patterns
_KNOWN: dict[int, tuple[tuple[Category, ...], dict[tuple[str, str], str]]] = {}
_KNOWN_NAMES = 100_000
_KNOWN_NAME_CHARS = 4096


def _known_categories(table: tuple[Category, ...]) -> dict[tuple[str, str], str]:
    entry = _KNOWN.get(id(table))
    if entry is None or entry[0] is not table:
        if len(_KNOWN) >= 8:  # load_categories keeps 8 tables
            _KNOWN.clear()
        entry = _KNOWN[id(table)] = (table, {})
    return entry[1]


def with_graph_executions(codes: np.ndarray, categories: np.ndarray,
                          in_graph: pd.Series | np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, categories)`` of :func:`classify_codes` with every whole CUDA graph execution
    (``in_graph`` = :data:`~analyzer.loading.model.GRAPH_EXECUTION`) in :data:`GRAPH_CATEGORY`, whatever
    the name patterns say (``in_graph`` None or absent: unchanged)."""
    from analyzer.loading.model import GRAPH_EXECUTION

    if in_graph is None or not len(codes):
        return codes, categories
    flags = pd.Series(in_graph).fillna(0).to_numpy(dtype=np.int64)
    whole = flags == GRAPH_EXECUTION
    if not whole.any():
        return codes, categories
    categories = np.append(np.asarray(categories, dtype=object), GRAPH_CATEGORY)
    return np.where(whole, len(categories) - 1, codes), categories


def shorten_kernel_name(name: str, max_len: int = 80) -> str:
    """A readable kernel name: no ``void``/return type, no parameter list, nested template arguments
    elided (``<...>``) when too long, and at most ``max_len`` characters."""
    s = name.strip()
    s = s.removeprefix("void ")
    s = s.replace("(anonymous namespace)::", "")
    # drop a trailing parameter list "(...)" (balanced)
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            ch = s[i]
            if ch == ")":
                depth += 1
            elif ch == "(":
                depth -= 1
                if depth == 0:
                    if i > 0:
                        s = s[:i]
                    break
    if len(s) <= max_len:
        return s
    # keep the first template level with deeper levels elided, then cut to max_len
    out, depth = [], 0
    for ch in s:
        if ch == "<":
            depth += 1
            if depth == 2:
                out.append("<...")
                continue
        elif ch == ">":
            depth -= 1
            if depth == 1:
                out.append(">")
                continue
        if depth <= 1:
            out.append(ch)
    candidate = "".join(out)
    return candidate if len(candidate) <= max_len else candidate[: max_len - 3] + "..."


_KCAT_COLUMNS = {c: f"kernel column {c}" for c in KERNEL_COLUMNS} | {
    "category": "kernel category from categories.yaml (first matching pattern wins; a whole CUDA graph "
                "execution recorded as one row: cuda_graph)",
}


@fact("kernel_categories", columns=_KCAT_COLUMNS, scope_keys=("device", "stream", "nvtx_path", "name"), per_kernel=True)
def kernel_categories(ctx: FactContext) -> pd.DataFrame:
    """One row per kernel starting in the window: the kernels frame plus its ``category``."""
    table = load_categories(ctx.options.get("categories_file") or None)
    kernels = starts_in_window(ctx.trace.kernels, ctx.window)
    kernels = kernels.reset_index(drop=True)
    if kernels.empty:
        kernels["category"] = pd.Series(dtype=object)
        return kernels
    # a categorical (one byte per kernel): the text column cost 17 MB per million kernels
    codes, categories = classify_codes(kernels["name"], kernels["short_name"], table)
    kernels["category"] = categorical(*with_graph_executions(codes, categories, kernels.get("in_graph")))
    return kernels


@fact(
    "category_summary",
    columns={
        "category": "kernel category",
        "count": "kernels in the window",
        "total_ns": "summed kernel duration (ns)",
        "mean_ns": "mean kernel duration (ns)",
        "share": "total_ns / kernel time in the window (0..1)",
    },
    requires=("kernel_categories",),
    scope_keys=("category",),
)
def category_summary(ctx: FactContext) -> pd.DataFrame:
    """Kernel time per category in the window, largest first."""
    k = ctx.get("kernel_categories")
    if k.empty:
        return pd.DataFrame({"category": pd.Series(dtype=object), "count": pd.Series(dtype="int64"),
                             "total_ns": pd.Series(dtype="int64"), "mean_ns": pd.Series(dtype=float),
                             "share": pd.Series(dtype=float)})
    out = k.groupby("category", sort=False, observed=True).agg(
        count=("duration", "size"), total_ns=("duration", "sum"), mean_ns=("duration", "mean")).reset_index()
    out["category"] = category_text(out["category"])
    total = float(k["duration"].sum())
    out["share"] = out["total_ns"] / total if total > 0 else 0.0
    return out.sort_values("total_ns", ascending=False, ignore_index=True)


#: ``top_kernels``' columns (also :func:`kernel_summary`'s, the one implementation both the fact and the
#: phase tables' :func:`analyzer.facts.phase_table.top_kernels` use)
TOP_KERNEL_COLUMNS: dict[str, str] = {
    "name": "kernel name, the grouping key: demangled, else the short name (an export without the demangled one)",
    "display_name": "shortened name for display",
    "short_name": "short kernel name",
    "category": "kernel category",
    "count": "launches in the window",
    "total_ns": "summed duration (ns)",
    "mean_ns": "mean duration (ns)",
    "median_ns": "median duration (ns)",
    "min_ns": "shortest launch (ns)",
    "max_ns": "longest launch (ns)",
    "share": "total_ns / kernel time counted (0..1; 0 when that time is 0)",
}


def kernel_label_codes(kernels: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, labels)``: an integer code per kernel row (int64, numbered by first appearance) and the
    distinct labels it names: the demangled ``name``, else the ``short_name`` (a launch whose export has
    no demangled name; ``""`` when it has neither). Grouping by codes avoids building millions of
    strings; a categorical ``name`` is factorized by its own codes."""
    names = kernels["name"]
    # distinct names only: ``str()`` / emptiness tests per distinct value, then one gather
    name_codes, name_uniq = factorize_objects(
        names if isinstance(names.dtype, pd.CategoricalDtype) else names.astype(object))
    empty = np.append(np.array([str(u) == "" for u in name_uniq], dtype=bool), True)
    use_short = empty[name_codes]  # code -1 (missing) reads the trailing True
    if not use_short.any():  # the usual case: the first factorization is the answer
        codes, labels = name_codes, name_uniq
    else:
        mixed = np.where(use_short, kernels["short_name"].to_numpy(object), names.to_numpy(object))
        codes, labels = factorize_objects(pd.Series(mixed, dtype=object).fillna(""))
    return np.asarray(codes, dtype=np.int64), np.asarray(labels, dtype=object)


def category_text(column: pd.Series) -> Any:
    """``kernel_categories``' category column (a categorical) or a few of its rows as the plain text
    column the per-category tables keep (their values and dtype as before the column was a categorical)."""
    if not isinstance(column.dtype, pd.CategoricalDtype) or column.hasnans:
        return column
    return text_array(column.cat.codes.to_numpy(), column.cat.categories.to_numpy(dtype=object))


def kernel_category_codes(kernels: pd.DataFrame, table: tuple[Category, ...]) -> Any:
    """The ``category`` column of ``kernels`` (rows with ``name`` and ``short_name``) under ``table``, built
    from the codes (not a million-row object array a frame would convert to its text dtype)."""
    codes, categories = classify_codes(kernels["name"], kernels["short_name"], table)
    return text_array(*with_graph_executions(codes, categories, kernels.get("in_graph")))


@fact(
    "top_kernels",
    columns=TOP_KERNEL_COLUMNS,
    requires=("kernel_categories",),
    scope_keys=("name", "category"),
)
def top_kernels(ctx: FactContext) -> pd.DataFrame:
    """Kernels grouped by name, by total time in the window (all of them, largest first; equal totals
    by name)."""
    return kernel_summary(ctx.get("kernel_categories"))


def kernel_summary(kernels: pd.DataFrame) -> pd.DataFrame:
    """One row per kernel name (:func:`kernel_label_codes`) of ``kernels`` (rows with ``name``,
    ``short_name``, ``category``, ``duration``: ``kernel_categories``' rows or any selection of them),
    :data:`TOP_KERNEL_COLUMNS`: launches, total / mean / median / min / max duration, ``share`` of the
    summed duration of ``kernels`` (0 when that is 0), and the first launch's short name and category.
    Largest total first, equal totals by name."""
    cols = list(TOP_KERNEL_COLUMNS)
    if kernels.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in cols[:4] else "float64") for c in cols})
    # group by integer name codes: grouping a million ~1 kB names by their text cost 0.25 s of string
    # hashing; the name index is rebuilt from the distinct names only
    codes, uniques = kernel_label_codes(kernels)
    work = kernels[["short_name", "category", "duration"]]
    out = _per_code(work, codes, len(uniques))
    if out is None:
        out = work.groupby(codes, sort=False).agg(
            short_name=("short_name", "first"), category=("category", "first"), count=("duration", "size"),
            total_ns=("duration", "sum"), mean_ns=("duration", "mean"), median_ns=("duration", "median"),
            min_ns=("duration", "min"), max_ns=("duration", "max"),
        )
    out["category"] = category_text(out["category"])
    out.index = pd.Index(uniques[out.index.to_numpy()], name="name")
    out = out.reset_index()
    total = float(kernels["duration"].sum())
    out["share"] = out["total_ns"] / total if total > 0 else 0.0
    out["display_name"] = [shorten_kernel_name(str(n)) for n in out["name"]]  # distinct names only
    out = out.sort_values(["total_ns", "name"], ascending=[False, True], kind="stable", ignore_index=True)
    return out[cols]


def _per_code(work: pd.DataFrame, codes: np.ndarray, ngroups: int) -> pd.DataFrame | None:
    """:func:`kernel_summary`'s groupby of ``work`` by name ``codes`` (``0..ngroups-1`` numbered by first
    appearance, every code present), by one stable sort of the codes and ``reduceat`` over each
    name's run: the same values (first short name and category, count, sum, mean, median, min, max)
    without the groupby machinery over a million launches. None (use the groupby) when its results
    could differ: missing short names or durations (``first`` skips them), negative durations, or sums
    beyond float64's exact integers (the groupby's mean sums in float64)."""
    duration = work["duration"]
    if not len(codes) or duration.dtype != np.int64 or work["short_name"].hasnans \
            or work["category"].hasnans:
        return None
    dur = duration.to_numpy(np.int64)
    if dur.min() < 0 or float(dur.sum(dtype=np.float64)) >= 2.0 ** 52:
        return None
    order = np.argsort(codes, kind="stable")  # each name's launches in row order
    dur = dur[order]
    bounds = np.searchsorted(codes[order], np.arange(ngroups))
    count = np.diff(np.r_[bounds, len(order)]).astype(np.int64)
    total = np.add.reduceat(dur, bounds)
    first = order[bounds]
    median = np.array([np.median(dur[a:b]) for a, b in zip(bounds.tolist(), (bounds + count).tolist())],
                      dtype=np.float64)
    return pd.DataFrame({
        "short_name": work["short_name"].iloc[first].reset_index(drop=True),
        "category": work["category"].iloc[first].reset_index(drop=True),
        "count": count,
        "total_ns": total,
        "mean_ns": total / count,
        "median_ns": median,
        "min_ns": np.minimum.reduceat(dur, bounds),
        "max_ns": np.maximum.reduceat(dur, bounds),
    })
