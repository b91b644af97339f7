"""Error types with their exit codes (user errors 2, broken invariants 1, interruptions 130/143),
and the two checks every user-named file passes: ``read_user_file`` reads only a regular file,
of bounded size; ``owned_output`` writes only where nothing but a regular file stands."""

from __future__ import annotations

import os
import stat
from pathlib import Path

_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines splits on
MAX_READ_BYTES = 100_000_000  # 100 MB: the largest ledger or manifest of a 10,000-run study is a few MB


class UserError(Exception):
    """Bad input from the user (file, field, value, flag). The CLI prints one line, exits 2."""

    exit_code = 2


class InvariantError(Exception):
    """A run ended in a state that breaks an accounting or probability invariant (exit 1)."""

    exit_code = 1


class Interrupted(BaseException):
    """Ctrl+C or SIGTERM during a command; the message says what was kept. A BaseException, like
    the KeyboardInterrupt it replaces, so no ``except Exception`` (a study's failure record) takes it."""


def _kind(mode: int) -> str:
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "a special file")


def one_line(text: str) -> str:
    """``text`` with its line breaks written as escapes (a file name may hold one)."""
    return "".join(repr(c)[1:-1] if c in _LINE_BREAKS else c for c in text)


def too_large(where: str, size: int, limit: int) -> UserError:
    """The one refusal of a file or text over its size limit."""
    return UserError(f"{where}: {size:,} bytes, more than the {limit:,} allowed")


def read_user_file(path: str | Path, what: str = "", limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of the user-named file ``path``, or a one-line UserError naming it (after ``what``,
    e.g. ``--skip``): it must be a regular file (a symlink to one is fine; a FIFO or a device would
    block or never end) of at most ``limit`` bytes, a size checked before reading (a sparse 10 GB
    file is refused at once)."""
    where = one_line(f"{what} {path}".lstrip())
    try:  # O_NONBLOCK: opening a FIFO does not wait for a writer; fstat then refuses it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UserError(f"{where}: no such file") from None
    except OSError as exc:
        raise UserError(f"{where}: cannot read ({exc.strerror or exc})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UserError(f"{where}: is {_kind(info.st_mode)}, not a file")
    with open(fd, "rb") as handle:
        if info.st_size > limit:
            raise too_large(where, info.st_size, limit)
        try:
            data = handle.read(limit + 1)  # a file growing while it is read is still bounded
        except OSError as exc:
            raise UserError(f"{where}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise too_large(where, len(data), limit)
    return data


def owned_output(path: str | Path, what: str, stdout_ok: bool = False) -> Path:
    """``path`` as a file to (re)write, or a one-line UserError: what stands there now must be a
    regular file (replaced) or nothing. A symlink, a FIFO, a device or a folder is refused and left
    unchanged. (The folders above it may be symlinks: outputs kept on another disk.)"""
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot write ({exc.strerror or exc})") from None
    if stat.S_ISREG(mode):
        return path
    kind = "a symlink" if stat.S_ISLNK(mode) else _kind(mode)
    raise UserError(f"{what} {path}: is {kind}; give a file path{' (or - for stdout)' if stdout_ok else ''}")
