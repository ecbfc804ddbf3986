"""A columnar cache of loaded traces, so that analysing the same file again skips the loader.

A user re-runs ``analyze`` on one capture many times (another ``--window``, ``--set``, rule file). The
loader's work (SQLite scan, attribution, joins) does not depend on any of that, so its result, the
:class:`~analyzer.loading.model.Trace`, is written once as Arrow IPC files (LZ4-compressed, one per
frame, text columns dictionary-coded, timestamps as differences: :mod:`analyzer.loading.arrowio`) and
read back on the next run in a fraction of the time.

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
larger than the limit is not written. The derived files beside the cache (:data:`DERIVED_FOLDERS`: decompressed
``.sqlite.xz`` traces, ``.nsys-rep`` exports) count against the same limit and are evicted with the entries,
least recently used first, except one used in the last :data:`DERIVED_IN_USE_S` seconds.

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

Lazy frames: the analysis (``TraceCache(lazy=True)``) reads an entry's meta.json only, and each frame
when first used, checked against the SHA-256 meta.json states for it (the entry's checksum covers those
digests and each frame's row count): a run whose facts come from the fact cache
(:mod:`analyzer.facts.cache`, the ``facts`` folder beside ``traces``, within the same size limit) reads
only the few frames its report shows. A frame found damaged then is loaded again by the loader.

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
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer.loading.arrowio import (  # noqa: F401 (re-exported: the caches' one implementation)
    Unstorable,
    _Unstorable,
    frame_from_ipc,
    frame_to_table,
    ipc_bytes,
    ipc_table,
    table_to_frame,
)
from analyzer.loading.columns import SHARED_CONSTANT_FRAMES, shared_constants
from analyzer.loading.model import FRAME_COLUMNS, Trace, TraceInfo
from analyzer.boundedio import parse_size  # noqa: F401 (re-exported: ANALYZER_CACHE_MAX is parsed here)

FORMAT = 5  # bump when the entry layout changes (5: int8/int16 columns of NARROW_INT_COLUMNS)
RACY_SECONDS = 3.0
DEFAULT_MAX_BYTES = 5 * 10**9
_HASH_CHUNK = 1 << 22
_ENTRY_RE = re.compile(r"^[0-9a-f]{64}$")
_TMP_RE = re.compile(r"^\.[0-9a-f]{12}-[a-z0-9_]{6,}$")  # tempfile.mkdtemp(prefix=".DIGEST12-")
_INDEX_RE = re.compile(r"^[0-9a-f]{40}$")
#: the one file of a fact cache entry besides its meta.json (analyzer.facts.cache)
FACT_FILE = "fact.arrow"
_ENTRY_FILES = frozenset({"meta.json", FACT_FILE, *(f"{name}.arrow" for name in FRAME_COLUMNS)})
#: the cache's folders under :func:`cache_home`: loaded traces, and the facts computed from them
#: (:mod:`analyzer.facts.cache`); ``ANALYZER_CACHE_MAX`` bounds them together
CACHE_FOLDERS = ("traces", "facts")
#: folders of derived files beside them (:mod:`analyzer.loading.nsys_rep`: a ``.sqlite.xz`` decompressed,
#: an ``.nsys-rep`` exported), each file named as it names them; within the same ``ANALYZER_CACHE_MAX``
DERIVED_FOLDERS: dict[str, re.Pattern[str]] = {
    "decompressed": re.compile(r"^[0-9a-f]{16}-."),
    "nsys-export": re.compile(r"-[0-9a-f]{16}\.sqlite$"),
}
#: a derived file used this recently may be open in another analysis: never evicted (nor counted)
DERIVED_IN_USE_S = 600
_SAID: set[tuple[str, str]] = set()

Progress = Callable[[str], None]


def _debug(message: str, what: str = "trace cache") -> None:
    if os.environ.get("ANALYZER_DEBUG"):
        sys.stderr.write(f"{what}: {message}\n")


def _say_once(key: str, message: str, what: str = "trace cache") -> None:
    """A line on stderr, once per process and kind of problem: the cache is never required, but a user
    should know when theirs was refused or damaged."""
    if (what, key) not in _SAID:
        _SAID.add((what, key))
        sys.stderr.write(f"note: {what}: {message}\n")


def trusted(st: os.stat_result) -> bool:
    """Owned by this user and not writable by group or others."""
    geteuid = getattr(os, "geteuid", None)
    return (geteuid is None or st.st_uid == geteuid()) and not st.st_mode & 0o022


def root_trusted(root: Path, what: str = "trace cache") -> bool:
    """The cache folder ``root`` is this user's and no one else can write to it (or does not exist yet:
    it is created private); otherwise a note says so, once (``what``: which cache)."""
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if trusted(st):
        return True
    _say_once("root", f"{root} is not private to you (another user's, or writable by others); "
                      "not used. Make it yours and chmod 700 it, or set ANALYZER_CACHE_DIR", what)
    return False


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
    d = _meta_of(meta)
    return d is not None and "signature" in d and d.get("digest") == meta.parent.name


class _Untrusted(Exception):
    pass


def _read_private(path: Path, limit: int | None = None) -> bytes:
    """The bytes of a cache file: a regular file (not a link, FIFO or device) of this user's that no one
    else can write to; raises :class:`_Untrusted` otherwise, or when it holds more than ``limit`` bytes
    (OSError when it cannot be read)."""

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not trusted(st):
            raise _Untrusted(f"{path} is not a private file of yours")
        data = fh.read() if limit is None else fh.read(limit + 1)
        if limit is not None and len(data) > limit:
            raise _Untrusted(f"{path} is larger than a file the cache writes")
        return data


#: the most a meta.json (or an identity index file) may hold: the cache writes a few kilobytes
META_MAX_BYTES = 1 << 24
INDEX_MAX_BYTES = 4096


def _meta_of(meta: Path) -> dict[str, Any] | None:
    """The JSON object in the cache file ``meta`` (read as :func:`_read_private` reads: no link, FIFO or
    device, nothing another user could write, at most :data:`META_MAX_BYTES`), or None when it is not
    one. Every cache read of a meta.json goes through here or :func:`open_entry`: one that reads a FIFO
    blocks forever, one that follows a link to ``/dev/zero`` grows memory without bound."""
    try:
        d = json.loads(_read_private(meta, META_MAX_BYTES))
    except (OSError, ValueError, RecursionError, _Untrusted):
        return None
    return d if isinstance(d, dict) else None


#: meta.json's keys the trace is rebuilt from (``files``: each Arrow file's SHA-256, so that one frame
#: can be read and checked alone; ``rows``: each frame's length), covered by the entry's checksum
_STATED = ("info", "extras", "columns", "digest", "source_size", "files", "rows")


def entry_checksum(files: dict[str, bytes], meta: dict[str, Any], stated_keys: tuple[str, ...] = _STATED) -> str:
    """SHA-256 of an entry's Arrow files and the part of its meta.json (``stated_keys``) the content is
    rebuilt from."""
    return checksum_of_digests({name: hashlib.sha256(data).hexdigest() for name, data in files.items()}, meta,
                               stated_keys)


def checksum_of_digests(digests: dict[str, str], meta: dict[str, Any], stated_keys: tuple[str, ...] = _STATED) -> str:
    """:func:`entry_checksum` from the files' SHA-256 digests (hex) instead of their bytes."""
    h = hashlib.sha256()
    for name in sorted(digests):
        h.update(name.encode() + b"\0" + bytes.fromhex(digests[name]))
    stated = {k: meta.get(k) for k in stated_keys}
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


def cache_root(folder: str = "traces") -> Path:
    """The cache directory for traces (see the module docstring), or another of :data:`CACHE_FOLDERS`."""
    return cache_home() / folder


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
        hash_sources(h, sources, here.parent)
        _SIGNATURE = h.hexdigest()
    return _SIGNATURE


def hash_sources(h: Any, sources: list[Path], root: Path) -> None:
    """Feed each file of ``sources`` (sorted) into the hash ``h``: its path under ``root`` and its bytes
    (only the path when it cannot be read): a code signature of the caches."""
    for src in sorted(sources):
        name = str(src.relative_to(root)).encode()
        try:
            h.update(name + b"\0" + src.read_bytes())
        except OSError:
            h.update(name)


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
# entries: folders named by a digest, holding Arrow files and a checksummed meta.json (shared by the
# trace cache and analyzer.facts.cache)
# ---------------------------------------------------------------------------------------------------
def open_entry(root: Path, digest: str, what: str = "trace cache") -> tuple[Path, dict[str, Any]] | None:
    """The folder and meta.json of entry ``digest`` under ``root``: a private folder of this user's whose
    meta.json (a private file) names that digest; None otherwise (a refused one said once on stderr)."""
    entry = root / digest
    try:
        st = os.lstat(entry)
        if not stat.S_ISDIR(st.st_mode) or not trusted(st):
            raise _Untrusted(f"{entry} is not a private folder of yours")
        meta = json.loads(_read_private(entry / "meta.json", META_MAX_BYTES))
    except _Untrusted as err:
        _say_once("entry", f"{err}; not used", what)
        return None
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(meta, dict) or meta.get("digest") != digest:
        _debug(f"{entry.name}: not an entry for this digest; ignored", what)
        return None
    return entry, meta


def read_entry_files(entry: Path, meta: dict[str, Any], names: list[str], label: str, instead: str,
                     what: str = "trace cache", stated_keys: tuple[str, ...] = _STATED) -> dict[str, bytes] | None:
    """The bytes of ``names`` in ``entry``, checked against the checksum of its meta.json; None when one
    is missing, unreadable or refused, or the checksum differs (said once: ``label`` does not match
    its checksum; ``instead``)."""
    try:
        files = {name: _read_private(entry / name) for name in names}
    except _Untrusted as err:
        _say_once("entry", f"{err}; not used", what)
        return None
    except OSError as err:
        _debug(f"{entry.name}: unreadable ({err}); ignored", what)
        return None
    if meta.get("checksum") != entry_checksum(files, meta, stated_keys):
        _say_once("checksum", f"{label} does not match its checksum (it changed after it was written); {instead}",
                  what)
        return None
    return files


def touch_entry(entry: Path) -> None:
    """Mark the entry used now (its meta.json's mtime: eviction removes the least recently used)."""
    try:
        os.utime(entry / "meta.json")
    except OSError:
        pass


def write_entry(root: Path, digest: str, files: dict[str, bytes], meta: dict[str, Any], what: str = "trace cache",
                stated_keys: tuple[str, ...] = _STATED, digests: dict[str, str] | None = None) -> bool:
    """Write entry ``digest`` under ``root``: ``files`` and ``meta`` (with their checksum added) into a
    private temporary folder renamed into place, so no run ever sees half an entry. False when it could
    not be written (said with ANALYZER_DEBUG). ``digests``: the files' SHA-256 (hex) when already known."""
    try:
        make_private_dir(root)
        tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=root))  # 0700
    except OSError as err:
        _debug(f"cannot write under {root}: {err}", what)
        return False
    try:
        checksum = (checksum_of_digests(digests, meta, stated_keys) if digests is not None
                    else entry_checksum(files, meta, stated_keys))
        meta = {**meta, "checksum": checksum}
        for fname, data in {**files, "meta.json": json.dumps(meta).encode()}.items():
            fd = os.open(tmp / fname, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        final = root / digest
        try:
            os.rename(tmp, final)
        except OSError:  # an entry appeared meanwhile (another run), or an old one is in the way
            _remove_entry_dir(final)
            os.rename(tmp, final)
    except OSError as err:
        _debug(f"cannot write the entry: {err}", what)
        _remove_entry_dir(tmp)
        return False
    return True


def _metas(root: Path) -> list[Path]:
    try:
        return [p / "meta.json" for p in root.iterdir() if _ENTRY_RE.match(p.name)]
    except OSError:
        return []


def _traces_with_facts(root: Path) -> set[str]:
    """The trace digests the fact entries beside ``root`` (a ``traces`` folder) were computed from."""
    out: set[str] = set()
    if root.name != "traces":
        return out
    for meta in _metas(root.parent / "facts"):
        d = _meta_of(meta)
        digest = d.get("trace") if d is not None else None
        if isinstance(digest, str) and _ENTRY_RE.match(digest):
            out.add(digest)
    return out


def entries_in(root: Path) -> list[tuple[float, int, Path]]:
    """(last use, bytes, directory) of every entry the cache wrote under ``root``, oldest first."""
    out = []
    for meta in _metas(root):
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


def derived_in(folder: Path) -> list[tuple[float, int, Path]]:
    """(last use, bytes, file) of every derived file in ``folder`` (one of :data:`DERIVED_FOLDERS`, a
    real folder of this user's, not a link): regular files of this user's named as the analyzer names
    them. Last use: the access time :func:`mark_used` sets (never the mtime, which readers check)."""
    pattern = DERIVED_FOLDERS.get(folder.name)
    out: list[tuple[float, int, Path]] = []
    try:
        st = os.lstat(folder)
        if pattern is None or not stat.S_ISDIR(st.st_mode) or not trusted(st):
            return out
        with os.scandir(folder) as it:
            for item in it:
                if not pattern.search(item.name):
                    continue
                try:
                    fst = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(fst.st_mode) and trusted(fst):
                    out.append((max(fst.st_atime, fst.st_mtime), fst.st_size, Path(item.path)))
    except OSError:
        pass
    return sorted(out)


def mark_used(path: Path) -> None:
    """Record that the derived file ``path`` was used now (its access time; the mtime stays)."""
    try:
        os.utime(path, ns=(time.time_ns(), os.stat(path).st_mtime_ns))
    except OSError:
        pass


def evict_entries(root: Path, limit: int, keep: Path | None = None) -> None:
    """Remove the least recently used entries until those of ``root`` and of the other
    :data:`CACHE_FOLDERS` beside it (when ``root`` is one of them or of :data:`DERIVED_FOLDERS`), with
    the derived files there, fit ``limit`` together; drop the temporary folders of interrupted runs (an
    hour old) in them. A derived file used in the last :data:`DERIVED_IN_USE_S` seconds, and ``keep``,
    stay (and do not count): another analysis may be reading it."""
    roots = [root]
    shared = root.name in CACHE_FOLDERS or root.name in DERIVED_FOLDERS
    if shared:
        roots = [root.parent / name for name in CACHE_FOLDERS]
    now = time.time()
    entries = [(used, size, entry, False) for r in roots for used, size, entry in entries_in(r)]
    if shared:
        entries += [(used, size, f, True) for name in DERIVED_FOLDERS
                    for used, size, f in derived_in(root.parent / name)
                    if f != keep and now - used >= DERIVED_IN_USE_S]
    entries.sort(key=lambda e: e[0])
    total = sum(e[1] for e in entries)
    for _, size, entry, derived in entries:
        if total <= limit:
            break
        if derived:
            try:
                os.unlink(entry)
            except OSError:
                continue
        else:
            _remove_entry_dir(entry)
        total -= size
    for r in roots:
        try:
            for p in r.iterdir():
                if (_TMP_RE.match(p.name) and not p.is_symlink() and p.is_dir()
                        and now - p.stat().st_mtime > 3600):
                    _remove_entry_dir(p)
        except OSError:
            continue


def _info_to_json(info: TraceInfo) -> dict[str, Any]:
    d = asdict(info)
    d["path"] = str(info.path)
    return d


_SOURCE_ATTR = "_cache_source_digest"


def mark_source(trace: Trace, digest: str) -> None:
    """Record on ``trace`` the SHA-256 of the file it was loaded from. An attribute of this object, not
    a field: a trace made from it (``dataclasses.replace``, one rank's frames) carries none."""
    setattr(trace, _SOURCE_ATTR, digest)


def source_digest(trace: Trace) -> str | None:
    """The SHA-256 of the file ``trace`` was loaded from, when the trace cache knows it (see
    :func:`mark_source`); the fact cache (:mod:`analyzer.facts.cache`) keys its entries on it."""
    digest = getattr(trace, _SOURCE_ATTR, None)
    return digest if isinstance(digest, str) else None


# ---------------------------------------------------------------------------------------------------
# the cache
# ---------------------------------------------------------------------------------------------------
class TraceCache:
    """Entries under ``root`` (default :func:`cache_root`), at most ``limit`` bytes in all."""

    def __init__(self, root: Path | None = None, limit: int | None = None, *, background: bool = False,
                 lazy: bool = False) -> None:
        """``background``: a new entry's files are written by a thread while the caller goes on (the
        trace's frames are turned into Arrow tables and its info and extras into text first, so later
        changes to the trace do not reach the entry); :meth:`wait` finishes them. ``lazy``: a trace
        served from the cache reads each frame (and checks its SHA-256) when first used, so a run whose
        facts come from the fact cache reads only the frames the report shows (a damaged frame found
        then is loaded again by the loader, said once on stderr)."""
        self.root = root or cache_root()
        self.limit = max_bytes() if limit is None else limit
        self.background = background
        self.lazy = lazy
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
            trace = (self._read_lazy(digest, path, say, ident, load) if self.lazy
                     else self._read(digest, path, say, ident.size))
            if trace is not None:
                self.hits += 1
                self._remember(ident, digest)
                mark_source(trace, digest)
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
            mark_source(trace, digest)
            self._write(digest, ident, trace, say)
        return trace

    def load_uncached(self, path: Path, load: Callable[[], Trace]) -> Trace:
        """``load()`` (a format the cache does not store: torch.profiler JSON), the trace marked with the
        SHA-256 of ``path``'s content (:func:`source_digest`) for the fact cache: from the identity
        index, else computed while ``load()`` runs."""
        try:
            ident = Identity.of(path)
        except OSError:
            return load()
        digest = self._digest_from_index(ident) if self._root_trusted() else None
        hasher = _Hasher(path) if digest is None else None
        trace = load()
        if hasher is not None:
            digest = hasher.result()
            try:
                unchanged = Identity.of(path) == ident
            except OSError:
                unchanged = False
            if digest is None or not unchanged:
                return trace
            if self._root_trusted() and self.limit > 0:
                self._remember(ident, digest)
        if digest is not None:
            mark_source(trace, digest)
        return trace

    def _root_trusted(self) -> bool:
        return root_trusted(self.root)

    # -- lookup -----------------------------------------------------------------------------------------
    def _index_file(self, ident: Identity) -> Path:
        return self.root / "ident" / ident.key()

    def _digest_from_index(self, ident: Identity) -> str | None:
        try:
            digest = _read_private(self._index_file(ident), INDEX_MAX_BYTES).decode("ascii", "replace").strip()
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
            d = _meta_of(meta)
            if d is not None and d.get("source_size") == size:
                return True
        return False

    def _metas(self) -> list[Path]:
        return _metas(self.root)

    @staticmethod
    def _safe_digest(path: Path) -> str | None:
        try:
            return file_digest(path)
        except OSError as err:
            _debug(f"cannot hash {path}: {err}")
            return None

    # -- read -------------------------------------------------------------------------------------------
    def _read(self, digest: str, path: Path, say: Progress, size: int | None = None) -> Trace | None:

        opened = open_entry(self.root, digest)
        if opened is None:
            return None
        entry, meta = opened
        if meta.get("signature") != code_signature():
            _debug(f"{entry.name}: written by another loader version; ignored")
            return None
        if size is not None and meta.get("source_size") != size:
            _debug(f"{entry.name}: written for a file of another size; ignored")
            return None
        say(f"reading {path.name} from the trace cache")
        files = read_entry_files(entry, meta, [f"{name}.arrow" for name in FRAME_COLUMNS],
                                 f"the entry for {path.name}", "reading the trace again")
        if files is None:
            return None
        try:
            frames = {}
            for name in FRAME_COLUMNS:
                frames[name] = frame_from_ipc(files[f"{name}.arrow"])
                if list(frames[name].columns) != meta["columns"][name]:
                    raise _Unstorable(f"{name}: columns differ from meta.json")
            info_d = dict(meta["info"])
            info_d["path"] = path  # the name the user gave this time
            info = TraceInfo(**info_d)
            extras = meta.get("extras") or {}
        except Exception as err:  # a damaged entry is a miss, never an error  # noqa: BLE001
            _debug(f"{entry.name}: unreadable ({type(err).__name__}: {err}); ignored")
            return None
        touch_entry(entry)
        return Trace(info=info, extras=extras, **frames)

    def _read_lazy(self, digest: str, path: Path, say: Progress, ident: Identity,
                   load: Callable[[], Trace]) -> Trace | None:
        """The trace of entry ``digest`` with its frames read when first used (:class:`_LazyTrace`): here
        only meta.json is read and checked (its checksum covers each frame file's SHA-256)."""
        opened = open_entry(self.root, digest)
        if opened is None:
            return None
        entry, meta = opened
        if meta.get("signature") != code_signature() or meta.get("source_size") != ident.size:
            _debug(f"{entry.name}: written by another loader version or for another file; ignored")
            return None
        digests, rows = meta.get("files"), meta.get("rows")
        names = [f"{name}.arrow" for name in FRAME_COLUMNS]
        if not (isinstance(digests, dict) and isinstance(rows, dict) and set(digests) == set(names)
                and all(isinstance(d, str) and re.fullmatch(r"[0-9a-f]{64}", d) for d in digests.values())
                and all(isinstance(rows.get(n), int) for n in FRAME_COLUMNS)):
            _debug(f"{entry.name}: no frame digests; ignored")
            return None
        if meta.get("checksum") != checksum_of_digests(digests, meta):
            _say_once("checksum", f"the entry for {path.name} does not match its checksum (it changed after it "
                                  "was written); reading the trace again")
            return None
        say(f"reading {path.name} from the trace cache")
        try:
            info_d = dict(meta["info"])
            info_d["path"] = path  # the name the user gave this time
            info = TraceInfo(**info_d)
            extras = meta.get("extras") or {}
        except Exception as err:  # noqa: BLE001 - a damaged entry is a miss
            _debug(f"{entry.name}: unreadable ({type(err).__name__}: {err}); ignored")
            return None
        touch_entry(entry)
        return _LazyTrace.of(info, extras, _Frames(entry, meta, path, ident, load))

    # -- write ------------------------------------------------------------------------------------------
    def _write(self, digest: str, ident: Identity, trace: Trace, say: Progress) -> None:
        if self.limit <= 0:
            return
        try:
            tables = {name: frame_to_table(getattr(trace, name)) for name in FRAME_COLUMNS}
            meta_text = json.dumps({
                "format": FORMAT, "signature": code_signature(), "digest": digest,
                "source": ident.path, "source_size": ident.size, "created": time.time(),
                "info": _info_to_json(trace.info),
                "extras": trace.extras,  # JSON only; a trace with other extras is not cached
                "columns": {name: list(getattr(trace, name).columns) for name in FRAME_COLUMNS},
                "rows": {name: len(getattr(trace, name)) for name in FRAME_COLUMNS},
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
        files = {f"{name}.arrow": ipc_bytes(table) for name, table in tables.items()}
        meta = json.loads(meta_text)
        meta["files"] = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
        if not write_entry(self.root, digest, files, meta, digests=meta["files"]):
            return
        self._remember(ident, digest)
        self.evict()

    # -- eviction ---------------------------------------------------------------------------------------
    def entries(self) -> list[tuple[float, int, Path]]:
        """(last use, bytes, directory) of every entry, oldest first."""
        return entries_in(self.root)

    def evict(self) -> None:
        """Remove least recently used entries (of this folder and the fact cache beside it, see
        :func:`evict_entries`) until the total fits the limit; drop stale leftovers (temporary
        directories of interrupted runs, index files of evicted entries)."""
        evict_entries(self.root, self.limit)
        try:
            index = self.root / "ident"
            if index.is_dir() and not index.is_symlink():
                live = {p.name for p in self.root.iterdir() if _ENTRY_RE.match(p.name)}
                live |= _traces_with_facts(self.root)  # a torch.profiler file has fact entries only
                for f in index.iterdir():
                    try:
                        if not _INDEX_RE.match(f.name):
                            continue
                        digest = _read_private(f, INDEX_MAX_BYTES).decode("ascii", "replace").strip()
                        if _ENTRY_RE.match(digest) and digest not in live:
                            f.unlink()
                    except (OSError, _Untrusted):
                        continue
        except OSError:
            pass


class _Frames:
    """The frames of a lazily read entry: each read from its Arrow file and checked against its SHA-256
    when first asked for; if one cannot be used, the loader runs once and gives the others."""

    def __init__(self, entry: Path, meta: dict[str, Any], path: Path, ident: Identity, load: Callable[[], Trace]):
        self.entry, self.meta, self.path, self.ident, self.load = entry, meta, path, ident, load
        self.rows: dict[str, int] = dict(meta["rows"])
        self.lock = threading.Lock()
        self.loaded: Trace | None = None  # the loader's trace, after a frame could not be read

    def frame(self, name: str) -> pd.DataFrame:
        """Frame ``name``, its constant integer columns stored once as ``load_trace`` stores them."""
        with self.lock:
            frame = self._read(name) if self.loaded is None else None
            if frame is None:
                if self.loaded is None:
                    self.loaded = self._load_again()
                frame = getattr(self.loaded, name)
            return shared_constants(frame) if name in SHARED_CONSTANT_FRAMES else frame

    def _read(self, name: str) -> pd.DataFrame | None:
        fname = f"{name}.arrow"
        try:
            data = _read_private(self.entry / fname)
        except (OSError, _Untrusted) as err:
            _debug(f"{self.entry.name}: {fname} unreadable ({err}); loading the trace again")
            return None
        if hashlib.sha256(data).hexdigest() != self.meta["files"][fname]:
            _say_once("checksum", f"the entry for {self.path.name} does not match its checksum (it changed after "
                                  "it was written); reading the trace again")
            return None
        try:
            frame = frame_from_ipc(data)
            if list(frame.columns) != self.meta["columns"][name] or len(frame) != self.rows[name]:
                raise _Unstorable(f"{name}: columns or rows differ from meta.json")
        except Exception as err:  # noqa: BLE001 - a damaged frame is loaded again, never an error
            _debug(f"{self.entry.name}: {fname} unreadable ({type(err).__name__}: {err}); loading the trace again")
            return None
        return frame

    def _load_again(self) -> Trace:
        """The loader's trace of the same file (the entry is removed: the next run writes it again)."""
        _remove_entry_dir(self.entry)
        try:
            unchanged = Identity.of(self.path) == self.ident
        except OSError:
            unchanged = False
        if not unchanged:
            from analyzer.errors import InputError

            raise InputError(self.path, "changed while it was being analyzed", hint="run the analysis again")
        return self.load()


class _LazyTrace(Trace):
    """A trace served from the cache whose frames are read when first used (:class:`_Frames`); otherwise
    a :class:`Trace` (pickled, copied or compared, it reads them all)."""

    _frames: _Frames

    @classmethod
    def of(cls, info: TraceInfo, extras: dict[str, object], frames: _Frames) -> _LazyTrace:
        trace = cls.__new__(cls)
        trace.__dict__.update(info=info, extras=extras, ncu=None, ncu_only=False, _frames=frames)
        return trace

    def __getattr__(self, name: str) -> Any:  # only for attributes not set yet: the frames not read
        frames = self.__dict__.get("_frames")
        if frames is None or name not in FRAME_COLUMNS:
            raise AttributeError(name)
        frame = frames.frame(name)
        self.__dict__.setdefault(name, frame)
        return self.__dict__[name]

    def __reduce__(self) -> tuple[Any, ...]:
        return _plain_trace, ({f.name: getattr(self, f.name) for f in dataclass_fields(Trace)},)


def _plain_trace(fields: dict[str, Any]) -> Trace:
    return Trace(**fields)


def frame_rows(trace: Trace, name: str) -> int:
    """``len(getattr(trace, name))``, without reading a frame a lazily read trace has not read yet."""
    frames = trace.__dict__.get("_frames") if isinstance(trace, _LazyTrace) else None
    if frames is not None and name not in trace.__dict__ and name in frames.rows:
        return frames.rows[name]
    return len(getattr(trace, name, ()))


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
