"""``wheels.json`` beside the landing page: every wheel of the site with its variant, Python, platform tag, GPU
archs, digest and URL, for tools (the doctor picks the wheel for an environment from it) rather than people."""

from __future__ import annotations

import json
from collections.abc import Mapping

from index_site import layout
from index_site.wheels import GpuArchs, WheelFile

SCHEMA_VERSION = 1


def manifest(wheels: tuple[WheelFile, ...], archs: Mapping[str, GpuArchs], *, base_url: str) -> bytes:
    base_url = base_url.rstrip("/")
    entries = [_entry(w, archs.get(w.filename), base_url) for w in sorted(wheels, key=lambda w: w.filename)]
    document = {"schema": SCHEMA_VERSION, "generator": "wheelwright", "base_url": base_url, "wheels": entries}
    return (json.dumps(document, separators=(",", ":")) + "\n").encode()


def _entry(wheel: WheelFile, archs: GpuArchs | None, base_url: str) -> dict[str, object]:
    name = wheel.name
    pythons = name.pythons
    return {
        "filename": wheel.filename,
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
        "requires_python": wheel.metadata.requires_python,
        "archs": {"sass": list(archs.sass), "ptx": list(archs.ptx)} if archs is not None else None,
        "sha256": wheel.sha256,
        "size": wheel.size,
        "url": f"{base_url}/{layout.href('', layout.wheel_path(name.label, wheel.filename))}",
        "find_links": f"{base_url}/{layout.findlinks_path(name.label)}",
        "setup": f"{base_url}/{layout.setup_path(name.label, pythons[0])}",
    }
