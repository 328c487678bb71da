"""The wheelhouse of the release plan's shape lives with the landing page's benchmark, which builds it too:
scripts/bench/release.py (scripts never import a test module; tests may import scripts)."""

from scripts.bench.release import (
    BASE_URL,
    FAILURES,
    NOT_PLANNED,
    Injected,
    release_jobs,
    spec_for,
    write_release_wheelhouse,
)

__all__ = ["BASE_URL", "FAILURES", "NOT_PLANNED", "Injected", "release_jobs", "spec_for", "write_release_wheelhouse"]
