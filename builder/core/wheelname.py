"""The one parsed form of a wheel filename, for the build steps and the index alike.

Built on ``packaging.utils.parse_wheel_filename`` (name, version, build tag, tags), keeping the name and version as
written too, since the verify gate and the index check that they were written in normal form. PEP 825 (wheel
variants) adds an optional variant-label part after the platform tag; ``variant`` holds it, so that support is one
change to :meth:`WheelFilename.parse` rather than to every caller.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.tags import Tag
from packaging.utils import BuildTag, InvalidWheelFilename, NormalizedName, parse_wheel_filename
from packaging.version import Version

__all__ = ["InvalidWheelFilename", "WheelFilename"]


@dataclass(frozen=True, kw_only=True)
class WheelFilename:
    """``causal_conv1d-1.7.0+pt214cu130-cp311-cp311-manylinux_2_28_x86_64.whl``, parsed."""

    filename: str
    dist: str  # the name part as written: causal_conv1d
    version_text: str  # the version part as written: 1.7.0+pt214cu130
    name: NormalizedName  # causal-conv1d
    version: Version
    build: BuildTag
    tags: frozenset[Tag]
    python_tag: str  # the tag parts as written (compressed sets like cp310.cp311 stay whole)
    abi_tag: str
    platform_tag: str
    variant: str | None = None  # PEP 825's variant label; no filename carries one yet

    @classmethod
    def parse(cls, filename: str) -> WheelFilename:
        """Raise :class:`InvalidWheelFilename` (a ValueError) with packaging's reason for anything else."""
        name, version, build, tags = parse_wheel_filename(filename)
        dist, version_text, *_, python_tag, abi_tag, platform_tag = filename[: -len(".whl")].split("-")
        return cls(
            filename=filename, dist=dist, version_text=version_text, name=name, version=version, build=build,
            tags=tags, python_tag=python_tag, abi_tag=abi_tag, platform_tag=platform_tag,
        )

    @property
    def label(self) -> str | None:
        """The local version, which carries wheelwright's variant label: ``pt214cu130``."""
        return self.version.local

    @property
    def platforms(self) -> frozenset[str]:
        return frozenset(tag.platform for tag in self.tags)

    def __str__(self) -> str:
        return self.filename
