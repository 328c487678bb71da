"""What one process remembers between re-indexes: each memo is a bounded dict whose oldest entries go first, and
every memo is registered here, so ``forget_all`` puts the process back where a new one starts (the lru_caches of
pure functions need no forgetting). A memo is only a shortcut: a render from none of them gives the same bytes
(tests/unit/test_index_settle.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")

_FORGETTERS: list[Callable[[], None]] = []


class Memo(dict[K, V]):
    """A dict that keeps at most ``kept`` entries: ``keep`` adds one as the newest and lets the oldest go."""

    def __init__(self, kept: int) -> None:
        super().__init__()
        self.kept = kept
        _FORGETTERS.append(self.clear)

    def keep(self, key: K, value: V) -> V:
        """Remember ``value`` under ``key`` (as the newest entry) and return it."""
        self.pop(key, None)
        self[key] = value
        while len(self) > self.kept:
            del self[next(iter(self))]
        return value

    def forget_except(self, live: Iterable[K], slack: int) -> None:
        """Let go what is not in ``live`` (files gone from the folders indexed last) once the memo holds more than
        twice them plus ``slack``: a few stale entries are cheaper to keep than to look for on every run."""
        live = set(live)
        if len(self) > 2 * len(live) + slack:
            for key in self.keys() - live:
                del self[key]


def forget_all() -> None:
    """Forget every memo of the index, as a new process would start."""
    for forget in _FORGETTERS:
        forget()
