"""The one family of user-facing errors. The CLI catches these, prints one ERROR line plus a TIP, and exits
with the error's code; anything else is a bug and shows a traceback only with --debug."""

from __future__ import annotations

import difflib
import errno
import os
from collections.abc import Iterable


class WheelwrightError(Exception):
    """An error the user can act on."""

    exit_code = 1
    tip: str | None = None

    def __init__(self, message: str, *, tip: str | None = None) -> None:
        super().__init__(message)
        if tip is not None:
            self.tip = tip


class ConfigError(WheelwrightError):
    """matrix.yaml (or a data file) is invalid."""

    exit_code = 2


class FactsError(ConfigError):
    """builder/data/torch.toml breaks one of its invariants."""


class PlanError(WheelwrightError):
    """The matrix asks for something that cannot be planned (an impossible combination)."""

    exit_code = 3


class ToolchainError(WheelwrightError):
    """A compiler, toolkit or interpreter a job needs is missing or wrong."""

    exit_code = 4


class NotBuildableHere(ToolchainError):
    """The job's toolkit, interpreter or torch cannot be had on this machine; reported, never attempted."""


class FetchError(WheelwrightError):
    """An sdist could not be fetched or failed its hash check."""

    exit_code = 5


class BuildFailed(WheelwrightError):
    """One or more jobs failed; the summary says which."""

    exit_code = 6


class PublishError(WheelwrightError):
    """Publishing would overwrite or lose something, or the object store refused."""

    exit_code = 7


class WheelError(WheelwrightError):
    """A built wheel could not be read, repaired or verified (a malformed ELF or fatbin, an unrepairable ABI)."""

    exit_code = 10


class RecipeError(WheelwrightError):
    """An upstream sdist no longer has the shape its recipe expects (the recipe must be updated, not skipped)."""

    exit_code = 8


class LedgerError(WheelwrightError):
    """ledger.sqlite cannot be used: corrupt, not a database, from a newer wheelwright, or locked too long."""

    exit_code = 9


class ShardError(LedgerError):
    """A wheelhouse given to ``merge`` (a CI artifact) has a ledger row that does not describe its own files."""


class FileSystemError(WheelwrightError):
    """The operating system refused a file operation (no space, no permission, read-only, not a folder)."""

    exit_code = 11

    @classmethod
    def from_os(cls, error: OSError) -> FileSystemError:
        """The OSError as one sentence naming the path, with a tip for the usual causes."""
        where = " -> ".join(str(name) for name in (error.filename, error.filename2) if name is not None)
        reason = error.strerror or str(error)
        return cls(f"{where}: {reason}" if where else reason, tip=_OS_TIPS.get(error.errno or 0))


_OS_TIPS = {
    errno.ENOSPC: "free space on that filesystem, or point --output/--site somewhere else, then run again",
    errno.EDQUOT: "free space on that filesystem, or point --output/--site somewhere else, then run again",
    errno.EACCES: "pick a folder you may write to (--output/--site), or fix its permissions",
    errno.EPERM: "pick a folder you may write to (--output/--site), or fix its permissions",
    errno.EROFS: "that filesystem is read-only; pick another --output/--site",
    errno.ENOTDIR: "a path that must be a folder names a file; pass a folder",
    errno.EEXIST: "a path that must be a folder names a file; pass a folder",
    errno.EISDIR: "a path that must be a file names a folder",
}


def did_you_mean(word: object, choices: Iterable[object]) -> str:
    """`` (did you mean 'env'?)`` when one of ``choices`` is close to ``word``, else ``""``."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def shown_name(name: str) -> str:
    """A file name or path as a message, a page or an SQLite row can hold it: os.scandir and sys.argv hand over a
    byte that is not UTF-8 as a lone surrogate, which none of them takes; it is shown as ``\\xNN``. Any name in
    UTF-8 comes back as it is."""
    return name if name.isascii() else os.fsencode(name).decode("utf-8", "backslashreplace")


def one_line(text: str) -> str:
    """``text`` as one line of a log or a terminal: each character that is not printable (a line end that would
    start a forged ERROR line, the ESC of a terminal's escape sequence, a lone surrogate) as its Python escape."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
