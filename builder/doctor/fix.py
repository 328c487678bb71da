"""The fix as one command: the wheel of our index built for this environment's torch, checked against the site's
PEP 691 JSON pages to exist for this Python and platform; if none does, the nearest variant that exists and the
matrix line that would build the missing one."""

from __future__ import annotations

import json
import shlex
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from builder.core.http import Limits, open_bounded
from builder.doctor.labels import (
    Variant,
    WheelName,
    our_label,
    parse_variant,
    parse_wheel,
    release,
    split_local,
    wheel_fits,
)
from builder.doctor.probe import Environment
from builder.doctor.verdicts import Diagnosis

# One project's JSON page of our index: a few hundred KB for a thousand wheels; the user is waiting.
DOCTOR_PAGE = Limits(connect=10, idle=20, total=60, cap=16 << 20)

Page = dict[str, Any]  # a PEP 691 JSON document
FetchJson = Callable[[str], "Page | None"]  # URL -> the JSON document, None for 404


@dataclass(frozen=True)
class Fix:
    note: str  # one sentence: what the command installs, or why there is none
    pip: str | None = None
    uv: str | None = None
    wheel: str | None = None
    page: str | None = None  # the site's page of this setup (variant x Python), every wheel and command on it


def setup_page(root: str, label: str, python_tag: str) -> str:
    """``<site>/select/pt214cu130-cp311.html``: the shape index_site.layout.setup_path gives it (a test checks)."""
    return f"{root}/select/{label}-{python_tag}.html"


class IndexUnreachable(Exception):
    """The index did not answer (or answered something that is not a PEP 691 page)."""


def fetch_json(url: str) -> Page | None:
    headers = {"Accept": "application/vnd.pypi.simple.v1+json"}
    try:
        with open_bounded(url, DOCTOR_PAGE, headers) as response:
            page: Page = json.loads(response.read().decode("utf-8", errors="replace"))
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise IndexUnreachable(f"{url}: HTTP {error.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise IndexUnreachable(f"{url}: {getattr(error, 'reason', error)}") from None
    return page


def index_root(url: str) -> str:
    """The site root from what a user may pass: the site, its /simple/ or its /json/ index."""
    url = url.rstrip("/")
    for suffix in ("/simple", "/json"):
        if url.endswith(suffix):
            return url[: -len(suffix)]
    return url


def find_fix(
    env: Environment, diagnosis: Diagnosis, index_url: str | None, fetch: FetchJson = fetch_json
) -> Fix | None:
    """None when nothing needs fixing; otherwise the command, or the sentence saying why there is none."""
    if diagnosis.ok:
        return None
    if not diagnosis.needs_wheel:
        return Fix(note="no other wheel helps here: the fix is the driver or the system named above.")
    label = our_label(env.torch.version, env.torch.cuda, env.torch.hip) if env.torch.version else None
    wanted = parse_variant(label) if label else None
    if label is None or wanted is None:
        what = f"torch {env.torch.version} is a CPU build" if env.torch.version else "torch is not installed"
        return Fix(note=f"{what}: install a CUDA build of torch first, then run doctor again.")
    if not index_url:
        return Fix(
            note=f"the wheel to install is {diagnosis.package.name} for {label}; pass --index-url to check it exists."
        )
    root = index_root(index_url)
    try:
        return _lookup(env, diagnosis, root, wanted, fetch)
    except IndexUnreachable as error:
        return Fix(note=f"cannot check the index: {error}.")


def _lookup(env: Environment, diagnosis: Diagnosis, root: str, wanted: Variant, fetch: FetchJson) -> Fix:
    project, label = diagnosis.package.name, wanted.label
    page = fetch(f"{root}/whl/{label}/json/{project}/index.json")
    wheel = _best(_fitting(env, page), split_local(diagnosis.package.version)[0])
    if wheel is None:
        return _nearest(env, project, root, wanted, fetch)
    # Each word quoted: the version comes from a filename the index lists and the interpreter's path from the
    # environment, and the line is pasted into a shell (quote() leaves a plain word as it is).
    pin = shlex.quote(f"{project}=={wheel.version}")
    links = shlex.quote(f"{root}/whl/{label}.html")
    python = shlex.quote(env.executable)
    return Fix(
        note=f"installs {wheel.filename}, built for torch {wanted.torch} ({label}).",
        pip=f"{python} -m pip install --force-reinstall --no-deps {pin} -f {links}",
        uv=f"uv pip install --python {python} --reinstall --no-deps {pin} --find-links {links}",
        wheel=wheel.filename,
        page=setup_page(root, label, env.python_tag),
    )


def _fitting(env: Environment, page: Page | None) -> list[WheelName]:
    files = (page or {}).get("files", [])
    names = [parse_wheel(f.get("filename", "")) for f in files if not f.get("yanked")]
    return [w for w in names if w and wheel_fits(w, python_tag=env.python_tag, machine=env.machine, glibc=env.glibc)]


def _best(wheels: list[WheelName], public_version: str) -> WheelName | None:
    """The wheel of the installed version when the index has it, else the highest version."""
    same = [w for w in wheels if split_local(w.version)[0] == public_version]
    pool = same or wheels
    return max(pool, key=lambda w: release(w.version)) if pool else None


def _nearest(env: Environment, project: str, root: str, wanted: Variant, fetch: FetchJson) -> Fix:
    label = wanted.label
    where = f"{env.python_tag}, {env.machine}, glibc {env.glibc}"
    build = (
        f'or build it: add a profile to matrix.yaml with torch: ["{wanted.torch}"], accelerators: '
        f"[{wanted.accelerator.replace('.', '') if wanted.cuda else wanted.accelerator}], python: "
        f'["{env.python_tag[2]}.{env.python_tag[3:]}"]'
    )
    wheels = _fitting(env, fetch(f"{root}/json/{project}/index.json"))
    others = [(w, v) for w, v in ((w, _variant(w)) for w in wheels) if v is not None]
    if not others:
        return Fix(note=f"the index has no {project} wheel for {label} ({where}), nor for any other variant; {build}.")
    near, variant = min(others, key=lambda pair: _distance(pair[1], wanted, pair[0]))
    return Fix(
        note=f"the index has no {project} wheel for {label} ({where}); the nearest is {near.filename} "
        f"(torch {variant.torch}, {variant.accelerator}), which needs that torch; {build}.",
    )


def _variant(wheel: WheelName) -> Variant | None:
    return parse_variant(split_local(wheel.version)[1])


def _distance(variant: Variant, wanted: Variant, wheel: WheelName) -> tuple[object, ...]:
    """Same torch minor first, then the closest CUDA (older before newer: an older toolkit runs on the driver)."""
    gap = _cuda_number(wanted.cuda) - _cuda_number(variant.cuda)
    torch_gap = abs(release(variant.torch)[1] - release(wanted.torch)[1])
    return (variant.torch != wanted.torch, torch_gap, gap < 0, abs(gap), tuple(-n for n in release(wheel.version)))


def _cuda_number(cuda: str | None) -> int:
    """ "13.0" -> 130, upstream's "12" -> 120, ROCm (None) -> 0."""
    numbers = (*release(cuda or "0"), 0)
    return numbers[0] * 10 + numbers[1]
