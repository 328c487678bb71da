"""Before an install from the variant channel: does any build of the channel run on this machine's GPU and driver?
Where none does, uv refuses (the channel's guards) and installers that know nothing of variants take the fallback,
whose first kernel call fails; doctor says so first, from the channel's ``{name}-{version}-variants.json``."""

from __future__ import annotations

import json
import re
import urllib.error
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from builder.core.http import open_bounded
from builder.doctor.fix import DOCTOR_PAGE, IndexUnreachable
from builder.doctor.labels import PACKAGES, ptx_covers, release, sass_runs, torch_minor
from builder.doctor.probe import Environment

NO_RUNNABLE_VARIANT = "no-runnable-variant"
_SM = re.compile(r"^(?P<major>[0-9]+?)(?P<minor>[0-9])(?P<variant>[af]?)_(?P<kind>real|virtual)$")
FetchText = Callable[[str], "str | None"]  # URL -> the body, None for 404


@dataclass(frozen=True)
class ChannelVerdict:
    project: str
    runs: bool
    message: str


def channel_url(index_url: str, torch_version: str, project: str) -> str:
    """The channel's PEP 691 page of ``project`` for the torch in the environment (``variant/pt214/json/...``)."""
    tag = "pt" + torch_minor(torch_version).replace(".", "")
    return f"{index_url.rstrip('/')}/variant/{tag}/json/{project}/"


def builds_that_run(document: Mapping[str, Any], gpu: str, driver_cuda: str | None) -> list[str]:
    """The labels of ``document`` (a variants.json) whose SASS or PTX runs on compute capability ``gpu`` with a
    driver for ``driver_cuda`` (unknown: not held against a build); the guards (labels with a dot) are no builds."""
    runs = []
    for label, properties in sorted(document.get("variants", {}).items()):
        nvidia = properties.get("nvidia", {}) if isinstance(properties, dict) else {}
        if "." in label or not nvidia.get("sm_arch"):
            continue
        bound = (nvidia.get("cuda_version_lower_bound") or ["0"])[0]
        if driver_cuda and release(driver_cuda) < release(bound):
            continue
        if any(_runs(value, gpu) for value in nvidia["sm_arch"]):
            runs.append(label)
    return runs


def _runs(value: str, gpu: str) -> bool:
    match = _SM.match(value)
    if match is None:
        return False
    arch = f"{match['major']}.{match['minor']}{match['variant']}"
    return sass_runs(arch, gpu) if match["kind"] == "real" else ptx_covers(arch, gpu)


def channel_verdict(env: Environment, project: str, page: Mapping[str, Any], fetch: FetchText, base: str
                    ) -> ChannelVerdict | None:
    """The verdict for ``project`` on the channel page ``page`` (PEP 691): None without a GPU seen here, or with
    no variants.json on the page."""
    documents = [f for f in page.get("files", []) if str(f.get("filename", "")).endswith("-variants.json")]
    if not env.gpus or not documents:
        return None
    newest = documents[-1]  # the page lists versions oldest first
    text = fetch(base + str(newest["url"]))
    if text is None:
        return None
    document = json.loads(text)
    version = str(newest["filename"]).rsplit("-", 2)[-2]
    gpu = max(env.gpus, key=lambda g: release(g.arch))
    sm = "sm_" + gpu.arch.replace(".", "")
    running = builds_that_run(document, gpu.arch, env.driver_cuda)
    if running:
        return ChannelVerdict(project, True, f"{project} {version} on the variant channel: {', '.join(running)} "
                              f"run{'s' if len(running) == 1 else ''} on the {gpu.name} ({sm}); uv picks the best.")
    driver = f", driver for CUDA {env.driver_cuda}" if env.driver_cuda else ""
    return ChannelVerdict(
        project, False,
        f"no build of {project} {version} on the variant channel runs on the {gpu.name} ({sm}{driver}): none has "
        "SASS or PTX for it (or each needs a newer driver). uv refuses to install it (the channel's guard says "
        "why); pip, and uv without wheel variants, install the fallback, whose first kernel call fails with 'no "
        "kernel image is available for execution on the device'.",
    )


def channel_verdicts(env: Environment, index_url: str | None, fetch_page: Callable[[str], Any], fetch: FetchText
                     ) -> list[ChannelVerdict]:
    """The verdict of each package doctor knows, on the channel of the environment's torch at ``index_url``."""
    if not index_url or not env.torch.version or not env.gpus:
        return []
    found = []
    for project in PACKAGES:
        url = channel_url(index_url, env.torch.version, project)
        page = fetch_page(url)
        verdict = channel_verdict(env, project, page, fetch, url) if page else None
        if verdict is not None:
            found.append(verdict)
    return found


def fetch_text(url: str) -> str | None:
    """A variants.json of the channel (None for 404), within the limits doctor reads index pages with."""
    try:
        with open_bounded(url, DOCTOR_PAGE, {}) as response:
            return str(response.read().decode("utf-8", errors="replace"))
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise IndexUnreachable(f"{url}: HTTP {error.code}") from None
    except (urllib.error.URLError, OSError) as error:
        raise IndexUnreachable(f"{url}: {getattr(error, 'reason', error)}") from None


def channel_lines(verdicts: list[ChannelVerdict]) -> list[str]:
    return [f"variant channel: {v.message}" for v in verdicts]
