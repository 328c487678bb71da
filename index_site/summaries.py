"""What a run's passes over every release work out of each release (its page cells' digests, its parts of the
blocks' and of the variant channel's digests, the twin names its wheels expect, whether its twin rows agree with its
wheel rows), kept in the index state for the next run beside the rows they were worked out from. Each part is
kept with the stamps of those rows (state.py gives a release's rows a new, random stamp with every write of them)
and the code digest, and used only while both hold: a run that adds one wheel works out the parts of its one
release, and takes the others' as the last run left them, not one fingerprint per wheel of dist/.

Only a shortcut, as the rest of the state: a part whose key does not hold, or that cannot be read, is worked out
again; nothing is written for a release none of whose parts was."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from index_site.state import IndexState

_Parts = dict[str, tuple[str, Any]]  # part: (key, what was worked out)
T = TypeVar("T")


class Summaries:
    """The parts of one run: those the state holds, and those this run used or worked out, by release."""

    def __init__(self, state: IndexState, code: str) -> None:
        self._state = state
        self._code = code
        self._stored: dict[str, _Parts] | None = None
        self._used: dict[str, _Parts] = {}
        self._fresh: set[str] = set()

    def releases(self, table: str) -> Mapping[str, Mapping[str, Any]]:
        """The rows of ``table`` ("wheels" or "twins") by release, as the state holds them."""
        return self._state.wheel_releases() if table == "wheels" else self._state.twin_releases()

    def key(self, table: str, release: str, *more: str) -> str | None:
        """The key of a part worked out of ``release``'s rows of ``table`` ("wheels" or "twins") as they are now,
        and ``more``; None where those rows have no stamp (damaged or misfiled: such a part is worked out and not
        kept). The stamp is the rows' at the time of asking: part() works the part out then too, so a part is kept
        with the stamp of the rows it came from, whatever this run writes before or after."""
        stamp = self._state.stamps(table).get(release)
        return None if stamp is None else "\0".join((self._code, stamp, *more))

    def key_of_both(self, release: str) -> str | None:
        """The key of a part worked out of both ``release``'s wheel rows and its twin rows (a twin's row sits with
        its wheel's): None where either has no stamp."""
        twins = self._state.stamps("twins").get(release)
        return None if twins is None else self.key("wheels", release, twins)

    def part(
        self, release: str, name: str, key: str | None, work: Callable[[], T], kind: Callable[[object], bool]
    ) -> T:
        """The part ``name`` of ``release``: as kept, where it was kept with ``key`` and is of its ``kind``, else
        ``work()``."""
        if key is None:
            return work()
        kept = self._decoded().get(release, {}).get(name)
        if kept is not None and kept[0] == key and kind(kept[1]):
            self._used.setdefault(release, {})[name] = kept
            value: T = kept[1]
            return value
        value = work()
        self._used.setdefault(release, {})[name] = (key, value)
        self._fresh.add(release)
        return value

    def by_release(
        self, table: str, name: str, work: Callable[[Mapping[str, Any]], T], kind: Callable[[object], bool]
    ) -> dict[str, T]:
        """The part ``name`` of every release with rows in ``table``: as kept while its rows' stamp holds, else
        ``work`` of its rows (part())."""
        return {
            release: self.part(release, name, self.key(table, release), functools.partial(work, rows), kind)
            for release, rows in self.releases(table).items()
        }

    def save(self) -> None:
        """Keep the parts this run used of each release it worked a part out for (a release's parts not used this
        run are of labels it no longer has, or of passes this run did not make: they go), and drop the parts of
        releases that hold no rows now. Which those are is worked out here from the rows held, not by SQLite: its
        search of both tables for each release read every summary's pages (0.07 CPU-s at 100,000 wheels)."""
        if not self._fresh:
            return
        import msgspec

        encode = msgspec.msgpack.Encoder().encode
        gone = sorted(self._decoded().keys() - self._state.releases_with_rows())
        self._state.write_summaries({release: encode(self._used[release]) for release in sorted(self._fresh)}, gone)
        self._fresh.clear()

    def _decoded(self) -> dict[str, _Parts]:
        if self._stored is None:
            self._stored = _decode(self._state.summaries())
        return self._stored


def _decode(stored: dict[str, bytes]) -> dict[str, _Parts]:
    """Each release's parts; a value that is not what save() writes counts as none."""
    import msgspec

    decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(dict[str, tuple[str, Any]])
    found = {}
    for release, value in stored.items():
        try:
            found[release] = decoder.decode(value)
        except (msgspec.MsgspecError, TypeError):
            continue
    return found


def text_map(value: object) -> bool:
    """Whether ``value`` is a {text: text} map: the kind of the parts the index keeps."""
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
