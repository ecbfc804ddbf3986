"""The fact registry: derived tables declared with their inputs and columns.

A fact is a pure function of the trace, the analysis window, parameters and other facts. Each is
declared once with :func:`fact`; the :class:`FactStore` orders the dependencies (depth first), checks
they are acyclic, and computes a fact (and what it needs) on first ``get``, once.

Columns are declared statically so that rules can be validated before any trace is read
(``unknown column "durration" in GPU001.condition; did you mean "duration"?``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from analyzer.analysis import Window
    from analyzer.loading.model import Trace


@dataclass(frozen=True)
class FactContext:
    """What a fact's compute function receives."""

    trace: "Trace"
    window: "Window"
    store: "FactStore"
    options: Mapping[str, Any]  # analysis-wide options (e.g. utilization bins, category table path)

    def get(self, name: str) -> pd.DataFrame:
        return self.store.get(name)


@dataclass(frozen=True)
class FactSpec:
    name: str
    compute: Callable[[FactContext], pd.DataFrame]
    columns: Mapping[str, str]  # column -> one-line description (with unit)
    requires: tuple[str, ...] = ()  # other facts
    doc: str = ""
    scope_keys: tuple[str, ...] = ()  # columns usable as rule scope keys (device, stream, nvtx_path, name)
    # trace capabilities (analyzer.loading.capabilities) the whole fact needs, and those single columns
    # need: a rule reading them on a trace that lacks one is reported "not available in this trace"
    needs: tuple[str, ...] = ()
    column_needs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def needs_for(self, columns: Iterable[str]) -> set[str]:
        """Capabilities needed to read ``columns`` of this fact (the fact's own needs included)."""
        out = set(self.needs)
        for c in columns:
            out.update(self.column_needs.get(c, ()))
        return out


FACTS: dict[str, FactSpec] = {}


def fact(
    name: str,
    *,
    columns: Mapping[str, str],
    requires: Iterable[str] = (),
    scope_keys: Iterable[str] = (),
    needs: Iterable[str] = (),
    column_needs: Mapping[str, Iterable[str]] | None = None,
) -> Callable[[Callable[[FactContext], pd.DataFrame]], Callable[[FactContext], pd.DataFrame]]:
    """Decorator registering ``fn`` as the fact ``name``. Its docstring becomes the fact's doc.
    ``needs`` / ``column_needs`` name the trace capabilities the fact / some of its columns rest on."""
    from analyzer.loading.capabilities import CAPABILITIES

    col_needs = {c: tuple(v) for c, v in (column_needs or {}).items()}
    for cap in [*needs, *(x for v in col_needs.values() for x in v)]:
        if cap not in CAPABILITIES:
            raise ValueError(f"fact {name!r}: unknown capability {cap!r} (known: {', '.join(CAPABILITIES)})")
    unknown_cols = set(col_needs) - set(columns)
    if unknown_cols:
        raise ValueError(f"fact {name!r}: column_needs names undeclared columns {sorted(unknown_cols)}")

    def register(fn: Callable[[FactContext], pd.DataFrame]) -> Callable[[FactContext], pd.DataFrame]:
        if name in FACTS:
            raise ValueError(f"fact {name!r} registered twice")
        FACTS[name] = FactSpec(
            name=name,
            compute=fn,
            columns=dict(columns),
            requires=tuple(requires),
            doc=(fn.__doc__ or "").strip(),
            scope_keys=tuple(scope_keys),
            needs=tuple(needs),
            column_needs=col_needs,
        )
        return fn

    return register


def get_spec(name: str) -> FactSpec:
    """The spec of fact ``name``; fails loudly with the known names."""
    _ensure_loaded()
    try:
        return FACTS[name]
    except KeyError:
        known = ", ".join(sorted(FACTS))
        raise KeyError(f"unknown fact {name!r}; known facts: {known}") from None


def all_specs() -> dict[str, FactSpec]:
    _ensure_loaded()
    return dict(FACTS)


def dependency_graph(names: Iterable[str] | None = None) -> Any:
    """A ``networkx.DiGraph`` with edges ``dependency -> dependent`` for ``names`` and everything they
    need (all facts if None); for tools that walk the graph (networkx is imported only here, not on
    the analysis path, which uses :func:`dependency_order`)."""
    import networkx as nx

    graph = nx.DiGraph()
    for name in dependency_order(names):
        graph.add_node(name)
        for dep in get_spec(name).requires:
            graph.add_edge(dep, name)
    return graph


def dependency_order(names: Iterable[str] | None = None) -> list[str]:
    """``names`` and every fact they need (all facts if None), each after its dependencies (a
    depth-first topological order). Raises ``ValueError`` naming the cycle if the declarations have one."""
    _ensure_loaded()
    order: list[str] = []
    done: set[str] = set()
    path: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if name in path:
            cycle = path[path.index(name):] + [name]
            raise ValueError(f"fact dependency cycle: {' -> '.join(cycle)}")
        path.append(name)
        for dep in get_spec(name).requires:
            visit(dep)
        path.pop()
        done.add(name)
        order.append(name)

    for name in (FACTS if names is None else names):
        visit(name)
    return order


@dataclass
class FactStore:
    """Computes facts lazily, once each, for one trace and window."""

    trace: "Trace"
    window: "Window"
    options: Mapping[str, Any] = field(default_factory=dict)
    _cache: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    def get(self, name: str) -> pd.DataFrame:
        if name not in self._cache:
            spec = get_spec(name)
            for dep in dependency_order([name]):
                if dep != name and dep not in self._cache:
                    self._cache[dep] = self._compute(get_spec(dep))
            self._cache[name] = self._compute(spec)
        return self._cache[name]

    def computed(self) -> list[str]:
        return list(self._cache)

    def update_options(self, extra: Mapping[str, Any], *, forget: Iterable[str] = ()) -> None:
        """Add ``extra`` to the options and drop the cached facts in ``forget`` and every fact
        depending on them, so that they are computed again with the new options (a multi-GPU job
        tells each rank its waits after the first facts were computed)."""
        self.options = {**self.options, **extra}
        names = set(forget)
        if names:
            stale = names | {c for c in self._cache if names & set(dependency_order([c]))}
            for name in stale:
                self._cache.pop(name, None)

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """A value several facts of this store derive from the same trace columns (e.g. the distinct
        API names), computed once on first use instead of once per fact."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def _compute(self, spec: FactSpec) -> pd.DataFrame:
        from analyzer.watchdog import stage

        ctx = FactContext(trace=self.trace, window=self.window, store=self, options=self.options)
        with stage(f"fact {spec.name}"):
            frame = spec.compute(ctx)
        missing = [c for c in spec.columns if c not in frame.columns]
        if missing:
            raise RuntimeError(f"fact {spec.name!r} did not produce declared columns {missing}")
        return frame


_LOADED = False


def _ensure_loaded() -> None:
    """Import the modules that register facts (they register on import)."""
    global _LOADED
    if not _LOADED:
        _LOADED = True
        import analyzer.facts as facts_pkg

        facts_pkg.load_all()
