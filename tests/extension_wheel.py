"""A minimal wheel of a job's name and label that carries one shared object: enough for the verify gate's checks
that read files (names, tags, ELF facts, fatbins, ABI), for tests that compile a real object but no package."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from builder.plan.job import Job


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def extension_wheel(so: Path, job: Job, out: Path, *, platform: str = "manylinux_2_28_x86_64") -> Path:
    dist = f"{job.dist_name}-{job.local_version}"
    tag = f"{job.python_tag}-{job.python_tag}-{platform}"
    files = {
        so.name: so.read_bytes(),
        f"{dist}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {job.package}\nVersion: {job.local_version}\n"
            f"Requires-Dist: {job.torch_requirement}\n"
        ).encode(),
        f"{dist}.dist-info/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
    }
    record = [_record_line(name, data) for name, data in files.items()]
    files[f"{dist}.dist-info/RECORD"] = ("\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n").encode()
    wheel = out / f"{dist}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel
