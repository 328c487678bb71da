"""What a run finds of its inputs before it judges a file: the files of dist/ and variant/ with their identities
(one lstat each) and the ledger's digest while the ledger's files keep their identities. A run that finds nothing
moved (quiet.py) needs these and no more, so this module imports nothing the judging needs (test_cli_startup.py)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from builder.core.errors import FileSystemError, shown_name
from builder.core.hashing import FileIdentity, sorted_entries
from index_site.report import Rejection

if TYPE_CHECKING:
    from builder.core.ledger import LedgerEntry
    from index_site.state import IndexState

log = logging.getLogger(__name__)

Listing = tuple[dict[str, FileIdentity], list[Rejection]]  # a folder's files with identities, and what is refused

# name-version-python-abi-platform-label.whl, every part URL- and HTML-safe
TWIN_NAME = re.compile(
    # a build tag (a digit first, unlike any Python tag): a real build beside a day-0 wheel of its name (docs/abi.md)
    r"^(?P<dist>[a-z0-9_]+)-(?P<version>[0-9][A-Za-z0-9.!_]*)(?P<build>-[0-9][A-Za-z0-9_]*)?"
    r"-(?P<tag>[a-z0-9_.]+-[a-z0-9_.]+-[a-z0-9_.]+)"
    r"-(?P<label>pt[1-9][0-9]+(?:cu|rocm)[0-9]+(?:sm[0-9]+[af]?)?)\.whl$"  # sm90: a slim wheel (builder/steps/slim.py)
)


def listing(dist: Path) -> Listing:
    """Every name ending in .whl in ``dist``, in order, with its identity (one lstat each), and those that are not
    regular files, refused."""
    found: dict[str, FileIdentity] = {}
    rejected: list[Rejection] = []
    try:
        with sorted_entries(dist, ".whl") as (names, status_of):
            new = tuple.__new__  # FileIdentity without its per-call checks: one per file, every run
            for name in names:
                shown = name if name.isascii() else shown_name(name)
                if shown != name:  # no page, log line or SQLite row can hold it as it is
                    reason = f"{shown}: a name not in UTF-8, not a wheel's; skipped"
                    log.info("not indexed: %s", reason)
                    rejected.append(Rejection(filename=shown, reason=reason))
                    continue
                try:
                    status = status_of(name)
                except OSError:  # gone since it was listed
                    continue
                if (status.st_mode & 0o170000) == 0o100000:
                    identity = (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
                    found[name] = new(FileIdentity, identity)
                else:
                    reason = f"{name}: {_not_regular(status.st_mode)}, not a wheel file; skipped"
                    log.info("not indexed: %s", reason)
                    rejected.append(Rejection(filename=name, reason=reason))
    except FileNotFoundError:
        return found, rejected
    except OSError as error:
        raise FileSystemError(f"{dist}: cannot be listed ({error.strerror or error})") from None
    return found, rejected


def _not_regular(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link (never followed)"
    return "a folder" if stat.S_ISDIR(mode) else "a special file (FIFO, socket or device)"


def variant_listing(folder: Path) -> Listing:
    """The regular files of ``folder`` named like wheels, in order, with their identities; anything else named so,
    refused."""
    found: dict[str, FileIdentity] = {}
    refused: list[Rejection] = []
    try:
        with sorted_entries(folder, ".whl") as (names, status_of):
            new, twins = tuple.__new__, twin_names(names)  # as listing: one each per file, every run
            for name in names:
                shown = name if name.isascii() else shown_name(name)
                if shown != name:
                    refused.append(Rejection(filename=shown, reason=f"{shown}: a name not in UTF-8; not published"))
                    continue
                try:
                    status = status_of(name)
                except OSError:  # gone since it was listed
                    continue
                if (status.st_mode & 0o170000) != 0o100000:
                    refused.append(Rejection(filename=name, reason=f"{name}: not a regular file; not published"))
                elif name not in twins:
                    refused.append(Rejection(filename=name, reason=f"{name}: not a variant twin's name"))
                else:
                    identity = (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
                    found[name] = new(FileIdentity, identity)
    except (FileNotFoundError, NotADirectoryError):
        return {}, []
    return found, refused


def twin_names(names: list[str]) -> set[str]:
    """The names among ``names`` that are twins' (TWIN_NAME), found by one search of all of them joined (a line
    each), not a match of each: a tenth of a CPU-second at 100,000 twins. A name holding a newline matches nothing,
    as TWIN_NAME does not match it."""
    return set(_TWIN_LINES.findall("\n".join(names)))


_TWIN_LINES = re.compile(re.sub(r"\(\?P<\w+>", "(?:", TWIN_NAME.pattern), re.MULTILINE)  # no groups: whole names


def ledger_digest(failures: Collection[LedgerEntry], archs: Mapping[str, object]) -> str:
    """What of the ledger the site shows (its failures and the GPU archs of its wheels), as one digest."""
    shown = {found: repr(found) for found in set(archs.values())}  # a farm's builds share a few records
    archs_shown = sorted(map("\0".join, zip(archs, map(shown.__getitem__, archs.values()))))  # f"{name}\0{found!r}"
    parts = sorted(repr(entry) for entry in failures) + archs_shown
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def read_ledger(path: Path, state: IndexState) -> str:
    """ledger_digest of the ledger at ``path``: the one the state recorded while the ledger's files keep the
    identities they had when it was read (any commit moves the mtime and ctime of the database or of its
    write-ahead log, and no one can set a ctime back), else read again and recorded. Every run asks, the quiet run
    too: reading a ledger of 10,000 built jobs' archs and windows takes 0.09 CPU-s."""
    identity = ledger_identity(path)
    recorded = state.meta().get(LEDGER_KEY)
    try:
        held, digest = json.loads(recorded) if recorded else (None, None)
    except (ValueError, TypeError):
        held, digest = None, None
    if held == identity and isinstance(digest, str):
        return digest
    from builder.core.ledger import Ledger  # only where the ledger moved: its rows are read again

    with Ledger(path) as ledger:
        digest = ledger_digest(tuple(ledger.failures()), ledger.wheel_archs())
    state.write(meta=ledger_meta(identity, digest))
    return digest


LEDGER_KEY = "ledger"  # the state's meta: [the ledger's identity when read, its ledger_digest]


def ledger_meta(identity: list[list[int] | None], digest: str) -> dict[str, str]:
    """The state's record of the ledger as read at ``identity`` (read_ledger takes it apart)."""
    return {LEDGER_KEY: json.dumps([identity, digest])}


def ledger_identity(path: Path) -> list[list[int] | None]:
    """The identities of the ledger's database and write-ahead log files ([inode, size, mtime, ctime], None where
    absent): what a commit by any writer moves."""
    found: list[list[int] | None] = []
    for name in (path, path.with_name(f"{path.name}-wal")):
        try:
            status = os.lstat(name)
        except FileNotFoundError:
            found.append(None)
            continue
        found.append([status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns])
    return found
