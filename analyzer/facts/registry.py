"""The fact registry: derived tables declared with their inputs and columns.

A fact is a pure function of the trace, the analysis window, parameters and other facts. Each is
declared once with :func:`fact`; the :class:`FactStore` orders the dependencies (depth first), checks
they are acyclic, and computes a fact (and what it needs) on first ``get``, once.

Columns are declared statically so that rules can be validated before any trace is read
(``unknown column "durration" in GPU001.condition; did you mean "duration"?``).
"""
from __future__ import annotations

import importlib

import threading
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
    #: rows describe individual kernels (names, launch configurations, counters): a CUDA graph traced
    #: without its kernels (nsys' default graph-level tracing) hides the ones it runs from this fact
    per_kernel: bool = False
    #: computing it is the run's memory peak (millions of rows of temporaries): it is never computed ahead
    #: of its reader, and while one thread computes it no other thread starts computing a fact ahead
    #: (:meth:`FactStore.start_prefetch`), so the facts read later are not held through its peak
    alone: bool = False

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
    per_kernel: bool = False,
    alone: bool = False,
) -> Callable[[Callable[[FactContext], pd.DataFrame]], Callable[[FactContext], pd.DataFrame]]:
    """Decorator registering ``fn`` as the fact ``name``. Its docstring becomes the fact's doc.
    ``needs`` / ``column_needs`` name the trace capabilities the fact / some of its columns rest on;
    ``per_kernel``: its rows describe individual kernels (see :attr:`FactSpec.per_kernel`); ``alone``: no
    fact is computed ahead on another thread while it is computed (:attr:`FactSpec.alone`)."""
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
            per_kernel=per_kernel,
            alone=alone,
        )
        return fn

    return register


class UnknownFactError(LookupError):
    """A fact no module registers. Its own type, not ``KeyError``: a ``KeyError`` raised while a fact is
    computed (a missing column, a bad lookup) is a bug in that fact and must not read as "this fact is
    not available"."""

    def __init__(self, name: str, known: Iterable[str] = (), hint: str = "") -> None:
        self.name = name
        self.known = tuple(known)
        known_text = f"; known facts: {', '.join(self.known)}" if self.known else ""
        super().__init__(f"unknown fact {name!r}{known_text}" + (f" ({hint})" if hint else ""))


def _inputs_of(names: list[str]) -> set[str] | None:
    """The facts ``names`` need, directly or through others (None: no names)."""
    if not names:
        return None
    out: set[str] = set()
    todo = [r for n in names for r in get_spec(n).requires]
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo.extend(get_spec(name).requires)
    return out


def get_spec(name: str) -> FactSpec:
    """The spec of fact ``name``; raises :class:`UnknownFactError` with the known names."""
    _ensure_loaded()
    try:
        return FACTS[name]
    except KeyError:
        raise UnknownFactError(name, sorted(FACTS)) from None


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
    """Computes facts lazily, once each, for one trace and window.

    By default every computed fact is kept for the store's lifetime. After :meth:`plan_reads` the store
    frees each fact (and each :meth:`memo` value that names its users) once no reader still to come
    needs it, directly or to compute another fact: at ten million kernels the facts the rules leave
    behind are gigabytes. Freeing never changes what a fact holds: a freed fact asked for again is
    computed again (the same table, in more time), so a reader the plan did not name stays correct.

    With a plan, :meth:`start_prefetch` computes the facts the readers will read on a second thread while
    the caller's thread reads them (numpy and pandas release the GIL inside their array loops, so two
    facts computed at once take ~0.6 of the time one after the other on two cores). The store is safe to
    share between the two: each fact is computed by one thread, the other waits for it (or meanwhile
    computes another fact whose inputs are ready), and freeing never drops a fact being read or computed.
    Facts are pure, so what each holds does not depend on which thread computed it."""

    trace: "Trace"
    window: "Window"
    options: Mapping[str, Any] = field(default_factory=dict)
    _cache: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)
    _memo_users: dict[str, frozenset[str]] = field(default_factory=dict, repr=False)
    #: reads still to come, per fact (None: no plan, keep everything); see plan_reads
    _pending: dict[str, int] | None = field(default=None, repr=False)
    _keep: frozenset[str] = field(default=frozenset(), repr=False)
    _active: list[str] = field(default_factory=list, repr=False)  # facts whose dependencies are being computed
    #: how many times each fact was computed (more than once: freed, then read by a reader not planned)
    computations: dict[str, int] = field(default_factory=dict, repr=False)
    # -- sharing the store between two threads (see start_prefetch) ---------------------------------------
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _changed: threading.Condition = field(init=False, repr=False)  # a fact or memo value stored or given up
    _running: dict[str, int] = field(default_factory=dict, repr=False)  # fact -> ident of the thread computing it
    _memo_running: set[str] = field(default_factory=set, repr=False)
    #: facts that failed when computed ahead of their reader (by the second thread, while waiting, or
    #: early): never computed ahead again; the reader computes each and reports the error in its place
    _failed_ahead: set[str] = field(default_factory=set, repr=False)
    _order: tuple[str, ...] = field(default=(), repr=False)  # the plan's facts in reading order (dependencies first)
    _prefetcher: threading.Thread | None = field(default=None, repr=False)
    _local: threading.local = field(default_factory=threading.local, repr=False)  # .depth: facts being computed
    _stopping: bool = field(default=False, repr=False)
    _trim: bool | None = field(default=None, repr=False)  # see _trims_memory
    #: the fact cache's entries for this store (analyzer.facts.cache.StoreFacts; None: every fact is
    #: computed): a fact found there is read instead of computed, and its inputs are not needed
    disk: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._changed = threading.Condition(self._lock)

    def get(self, name: str) -> pd.DataFrame:
        frame = self._cache.get(name)
        if frame is not None:
            return frame
        spec = get_spec(name)
        with self._lock:
            self._active.append(name)  # its dependencies stay while they are computed and read
        try:
            if not self._on_disk(name):
                for dep in spec.requires:
                    self.get(dep)
            return self._obtain(spec)
        finally:
            with self._lock:
                self._active.remove(name)
            self._release()  # what only it kept (its inputs, read until now)

    def _on_disk(self, name: str) -> bool:
        """Fact ``name`` is in the fact cache: read, not computed from its inputs."""
        disk = self.disk
        return disk is not None and disk.has(name)

    def computed(self) -> list[str]:
        with self._lock:
            return list(self._cache)

    def update_options(self, extra: Mapping[str, Any], *, forget: Iterable[str] = ()) -> None:
        """Add ``extra`` to the options and drop the cached facts in ``forget`` and every fact
        depending on them, so that they are computed again with the new options (a multi-GPU job
        tells each rank its waits after the first facts were computed)."""
        with self._lock:
            self.options = {**self.options, **extra}
            self.disk = None  # keyed on the options it was made with
            names = set(forget)
            if names:
                stale = names | {c for c in self._cache if names & set(dependency_order([c]))}
                for name in stale:
                    self._cache.pop(name, None)

    def memo(self, key: str, compute: Callable[[], Any], *, users: Iterable[str] = ()) -> Any:
        """A value several facts of this store derive from the same trace columns (e.g. the distinct
        API names), computed once on first use instead of once per fact. ``users``: every fact whose
        computation reads it; with a plan (:meth:`plan_reads`) the value is freed once all of them are
        computed or no longer needed (without ``users`` it is kept)."""
        with self._lock:
            while key not in self._memo and key in self._memo_running:
                self._changed.wait()  # the other thread computes it (memo values never wait on facts)
            if key in self._memo:
                return self._memo[key]
            self._memo_running.add(key)
        try:
            value = compute()
        finally:
            with self._lock:
                self._memo_running.discard(key)
                self._changed.notify_all()
        with self._lock:
            self._memo[key] = value
            if users:
                self._memo_users[key] = frozenset(users)
            self._changed.notify_all()
        return value

    # -- freeing facts after their last reader -------------------------------------------------------
    def plan_reads(self, readers: Iterable[Iterable[str]], *, keep: Iterable[str] = ()) -> None:
        """Free facts after their last reader from now on. ``readers``: the facts each reader still to
        come reads (a rule's ``requires``), in the order they read, each reader telling :meth:`done_with`
        when it has finished; ``keep``: facts read after them all (the report's), kept to the end. A fact
        still needed that is the last one needing a fact or memo value at hand is computed as soon as a
        reader finishes (``nvtx_instances`` right after ``phases``: the phase index they share is freed
        then, not after the report read it); one failing then is left to its reader, which computes it
        again and reports the error where it would have without the plan."""
        pending: dict[str, int] = {}
        order: dict[str, None] = {}
        for reads in readers:
            reads = list(reads)
            for name in set(reads):
                pending[name] = pending.get(name, 0) + 1
            order.update(dict.fromkeys(dependency_order(reads)))
        with self._lock:
            self._pending = pending
            self._keep = frozenset(keep)
            self._order = tuple(order)
            self._release()

    def done_with(self, reads: Iterable[str]) -> None:
        """One reader of the plan (see :meth:`plan_reads`) finished reading ``reads``: facts no reader
        still needs are freed, and facts to keep that free something are computed now."""
        with self._lock:
            if self._pending is None:
                return
            for name in set(reads):
                if self._pending.get(name, 0) > 0:
                    self._pending[name] -= 1
            self._release()
        self._compute_early()

    def _needed(self, also_cached: frozenset[str] = frozenset()) -> tuple[set[str], set[str]]:
        """(facts, memo keys) that readers still to come need, given what is computed (plus
        ``also_cached``): the facts they read, and the dependencies of those not computed yet."""
        assert self._pending is not None
        cached = self._cache.keys() | also_cached
        busy = {*self._active, *self._running}
        need: set[str] = set()
        todo = [n for n, c in self._pending.items() if c > 0] + [*self._keep, *busy]
        while todo:
            name = todo.pop()
            if name in need:
                continue
            need.add(name)
            if (name not in cached or name in busy) and not self._on_disk(name):
                try:
                    todo.extend(get_spec(name).requires)
                except UnknownFactError:  # the reader fails on its own
                    pass
        open_ = (need - cached) | busy
        memos = {k for k in self._memo if k not in self._memo_users or self._memo_users[k] & open_}
        return need, memos

    def _release(self) -> bool:
        """Free the facts and memo values no pending reader needs; whether the heap was trimmed."""
        with self._lock:
            if self._pending is None:
                return False
            need, memos = self._needed()
            freed = [n for n in self._cache if n not in need]
            for name in freed:
                del self._cache[name]
            stale = [k for k in self._memo if k not in memos]
            for key in stale:
                del self._memo[key]
        if (freed or stale) and self._trims_memory():
            _return_freed_memory()
            return True
        return False

    def _trims_memory(self) -> bool:
        """Whether freeing facts hands the heap's pages back to the system: for traces of
        :data:`TRIM_FROM_ROWS` kernels, copies, memsets and API calls or more. A smaller trace's facts hold a
        few MiB, and 18 trims per analysis cost more CPU (~10 ms, and the page faults of taking the pages
        again) than the memory they return is worth."""
        if self._trim is None:
            from analyzer.loading.cache import frame_rows

            self._trim = sum(frame_rows(self.trace, n) for n in ("kernels", "memcpy", "memset", "api")) \
                >= TRIM_FROM_ROWS
        return self._trim

    def _compute_early(self) -> None:
        """Compute now the facts still needed whose inputs (facts, memo values) are all at hand and
        that are the last ones needing one of those inputs, then free it (``category_summary``,
        ``top_kernels`` and ``sm_activity`` once the rules are done with ``kernel_categories``;
        ``nvtx_instances`` once ``phases`` no longer needs the phase index). Called when a reader is done
        and when a fact computed outside any other completes (``phases`` as soon as ``nvtx_instances`` is
        at hand: the phase index, 130 MB per million kernels, is then freed before the timeline segments
        are built instead of after the scalars' reader)."""
        while True:
            with self._lock:
                need, memos = self._needed()
                ready = {}
                for name in sorted(need - self._cache.keys() - self._running.keys() - self._failed_ahead):
                    try:
                        requires = set(get_spec(name).requires)
                    except UnknownFactError:
                        continue
                    inputs = requires | {k for k, users in self._memo_users.items()
                                         if name in users and k in self._memo}
                    if inputs and requires <= self._cache.keys():
                        ready[name] = inputs
                if not ready:
                    return
                after, after_memos = self._needed(frozenset(ready))
                freed = ((need & self._cache.keys()) - after) | (memos - after_memos)
                now = [name for name, inputs in ready.items() if inputs & freed]
            if not now:
                return
            for name in now:
                if not self._ahead(get_spec(name), claimed=False):
                    return

    def _compute(self, spec: FactSpec) -> pd.DataFrame:
        from analyzer.watchdog import stage

        disk = self.disk
        ctx = FactContext(trace=self.trace, window=self.window, store=self, options=self.options)
        with stage(f"fact {spec.name}"):
            frame = disk.read(spec.name) if disk is not None else None
            if frame is not None:
                return frame
            frame = spec.compute(ctx)
        missing = [c for c in spec.columns if c not in frame.columns]
        if missing:
            raise RuntimeError(f"fact {spec.name!r} did not produce declared columns {missing}")
        if disk is not None and disk is self.disk and self._read_by_readers(spec.name):
            disk.offer(spec.name, frame)
        return frame

    def _read_by_readers(self, name: str) -> bool:
        """Whether the plan's readers read fact ``name`` themselves (every fact without a plan): those the
        fact cache stores; a fact computed only as another's input is not needed when that one is read."""
        pending = self._pending
        return pending is None or name in pending or name in self._keep

    # -- two threads ----------------------------------------------------------------------------------
    def start_prefetch(self) -> None:
        """Compute the planned facts (:meth:`plan_reads`) on a second thread, in the order the readers
        read them, while this thread runs the readers. Call :meth:`stop_prefetch` when the readers are
        done (or have failed). A fact the second thread fails to compute is left to the reader, which
        computes it and fails the same way, in its own thread."""
        with self._lock:
            if self._prefetcher is not None or not self._order:
                return
            self._stopping = False
            self._prefetcher = threading.Thread(target=self._prefetch, name="analyzer-facts", daemon=True)
            self._prefetcher.start()

    def stop_prefetch(self, *, wait: bool = True) -> None:
        """End the second thread after the fact it is computing (``wait``: return once it ended)."""
        with self._lock:
            thread, self._prefetcher = self._prefetcher, None
            self._stopping = True
            self._changed.notify_all()
        if thread is not None and wait and thread is not threading.current_thread():
            thread.join()

    def _prefetch(self) -> None:
        from analyzer.resources import helpers_may_go_on

        while True:
            if not helpers_may_go_on():  # above the helpers' memory limit: the readers go on alone
                return
            with self._lock:
                if self._stopping:
                    return
                spec = self._claim_ready()
                if spec is None:
                    need, _ = self._needed()
                    if not any(n in need and n not in self._cache and n not in self._failed_ahead
                               for n in self._order):
                        return  # every planned fact is computed or no longer needed
                    self._changed.wait()  # for the inputs the reader's thread is computing
                    continue
            self._ahead(spec, claimed=True)

    def _claim_ready(self) -> FactSpec | None:
        """The first planned fact still needed, not computed or being computed, whose inputs are all
        computed, claimed for this thread (the lock is held)."""
        if not self._order or self._pending is None:
            return None
        me = threading.get_ident()
        if any(t != me and get_spec(n).alone for n, t in self._running.items()):
            return None  # another thread computes the run's memory peak: nothing else meanwhile
        # a fact computed alone whose inputs are being computed: only those inputs meanwhile (what is
        # computed now is held through its peak)
        inputs = _inputs_of([n for n in self._active if get_spec(n).alone])
        need: set[str] | None = None
        for name in self._order:
            if name in self._cache or name in self._running or name in self._failed_ahead:
                continue
            spec = get_spec(name)
            if spec.alone or not (self._on_disk(name) or all(r in self._cache for r in spec.requires)):
                continue  # a fact computed alone is its reader's to compute
            if inputs is not None and name not in inputs:
                continue
            if need is None:
                need, _ = self._needed()
            if name in need:
                self._running[name] = threading.get_ident()
                return spec
        return None

    def _obtain(self, spec: FactSpec) -> pd.DataFrame:
        """``spec``'s fact, its dependencies computed: from the cache, computed here, or waited for while
        another thread computes it (meanwhile computing a fact whose inputs are ready). Only a thread
        computing no fact waits: one asked for a fact another thread computes while it computes a fact
        itself (a dependency the fact does not declare) computes its own copy. A waiting thread holds no
        fact, so threads can never wait for each other in a circle."""
        name = spec.name
        inside = getattr(self._local, "depth", 0) > 0  # computing a fact: never wait (see above)
        while True:
            with self._lock:
                frame = self._cache.get(name)
                if frame is not None:
                    return frame
                if name not in self._running:
                    self._running[name] = threading.get_ident()
                    claimed = True
                    break
                if inside:
                    claimed = False
                    break
                other = self._claim_ready()
                if other is None:
                    from analyzer.watchdog import stage

                    with stage(f"fact {name} (on the second thread)"):
                        self._changed.wait()
                    continue
            self._ahead(other, claimed=True)
        return self._run(spec, claimed=claimed)

    def _ahead(self, spec: FactSpec, *, claimed: bool) -> bool:
        """Compute ``spec`` ahead of its reader (``claimed``: by this thread, else through :meth:`get`);
        False if it failed: then it is left to the reader, which computes it again in its own context
        (inside its rule) and fails there as it would have without computing ahead."""
        try:
            if claimed:
                self._run(spec, claimed=True)
            else:
                self.get(spec.name)
            return True
        except Exception:  # noqa: BLE001 - reported by the reader
            with self._lock:
                self._failed_ahead.add(spec.name)
            return False

    def _run(self, spec: FactSpec, *, claimed: bool) -> pd.DataFrame:
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        try:
            frame = self._compute(spec)
        except BaseException:
            self._local.depth = depth
            if claimed:
                with self._lock:
                    self._running.pop(spec.name, None)
                    self._changed.notify_all()
            raise
        self._local.depth = depth
        with self._lock:
            if claimed:
                self._running.pop(spec.name, None)
            fresh = claimed or spec.name not in self._cache
            if fresh:
                self.computations[spec.name] = self.computations.get(spec.name, 0) + 1
                self._cache[spec.name] = frame
            self._changed.notify_all()
        trimmed = False
        if fresh and self._pending is not None:
            trimmed = self._release()
            if depth == 0:  # not inside another fact: what this one completes may free memory now
                self._compute_early()
        if fresh and spec.alone and not trimmed and self._trims_memory():
            _return_freed_memory()  # a fact computed alone is a big build: its temporaries' pages
        return frame


#: traces with fewer kernels, copies, memsets and API calls keep freed facts' pages in the heap
TRIM_FROM_ROWS = 100_000


def _return_freed_memory() -> None:
    """Give the heap pages of freed facts back to the system (glibc's ``malloc_trim`` and Arrow's pool:
    a fact's columns under 32 MB live in the heap, which keeps freed pages; at a million kernels the
    rules' later facts started 160 MiB higher without it; 14 calls, 32 ms in all)."""
    from analyzer.resources import release_free_memory

    release_free_memory()


#: Fact modules; each registers its facts with @fact on import (:func:`load_all`).
FACT_MODULES: tuple[str, ...] = (
    "analyzer.facts.intervals",
    "analyzer.facts.nvtx",
    "analyzer.facts.categories",
    "analyzer.facts.occupancy",
    "analyzer.facts.graphs",
    "analyzer.facts.api",
    "analyzer.facts.phases",
    "analyzer.facts.ncu",
    "analyzer.facts.hardware",
    "analyzer.facts.periods",
    "analyzer.facts.steps",
    "analyzer.facts.comm",
    "analyzer.facts.job",
    "analyzer.facts.stacks",
    "analyzer.facts.gpumetrics",
    "analyzer.facts.energy",
    "analyzer.facts.breakdown",
    "analyzer.facts.breakdown_table",
    "analyzer.facts.recurring_setup",
    "analyzer.facts.copy_stalls",
    "analyzer.facts.copy_kernels",
    "analyzer.facts.fallback_kernels",
    "analyzer.facts.autotune",
    "analyzer.facts.recompute",
    "analyzer.facts.unused_grads",
    "analyzer.facts.memory",
)


def load_all() -> None:
    """Import every fact module (each registers its facts)."""
    for module in FACT_MODULES:
        importlib.import_module(module)


_LOADED = False


def _ensure_loaded() -> None:
    """Import the modules that register facts (they register on import)."""
    global _LOADED
    if not _LOADED:
        _LOADED = True
        load_all()
