"""Files written whole or not at all, and TOML data files read with one kind of error; shared by every layer."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from builder.core.errors import ConfigError
from builder.core.resources import Resource


@contextmanager
def atomic_file(path: Path, *, mode: int = 0o644) -> Iterator[IO[bytes]]:
    """A temporary file beside ``path``, renamed onto it when the block ends without an exception (else removed):
    a reader, or a run killed midway, sees the old file or the new one, never part of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, part = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out:
            yield out
        os.chmod(part, mode)  # mkstemp's 0600 would keep a shared cache or a served site from other users
        os.replace(part, path)
    finally:
        Path(part).unlink(missing_ok=True)


def write_atomic(path: Path, content: bytes) -> None:
    with atomic_file(path) as out:
        out.write(content)


def read_toml(source: Path | Resource, *, what: str, error: type[ConfigError] = ConfigError) -> dict[str, Any]:
    """A TOML data file (a path, or one of wheelwright's own resources) as a dict; ``error`` names the file when it
    cannot be read or parsed."""
    where = source.source if isinstance(source, Resource) else str(source)
    try:
        text = source.read_text() if isinstance(source, Resource) else source.read_text(encoding="utf-8")
    except OSError as failure:
        raise error(f"{where}: cannot read {what}: {failure.strerror}") from None
    return parse_toml(text, where, error=error)


def parse_toml(text: str, where: str, *, error: type[ConfigError] = ConfigError) -> dict[str, Any]:
    """TOML text (of the file ``where`` names) as a dict; ``error`` names the file when it does not parse."""
    if sys.version_info >= (3, 11):  # imported here: most commands, the index among them, read no TOML
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as failure:
        raise error(f"{where}: not valid TOML: {failure}") from None
