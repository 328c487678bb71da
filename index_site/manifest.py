"""``wheels.json`` beside the landing page: every wheel of the site with its variant, Python, platform tag, GPU
archs, digest and URL, for tools (the doctor picks the wheel for an environment from it) rather than people."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping

from index_site import layout
from index_site.wheels import GpuArchs, WheelFile, WheelName

SCHEMA_VERSION = 1


def manifest(wheels: tuple[WheelFile, ...], archs: Mapping[str, GpuArchs], *, base_url: str) -> bytes:
    base_url = base_url.rstrip("/")
    head = json.dumps({"schema": SCHEMA_VERSION, "generator": "wheelwright", "base_url": base_url})
    entries = ",".join(
        _entry(w.name, w.sha256, w.size, w.metadata.requires_python, archs.get(w.filename), base_url)
        for w in sorted(wheels, key=lambda w: w.filename)
    )
    return f'{head[:-1]},"wheels":[{entries}]}}\n'.encode()


@functools.lru_cache(maxsize=65536)
def _entry(
    name: WheelName, sha256: str, size: int, requires_python: str | None, archs: GpuArchs | None, base_url: str
) -> str:
    """One wheel's entry as JSON text (a pure function of these fields, so built once per wheel per process)."""
    filename = name.filename
    pythons = name.pythons
    entry = {
        "filename": filename,
        "package": name.project,
        "version": name.public_version,
        "local_version": name.version,
        "label": name.label,
        "torch": name.torch,
        "accelerator": name.accelerator.name,
        "python": pythons[0],  # the one Python of a wheel the farm built; "pythons" lists a compressed tag's all
        "pythons": list(pythons),
        "python_tag": name.python_tag,
        "abi_tag": name.abi_tag,
        "platform_tag": name.platform_tag,
        "requires_python": requires_python,
        "archs": {"sass": list(archs.sass), "ptx": list(archs.ptx)} if archs is not None else None,
        "sha256": sha256,
        "size": size,
        "url": f"{base_url}/{layout.wheel_href('', name.label, filename)}",
        "find_links": f"{base_url}/{layout.findlinks_path(name.label)}",
        "setup": f"{base_url}/{layout.setup_path(name.label, pythons[0])}",
    }
    return json.dumps(entry, separators=(",", ":"))
