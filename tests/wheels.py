"""Hand-made wheels for tests: a zip with METADATA, WHEEL and RECORD around whatever files a test needs."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from builder.plan.job import Job


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def make_wheel(
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
    """Write ``{name}-{version}-{python_tag}-{python_tag}-{platform}.whl`` holding ``files`` (bytes or a file)."""
    abi_tag = "none" if pure else python_tag
    tag = f"{python_tag}-{abi_tag}-{platform}"
    dist_info = f"{name}-{version}.dist-info"
    metadata = "\n".join([
        "Metadata-Version: 2.1",
        f"Name: {metadata_name or name}",
        f"Version: {metadata_version or version}",
        *(f"Requires-Dist: {r}" for r in requires),
        "",
    ])
    wheel_info = f"Wheel-Version: 1.0\nGenerator: wheelwright-tests\nRoot-Is-Purelib: {str(pure).lower()}\nTag: {tag}\n"
    contents = {path: data if isinstance(data, bytes) else data.read_bytes() for path, data in files.items()}
    contents[f"{dist_info}/METADATA"] = metadata.encode()
    contents[f"{dist_info}/WHEEL"] = wheel_info.encode()
    record = [record_line(path, data) for path, data in contents.items()] + [f"{dist_info}/RECORD,,"]
    contents[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = out_dir / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in contents.items():
            info = zipfile.ZipInfo(path)
            info.external_attr = 0o755 << 16 if path.endswith(".so") else 0o644 << 16
            archive.writestr(info, data, zipfile.ZIP_DEFLATED)
    return wheel


def job_wheel(out_dir: Path, job: Job, files: Mapping[str, bytes | Path], **overrides: object) -> Path:
    """A wheel that is right for ``job`` in name, version and tags unless ``overrides`` say otherwise."""
    arguments: dict = {"name": job.dist_name, "version": job.local_version, "python_tag": job.python_tag,
                       "requires": (job.torch_requirement,), **overrides}
    return make_wheel(out_dir, files=files, **arguments)


def with_provenance(wheel: Path, job: Job) -> Path:
    """Embed the provenance fields verify compares (what the build records, without probing any tool)."""
    from builder.steps import provenance

    record = {
        "schema": provenance.SCHEMA, "job": job.identifier, "package": job.package, "version": job.version,
        "label": job.label, "torch": {"version": job.torch, "requirement": job.torch_requirement,
                                      "cxx11_abi": job.cxx11_abi},
        "toolkit": {"kind": job.accelerator.kind, "version": job.accelerator.version},
        "archs": provenance.job_archs(job),
    }
    provenance.embed(wheel, record)
    return wheel
