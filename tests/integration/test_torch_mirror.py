"""A job's torch from a mirror of PyTorch's index (WHEELWRIGHT_TORCH_INDEX), as a farm behind an artifact proxy
gets it: a PEP 503 server on loopback serves the registry's real torch 2.14.1 wheel relabelled as PyTorch's index
names it (``torch-2.14.1+cu130``: METADATA's Version, the .dist-info folder and RECORD rewritten) and sends every
other project (torch's dependencies) on to the registry. Real pip installs it; the installed torch is checked."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import http.server
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.core.context import job_context
from builder.core.hashing import sha256_of
from builder.core.settings import cache_root
from builder.plan.accelerator import Accelerator
from builder.plan.facts import load_facts
from builder.steps import provenance
from builder.steps.environment import runtime_env
from builder.steps.fetch import index_url
from builder.steps.torch_index import TORCH_INDEX, TorchMismatch, download_torch, find_torch_wheel
from tests import peers
from tests.jobs import local_job

pytestmark = pytest.mark.slow  # each test installs a real torch with its CUDA dependencies (~2 GB, pip's cache)

JOB = local_job()  # causal-conv1d 1.7.0 for torch 2.14.1 cu130, cp311


def relabel(source: Path, folder: Path, local: str) -> Path:
    """``source`` (the registry's torch-2.14.1-...whl) as ``torch-2.14.1+LOCAL-...whl``, with zip's own tools:
    zipnote renames the .dist-info members in place and zip replaces METADATA and RECORD, so the gigabyte of
    compressed members is copied, not recompressed."""
    version = source.name.split("-")[1]
    target = folder / source.name.replace(f"-{version}-", f"-{version}+{local}-", 1)
    shutil.copyfile(source, target)
    old, new = f"torch-{version}.dist-info/", f"torch-{version}+{local}.dist-info/"
    with zipfile.ZipFile(target) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(old + "METADATA").decode()
        record = wheel.read(old + "RECORD").decode()
    notes = "".join(f"@ {name}\n@={name.replace(old, new, 1)}\n@ (comment above this line)\n"
                    for name in names if name.startswith(old))
    subprocess.run(["zipnote", "-w", str(target)], input=notes.encode(), check=True, capture_output=True)
    metadata = metadata.replace(f"\nVersion: {version}\n", f"\nVersion: {version}+{local}\n", 1)
    staged = folder / "dist-info"
    (staged / new).mkdir(parents=True)
    (staged / new / "METADATA").write_text(metadata)
    digest = base64.urlsafe_b64encode(hashlib.sha256(metadata.encode()).digest()).rstrip(b"=").decode()
    lines = []
    for line in record.replace(old, new).splitlines():
        path = line.split(",")[0]
        lines.append(f"{path},sha256={digest},{len(metadata.encode())}" if path == new + "METADATA" else line)
    (staged / new / "RECORD").write_text("\n".join(lines) + "\n")
    subprocess.run(["zip", "-q", "-d", str(target), new + "METADATA", new + "RECORD"], check=True)
    subprocess.run(["zip", "-q", str(target), new + "METADATA", new + "RECORD"], cwd=staged, check=True)
    return target


class Mirror(http.server.ThreadingHTTPServer):
    """``/whl/<accelerator>/torch/`` lists the wheels put there (PEP 503, with sha256 fragments); other projects
    are redirected to the registry, as an artifact proxy resolves what it does not hold."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.wheels: dict[str, list[Path]] = {}
        self.requests: list[str] = []

    @property
    def template(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/whl/{{accelerator}}/"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Mirror

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        parts = self.path.strip("/").split("/")
        wheels = {w.name: w for ws in self.server.wheels.values() for w in ws}
        if parts[:1] == ["files"] and parts[-1].replace("%2B", "+") in wheels:
            self._send_file(wheels[parts[-1].replace("%2B", "+")])
        elif len(parts) == 3 and parts[0] == "whl" and parts[2] == "torch":
            self._send_page(self.server.wheels.get(parts[1], []))
        elif len(parts) == 3 and parts[0] == "whl":
            self.send_response(302)
            self.send_header("Location", f"{index_url().rstrip('/')}/{parts[2]}/")
            self.end_headers()
        else:
            self.send_error(404)

    def _send_page(self, wheels: list[Path]) -> None:
        links = "".join(f'<a href="/files/{w.name.replace("+", "%2B")}#sha256={sha256_of(w)}">{w.name}</a>\n'
                        for w in wheels)
        body = f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_file(self, path: Path) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(path.stat().st_size))
        self.end_headers()
        with path.open("rb") as handle:
            shutil.copyfileobj(handle, self.wfile)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def registry_torch() -> Path:
    """The registry's torch 2.14.1 wheel for cp311, in wheelwright's shared cache (the builds' own)."""
    wheel = find_torch_wheel(JOB, load_facts(), "http://127.0.0.1:9/{accelerator}/")  # nothing listens on port 9
    path, _ = download_torch(wheel, JOB.identifier, cache_root() / "torch-wheels")
    return path


@pytest.fixture
def mirror() -> Iterator[Mirror]:
    with peers.serving(Mirror()) as server:
        yield server


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A runtime cache of the test's own: the torch it installs is a relabelled one, which no build may reuse."""
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_job_installs_its_torch_from_the_mirror_and_records_its_url_and_sha256(
    registry_torch: Path, mirror: Mirror, own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = relabel(registry_torch, tmp_path, "cu130")
    mirror.wheels["cu130"] = [wheel]
    monkeypatch.setenv("WHEELWRIGHT_TORCH_INDEX", mirror.template)
    log = tmp_path / "job.log"
    with job_context(JOB, log):
        runtime = runtime_env(JOB, load_facts())
    url = f"http://127.0.0.1:{mirror.server_address[1]}/files/{wheel.name.replace('+', '%2B')}"
    assert runtime.wheel is not None and runtime.wheel.origin == TORCH_INDEX
    assert (runtime.wheel.url, runtime.wheel.sha256) == (url, sha256_of(wheel))
    assert f"/files/{wheel.name.replace('+', '%2B')}" in mirror.requests
    text = log.read_text()
    assert f"downloading torch from {url}" in text and "checked torch 2.14.1+cu130 (CUDA 13.0" in text
    assert (runtime.site_packages / "torch-2.14.1+cu130.dist-info" / "METADATA").is_file()
    record = provenance.build_record(JOB, toolchain=None, torch_wheel=runtime.origin())
    assert record["torch"]["wheel"] == {  # type: ignore[index]
        "filename": wheel.name, "url": url, "sha256": sha256_of(wheel), "index": mirror.template.format(
            accelerator="cu130"), "origin": TORCH_INDEX}


def test_a_mirror_serving_another_cuda_fails_the_job_naming_both(
    registry_torch: Path, mirror: Mirror, own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = dataclasses.replace(JOB, accelerator=Accelerator.parse("cu126"))
    mirror.wheels["cu126"] = [relabel(registry_torch, tmp_path, "cu126")]  # named cu126, built for CUDA 13.0
    monkeypatch.setenv("WHEELWRIGHT_TORCH_INDEX", mirror.template)
    with pytest.raises(TorchMismatch) as raised:
        runtime_env(job, load_facts())
    message = str(raised.value)
    assert "served torch 2.14.1+cu130 (CUDA 13.0" in message and "needs torch 2.14.1 (CUDA 12.6" in message
    assert "\n" not in message
    assert not [p for p in (own_cache / "runtime").glob("torch-*") if p.is_dir()]  # nothing half-checked to reuse
