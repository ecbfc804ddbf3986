"""A columnar cache of loaded traces, so that analysing the same file again skips the loader.

A user re-runs ``analyze`` on one capture many times (another ``--window``, ``--set``, rule file). The
loader's work (SQLite scan, attribution, joins) does not depend on any of that, so its result, the
:class:`~analyzer.loading.model.Trace`, is written once as Arrow IPC files (LZ4-compressed, one per
frame, text columns dictionary-coded) and read back on the next run in a fraction of the time.

Where: ``$ANALYZER_CACHE_DIR/traces``, else ``$XDG_CACHE_HOME/gpu-trace-analyzer/traces``, else
``~/.cache/gpu-trace-analyzer/traces``: the user's cache directory, never beside the input.

Keys, and why an entry is never stale:

* An entry is named by the SHA-256 of the input file's **content** (the file the user gave: the
  ``.sqlite``, ``.sqlite.xz`` or ``.nsys-rep``) and stamped with the loader's **code signature** (a hash
  of the ``analyzer.loading`` sources and the cache format), so a changed file or a changed loader
  never reads an old entry, while a copied or moved file still finds its entry.
* Hashing a 10 M-kernel export takes seconds, so a small **identity index** maps the file's identity
  (resolved path, device, inode, size, mtime and ctime in ns) to the content hash. Any write to the file
  or any replacement changes its ctime or inode, which the user cannot set back. The index only records
  files whose last change is more than :data:`RACY_SECONDS` old: a file written twice within one
  timestamp tick would otherwise look unchanged (git's "racily clean" problem); such files are hashed
  every time instead.
* On a first run the content hash is computed while the loader runs (in a thread; hashlib releases
  the GIL), unless an entry of the same file size exists, in which case it is computed first to look
  for that entry.

Limits: the cache keeps at most ``$ANALYZER_CACHE_MAX`` bytes (default 5 GB, e.g. ``ANALYZER_CACHE_MAX=
20GB``; ``0`` disables writing); after each write the least recently used entries are evicted. An entry
larger than the limit is not written.

Trust: nothing in an entry is code (Arrow IPC and JSON only). The cache directory is created private
(``0700``), entry files ``0600``; the directory, an entry or a file owned by another user or writable
by group or others is not used (said once on stderr): someone else could have put it there. Each
entry's ``meta.json`` carries a SHA-256 of its content (every Arrow file and the info, extras and
columns it states), checked on every read: an entry that does not match is not used, the trace is
loaded again, and stderr says so once. Eviction removes only what the analyzer wrote: entry folders
and temporary folders by their own names, and in them only the analyzer's own file names, never
following a symbolic link (a ``traces`` folder that is a link to a folder with other content loses none
of it).

Never required: ``--no-cache`` (or ``ANALYZER_NO_CACHE=1``) skips it; an unreadable, partial or
corrupt entry, a read-only or full cache directory, a frame whose columns cannot be stored exactly
(anything but integers, floats, booleans and text) all fall back to the loader silently
(``ANALYZER_DEBUG=1`` says why on stderr). Entries are written to a temporary directory and renamed
into place, so a concurrent or interrupted run never leaves a half entry under a real name.

Exactness: a cached trace has the same frames (columns, dtypes incl. categorical categories and int
widths, values, index), :class:`~analyzer.loading.model.TraceInfo` (with the path the user gave this
time) and extras as the loaded one; tests compare both and the reports built from them byte for byte.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer.loading.model import FRAME_COLUMNS, Trace, TraceInfo

FORMAT = 2  # bump when the entry layout changes
RACY_SECONDS = 3.0
DEFAULT_MAX_BYTES = 5 * 10**9
_HASH_CHUNK = 1 << 22
_SUPPORTED_KINDS = "iufb"
_ENTRY_RE = re.compile(r"^[0-9a-f]{64}$")
_TMP_RE = re.compile(r"^\.[0-9a-f]{12}-[a-z0-9_]{6,}$")  # tempfile.mkdtemp(prefix=".DIGEST12-")
_INDEX_RE = re.compile(r"^[0-9a-f]{40}$")
_ENTRY_FILES = frozenset({"meta.json", *(f"{name}.arrow" for name in FRAME_COLUMNS)})
_SAID: set[str] = set()

Progress = Callable[[str], None]


def _debug(message: str) -> None:
    if os.environ.get("ANALYZER_DEBUG"):
        sys.stderr.write(f"trace cache: {message}\n")


def _say_once(key: str, message: str) -> None:
    """A line on stderr, once per process and kind of problem: the cache is never required, but a user
    should know when theirs was refused or damaged."""
    if key not in _SAID:
        _SAID.add(key)
        sys.stderr.write(f"note: trace cache: {message}\n")


def trusted(st: os.stat_result) -> bool:
    """Owned by this user and not writable by group or others."""
    geteuid = getattr(os, "geteuid", None)
    return (geteuid is None or st.st_uid == geteuid()) and not st.st_mode & 0o022


def make_private_dir(path: Path) -> None:
    """``path`` (and missing parents) created ``0700``; an existing folder is left as it is."""
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            continue
        os.chmod(d, 0o700)  # mkdir's mode goes through the umask


def _remove_entry_dir(folder: Path) -> None:
    """Remove a folder the cache wrote: only its own file names, never following a link; a folder with
    anything else in it stays."""
    try:
        st = os.lstat(folder)
    except OSError:
        return

    if not stat.S_ISDIR(st.st_mode):
        return
    try:
        with os.scandir(folder) as it:
            children = list(it)
    except OSError:
        return
    for child in children:
        if child.name in _ENTRY_FILES and (child.is_symlink() or child.is_file(follow_symlinks=False)):
            try:
                os.unlink(child.path)
            except OSError:
                pass
    try:
        os.rmdir(folder)
    except OSError:
        pass


def _ours(meta: Path) -> bool:
    """``meta`` is the meta.json of an entry the cache wrote: a JSON object with the cache's fields and
    the folder's own name as its digest."""
    try:
        if meta.is_symlink() or meta.stat().st_size > 1 << 24:
            return False
        d = json.loads(meta.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(d, dict) and "signature" in d and d.get("digest") == meta.parent.name


class _Untrusted(Exception):
    pass


def _read_private(path: Path) -> bytes:
    """The bytes of a cache file: a regular file (not a link, FIFO or device) of this user's that no one
    else can write to; raises :class:`_Untrusted` otherwise (OSError when it cannot be read)."""

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not trusted(st):
            raise _Untrusted(f"{path} is not a private file of yours")
        return fh.read()


def _checksum(files: dict[str, bytes], meta: dict[str, Any]) -> str:
    """SHA-256 of an entry's Arrow files and the part of its meta.json the trace is rebuilt from."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    stated = {k: meta.get(k) for k in ("info", "extras", "columns", "digest", "source_size")}
    h.update(json.dumps(stated, sort_keys=True).encode())
    return h.hexdigest()


def cache_home() -> Path:
    """The analyzer's directory in the user's cache: ``$ANALYZER_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/gpu-trace-analyzer``, else ``~/.cache/gpu-trace-analyzer``."""
    env = os.environ.get("ANALYZER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpu-trace-analyzer"


def cache_root() -> Path:
    """The cache directory for traces (see the module docstring)."""
    return cache_home() / "traces"


def parse_size(text: str) -> int:
    """``"5GB"`` -> 5e9, ``"500MB"``, ``"2GiB"``, ``"123"`` (bytes); raises ValueError."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?)b?\s*", text.lower())
    if not m:
        raise ValueError(f"bad size {text!r}; write e.g. 5GB, 500MB or 0")
    base = 1024 if m.group(3) else 1000
    return int(float(m.group(1)) * base ** " kmgt".index(m.group(2) or " "))


def max_bytes() -> int:
    env = os.environ.get("ANALYZER_CACHE_MAX")
    if env:
        try:
            return parse_size(env)
        except ValueError as err:
            _debug(f"ignoring ANALYZER_CACHE_MAX: {err}")
    return DEFAULT_MAX_BYTES


def enabled_by_env() -> bool:
    return os.environ.get("ANALYZER_NO_CACHE", "").strip().lower() in ("", "0", "false", "no")


_SIGNATURE: str | None = None


def code_signature() -> str:
    """Hash of the cache format, the loader sources (``analyzer/loading`` and the helpers it calls in
    ``analyzer/facts/_util.py``) and the pandas, numpy and pyarrow versions: entries written by another
    loader are never read."""
    global _SIGNATURE
    if _SIGNATURE is None:
        import pyarrow as pa

        h = hashlib.sha256(f"format {FORMAT} pandas {pd.__version__} numpy {np.__version__} "
                           f"pyarrow {pa.__version__}".encode())
        here = Path(__file__).resolve().parent
        # every loader source (subpackages too, tests not), and the shared helpers the loader calls
        sources = [s for s in here.rglob("*.py") if "tests" not in s.relative_to(here).parts]
        sources += [here.parent / "facts" / "_util.py"]
        for src in sorted(sources):
            name = str(src.relative_to(here.parent)).encode()
            try:
                h.update(name + b"\0" + src.read_bytes())
            except OSError:
                h.update(name)
        _SIGNATURE = h.hexdigest()
    return _SIGNATURE


def file_digest(path: Path) -> str:
    """SHA-256 of the file's bytes."""
    h = hashlib.sha256()
    buf = bytearray(_HASH_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            h.update(view[:n])
    return h.hexdigest()


@dataclass(frozen=True)
class Identity:
    path: str
    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, path: Path) -> Identity:
        st = os.stat(path)
        return cls(str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:40]

    def settled(self, now_ns: int) -> bool:
        """Changed long enough ago that a later change must show in mtime/ctime."""
        return now_ns - max(self.mtime_ns, self.ctime_ns) > RACY_SECONDS * 1e9


# ---------------------------------------------------------------------------------------------------
# frames <-> Arrow
# ---------------------------------------------------------------------------------------------------
class _Unstorable(Exception):
    pass


def _frame_to_table(frame: pd.DataFrame):  # -> pyarrow.Table
    import pyarrow as pa

    if not isinstance(frame.index, pd.RangeIndex) or frame.index.start != 0 or frame.index.step != 1:
        raise _Unstorable("frame index is not 0..n-1")
    arrays, fields = [], []
    for name in frame.columns:
        if not isinstance(name, str):
            raise _Unstorable(f"column name {name!r}")
        col = frame[name]
        dtype = col.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            cats = dtype.categories
            if cats.dtype != object or dtype.ordered or not all(isinstance(c, str) for c in cats):
                raise _Unstorable(f"{name}: categorical of {cats.dtype}")
            codes = col.cat.codes.to_numpy()
            kind = f"category:{codes.dtype.str}"
            arr = pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(list(cats), type=pa.string()))
        elif isinstance(dtype, np.dtype) and dtype.kind == "O":
            from analyzer.loading.columns import factorize_objects

            codes, uniques = factorize_objects(col)
            if (codes < 0).any() or not all(isinstance(u, str) for u in uniques):
                raise _Unstorable(f"{name}: object column with non-text values")
            kind = "object"
            arr = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)),
                                                 pa.array(list(uniques), type=pa.string()))
        elif isinstance(dtype, np.dtype) and dtype.kind in _SUPPORTED_KINDS:
            kind = dtype.str
            arr = pa.array(col.to_numpy())
        else:
            raise _Unstorable(f"{name}: dtype {dtype}")
        arrays.append(arr)
        fields.append(pa.field(name, arr.type, metadata={"kind": kind}))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _table_to_frame(table) -> pd.DataFrame:  # table: pyarrow.Table
    import pyarrow as pa

    out: dict[str, Any] = {}
    for i, field in enumerate(table.schema):
        kind = (field.metadata or {}).get(b"kind", b"").decode()
        col = table.column(i)
        arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        if kind.startswith("category:") or kind == "object":
            if not pa.types.is_dictionary(arr.type):
                raise _Unstorable(f"{field.name}: expected dictionary data")
            labels = np.empty(len(arr.dictionary), dtype=object)
            labels[:] = arr.dictionary.to_pylist()
            codes = arr.indices.to_numpy(zero_copy_only=False)
            if kind == "object":
                out[field.name] = pd.Series(labels[codes] if len(codes) else np.empty(0, dtype=object),
                                            dtype=object, copy=False)
            else:
                codes = codes.astype(np.dtype(kind.split(":", 1)[1]), copy=False)
                out[field.name] = pd.Categorical.from_codes(codes, categories=pd.Index(labels, dtype=object))
        elif kind and np.dtype(kind).kind in _SUPPORTED_KINDS:
            # a writable copy in the exact dtype: loaded frames are writable, so cached ones are too
            out[field.name] = np.array(arr.to_numpy(zero_copy_only=False), dtype=np.dtype(kind), copy=True)
        else:
            raise _Unstorable(f"{field.name}: unknown column kind {kind!r}")
    return pd.DataFrame(out, copy=False) if out else pd.DataFrame(index=pd.RangeIndex(table.num_rows))


def _info_to_json(info: TraceInfo) -> dict[str, Any]:
    d = asdict(info)
    d["path"] = str(info.path)
    return d


# ---------------------------------------------------------------------------------------------------
# the cache
# ---------------------------------------------------------------------------------------------------
class TraceCache:
    """Entries under ``root`` (default :func:`cache_root`), at most ``limit`` bytes in all."""

    def __init__(self, root: Path | None = None, limit: int | None = None, *, background: bool = False) -> None:
        """``background``: a new entry's files are written by a thread while the caller goes on (the
        trace's frames are turned into Arrow tables and its info and extras into text first, so later
        changes to the trace do not reach the entry); :meth:`wait` finishes them."""
        self.root = root or cache_root()
        self.limit = max_bytes() if limit is None else limit
        self.background = background
        self.hits = 0  # traces served from the cache by this object
        self._pending: list[threading.Thread] = []

    def wait(self) -> None:
        """Finish the entries being written in the background (no-op when none is)."""
        pending, self._pending = self._pending, []
        for thread in pending:
            thread.join()

    # -- public -----------------------------------------------------------------------------------------
    def load(self, path: Path, load: Callable[[], Trace], progress: Progress | None = None) -> Trace:
        """The trace of ``path`` from the cache, else ``load()`` (and stored for next time)."""
        say = progress or (lambda _m: None)
        if not self._root_trusted():
            return load()
        try:
            ident = Identity.of(path)
        except OSError:
            return load()
        digest = self._digest_from_index(ident)
        if digest is None and self._same_size_entry(ident.size):
            say(f"hashing {path.name} to look it up in the trace cache")
            digest = self._safe_digest(path)
        if digest is not None:
            trace = self._read(digest, path, say, ident.size)
            if trace is not None:
                self.hits += 1
                self._remember(ident, digest)
                return trace
        hasher = None
        if digest is None:  # hash while the loader runs
            hasher = _Hasher(path)
        trace = load()
        if hasher is not None:
            digest = hasher.result()
        try:
            unchanged = Identity.of(path) == ident  # not written to while we read and hashed it
        except OSError:
            unchanged = False
        if digest is not None and unchanged:
            self._write(digest, ident, trace, say)
        return trace

    def _root_trusted(self) -> bool:
        """The cache folder is this user's and no one else can write to it (or does not exist yet: it
        is created private)."""
        try:
            st = os.stat(self.root)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        if trusted(st):
            return True
        _say_once("root", f"{self.root} is not private to you (another user's, or writable by others); "
                          "not used. Make it yours and chmod 700 it, or set ANALYZER_CACHE_DIR")
        return False

    # -- lookup -----------------------------------------------------------------------------------------
    def _index_file(self, ident: Identity) -> Path:
        return self.root / "ident" / ident.key()

    def _digest_from_index(self, ident: Identity) -> str | None:
        try:
            digest = _read_private(self._index_file(ident)).decode("ascii", "replace").strip()
        except (OSError, _Untrusted):
            return None
        return digest if _ENTRY_RE.match(digest) else None

    def _remember(self, ident: Identity, digest: str) -> None:
        if not ident.settled(time.time_ns()):
            return  # racily clean: hash it next time
        try:
            target = self._index_file(ident)
            make_private_dir(target.parent)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(digest)
            os.replace(tmp, target)
        except OSError as err:
            _debug(f"cannot write the identity index: {err}")

    def _same_size_entry(self, size: int) -> bool:
        for meta in self._metas():
            try:
                if json.loads(meta.read_text()).get("source_size") == size:
                    return True
            except (OSError, ValueError):
                continue
        return False

    def _metas(self) -> list[Path]:
        try:
            return [p / "meta.json" for p in self.root.iterdir() if _ENTRY_RE.match(p.name)]
        except OSError:
            return []

    @staticmethod
    def _safe_digest(path: Path) -> str | None:
        try:
            return file_digest(path)
        except OSError as err:
            _debug(f"cannot hash {path}: {err}")
            return None

    # -- read -------------------------------------------------------------------------------------------
    def _read(self, digest: str, path: Path, say: Progress, size: int | None = None) -> Trace | None:

        entry = self.root / digest
        try:
            st = os.lstat(entry)
            if not stat.S_ISDIR(st.st_mode) or not trusted(st):
                raise _Untrusted(f"{entry} is not a private folder of yours")
            meta = json.loads(_read_private(entry / "meta.json"))
        except _Untrusted as err:
            _say_once("entry", f"{err}; not used")
            return None
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or meta.get("signature") != code_signature() or meta.get("digest") != digest:
            _debug(f"{entry.name}: written by another loader version; ignored")
            return None
        if size is not None and meta.get("source_size") != size:
            _debug(f"{entry.name}: written for a file of another size; ignored")
            return None
        say(f"reading {path.name} from the trace cache")
        try:
            import pyarrow as pa

            files = {name: _read_private(entry / f"{name}.arrow") for name in FRAME_COLUMNS}
        except _Untrusted as err:
            _say_once("entry", f"{err}; not used")
            return None
        except OSError as err:
            _debug(f"{entry.name}: unreadable ({err}); ignored")
            return None
        if meta.get("checksum") != _checksum(files, meta):
            _say_once("checksum", f"the entry for {path.name} does not match its checksum (it changed after "
                                  "it was written); reading the trace again")
            return None
        try:
            frames = {}
            for name in FRAME_COLUMNS:
                table = pa.ipc.open_file(pa.BufferReader(files[name])).read_all()
                frames[name] = _table_to_frame(table)
                if list(frames[name].columns) != meta["columns"][name]:
                    raise _Unstorable(f"{name}: columns differ from meta.json")
            info_d = dict(meta["info"])
            info_d["path"] = path  # the name the user gave this time
            info = TraceInfo(**info_d)
            extras = meta.get("extras") or {}
        except Exception as err:  # a damaged entry is a miss, never an error  # noqa: BLE001
            _debug(f"{entry.name}: unreadable ({type(err).__name__}: {err}); ignored")
            return None
        try:
            os.utime(entry / "meta.json")  # last use, for eviction
        except OSError:
            pass
        return Trace(info=info, extras=extras, **frames)

    # -- write ------------------------------------------------------------------------------------------
    def _write(self, digest: str, ident: Identity, trace: Trace, say: Progress) -> None:
        if self.limit <= 0:
            return
        try:
            tables = {name: _frame_to_table(getattr(trace, name)) for name in FRAME_COLUMNS}
            meta_text = json.dumps({
                "format": FORMAT, "signature": code_signature(), "digest": digest,
                "source": ident.path, "source_size": ident.size, "created": time.time(),
                "info": _info_to_json(trace.info),
                "extras": trace.extras,  # JSON only; a trace with other extras is not cached
                "columns": {name: list(getattr(trace, name).columns) for name in FRAME_COLUMNS},
            })
        except (_Unstorable, TypeError, ValueError) as err:
            _debug(f"not caching {ident.path}: {err}")
            return
        estimate = sum(t.nbytes for t in tables.values())
        if estimate // 2 > self.limit:  # LZ4 halves it at best on timestamps
            _debug(f"not caching {ident.path}: about {estimate / 1e9:.1f} GB, over the limit")
            return
        say("writing the trace cache")
        if self.background:
            thread = threading.Thread(target=self._store_quietly, args=(digest, ident, tables, meta_text),
                                      name="trace-cache-write", daemon=True)
            self._pending.append(thread)
            thread.start()
        else:
            self._store(digest, ident, tables, meta_text)

    def _store_quietly(self, *args: Any) -> None:
        """:meth:`_store` in a thread: any failure is a skipped entry (said with ANALYZER_DEBUG), never a
        traceback on the user's terminal."""
        try:
            self._store(*args)
        except Exception as err:  # noqa: BLE001 - the cache is never required
            _debug(f"cannot write the entry: {type(err).__name__}: {err}")

    def _store(self, digest: str, ident: Identity, tables: dict[str, Any], meta_text: str) -> None:
        """Write an entry's files into a temporary directory, rename it into place, evict old entries
        (Arrow's LZ4 and file writes release the GIL: in the background this overlaps the rules)."""
        import pyarrow as pa

        try:
            make_private_dir(self.root)
            tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=self.root))  # 0700
        except OSError as err:
            _debug(f"cannot write under {self.root}: {err}")
            return
        try:
            options = pa.ipc.IpcWriteOptions(compression="lz4")
            files: dict[str, bytes] = {}
            for name, table in tables.items():
                sink = pa.BufferOutputStream()
                with pa.ipc.new_file(sink, table.schema, options=options) as writer:
                    writer.write_table(table)
                files[name] = sink.getvalue().to_pybytes()
            meta = json.loads(meta_text)
            meta["checksum"] = _checksum(files, meta)
            files_out = {f"{name}.arrow": data for name, data in files.items()}
            files_out["meta.json"] = json.dumps(meta).encode()
            for fname, data in files_out.items():
                fd = os.open(tmp / fname, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
            final = self.root / digest
            try:
                os.rename(tmp, final)
            except OSError:  # an entry appeared meanwhile (another run), or an old one is in the way
                _remove_entry_dir(final)
                os.rename(tmp, final)
        except OSError as err:
            _debug(f"cannot write the entry: {err}")
            _remove_entry_dir(tmp)
            return
        self._remember(ident, digest)
        self.evict()

    # -- eviction ---------------------------------------------------------------------------------------
    def entries(self) -> list[tuple[float, int, Path]]:
        """(last use, bytes, directory) of every entry, oldest first."""
        out = []
        for meta in self._metas():
            entry = meta.parent
            try:
                if entry.is_symlink() or not _ours(meta):
                    continue
                used = meta.stat(follow_symlinks=False).st_mtime
                size = sum(f.stat(follow_symlinks=False).st_size for f in entry.iterdir())
            except OSError:
                continue
            out.append((used, size, entry))
        return sorted(out)

    def evict(self) -> None:
        """Remove least recently used entries until the total fits the limit; drop stale leftovers
        (temporary directories of interrupted runs, index files of evicted entries)."""
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        for _, size, entry in entries:
            if total <= self.limit:
                break
            _remove_entry_dir(entry)
            total -= size
        now = time.time()
        try:
            for p in self.root.iterdir():
                if (_TMP_RE.match(p.name) and not p.is_symlink() and p.is_dir()
                        and now - p.stat().st_mtime > 3600):
                    _remove_entry_dir(p)
            index = self.root / "ident"
            if index.is_dir() and not index.is_symlink():
                live = {p.name for p in self.root.iterdir() if _ENTRY_RE.match(p.name)}
                for f in index.iterdir():
                    try:
                        if not (_INDEX_RE.match(f.name) and not f.is_symlink() and f.is_file()):
                            continue
                        digest = f.read_text().strip()
                        if _ENTRY_RE.match(digest) and digest not in live:
                            f.unlink()
                    except (OSError, UnicodeDecodeError):
                        continue
        except OSError:
            pass


class _Hasher:
    """The file's SHA-256, computed in a thread (hashlib releases the GIL on large updates)."""

    def __init__(self, path: Path) -> None:
        self._digest: str | None = None
        self._thread = threading.Thread(target=self._run, args=(path,), name="trace-cache-hash", daemon=True)
        self._thread.start()

    def _run(self, path: Path) -> None:
        self._digest = TraceCache._safe_digest(path)

    def result(self) -> str | None:
        self._thread.join()
        return self._digest
