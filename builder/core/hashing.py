"""Content hashes of files, shared by the build steps and the index."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1 << 16


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
