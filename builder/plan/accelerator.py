"""What a variant label and a Python of the plan are made of: the accelerator (cu130, rocm6.1), torch minors and
CPython versions, with their order, and the label itself (format_label, parse_label). Plain dataclasses, the standard
library and packaging's Version: the index parses every wheel's label with these, and must not wait for facts.py's
pydantic models to import (a tenth of a second), nor for job.py's plan models (5 ms)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from packaging.version import Version

_ACCEL_RE = re.compile(r"cu(?P<cu>[1-9]\d{1,2})|rocm(?P<rocm>[1-9]\d*(?:\.\d+){1,2})")


def torch_minor(torch: str) -> str:
    """The minor release a torch version belongs to (the unit of ABI and labels): "2.14" for 2.14.1+cu130."""
    return ".".join(torch.split("+")[0].split(".")[:2])


def version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


FREE_THREADED = "t"  # PEP 703's ABI suffix: Python "3.13t", tags cp313-cp313t


def is_free_threaded(python: str) -> bool:
    return python.endswith(FREE_THREADED)


def base_python(python: str) -> str:
    """The CPython minor a Python of the plan runs: "3.13" for the free-threaded "3.13t"."""
    return python.removesuffix(FREE_THREADED)


def python_key(python: str) -> tuple[int, ...]:
    """Sorts "3.13t" right after "3.13" and before "3.14"."""
    return (*version_key(base_python(python)), int(is_free_threaded(python)))


@dataclass(frozen=True, kw_only=True, order=True)
class Accelerator:
    """A torch build variant's accelerator: ``cu130`` (CUDA 13.0) or ``rocm6.1`` (ROCm 6.1)."""

    kind: Literal["cuda", "rocm"]
    version: str

    @classmethod
    def parse(cls, name: str) -> Accelerator:
        match = _ACCEL_RE.fullmatch(name)
        if match is None:
            msg = f"{name!r} is not an accelerator; write CUDA as 'cu130' (13.0) and ROCm as 'rocm6.1'"
            raise ValueError(msg)
        if match["cu"]:
            digits = match["cu"]
            return cls(kind="cuda", version=f"{int(digits[:-1])}.{digits[-1]}")
        return cls(kind="rocm", version=match["rocm"])

    @classmethod
    def cuda(cls, version: str) -> Accelerator:
        return cls(kind="cuda", version=version)

    @classmethod
    def rocm(cls, version: str) -> Accelerator:
        return cls(kind="rocm", version=version)

    @property
    def name(self) -> str:
        """How torch's own indexes spell it: cu130, rocm6.1."""
        if self.kind == "cuda":
            return "cu" + self.version.replace(".", "")
        return "rocm" + self.version

    @property
    def tag(self) -> str:
        """How the variant label spells it: cu130, rocm61 (digits only, so the label stays one PEP 440 segment)."""
        return self.name.replace(".", "")

    def __str__(self) -> str:
        return self.name


# No leading zeros anywhere, so that every label parses back to exactly one (torch minor, accelerator).
_LABEL_RE = re.compile(r"pt(?P<major>[1-9])(?P<minor>0|[1-9]\d*)(?P<accel>cu[1-9]\d{1,2}|rocm[1-9]\d{1,2})")


def format_label(torch: str, accelerator: Accelerator) -> str:
    """``pt{major}{minor}{accelerator}``: torch 2.14.x + CUDA 13.0 -> ``pt214cu130``; 2.4 + ROCm 6.1 -> ``pt24rocm61``.

    Torch's major version is one digit (1 or 2), which is what keeps ``pt214`` unambiguous.
    """
    major, minor = Version(torch).release[:2]
    if major > 9:
        raise ValueError(f"torch {torch}: the label format assumes a one-digit major version")
    return f"pt{major}{minor}{accelerator.tag}"


def parse_label(label: str) -> tuple[str, Accelerator]:
    """The inverse of :func:`format_label`: ``pt214cu130`` -> ("2.14", cu130)."""
    match = _LABEL_RE.fullmatch(label)
    if match is None:
        raise ValueError(f"{label!r} is not a variant label like 'pt214cu130' or 'pt24rocm61'")
    accel = match["accel"]
    if accel.startswith("cu"):
        accelerator = Accelerator.parse(accel)
    else:
        accelerator = Accelerator.rocm(".".join(accel[len("rocm") :]))
    return f"{match['major']}.{match['minor']}", accelerator
