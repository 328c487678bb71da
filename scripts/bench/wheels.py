"""The one factory of hand-made wheels, for the tests and the benchmarks (scripts never import a test module; tests
may import scripts). Labelled index wheels (``WheelSpec``): METADATA, WHEEL and a RECORD with real hashes, a module
that names the exact file it came from (so a test can ask an installed package which wheel it was), deterministic
bytes unless ``salt`` asks for different ones. Wheels of given files (``wheel_of_files``, ``job_wheel``): what the
repair, verify and provenance tests put inside."""

from __future__ import annotations

import base64
import hashlib
import random
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from builder.plan.accelerator import parse_label
from builder.plan.job import Job
from index_site.wheels import CoreMetadata, WheelFile, parse_wheel_name

_EPOCH = (2024, 1, 1, 0, 0, 0)


@dataclass(frozen=True, kw_only=True)
class WheelSpec:
    project: str = "causal-conv1d"
    version: str = "1.7.0"
    label: str = "pt214cu130"
    python: str = "cp311"
    platform: str = "linux_x86_64"
    requires_python: str | None = ">=3.9"
    summary: str = "Causal depthwise conv1d in CUDA, with a PyTorch interface"
    payload_bytes: int = 0  # incompressible filler, for realistic sizes
    salt: str = ""  # change the bytes without changing the name
    metadata_name: str | None = None  # METADATA's Name when it should disagree with the filename
    filename: str | None = None  # write under this name instead of the one the spec implies

    @property
    def dist_name(self) -> str:
        return canonicalize_name(self.project).replace("-", "_")

    @property
    def local_version(self) -> str:
        return f"{self.version}+{self.label}"

    @property
    def wheel_filename(self) -> str:
        return self.filename or f"{self.dist_name}-{self.local_version}-{self.tag}.whl"

    @property
    def tag(self) -> str:
        """``python`` as a wheel's tags: cp311-cp311, a free-threaded cp313t as cp313-cp313t (PEP 703)."""
        abi = self.python if self.python.startswith("cp") else "none"
        interpreter = self.python.removesuffix("t") if self.python.startswith("cp") else self.python
        return f"{interpreter}-{abi}-{self.platform}"


def make_wheel(directory: Path, spec: WheelSpec | None = None, **fields: object) -> Path:
    """Write the wheel ``spec`` (or ``WheelSpec(**fields)``) into ``directory``; return its path."""
    spec = spec or WheelSpec(**fields)  # type: ignore[arg-type]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / spec.wheel_filename
    dist_info = f"{spec.dist_name}-{spec.local_version}.dist-info"
    files = {
        f"{spec.dist_name}/__init__.py": _module(spec).encode(),
        f"{dist_info}/METADATA": metadata_text(spec).encode(),
        f"{dist_info}/WHEEL": _wheel_text(spec).encode(),
    }
    if spec.payload_bytes:
        files[f"{spec.dist_name}/_payload.bin"] = random.Random(spec.wheel_filename + spec.salt).randbytes(
            spec.payload_bytes
        )
    return _write(path, files, dist_info)


def metadata_text(spec: WheelSpec) -> str:
    torch, _ = parse_label(spec.label)
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {spec.metadata_name or spec.project}",
        f"Version: {spec.local_version}",
        f"Summary: {spec.summary}",
    ]
    if spec.requires_python is not None:
        lines.append(f"Requires-Python: {spec.requires_python}")
    lines.append(f"Requires-Dist: torch=={torch}.*")
    return "\n".join(lines) + "\n\n"


def _wheel_text(spec: WheelSpec) -> str:
    return _wheel_info(spec.tag, pure=False) + "\n"


def _wheel_info(tag: str, *, pure: bool) -> str:
    return f"Wheel-Version: 1.0\nGenerator: wheelwright-tests\nRoot-Is-Purelib: {str(pure).lower()}\nTag: {tag}\n"


def _module(spec: WheelSpec) -> str:
    return f'WHEEL_FILENAME = "{spec.wheel_filename}"\n__version__ = "{spec.local_version}"\nSALT = "{spec.salt}"\n'


def _write(path: Path, files: Mapping[str, bytes], dist_info: str) -> Path:
    """The wheel at ``path``: ``files`` and a RECORD of them, fixed timestamps, shared objects executable."""
    record = f"{dist_info}/RECORD"
    files = {**files, record: _record(files, record).encode()}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            stored = name.endswith("_payload.bin")  # random filler does not compress; don't spend time trying
            archive.writestr(info, content, compress_type=zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED)
    return path


def _record(files: Mapping[str, bytes], record_name: str) -> str:
    lines = []
    for name, content in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(content)}")
    lines.append(f"{record_name},,")
    return "\n".join(lines) + "\n"


def indexed_wheel(
    filename: str, digit: str, requires_python: str | None = ">=3.9", summary: str = "Causal conv1d"
) -> WheelFile:
    """A catalogue entry without a file behind it, its digests made of ``digit`` so pages are easy to read."""
    metadata = CoreMetadata(sha256=digit * 63 + "m", size=321, requires_python=requires_python, summary=summary)
    return WheelFile(
        name=parse_wheel_name(filename),
        sha256=digit * 64,
        size=12_345_678,
        metadata=metadata,
        upload_time=1_700_000_000.5,
    )


# -- wheels of given files: the repair, verify and provenance tests ----------------------------------------------


def wheel_of_files(
    out_dir: Path,
    *,
    name: str,
    version: str,
    files: Mapping[str, bytes | Path],
    python_tag: str = "cp311",
    platform: str = "linux_x86_64",
    metadata_name: str | None = None,
    metadata_version: str | None = None,
    requires: Iterable[str] = ("torch==2.14.*",),
    pure: bool = False,
) -> Path:
    """Write ``{name}-{version}-{python_tag}-{abi}-{platform}.whl`` holding ``files`` (bytes, or a file's)."""
    tag = f"{python_tag}-{'none' if pure else python_tag}-{platform}"
    dist_info = f"{name}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1", f"Name: {metadata_name or name}", f"Version: {metadata_version or version}",
        *(f"Requires-Dist: {r}" for r in requires), "",
    ]
    contents = {path: data if isinstance(data, bytes) else data.read_bytes() for path, data in files.items()}
    contents[f"{dist_info}/METADATA"] = "\n".join(metadata).encode()
    contents[f"{dist_info}/WHEEL"] = _wheel_info(tag, pure=pure).encode()
    return _write(out_dir / f"{name}-{version}-{tag}.whl", contents, dist_info)


def job_wheel(out_dir: Path, job: Job, files: Mapping[str, bytes | Path], **overrides: Any) -> Path:
    """A wheel that is right for ``job`` in name, version and tags unless ``overrides`` say otherwise."""
    arguments: dict[str, Any] = {"name": job.dist_name, "version": job.local_version, "python_tag": job.python_tag,
                                 "requires": (job.torch_requirement,), **overrides}
    return wheel_of_files(out_dir, files=files, **arguments)


def with_provenance(wheel: Path, job: Job) -> Path:
    """Embed the provenance fields verify compares (what the build records, without probing any tool)."""
    from builder.steps import provenance  # the build steps only for the tests that want them

    record = {
        "schema": provenance.SCHEMA, "job": job.identifier, "package": job.package, "version": job.version,
        "label": job.label, "torch": {"version": job.torch, "requirement": job.torch_requirement,
                                      "cxx11_abi": job.cxx11_abi},
        "toolkit": {"kind": job.accelerator.kind, "version": job.accelerator.version},
        "archs": provenance.job_archs(job),
    }
    provenance.embed(wheel, record)
    return wheel
