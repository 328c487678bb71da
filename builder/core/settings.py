"""wheelwright's settings: where each ``WHEELWRIGHT_*`` value comes from, read when asked, never at import."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$WHEELWRIGHT_CACHE``, else ``~/.cache/wheelwright``; an empty value is an unset one."""
    return Path(os.environ.get("WHEELWRIGHT_CACHE") or Path.home() / ".cache" / "wheelwright")
