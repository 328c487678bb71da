"""What pip installed into the test venv, read from its installation report: each package must be our labelled
wheel, fetched from wheelwright's index, byte for byte the file the build put into dist/."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name

from builder.core.hashing import sha256_of
from scripts.acceptance.summary import FAILED, PASSED, Check


def install_checks(report: dict, *, packages: tuple[str, ...], label: str, index_url: str, dist: Path) -> list[Check]:
    installs = {canonicalize_name(item["metadata"]["name"]): item for item in report.get("install", [])}
    return [
        _package_check(installs.get(canonicalize_name(p)), p, label=label, index_url=index_url, dist=dist)
        for p in packages
    ]


def _package_check(item: dict | None, package: str, *, label: str, index_url: str, dist: Path) -> Check:
    name = f"{package} installed from the index"
    if item is None:
        return Check(name=name, status=FAILED, detail="pip's report does not list it as installed")
    version, url = item["metadata"]["version"], item["download_info"]["url"]
    filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    problems = []
    if not version.endswith(f"+{label}"):
        problems.append(f"version {version} lacks the label +{label}")
    if not url.startswith(index_url.rstrip("/") + "/"):
        problems.append(f"fetched from {url}, not from {index_url}")
    problems += _same_as_built(dist / filename, item["download_info"].get("archive_info", {}))
    detail = "; ".join(problems) or f"{filename} from {url}"
    return Check(
        name=name,
        status=FAILED if problems else PASSED,
        detail=detail,
        data={"version": version, "wheel": filename, "url": url},
    )


def _same_as_built(built: Path, archive_info: dict) -> list[str]:
    if not built.is_file():
        return [f"{built.name} is not a wheel the build put into {built.parent}"]
    reported = (archive_info.get("hashes") or {}).get("sha256")
    if reported is None:
        return [f"pip reported no sha256 for {built.name} (the index's link carries none)"]
    return [] if reported == sha256_of(built) else [f"{built.name} differs from the file in {built.parent}"]


def environment_checks(packages: tuple[str, ...], report: dict) -> list[Check]:
    """The interpreter running this (the test venv's) sees exactly the versions pip reported installing."""
    reported = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"] for item in report.get("install", [])
    }
    checks = []
    for package in packages:
        try:
            seen = metadata.version(package)
        except metadata.PackageNotFoundError:
            seen = None
        wanted = reported.get(canonicalize_name(package))
        ok = seen is not None and seen == wanted
        checks.append(
            Check(
                name=f"{package} visible to the test interpreter",
                status=PASSED if ok else FAILED,
                detail=f"importlib.metadata sees {seen}, pip installed {wanted}",
            )
        )
    return checks
