"""``wheels.json`` beside the landing page, for tools (rather than people): the releases of the site, each with
its wheel count and the URL of its own file, ``wheels/<package>/<version>.json``, which lists every wheel of that
release with its variant, Python, platform tag, GPU archs, digest and URL. One file per release, so that one added
wheel rewrites its release's file and the short list, not a file of every wheel of the site."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from urllib.parse import quote

from index_site import layout
from index_site.wheels import GpuArchs, WheelFile, WheelName

SCHEMA_VERSION = 2  # 1 listed every wheel in wheels.json itself


def manifest(releases: Iterable[tuple[str, str, int]], *, base_url: str) -> bytes:
    """``wheels.json``: each (package, version, wheel count), in the order given."""
    base_url = base_url.rstrip("/")
    document = {
        "schema": SCHEMA_VERSION,
        "generator": "wheelwright",
        "base_url": base_url,
        "releases": [
            {
                "package": project,
                "version": version,
                "wheels": count,
                "url": f"{base_url}/{quote(layout.release_manifest_path(project, version))}",
            }
            for project, version, count in releases
        ],
    }
    return (json.dumps(document, separators=(",", ":")) + "\n").encode()


def release_manifest(
    project: str, version: str, wheels: Iterable[WheelFile], archs: Mapping[str, GpuArchs], *, base_url: str
) -> bytes:
    """``wheels/<package>/<version>.json``: every wheel of one release, by filename."""
    base_url = base_url.rstrip("/")
    head = json.dumps(
        {
            "schema": SCHEMA_VERSION,
            "generator": "wheelwright",
            "base_url": base_url,
            "package": project,
            "version": version,
        },
        separators=(",", ":"),
    )
    entries = ",".join(_entries(sorted(wheels, key=lambda w: w.filename), archs, base_url))
    return f'{head[:-1]},"wheels":[{entries}]}}\n'.encode()


def _entries(wheels: list[WheelFile], archs: Mapping[str, GpuArchs], base_url: str) -> list[str]:
    return [
        _entry(w.name, w.sha256, w.size, w.metadata.requires_python, archs.get(w.filename), base_url) for w in wheels
    ]


def _entry(
    name: WheelName, sha256: str, size: int, requires_python: str | None, archs: GpuArchs | None, base_url: str
) -> str:
    """One wheel's entry as JSON text."""
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
        **({"abi_window": archs.abi_window} if archs is not None and archs.abi_window else {}),
        "sha256": sha256,
        "size": size,
        "url": f"{base_url}/{layout.wheel_href('', name.label, filename)}",
        "find_links": f"{base_url}/{layout.findlinks_path(name.label)}",
        "setup": f"{base_url}/{layout.setup_path(name.label, pythons[0])}",
    }
    return json.dumps(entry, separators=(",", ":"))
