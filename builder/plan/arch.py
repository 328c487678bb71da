"""GPU architectures as matrix.yaml, torch's arch-list variables and the fatbin reader spell them, parsed in one place:
CUDA ``9.0``, ``9.0a`` (arch-specific), ``10.0f`` (family), ``12.0+PTX`` (also embed PTX), ``compute_90`` (PTX alone,
nvcc's name for a virtual arch, for GPUs newer than any SASS to JIT from); ROCm ``gfx942``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

_CUDA = re.compile(r"(?P<major>\d+)\.(?P<minor>\d+)(?P<variant>[af]?)(?P<ptx>\+PTX)?")
_PTX_ONLY = re.compile(r"compute_(?P<major>\d+)(?P<minor>\d)(?P<variant>[af]?)")  # nvcc's minor is one digit
_ROCM = re.compile(r"gfx[0-9a-f]+")


@dataclass(frozen=True)
class Arch:
    kind: Literal["cuda", "rocm"]
    major: int = 0
    minor: int = 0
    variant: str = ""  # CUDA only, "", "a" or "f": arch-specific (a) or family-specific (f) code
    ptx: bool = False  # CUDA only: PTX embedded (beside the SASS unless ptx_only)
    ptx_only: bool = False  # CUDA only: ``compute_90``, PTX and no SASS
    gfx: str = ""  # ROCm only: the target name

    @classmethod
    def parse(cls, text: str) -> Arch:
        """``Arch.parse("12.0+PTX")``; a ValueError (the caller says what it expected) for anything else."""
        cuda = _CUDA.fullmatch(text)
        if cuda is not None:
            return cls("cuda", int(cuda["major"]), int(cuda["minor"]), cuda["variant"], bool(cuda["ptx"]))
        ptx_only = _PTX_ONLY.fullmatch(text)
        if ptx_only is not None:
            major, minor, variant = int(ptx_only["major"]), int(ptx_only["minor"]), ptx_only["variant"]
            return cls("cuda", major, minor, variant, ptx=True, ptx_only=True)
        if _ROCM.fullmatch(text):
            return cls("rocm", gfx=text)
        raise ValueError(
            f"{text!r} is not a GPU architecture like '9.0', '9.0a', '12.0+PTX', 'compute_90' (PTX only) or 'gfx942'"
        )

    @property
    def plain(self) -> bool:
        """A bare compute capability (``9.0``), what the torch facts' default lists hold."""
        return self.kind == "cuda" and not self.variant and not self.ptx

    @property
    def has_sass(self) -> bool:
        """Machine code is built for it: everything but ``compute_90`` (ROCm code objects count as SASS)."""
        return not self.ptx_only

    @property
    def sass(self) -> str:
        """The arch's dotted name, without +PTX: ``9.0a`` (also for ``compute_90a``); for ROCm the target."""
        return f"{self.major}.{self.minor}{self.variant}" if self.kind == "cuda" else self.gfx

    @property
    def number(self) -> str:
        """How nvcc's -gencode spells it: ``90a`` (sm_90a, compute_90a)."""
        return f"{self.major}{self.minor}{self.variant}"

    @property
    def sort_key(self) -> tuple[int, int, str]:
        """Numeric order (7.5 < 9.0 < 10.0 < 12.0), then the variant; ROCm targets by name."""
        return (self.major, self.minor, self.variant) if self.kind == "cuda" else (0, 0, self.gfx)

    def __str__(self) -> str:
        if self.ptx_only:
            return f"compute_{self.number}"
        return self.sass + ("+PTX" if self.ptx else "")
