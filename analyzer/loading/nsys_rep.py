""".nsys-rep / .qdrep reports: export to SQLite once with the installed ``nsys``, cache, reuse.

The report format is private to NVIDIA; only ``nsys export`` reads it. We look for ``nsys`` on the PATH,
in ``$NSYS`` (a path to the binary), then in NVIDIA's and distributions' install locations, and export
into a cache directory keyed by the report's absolute path, size and mtime, so a second analysis of the
same report costs nothing and a changed report is exported again. Without ``nsys`` the user gets the
exact command to run elsewhere.
"""
from __future__ import annotations

import glob
import hashlib
import lzma
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from analyzer.boundedio import ENV as BOUNDED_ENV
from analyzer.boundedio import BoundedReadError, copy_decompressed, decompressed_limit
from analyzer.errors import InputError, UnsupportedFormatError

Progress = Callable[[str], None]

# where NVIDIA's installers, CUDA toolkits, Nsight Compute bundles and Debian put nsys
NSYS_GLOBS = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
    "/usr/local/cuda*/bin/nsys",
    "/usr/local/cuda*/nsight-systems-*/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/usr/lib/nsight-systems/bin/nsys",
    "/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys",
)


def default_cache_dir() -> Path:
    """The analyzer's cache directory (:func:`analyzer.loading.cache.cache_home`: ``ANALYZER_CACHE_DIR``,
    else the XDG cache)."""
    from analyzer.loading.cache import cache_home

    return cache_home()


def _usable(target: Path) -> bool:
    """A derived file (export, decompressed copy) to serve: a regular file of this user's, not a link,
    that no one else can write to (anyone who could might have put another trace there)."""
    import stat

    from analyzer.loading.cache import trusted

    try:
        st = os.lstat(target)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size > 0 and trusted(st)


def find_nsys() -> str | None:
    """Path of an ``nsys`` binary, or None. Prefers ``$NSYS``, then the PATH, then the newest install."""
    env = os.environ.get("NSYS")
    if env and os.access(env, os.X_OK):
        return env
    on_path = shutil.which("nsys")
    if on_path:
        return on_path
    found = [p for pattern in NSYS_GLOBS for p in glob.glob(pattern) if os.access(p, os.X_OK)]
    if not found:
        return None
    return max(found, key=_version_key)


def _version_key(path: str) -> tuple[int, ...]:
    nums = re.findall(r"(\d{4})\.(\d+)(?:\.(\d+))?", path)
    if not nums:
        return (0,)
    return tuple(int(x or 0) for x in nums[-1])


def export_command(report: Path, out: Path | str = "OUT.sqlite") -> str:
    return f"nsys export --type sqlite -o {out} {report}"


def cache_key(path: Path) -> str:
    """Key of a derived file: absolute path, device, inode, size, mtime and ctime, hashed (a changed
    input gets a new key). The inode and ctime matter: a file replaced by another of the same size whose
    mtime was carried over (``cp -p``, ``rsync -t``, ``tar x``) had the old key, and its stale
    decompressed copy was analyzed; no one can set a ctime back."""
    st = path.stat()
    raw = f"{path.resolve()}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}".encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def cached_sqlite_for_report(report: Path, *, cache_dir: Path | None = None,
                             progress: Progress | None = None) -> Path:
    """The SQLite export of ``report``, exporting it with ``nsys`` on first use."""
    from analyzer.loading.cache import mark_used

    say = progress or (lambda _m: None)
    cache = (cache_dir or default_cache_dir()) / "nsys-export"
    target = cache / f"{report.stem}-{cache_key(report)}.sqlite"
    if _usable(target) and _usable_folder(cache):
        say(f"using cached SQLite export {target}")
        mark_used(target)
        return target
    nsys = find_nsys()
    if nsys is None:
        raise UnsupportedFormatError(
            report,
            "reading .nsys-rep/.qdrep reports needs Nsight Systems (nsys), which is not installed here",
            hint=f"export it where nsys is installed and pass the .sqlite file: "
                 f"{export_command(report)}",
        )
    cache = writable_cache(cache)
    target = cache / target.name
    fd, tmp_name = tempfile.mkstemp(prefix=".export-", suffix=".sqlite", dir=cache)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.unlink()  # nsys refuses to overwrite without --force-overwrite on some versions
    say(f"exporting {report.name} to SQLite with {nsys} (once; cached in {cache})")
    cmd = [nsys, "export", "--type", "sqlite", "--output", str(tmp), str(report)]
    bounds = ExportBounds.for_report(report)
    try:
        # NVTX payloads as JSON (NCCL's communicator, rank, message sizes); an nsys without the
        # option gets the plain export
        code, err = run_export([*cmd[:4], "--include-json=true", *cmd[4:]], tmp, bounds)
        if code != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
            tmp.unlink(missing_ok=True)
            code, err = run_export(cmd, tmp, bounds)
    except ExportOverrun as exc:
        raise InputError(report, f"{nsys} export {exc}", hint=f"{exc.hint}, or run it yourself and pass the "
                         f".sqlite file: {export_command(report)}") from None
    except OSError as exc:
        raise UnsupportedFormatError(report, f"could not run {nsys} ({exc.strerror})",
                                     hint=f"run it yourself: {export_command(report)}") from exc
    if code != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
        tmp.unlink(missing_ok=True)
        detail = _last_line(err) or f"exit code {code}"
        raise _export_failure(report, nsys, detail, installed_version(nsys))
    os.chmod(tmp, 0o600)  # private like the rest of the cache (served only while no one else can write it)
    return _evict_beside(publish(tmp, target))


#: the export's default time limit: :data:`EXPORT_BASE_SECONDS` plus :data:`EXPORT_SECONDS_PER_MB` per MB of
#: report (a 100 MB report: 13 min; 1 GB: 43 min). An analysis under ``--timeout``/``ANALYZER_TIMEOUT`` uses
#: that limit instead, longer or shorter.
EXPORT_BASE_SECONDS = 600.0
EXPORT_SECONDS_PER_MB = 2.0
_POLL_SECONDS = 0.05
_OUTPUT_TAIL = 64 * 1024  # bytes of the exporter's messages kept (for the failure line)


class ExportOverrun(Exception):
    """The export ran past its time limit or wrote more than its size limit; it was ended and its
    partial output removed. ``str()`` says which, ``hint`` what to do."""

    def __init__(self, what: str, hint: str) -> None:
        super().__init__(what)
        self.hint = hint


class ExportBounds:
    """Time (s) and size (bytes) limits of one export."""

    def __init__(self, seconds: float, max_bytes: int, *, user_timeout: bool) -> None:
        self.seconds = seconds
        self.max_bytes = max_bytes
        self.user_timeout = user_timeout
        self.spent = 0.0  # seconds the export's attempts took so far (they share the limit)

    @classmethod
    def for_report(cls, report: Path) -> ExportBounds:
        """The limits for ``report``: the analysis's own ``--timeout`` when one is set, else the default
        scaled by the report's size; the exported SQLite gets the cap of any decompressed input
        (:func:`analyzer.boundedio.decompressed_limit` of the report's size: ``ANALYZER_MAX_INPUT`` or 32x,
        at least 64 MB, at most 8 GB)."""
        from analyzer.watchdog import active_limit

        size = report.stat().st_size
        try:
            max_bytes = decompressed_limit(size)
        except BoundedReadError as exc:
            raise InputError(report, exc.reason, hint=exc.hint) from None
        user = active_limit()
        if user is not None:
            return cls(user, max_bytes, user_timeout=True)
        return cls(EXPORT_BASE_SECONDS + EXPORT_SECONDS_PER_MB * size / 1e6, max_bytes, user_timeout=False)


def _written(out: Path) -> int:
    """Bytes the exporter has written so far: ``out`` and SQLite's files beside it."""
    total = 0
    for path in (out, *(out.with_name(out.name + s) for s in ("-journal", "-wal", "-shm"))):
        try:
            total += os.stat(path).st_size
        except OSError:
            pass
    return total


def _remove_output(out: Path) -> None:
    for path in (out, *(out.with_name(out.name + s) for s in ("-journal", "-wal", "-shm"))):
        path.unlink(missing_ok=True)


def run_export(cmd: list[str], out: Path, bounds: ExportBounds) -> tuple[int, str]:
    """Run the exporter ``cmd`` (which writes ``out``) within ``bounds``: its exit code and the tail of
    its messages. Past the time limit, or once ``out`` grows past the size limit, the exporter (its whole
    process group) is killed, ``out`` removed and :class:`ExportOverrun` raised; an interrupt (Ctrl-C, the
    analysis watchdog) does the same cleanup. Its messages are read as they come, only the last
    :data:`_OUTPUT_TAIL` bytes kept."""
    import collections
    import signal
    import threading
    import time

    tail: collections.deque[bytes] = collections.deque()
    kept = [0]

    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)

    def drain() -> None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        for chunk in iter(lambda: os.read(fd, 8192), b""):
            tail.append(chunk)
            kept[0] += len(chunk)
            while kept[0] - len(tail[0]) >= _OUTPUT_TAIL:
                kept[0] -= len(tail.popleft())

    reader = threading.Thread(target=drain, name="nsys-export-output", daemon=True)
    reader.start()
    started = time.monotonic() - bounds.spent
    done = False
    try:
        while proc.poll() is None:
            elapsed = time.monotonic() - started
            if elapsed > bounds.seconds:
                hint = ("raise --timeout (ANALYZER_TIMEOUT)" if bounds.user_timeout else
                        "allow it longer with --timeout SECONDS (ANALYZER_TIMEOUT)")
                limit = "the --timeout" if bounds.user_timeout else "the default limit for a report this size"
                raise ExportOverrun(f"ran past {bounds.seconds:g} s ({limit}); it was stopped", hint)
            if _written(out) > bounds.max_bytes:
                raise ExportOverrun(
                    f"wrote more than {bounds.max_bytes / 1e6:,.0f} MB of SQLite; it was stopped (a damaged "
                    "report, or one larger than the limit)",
                    f"if the report really is that large, set {BOUNDED_ENV} higher "
                    f"(e.g. {BOUNDED_ENV}={-(-2 * bounds.max_bytes // 10**9)}GB)")
            time.sleep(_POLL_SECONDS)
        if _written(out) > bounds.max_bytes:  # grew past the limit between two looks
            raise ExportOverrun(
                f"wrote more than {bounds.max_bytes / 1e6:,.0f} MB of SQLite (a damaged report, or one "
                "larger than the limit)",
                f"if the report really is that large, set {BOUNDED_ENV} higher "
                f"(e.g. {BOUNDED_ENV}={-(-2 * bounds.max_bytes // 10**9)}GB)")
        done = True
    finally:
        bounds.spent = time.monotonic() - started
        if not done:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
            _remove_output(out)
        reader.join(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
    return proc.returncode, b"".join(tail).decode("utf-8", "replace")


# "Version number is invalid: 2024@6@2@225-..." (nsys 2022-2023 reading a newer report)
_WRITER_VERSION = re.compile(r"\b(20\d\d)@(\d+)(?:@(\d+))?(?:@(\d+))?")
_VERSION_WORDS = re.compile(r"(?i)version (number )?(is )?(invalid|not supported)|unsupported version|newer version")


def installed_version(nsys: str) -> str | None:
    """``2022.4.2.1`` from ``nsys --version`` (None when it does not answer in 20 s)."""
    try:
        proc = subprocess.run([nsys, "--version"], capture_output=True, text=True, check=False, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(20\d\d\.\d+(?:\.\d+)*)", proc.stdout or "")
    return m.group(1) if m else None


def _export_failure(report: Path, nsys: str, detail: str, installed: str | None) -> UnsupportedFormatError:
    """One readable line for a failed export: a report written by a newer nsys than the installed one
    says both versions ("written by nsys 2024.6; the installed 2022.4 cannot read it: ...")."""
    have = ".".join((installed or "").split(".")[:2]) or None
    m = _WRITER_VERSION.search(detail)
    if m:
        wrote = ".".join(g for g in m.groups() if g is not None)
        short = f"{m.group(1)}.{m.group(2)}"
        what = f"written by nsys {wrote}; the installed {have or nsys} cannot read it"
        return UnsupportedFormatError(report, f"{what}: {detail}",
                                      hint=f"export it with nsys {short} or newer: {export_command(report)}")
    if _VERSION_WORDS.search(detail):
        what = f"written by a newer nsys than the installed {have or nsys}, which cannot read it"
        return UnsupportedFormatError(report, f"{what}: {detail}",
                                      hint=f"export it with the nsys that recorded it: {export_command(report)}")
    return UnsupportedFormatError(report, f"{nsys} export failed ({detail})",
                                  hint=f"a newer nsys may be needed for this report; run: {export_command(report)}")


def cached_decompressed(path: Path, *, cache_dir: Path | None = None, progress: Progress | None = None) -> Path:
    """``trace.sqlite.xz`` -> a decompressed copy in the cache (keyed like exports)."""
    from analyzer.loading.cache import mark_used

    say = progress or (lambda _m: None)
    cache = (cache_dir or default_cache_dir()) / "decompressed"
    stem = path.name.removesuffix(".xz")
    target = cache / f"{cache_key(path)}-{stem}"
    if _usable(target) and _usable_folder(cache):
        mark_used(target)
        return target
    cache = writable_cache(cache)
    target = cache / target.name
    if _usable(target):
        mark_used(target)
        return target
    say(f"decompressing {path.name} (once; cached in {cache})")
    fd, tmp_name = tempfile.mkstemp(prefix=".xz-", dir=cache)
    try:
        with os.fdopen(fd, "wb") as out, lzma.open(path, "rb") as src:
            copy_decompressed(src, out, decompressed_limit(path.stat().st_size))
    except BoundedReadError as exc:
        Path(tmp_name).unlink(missing_ok=True)
        raise InputError(path, f"the .xz file {exc.reason}", hint=exc.hint) from None
    except (lzma.LZMAError, EOFError) as exc:
        Path(tmp_name).unlink(missing_ok=True)
        raise InputError(path, f"cannot decompress the .xz file ({exc})", hint="download it again") from exc
    except OSError as exc:  # full disk while decompressing: nothing half-written stays in the cache
        Path(tmp_name).unlink(missing_ok=True)
        raise InputError(path, f"cannot decompress the .xz file into {cache} ({exc.strerror or exc})",
                         hint="free disk space there, set ANALYZER_CACHE_DIR elsewhere, or pass the "
                              "decompressed .sqlite") from exc
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return _evict_beside(publish(Path(tmp_name), target))


def _evict_beside(target: Path) -> Path:
    """``target``, a derived file just written; the least recently used cache contents evicted around
    it so that the cache folder (its entries and derived files together) stays within
    ``ANALYZER_CACHE_MAX`` (before, every decompressed copy and export stayed forever: 16 GB of copies
    of the same few traces on a development machine whose limit was 5 GB)."""
    from analyzer.loading.cache import DERIVED_FOLDERS, evict_entries, max_bytes

    if target.parent.name in DERIVED_FOLDERS:  # not the private fallback folder, removed at exit anyway
        evict_entries(target.parent, max_bytes(), keep=target)
    return target


def publish(tmp: Path, target: Path) -> Path:
    """Put the finished derived file ``tmp`` in place as ``target`` and return ``target``, without ever
    replacing a usable ``target`` another analysis put there meanwhile: that one may be open and being
    read (its reader checks that the file it read did not change, by path, and would refuse it), and it
    holds the same bytes (same input content, same derivation); ours is then dropped. A hard link creates
    ``target`` only if it does not exist (atomic); where links are not supported, a rename replaces it."""
    try:
        os.link(tmp, target)
    except FileExistsError:
        if not _usable(target):  # not ours to serve (owner, mode, a link): replaced by a good one
            os.replace(tmp, target)
            return target
    except OSError:  # no hard links on this file system
        os.replace(tmp, target)
        return target
    tmp.unlink(missing_ok=True)
    return target


_FALLBACK_CACHE: Path | None = None


def _usable_folder(folder: Path) -> bool:
    from analyzer.loading.cache import trusted

    try:
        return trusted(os.stat(folder))
    except OSError:
        return False


def writable_cache(cache: Path) -> Path:
    """``cache`` (created), or a private temporary folder removed at exit when it cannot be written
    (a read-only home directory, a full disk)."""
    global _FALLBACK_CACHE
    from analyzer.loading.cache import make_private_dir

    try:
        make_private_dir(cache)
        if os.access(cache, os.W_OK | os.X_OK) and _usable_folder(cache):
            return cache
    except OSError:
        pass
    if _FALLBACK_CACHE is None:
        import atexit

        _FALLBACK_CACHE = Path(tempfile.mkdtemp(prefix="gpu-trace-analyzer-"))
        atexit.register(shutil.rmtree, _FALLBACK_CACHE, True)
    return _FALLBACK_CACHE


def _last_line(text: str | None) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""
