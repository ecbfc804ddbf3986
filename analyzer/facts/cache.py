"""A cache of computed facts beside the trace cache, so that re-analysing a capture skips the facts too.

A user re-runs ``analyze`` on one capture with another ``--set``, rule file, output format: the trace
cache (:mod:`analyzer.loading.cache`) skips the loader, but the facts (timeline segments, gaps, NVTX
instances, ...: most of a cold run's time) would be computed again although they are the same. Facts
are pure functions of the trace, the analysis window, the fact options and other facts
(:mod:`analyzer.facts.registry`), so each fact a run computed is stored as an Arrow IPC file and read
back by the next run that asks for it with the same inputs, instead of computing it (and the facts it
needs).

Where: ``facts`` beside the trace cache's ``traces`` (``$ANALYZER_CACHE_DIR/facts``, ...), one entry
per fact: a folder named by the SHA-256 of its key and the fact's name, holding ``fact.arrow`` and a
``meta.json``.

The key (:func:`store_key`), so that an entry is never stale:

* the SHA-256 of the trace file's content (the trace cache's key; torch.profiler JSON is hashed the same
  way, :meth:`analyzer.loading.cache.TraceCache.load_uncached`), and the trace's info (rank, GPU, ...);
  a trace changed after loading (``--power`` logs attached, ``--ncu`` results joined) or one derived
  from a loaded trace (one rank of a report) has no entry at all;
* the facts' **code signature** (:func:`facts_signature`): the cache format, the loader's signature and
  the sources and data files of ``analyzer/facts``, ``analyzer/hardware`` (the GPU table) and the
  package's top-level modules (the window, the array helpers);
* the **window** (bounds, source, text, setup time and every step span);
* **every option** in the store's options (``exclude_ranges``, ``only_ranges``, the API's
  ``fact_options``...), and for options naming a file (:data:`FILE_OPTIONS`, or any ``Path``) that
  file's content. A store whose options cannot be written exactly (not JSON-like) is not cached, nor is
  one whose options change while it computes (:meth:`FactStore.update_options`: a job's ranks).

What: the facts the store's readers read (the rules' and scalars' facts and those the report keeps;
every fact computed when the store has no plan), not the ones computed only as another fact's input: a
cached run reads the facts it is asked for and never computes their inputs. A fact whose frame cannot
be stored exactly (an index other than 0..n-1, columns other than integers, floats, booleans and text)
is computed every time, and so is a fact registered outside ``analyzer/facts`` (a plugin's or a test's:
its code is not in the signature).

Trust, limits and failures are the trace cache's (its helpers, one implementation): Arrow IPC and JSON
only, private folders and files, a SHA-256 checksum of each entry checked on every read, the entries of
both folders together within ``ANALYZER_CACHE_MAX`` (least recently used evicted), ``--no-cache`` /
``ANALYZER_NO_CACHE=1`` skip it, and any problem falls back to computing the fact silently
(``ANALYZER_DEBUG=1`` says why). Entries are written by a background thread while the analysis goes
on, finished before the process exits.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from analyzer.loading import cache as tc

if TYPE_CHECKING:
    from analyzer.analysis import Window
    from analyzer.facts.registry import FactStore
    from analyzer.loading.model import Trace

FORMAT = 1  # bump when the entry layout or the key changes
WHAT = "fact cache"
#: options whose value names a file a fact reads: the key holds the file's content hash too
FILE_OPTIONS = frozenset({"categories_file"})
_STATED = ("fact", "key", "digest", "columns", "signature")
#: frames held for the writer at once (their Arrow tables share the facts' arrays): beyond it a fact is
#: written before the analysis goes on, so the cache never holds more than this much freed memory
_QUEUE_BYTES = 512 * 2**20

_SIGNATURE: str | None = None


def _debug(message: str) -> None:
    tc._debug(message, WHAT)


def facts_signature() -> str:
    """Hash of the fact cache format, the loader's code signature, and every source and data file of
    ``analyzer/facts``, ``analyzer/hardware`` and the ``analyzer`` package's top-level modules (tests
    not): a fact computed by other code is never read."""
    global _SIGNATURE
    if _SIGNATURE is None:
        h = hashlib.sha256(f"facts format {FORMAT} loader {tc.code_signature()}".encode())
        package = Path(__file__).resolve().parents[1]
        sources = [p for p in package.glob("*.py")]
        for sub in ("facts", "hardware"):
            sources += [p for p in (package / sub).rglob("*")
                        if p.suffix in (".py", ".yaml", ".yml", ".json", ".csv")
                        and "tests" not in p.relative_to(package).parts]
        tc.hash_sources(h, sources, package)
        _SIGNATURE = h.hexdigest()
    return _SIGNATURE


class Unkeyable(Exception):
    """An option or window value the key cannot hold exactly."""


def _canonical(value: Any, name: str = "") -> Any:
    """``value`` as JSON that tells apart every value a fact could read differently (types included:
    a tuple is not a list, 1 is not 1.0 nor True); raises :class:`Unkeyable` for anything else."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return {"int": str(value)}
    if isinstance(value, float):
        return {"float": value.hex() if math.isfinite(value) else repr(value)}
    if isinstance(value, Path):
        return {"path": str(value), "content": _file_key(value)}
    if isinstance(value, (tuple, list)):
        return {type(value).__name__: [_canonical(v, name) for v in value]}
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise Unkeyable(f"{name}: a mapping with keys other than text")
        return {"dict": [[k, _canonical(v, k)] for k, v in value.items()]}  # in order: a dict read back keeps it
    if is_dataclass(value) and not isinstance(value, type):  # each field as it is (asdict would drop nested types)
        return {type(value).__name__: {"dict": [[f.name, _canonical(getattr(value, f.name), f.name)]
                                                for f in fields(value)]}}
    raise Unkeyable(f"{name or 'a value'} is a {type(value).__name__}")


def _decode(doc: Any) -> Any:
    """The value :func:`_canonical` wrote (dataclasses: the analysis window's), types included; raises
    ValueError for anything else."""
    from analyzer.analysis import StepSpans, Window

    if doc is None or isinstance(doc, (bool, str)):
        return doc
    if isinstance(doc, dict) and len(doc) == 1:
        (tag, value), = doc.items()
        if tag == "int" and isinstance(value, str):
            return int(value)
        if tag == "float" and isinstance(value, str):
            return float.fromhex(value) if value not in ("nan", "inf", "-inf") else float(value)
        if tag in ("tuple", "list") and isinstance(value, list):
            items = [_decode(v) for v in value]
            return tuple(items) if tag == "tuple" else items
        if tag == "dict" and isinstance(value, list) and all(
                isinstance(kv, list) and len(kv) == 2 and isinstance(kv[0], str) for kv in value):
            return {k: _decode(v) for k, v in value}
        classes = {"Window": Window, "StepSpans": StepSpans}
        if tag in classes and isinstance(value, dict):
            fields_ = _decode(value)
            if isinstance(fields_, dict):
                return classes[tag](**fields_)
    raise ValueError(f"not a cached value: {str(doc)[:80]}")


def _file_key(path: Path) -> str:
    """The content hash of a file an option names ("missing" when it cannot be read: then the fact
    fails the same way each time)."""
    try:
        return tc.file_digest(Path(path))
    except (OSError, ValueError):
        return "missing"


def store_key(trace: Trace, window: Window, options: Mapping[str, Any]) -> str | None:
    """SHA-256 of everything the facts of a store read besides their code (see the module docstring);
    None when the store cannot be cached (the reason said with ANALYZER_DEBUG)."""
    digest = tc.source_digest(trace)
    if digest is None:
        _debug(f"{trace.name}: not a trace loaded through the cache (or changed since); facts not cached")
        return None
    if trace.ncu is not None or trace.ncu_only:
        _debug(f"{trace.name}: Nsight Compute results joined; facts not cached")
        return None
    try:
        info = asdict(trace.info)
        info.pop("path", None)  # the name the user gave this time: facts never read it
        opts = {k: _canonical(v, k) for k, v in sorted(options.items())}
        for k in FILE_OPTIONS & set(options):
            if options[k]:
                opts[k] = {"file": _canonical(options[k], k), "content": _file_key(Path(str(options[k])))}
        doc = {"format": FORMAT, "signature": facts_signature(), "trace": digest, "info": _canonical(info, "info"),
               "window": _canonical(window, "window"), "options": opts}
    except Unkeyable as err:
        _debug(f"{trace.name}: facts not cached: {err}")
        return None
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def window_key(trace: Trace, spec: str | None, exclude: Any) -> str | None:
    """SHA-256 naming the window :func:`analyzer.window.choose_window` picks for ``trace`` with ``spec``
    and ``exclude`` (its code is among the signature's top-level modules); None when not cacheable."""
    digest = tc.source_digest(trace)
    if digest is None or trace.ncu_only:
        return None
    try:
        info = asdict(trace.info)
        info.pop("path", None)
        doc = {"format": FORMAT, "signature": facts_signature(), "trace": digest, "info": _canonical(info, "info"),
               "window_spec": _canonical(spec, "window"), "exclude": _canonical(exclude, "exclude")}
    except Unkeyable as err:
        _debug(f"{trace.name}: window not cached: {err}")
        return None
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class FactCache:
    """The fact entries under ``root`` (default ``<cache home>/facts``), written by a background thread."""

    def __init__(self, root: Path | None = None, limit: int | None = None) -> None:
        self.root = root or tc.cache_root("facts")
        self.limit = tc.max_bytes() if limit is None else limit
        self.hits = 0  # facts read from the cache
        self.stored = 0  # facts written
        self._queue: queue.Queue[tuple[str, Any, dict[str, Any], int]] = queue.Queue()
        self._queued = 0  # bytes of the tables waiting to be written
        self._lock = threading.Lock()
        self._writer: threading.Thread | None = None
        self._evicted_at = 0  # self.stored when entries were last evicted

    def bind(self, trace: Trace, window: Window, options: Mapping[str, Any]) -> StoreFacts | None:
        """The entries of one store's facts (None when the store cannot be cached)."""
        if not self._root_trusted():
            return None
        key = store_key(trace, window, options)
        return StoreFacts(self, key, tc.source_digest(trace)) if key is not None else None

    def _root_trusted(self) -> bool:
        return tc.root_trusted(self.root, WHAT)

    # -- small values (the window, the scalars): a meta.json entry, JSON of every type ---------------------
    def value(self, label: str, key: str) -> Any:
        """The value stored as ``label`` under ``key``, None when there is none or it is unusable."""
        if self.limit <= 0 or not self._root_trusted():
            return None
        digest = hashlib.sha256(f"{label}\0{key}".encode()).hexdigest()
        if not os.path.isfile(self.root / digest / "meta.json"):
            return None
        opened = tc.open_entry(self.root, digest, WHAT)
        if opened is None:
            return None
        entry, meta = opened
        if (meta.get("fact"), meta.get("key"), meta.get("signature")) != (label, key, facts_signature()) or \
                tc.read_entry_files(entry, meta, [], f"the cached {label}", "computing it again", WHAT,
                                    (*_STATED, "value")) is None:
            return None
        try:
            value = _decode(meta["value"])
            if _canonical(value) != meta["value"]:
                raise ValueError("not exactly what was stored")
        except (ValueError, TypeError, KeyError, Unkeyable) as err:
            _debug(f"{entry.name}: unreadable {label} ({err}); computing it again")
            return None
        tc.touch_entry(entry)
        self.hits += 1
        return value

    def put_value(self, label: str, key: str, value: Any) -> None:
        """Store ``value`` as ``label`` under ``key`` (written here: its meta.json only)."""
        if self.limit <= 0 or not self._root_trusted():
            return
        try:
            doc = _canonical(value, label)
        except Unkeyable as err:
            _debug(f"{label} not cached: {err}")
            return
        digest = hashlib.sha256(f"{label}\0{key}".encode()).hexdigest()
        meta = {"format": FORMAT, "signature": facts_signature(), "digest": digest, "fact": label, "key": key,
                "columns": [], "value": doc, "created": time.time()}
        tc.write_entry(self.root, digest, {}, meta, WHAT, (*_STATED, "value"))

    # -- writing --------------------------------------------------------------------------------------
    def put(self, digest: str, table: Any, meta: dict[str, Any]) -> None:
        """Write an entry: by the writer thread, or here when the tables waiting for it are already
        :data:`_QUEUE_BYTES` (they hold the facts' memory)."""
        size = int(table.nbytes)
        with self._lock:
            inline = self._queued > 0 and self._queued + size > _QUEUE_BYTES
            if not inline:
                self._queued += size
                if self._writer is None:
                    self._writer = threading.Thread(target=self._write_loop, name="fact-cache-write", daemon=True)
                    self._writer.start()
                _PENDING.add(self)
        if inline:
            self._write(digest, table, meta)
            return
        self._queue.put((digest, table, meta, size))

    def _write_loop(self) -> None:
        while True:
            digest, table, meta, size = self._queue.get()
            try:
                self._write(digest, table, meta)
                del table
                with self._lock:
                    self._queued -= size
            except Exception as err:  # noqa: BLE001 - the cache is never required
                _debug(f"cannot write: {type(err).__name__}: {err}")
            finally:
                self._queue.task_done()

    def _write(self, digest: str, table: Any, meta: dict[str, Any]) -> None:
        try:
            files = {tc.FACT_FILE: tc.ipc_bytes(table)}
            if sum(len(b) for b in files.values()) > self.limit:
                _debug(f"not caching fact {meta['fact']}: over the limit")
                return
            if tc.write_entry(self.root, digest, files, meta, WHAT, _STATED):
                self.stored += 1
        except Exception as err:  # noqa: BLE001 - the cache is never required
            _debug(f"cannot write fact {meta.get('fact')}: {type(err).__name__}: {err}")

    def wait(self) -> None:
        """Finish writing the facts offered so far, then evict the least recently used entries of both
        cache folders beyond the limit (once per batch of writes: it reads every entry's meta.json)."""
        self._queue.join()
        _PENDING.discard(self)
        if self.stored != self._evicted_at:
            self._evicted_at = self.stored
            try:
                tc.evict_entries(self.root, self.limit)
            except Exception as err:  # noqa: BLE001 - the cache is never required
                _debug(f"cannot evict: {type(err).__name__}: {err}")


class StoreFacts:
    """One fact store's entries: ``has``/``read`` before computing a fact, ``offer`` after."""

    def __init__(self, cache: FactCache, key: str, trace_digest: str | None = None) -> None:
        self.cache = cache
        self.key = key
        self.trace_digest = trace_digest
        self._present: dict[str, bool] = {}

    def _digest(self, name: str) -> str:
        return hashlib.sha256(f"{self.key}\0{name}".encode()).hexdigest()

    def has(self, name: str) -> bool:
        """Whether an entry for fact ``name`` is there (checked when read)."""
        present = self._present.get(name)
        if present is None:
            present = _ours(name) and os.path.isfile(self.cache.root / self._digest(name) / "meta.json")
            self._present[name] = present
        return present

    def read(self, name: str) -> pd.DataFrame | None:
        """Fact ``name`` from its entry, exactly as computed; None (and ``has`` false from now on) when
        there is none or it cannot be used."""
        if not self.has(name):
            return None
        frame = self._read(name)
        if frame is None:
            self._present[name] = False
        else:
            self.cache.hits += 1
        return frame

    def _read(self, name: str) -> pd.DataFrame | None:
        digest = self._digest(name)
        opened = tc.open_entry(self.cache.root, digest, WHAT)
        if opened is None:
            return None
        entry, meta = opened
        if (meta.get("fact"), meta.get("key"), meta.get("signature")) != (name, self.key, facts_signature()):
            _debug(f"{entry.name}: written for another fact or by other code; ignored")
            return None
        files = tc.read_entry_files(entry, meta, [tc.FACT_FILE], f"the cached fact {name}", "computing it again",
                                    WHAT, _STATED)
        if files is None:
            return None
        try:
            frame = tc.frame_from_ipc(files[tc.FACT_FILE])
            if list(frame.columns) != meta.get("columns"):
                raise ValueError("columns differ from meta.json")
        except Exception as err:  # a damaged entry is a miss, never an error  # noqa: BLE001
            _debug(f"{entry.name}: unreadable ({type(err).__name__}: {err}); computing {name}")
            return None
        tc.touch_entry(entry)
        return frame

    def offer(self, name: str, frame: pd.DataFrame) -> None:
        """Store fact ``name`` (its Arrow table made now, written in the background); a frame that cannot
        be stored exactly is skipped (said with ANALYZER_DEBUG)."""
        if self.cache.limit <= 0 or self._present.get(name) or not _ours(name):
            return
        try:
            table = tc.frame_to_table(frame)
        except Exception as err:  # noqa: BLE001 - unstorable frames are computed every time
            _debug(f"not caching fact {name}: {type(err).__name__}: {err}")
            return
        digest = self._digest(name)
        meta = {"format": FORMAT, "signature": facts_signature(), "digest": digest, "fact": name, "key": self.key,
                "columns": list(frame.columns), "created": time.time(),
                "trace": self.trace_digest}  # for eviction: the trace file's identity index entry stays
        self.cache.put(digest, table, meta)


def _ours(name: str) -> bool:
    """Fact ``name`` is computed by a module of ``analyzer/facts`` (whose sources the signature holds): a
    fact registered elsewhere (a plugin's, a test's) is computed every time."""
    from analyzer.facts.registry import UnknownFactError, get_spec

    try:
        spec = get_spec(name)  # the fact modules imported first
    except UnknownFactError:
        return False
    module = getattr(spec.compute, "__module__", "") or ""
    return module.startswith("analyzer.facts.") and not module.startswith("analyzer.facts.tests")


_CACHES: dict[tuple[Path, int], FactCache] = {}
_PENDING: set[FactCache] = set()


def fact_cache() -> FactCache:
    """The process's fact cache for the current cache folder and limit."""
    root, limit = tc.cache_root("facts"), tc.max_bytes()
    cache = _CACHES.get((root, limit))
    if cache is None:
        cache = _CACHES[(root, limit)] = FactCache(root, limit)
    return cache


def attach(store: FactStore) -> None:
    """Serve ``store``'s facts from the fact cache and store those it computes (unless ``--no-cache``
    / ``ANALYZER_NO_CACHE``, or the store cannot be cached: see the module docstring)."""
    if not tc.enabled_by_env():
        return
    store.disk = fact_cache().bind(store.trace, store.window, store.options)


def choose_window(trace: Trace, spec: str | None, exclude: Any, *, cached: bool,
                  choose: Callable[..., Window]) -> Window:
    """``choose(trace, spec, exclude=exclude)`` (:func:`analyzer.window.choose_window`, passed in: the
    window chooser sits above the facts) for ``trace``, ``spec`` and ``exclude``, read from the fact
    cache when ``cached`` and it chose it before for the same trace content, code and arguments (a
    cached run then reads no trace frame for it), stored there otherwise."""
    key = window_key(trace, spec, exclude) if cached and tc.enabled_by_env() else None
    if key is None:
        return choose(trace, spec, exclude=exclude)
    cache = fact_cache()
    window = cache.value("window", key)
    if type(window).__name__ != "Window":
        window = choose(trace, spec, exclude=exclude)
        cache.put_value("window", key, window)
    return window


def trace_scalars(store: FactStore) -> dict[str, float]:
    """:func:`analyzer.facts.scalars.trace_scalars` of ``store``, read from the fact cache when the store's
    facts are cached and it computed them before (a cached run then reads neither the scalars' facts nor
    the trace's kernels and API calls for them), stored there otherwise."""
    from analyzer.facts.scalars import trace_scalars as compute

    disk = store.disk
    if not isinstance(disk, StoreFacts):
        return compute(store)
    scalars = disk.cache.value("scalars", disk.key)
    if isinstance(scalars, dict) and all(isinstance(v, float) for v in scalars.values()):
        return scalars
    scalars = compute(store)
    if store.disk is disk:  # its options did not change meanwhile
        disk.cache.put_value("scalars", disk.key, scalars)
    return scalars


def wait_all() -> None:
    """Finish every fact cache's writes (at exit, and for callers that read the cache folder next)."""
    for cache in list(_PENDING):
        try:
            cache.wait()
        except Exception as err:  # noqa: BLE001 - at exit: never a traceback
            _debug(f"cannot finish writing: {type(err).__name__}: {err}")


atexit.register(wait_all)
