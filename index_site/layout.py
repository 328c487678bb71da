"""Where each file of the site lives, what kind of file it is, and what that means for serving and publishing:
content type, cache lifetime, mutability and the order in which a publish may make it visible. Also the variant
channel's uv command, made of its root's URL alone (the CLI prints it without importing the channel's pages)."""

from __future__ import annotations

import functools
import posixpath
import re
import shlex
from dataclasses import dataclass
from enum import IntEnum
from urllib.parse import quote

SITE_MARKER = ".wheelwright-site.json"  # also the manifest of what the index wrote, for publish
JSON_CONTENT_TYPE = "application/vnd.pypi.simple.v1+json"
LANDING = "index.html"
DOCTOR = "doctor.py"  # the standalone doctor, generated from builder.doctor
MANIFEST = "wheels.json"  # every release, for tools: each lists its wheels in a file of RELEASES
RELEASES = "wheels"  # wheels/<package>/<version>.json: every wheel of a release with its variant, archs and digest
# The only top-level names of a site: what the index writes and prunes, serve serves and publish uploads. A site
# folder may hold other things (the build output's ledger.sqlite and dist/, when --site names it): never shown.
VARIANTS = "variant"  # the PEP 825 variant channel (index_site/variants.py)
MANAGED = ("whl", "simple", "json", "select", "coverage", VARIANTS, RELEASES, MANIFEST, LANDING, DOCTOR)
FILES_AT_TOP = (MANIFEST, LANDING, DOCTOR)  # the managed names that are files: the others are folders


def is_site_path(path: str) -> bool:
    """Whether ``path`` (POSIX, relative to the site root) may be part of the site: under a managed name, without
    hidden, empty, '.' or '..' parts, and without characters no site file has (NUL, backslash, controls)."""
    parts = path.split("/")
    if parts[0] not in MANAGED or any(not part or part.startswith(".") for part in parts):
        return False
    return not any(ord(c) < 0x20 or c in "\\\x7f" for c in path)


class Tier(IntEnum):
    """Publish order: a file may only link to files of a lower tier, so uploading tier by tier never exposes a
    link to something not yet uploaded."""

    FILE = 0  # wheels and their .metadata
    PROJECT = 1  # per-project pages, variant find-links pages and the release files of wheels.json (link to files)
    ROOT = 2  # project lists (link to project pages) and wheels.json (links to the release files)
    SETUP = 3  # one page per torch x accelerator x Python: its commands and wheels (link to the tiers below)
    COVERAGE = 4  # a project's older versions' coverage matrices (link to setup pages)
    LANDING = 5  # the landing page (links to everything)

    # Setup pages also link to each other (the selector) and back to the landing page: those links can point at
    # a page not yet uploaded only during a site's very first publish.


@dataclass(frozen=True, kw_only=True)
class Kind:
    content_type: str
    cache_control: str
    immutable: bool  # never overwritten once published: clients cache these by filename
    tier: Tier


WHEEL = Kind(
    content_type="application/octet-stream",
    cache_control="public, max-age=31536000, immutable",
    immutable=True,
    tier=Tier.FILE,
)
METADATA = Kind(
    content_type="text/plain; charset=utf-8",
    cache_control="public, max-age=31536000, immutable",
    immutable=True,
    tier=Tier.FILE,
)
_PAGE_CACHE = "public, max-age=300"


def wheel_path(label: str, filename: str) -> str:
    return f"whl/{label}/{filename}"


def metadata_path(label: str, filename: str) -> str:
    return f"whl/{label}/{filename}.metadata"


def findlinks_path(label: str) -> str:
    return f"whl/{label}.html"


def setup_path(label: str, python: str) -> str:
    """The page of one setup, ``select/pt214cu130-cp311.html``: the URL the doctor prints, so keep its shape."""
    return f"select/{label}-cp{python.replace('.', '')}.html"


def release_manifest_path(project: str, version: str) -> str:
    """The file listing every wheel of one release (``version``: the public version, 1.7.0)."""
    return f"{RELEASES}/{project}/{version}.json"


def coverage_path(project: str) -> str:
    return f"coverage/{project}.html"


def simple_root(label: str | None) -> str:
    """The PEP 503 root of one variant, or of all variants when ``label`` is None."""
    return f"whl/{label}/simple" if label else "simple"


def json_root(label: str | None) -> str:
    """The PEP 691 root: its own tree, because static hosting cannot negotiate content types."""
    return f"whl/{label}/json" if label else "json"


def href(page: str, target: str) -> str:
    """A relative, percent-encoded link from the page at ``page`` to ``target`` (both site paths).

    Directory index pages are reached by their directory URL, so links to them end in their directory.
    """
    directory, _, name = target.rpartition("/")
    prefix = _relative_directory(posixpath.dirname(page), directory)
    if name in ("index.html", "index.json"):
        return prefix or "./"
    return prefix + _quote(name)


def wheel_href(page: str, label: str, filename: str) -> str:
    """``href(page, wheel_path(label, filename))``, for the thousands of wheels one page links."""
    return _wheel_directory(page, label) + _quote(filename)


@functools.lru_cache(maxsize=4096)
def _wheel_directory(page: str, label: str) -> str:
    return _relative_directory(posixpath.dirname(page), f"whl/{label}")


@functools.lru_cache(maxsize=4096)
def _relative_directory(base: str, directory: str) -> str:
    """``directory`` seen from ``base``, quoted, with a trailing slash ("" when they are the same)."""
    relative = posixpath.relpath(directory or ".", base or ".")
    return "" if relative == "." else quote(relative) + "/"


def _quote(name: str) -> str:
    """``quote(name)``: "+" of a local version becomes %2B (some servers read a literal "+" as a space). A wheel
    filename has no other character quote() changes but "!", so those two are replaced directly: this runs for
    every wheel on every page that lists it, and quote() goes character by character."""
    if _PLAIN_NAME.match(name):
        return name.replace("+", "%2B").replace("!", "%21")
    return quote(name)


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.~+!-]*\Z")  # quote() leaves all of these but "+" and "!" as they are


# PEP 825's {name}-{version}-variants.json: linked from project pages, so published before them; it changes when a
# variant of that version is added, so it is cached like a page.
VARIANTS_JSON = Kind(content_type="application/json", cache_control=_PAGE_CACHE, immutable=False, tier=Tier.FILE)
# A wheel's wheelwright.json, served beside it: as immutable as the wheel it describes.
PROVENANCE = Kind(content_type="application/json", cache_control=WHEEL.cache_control, immutable=True, tier=Tier.FILE)


def kind_of(path: str) -> Kind:
    """The kind of the site file at ``path`` (a POSIX path relative to the site root)."""
    if path.endswith(".whl"):
        return WHEEL
    if path.endswith(".whl.metadata"):
        return METADATA
    if path.endswith("-variants.json"):
        return VARIANTS_JSON
    if path.endswith(".whl.provenance.json"):
        return PROVENANCE
    if path == MANIFEST:  # links to the release files
        return Kind(content_type="application/json", cache_control=_PAGE_CACHE, immutable=False, tier=Tier.ROOT)
    if path.startswith(f"{RELEASES}/"):  # link to wheels
        return Kind(content_type="application/json", cache_control=_PAGE_CACHE, immutable=False, tier=Tier.PROJECT)
    content_type = JSON_CONTENT_TYPE if path.endswith(".json") else _suffix_type(path)
    return Kind(content_type=content_type, cache_control=_PAGE_CACHE, immutable=False, tier=_page_tier(path))


def _suffix_type(path: str) -> str:
    if path.endswith(".html"):
        return "text/html; charset=utf-8"
    if path.endswith(".css"):
        return "text/css; charset=utf-8"
    if path.endswith(".py"):
        return "text/x-python; charset=utf-8"
    if path.endswith(".png"):
        return "image/png"
    return "application/octet-stream"


def _page_tier(path: str) -> Tier:
    if path == LANDING:
        return Tier.LANDING
    if path.startswith("select/"):
        return Tier.SETUP
    if path.startswith("coverage/"):
        return Tier.COVERAGE
    parts = path.split("/")
    if parts[-1] in ("index.html", "index.json") and parts[-2] in ("simple", "json"):
        return Tier.ROOT
    return Tier.PROJECT


def directory_index(path: str) -> str | None:
    """For a directory index page, the directory it stands for (``simple/foo/index.html`` -> ``simple/foo/``)."""
    head, _, tail = path.rpartition("/")
    if tail in ("index.html", "index.json"):
        return head + "/" if head else ""
    return None


def channel_root(torch_tag: str | None) -> str:
    """The variant channel's root: of every torch minor, or of one (``pt214``)."""
    return f"{VARIANTS}/{torch_tag}" if torch_tag else VARIANTS


def variant_command(base_url: str, torch_tag: str | None = None, package: str = "PACKAGE") -> str:
    """The one-URL uv command of the variant channel (all torch minors, or one)."""
    index = shlex.quote(f"{base_url}/{channel_root(torch_tag)}/simple/")
    return f"uv pip install --preview-features wheel-variants {shlex.quote(package)} --index-url {index}"
