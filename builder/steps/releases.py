"""Upstream releases: which packages of the matrix have a release on the registry newer than the newest version
we pin. The farm asks this as it asks which torch releases exist, so "our newest is older than upstream's" is
noticed by us before a user's unpinned ``pip install`` falls back to upstream's sdist."""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urljoin

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.core.errors import FetchError
from builder.plan.matrix import PackageSpec
from builder.steps.fetch import PEP691_JSON, index_url, open_url


@dataclass(frozen=True, kw_only=True)
class UpstreamStatus:
    package: str
    ours: str  # the newest version the matrix pins
    upstream: str | None  # the newest final release on the registry (None: it lists none)

    @property
    def behind(self) -> bool:
        return self.upstream is not None and Version(self.upstream) > Version(self.ours)


def released_versions(package: str, *, index: str | None = None) -> list[Version]:
    """Every final release the registry's PEP 691 page lists for ``package`` (pre-releases and junk skipped)."""
    url = urljoin(index or index_url(), canonicalize_name(package) + "/")
    try:
        with open_url(url, accept=PEP691_JSON) as response:
            document = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise FetchError(f"{package}: cannot read {url}: {error}") from None
    versions = document.get("versions") if isinstance(document, dict) else None
    if not isinstance(versions, list):
        raise FetchError(f"{package}: {url} lists no 'versions' (a PEP 700 JSON page is needed)")
    return sorted(v for v in map(_version, versions) if v is not None and not v.is_prerelease)


def check_upstream(packages: Iterable[PackageSpec], *, index: str | None = None) -> list[UpstreamStatus]:
    statuses = []
    for package in packages:
        ours = max(Version(pin.version) for pin in package.versions)
        released = released_versions(package.name, index=index)
        statuses.append(UpstreamStatus(package=package.name, ours=str(ours),
                                       upstream=str(released[-1]) if released else None))
    return statuses


def _version(text: object) -> Version | None:
    try:
        return Version(str(text))
    except InvalidVersion:
        return None
