"""The index's twin maker: the variant twin of a verified wheel (variant.py), or the check of a slim wheel cut
from it (slim.py). Above both, so neither imports the other to tell the two apart."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from builder.core.archive import Archive
from builder.core.errors import WheelError
from builder.core.hashing import FileIdentity
from builder.steps.variant import DerivedTwin, derive_open, make_twin, quick_problems, twin_problems
from builder.steps.wheelzip import read_members

if TYPE_CHECKING:
    from builder.steps.slim import FatRead

_SLIM_LABEL = re.compile(r"cu[0-9]+sm[0-9]+[af]?$")  # a slim wheel's label (builder/steps/slim.py)


class VariantTwins:
    """The index's twin maker (index_site.twins.TwinMaker): it makes the twin of a wheel the index accepted and
    says where a twin is not its wheel's. The index decides which twins are published. One maker serves one index
    run: it keeps the last fat wheel it read for slim checks (one, while that file keeps its identity)."""

    def __init__(self) -> None:
        self._fat: tuple[tuple[object, ...], FatRead] | None = None

    def make(self, wheel: Path, folder: Path) -> Path:
        """The twin of ``wheel``, written into ``folder`` and checked; WheelError says why none can be made."""
        return make_twin(wheel, folder).path

    def derive(self, file: BinaryIO, archive: Archive, twin: BinaryIO | None = None) -> DerivedTwin | None:
        """The twin ``make`` writes for the wheel open as ``file`` (``archive``: opened for bounded reads, named
        by the wheel's filename): its name, its bytes' sha256 and size, the files of its .dist-info the index
        reads, and whether ``twin`` (a file that may hold it) holds exactly its bytes; None where the wheel can have
        none."""
        return derive_open(file, archive, twin)

    def problems(self, wheel: Path, twin: Path) -> list[str]:
        """Where ``twin`` differs from the twin of ``wheel`` (payload, metadata, variant.json, provenance): from
        the archives' raw streams where they show it (quick_problems), else from every member inflated."""
        if _SLIM_LABEL.search(twin.name.removesuffix(".whl").rsplit("-", 1)[-1]):
            from builder.steps.slim import cut_problems  # the slim step's ELF and fatbin readers: slim twins only

            try:
                read = self._fat_read(wheel)
            except WheelError as error:
                return [str(error)]
            return cut_problems(wheel, twin, read=read)
        try:
            quick = quick_problems(wheel, twin)
            if quick is not None:
                return quick
            return twin_problems(read_members(wheel), wheel.name, read_members(twin), twin.name)
        except WheelError as error:
            return [str(error)]

    def _fat_read(self, wheel: Path) -> FatRead:
        """``wheel`` read for slim checks: the last one read while it has the identity it had then, else read now."""
        from builder.steps.slim import FatRead

        status = os.stat(wheel)
        key = (str(wheel), status.st_dev, FileIdentity.of(status))
        if self._fat is None or self._fat[0] != key:
            self._fat = None  # the last one's members go before the next one's are read
            self._fat = (key, FatRead.of(wheel))
        return self._fat[1]
