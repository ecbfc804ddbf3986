"""Atomic file output: a report (or a cache entry) appears whole or not at all.

Everything the analyzer writes goes through :func:`atomic_write` (or :func:`atomic_output` for writers
that stream): the bytes go to a temporary file in the target's own folder (``.NAME.XXXX.tmp``), are
flushed and fsync'ed, and only then renamed over the target (``os.replace``, atomic on POSIX). A crash,
Ctrl-C, a full disk (``ENOSPC``) or a quota error therefore never leaves a half-written report where an
old one was: the old file stays, the temporary file is removed, and the user gets one
:class:`~analyzer.errors.OutputError` line. The new file gets the permissions a plain ``open(path,
"w")`` would give it (the old file's mode when it replaces one, else ``0o666`` minus the umask), not
``mkstemp``'s ``0o600``.

Only regular files are written: a target that is a directory, a device (``/dev/null``, ``/dev/sda``), a
FIFO or a socket is refused with one :class:`~analyzer.errors.OutputError` line before anything is
written (renaming over it would replace the device node when run as root). A symbolic link is
**followed**: the file it points to is written (replaced atomically in its own folder) and the link
stays; a link to anything but a regular file (or a missing file) is refused like its target would be.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from analyzer.errors import OutputError

_HINTS = {
    errno.ENOSPC: "free some disk space or write elsewhere (--output)",
    errno.EDQUOT: "free some of your disk quota or write elsewhere (--output)",
    errno.EROFS: "the file system is read-only; write elsewhere (--output)",
    errno.EACCES: "no permission to write there; write elsewhere (--output)",
    errno.EPERM: "no permission to write there; write elsewhere (--output)",
}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def output_error(path: Path, exc: OSError, *, kept_old: bool) -> OutputError:
    """The one-line error for a failed write of ``path``."""
    reason = exc.strerror or type(exc).__name__
    note = "; the previous file is unchanged" if kept_old else ""
    return OutputError(path, f"cannot write the file ({reason}){note}",
                       hint=_HINTS.get(exc.errno or 0, "write elsewhere (--output)"))


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def output_target(path: str | Path) -> Path:
    """The regular file that writing ``path`` replaces: ``path`` itself, or the file a symbolic link at
    ``path`` leads to. Raises :class:`OutputError` when that is a directory, device, FIFO or socket."""
    target = Path(path)
    try:
        st = os.stat(target)  # follows links
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise output_error(target, exc, kept_old=True) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise OutputError(target, f"is {kind}, not a regular file; nothing was written",
                          hint="give a file name with -o/--output (or '-' for standard output)")
    if target.is_symlink():
        return Path(os.path.realpath(target))
    return target


def check_writable(path: str | Path) -> Path:
    """:func:`output_target` of ``path``, after a probe that a file can be created where it goes: a
    temporary file made and removed in the nearest folder that exists (the missing ones are made only
    when the report is written). For a check before a long analysis, so that it does not end in
    ``cannot write the file``. Raises :class:`OutputError`."""
    target = output_target(path)
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    existed = target.exists()
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise output_error(target, exc, kept_old=existed) from None
    os.close(fd)
    os.unlink(tmp_name)
    return target


def refuse_input(path: str | Path, inputs: Iterable[str | Path], *, option: str = "-o/--output") -> None:
    """Refuse to write ``path`` when it is one of ``inputs`` (the same file by device and inode, however
    spelt: another relative path, a symbolic or a hard link): the report would replace the trace, rule
    pack or baseline it is made from. Raises :class:`OutputError`; inputs that do not exist are skipped."""
    try:
        st = os.stat(path)
    except OSError:
        return  # nothing there yet: no input is replaced
    for one in inputs:
        try:
            same = os.path.samestat(st, os.stat(one))
        except OSError:
            continue
        if same:
            raise OutputError(path, f"is an input of this run ({one}); writing there would replace it, nothing "
                              "was written", hint=f"give another file name with {option}")


@contextlib.contextmanager
def atomic_output(path: str | Path, mode: str = "w", *, encoding: str | None = "utf-8",
                  make_parents: bool = True) -> Iterator[IO[Any]]:
    """A file object to write ``path`` through; the target is replaced only when the block ends
    without an exception. ``mode`` is ``"w"`` (text) or ``"wb"``."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', not {mode!r}")
    target = output_target(path)
    existed = target.exists()
    try:
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise output_error(target, exc, kept_old=existed) from None
    tmp = Path(tmp_name)
    try:
        try:
            os.fchmod(fd, (target.stat().st_mode & 0o7777) if existed else (0o666 & ~_umask()))
        except OSError:
            pass
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise output_error(target, exc, kept_old=existed) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: str | Path, data: str | bytes | Iterable[str], *, encoding: str = "utf-8") -> None:
    """Write ``data`` (text, bytes, or text in parts written one after the other) to ``path`` atomically
    (see the module docstring)."""
    with atomic_output(path, "wb" if isinstance(data, bytes) else "w", encoding=encoding) as fh:
        if isinstance(data, (str, bytes)):
            fh.write(data)
        else:
            for part in data:
                fh.write(part)
