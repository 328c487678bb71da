"""Where a job's torch comes from (builder/steps/torch_index.py): the accelerator's torch index, the registry only
for the registry's own variant, the best wheel for the job's interpreter, and the template's validation."""

from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path
from typing import Any

import pytest

from builder.core.errors import ConfigError
from builder.plan.accelerator import Accelerator
from builder.plan.facts import load_facts
from builder.plan.matrix import DEFAULT_TORCH_INDEX
from builder.steps import torch_index
from builder.steps.environment import check_torch_wheel
from builder.steps.fetch import IndexUnreachable
from builder.steps.torch_index import (
    REGISTRY,
    TORCH_INDEX,
    TorchMismatch,
    TorchUnavailable,
    TorchWheel,
    find_torch_wheel,
    torch_index_template,
)
from tests.jobs import local_job

FACTS = load_facts()
MIRROR = "https://mirror.test/whl/{accelerator}/"
LINUX = "manylinux_2_28_x86_64"


def entry(filename: str, sha256: str = "ab" * 32) -> dict[str, Any]:
    return {"filename": filename, "url": f"https://files.test/{filename}", "hashes": {"sha256": sha256}}


class Pages(dict[str, list[dict[str, Any]]]):
    """Index pages by URL (one not held is unreachable), and the URLs read, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []


@pytest.fixture
def pages(monkeypatch: pytest.MonkeyPatch) -> Pages:
    """The index pages the look-up may read: a URL mapped to None is unreachable."""
    served = Pages()
    asked = served.asked
    monkeypatch.setenv("WHEELWRIGHT_INDEX_URL", "https://registry.test/simple/")

    def index_files(page: str, who: str) -> list[dict[str, Any]]:
        asked.append(page)
        files = served.get(page)
        if files is None:
            raise IndexUnreachable(f"{who}: cannot read the index page {page}: Name or service not known")
        return files

    monkeypatch.setattr(torch_index, "index_files", index_files)
    return served


def test_the_torch_index_serves_the_job_s_variant_by_its_local_label(pages: dict[str, Any]) -> None:
    pages["https://mirror.test/whl/cu130/torch/"] = [
        entry(f"torch-2.14.1+cu130-cp311-cp311-{LINUX}.whl"),
        entry(f"torch-2.14.1+cu130-cp312-cp312-{LINUX}.whl"),
        entry(f"torch-2.13.0+cu130-cp311-cp311-{LINUX}.whl"),
    ]
    wheel = find_torch_wheel(local_job(), FACTS, MIRROR)
    assert wheel.filename == f"torch-2.14.1+cu130-cp311-cp311-{LINUX}.whl"
    assert (wheel.origin, wheel.index, wheel.sha256) == (TORCH_INDEX, "https://mirror.test/whl/cu130/", "ab" * 32)


def test_an_unreachable_torch_index_falls_back_to_the_registry_for_its_own_variant_only(
    pages: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    pages["https://registry.test/simple/torch/"] = [
        entry(f"torch-2.14.1-cp311-cp311-{LINUX}.whl"),
        entry(f"torch-2.14.1+cpu-cp311-cp311-{LINUX}.whl"),  # a plain 2.14.1 asks for no +cpu build
    ]
    caplog.set_level("INFO")
    wheel = find_torch_wheel(local_job(), FACTS, MIRROR)
    assert (wheel.filename, wheel.origin) == (f"torch-2.14.1-cp311-cp311-{LINUX}.whl", REGISTRY)
    assert "cannot be reached" in caplog.text and "taking it from the registry" in caplog.text

    other = dataclasses.replace(local_job(), torch="2.12.1", accelerator=Accelerator.parse("cu126"))
    with pytest.raises(TorchUnavailable, match=r"published only on PyTorch's index, and https://mirror.test/whl/cu126/"):
        find_torch_wheel(other, FACTS, MIRROR)


def test_a_host_that_does_not_answer_is_asked_once_per_run(pages: Pages) -> None:
    registry = "https://registry.test/simple/torch/"
    pages[registry] = [entry(f"torch-2.14.1-cp311-cp311-{LINUX}.whl"), entry(f"torch-2.12.1-cp311-cp311-{LINUX}.whl")]
    run = torch_index.IndexPages()
    for job in (local_job(), dataclasses.replace(local_job(), torch="2.12.1")):
        for accelerator in ("cu130", "cu126", "cu132"):
            try:
                find_torch_wheel(dataclasses.replace(job, accelerator=Accelerator.parse(accelerator)), FACTS, MIRROR,
                                 run)
            except TorchUnavailable:
                pass
    mirror_pages = [page for page in pages.asked if page.startswith("https://mirror.test/")]
    assert mirror_pages == ["https://mirror.test/whl/cu130/torch/"]  # then the host is known to be down
    assert pages.asked.count(registry) == 1


def test_the_best_tag_for_the_interpreter_wins_and_foreign_ones_never_do(pages: dict[str, Any]) -> None:
    pages["https://mirror.test/whl/cu130/torch/"] = [
        entry("torch-2.14.1+cu130-cp311-cp311-manylinux2014_x86_64.whl", "11" * 32),  # older than 2_28: pip's order
        entry("torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_aarch64.whl", "22" * 32),
        entry(f"torch-2.14.1+cu130-cp311-cp311-{LINUX}.whl", "33" * 32),
        entry("torch-2.14.1+cu130-cp311-cp311-win_amd64.whl", "44" * 32),
        entry("not a wheel at all"),
    ]
    assert find_torch_wheel(local_job(), FACTS, MIRROR).sha256 == "33" * 32


def test_a_reachable_index_without_the_wheel_names_what_is_missing(pages: dict[str, Any]) -> None:
    pages["https://mirror.test/whl/cu130/torch/"] = [entry(f"torch-2.14.1+cu130-cp312-cp312-{LINUX}.whl")]
    with pytest.raises(TorchUnavailable, match=r"lists no torch 2.14.1\+cu130 wheel for cp311 on x86_64"):
        find_torch_wheel(local_job(), FACTS, MIRROR)


def test_the_environment_overrides_the_matrix_template(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WHEELWRIGHT_TORCH_INDEX", raising=False)
    assert torch_index_template() == DEFAULT_TORCH_INDEX
    monkeypatch.setenv("WHEELWRIGHT_TORCH_INDEX", MIRROR)
    assert torch_index_template() == MIRROR


@pytest.mark.parametrize(
    "value",
    [
        "download.pytorch.org/whl/{accelerator}/",  # no scheme
        "ftp://mirror.test/{accelerator}/",  # a scheme pip's index does not read
        "https://mirror.test/{cuda}/",  # a field that is not {accelerator}
        "https://mirror.test/{accelerator",  # an unbalanced brace
        "https://mirror.test/whl/\n{accelerator}/",  # a newline (a header or a generated script would break)
        "https://mirror.test/whl /{accelerator}/",  # a space
        "https://mirror.test/\x1b[0m/{accelerator}/",  # a control character (an escape sequence)
    ],
)
def test_a_bad_torch_index_in_the_environment_is_one_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("WHEELWRIGHT_TORCH_INDEX", value)
    with pytest.raises(ConfigError, match=r"^WHEELWRIGHT_TORCH_INDEX: torch index .* is not an http\(s\) or file URL"):
        torch_index_template()


def torch_wheel_file(tmp_path: Path, version_py: str) -> Path:
    path = tmp_path / f"torch-2.14.1+cu130-cp311-cp311-{LINUX}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("torch/version.py", version_py)
    return path


SERVED = TorchWheel(filename="t.whl", url="http://mirror.test/t.whl", sha256=None, index="http://mirror.test/",
                    origin=TORCH_INDEX)
VERSION_PY = "from typing import Optional\n__version__ = '2.14.1+cu130'\ncuda: Optional[str] = '{cuda}'\nhip = None\n"


def test_the_wheel_s_own_version_file_is_checked_before_anything_is_installed(tmp_path: Path) -> None:
    check_torch_wheel(local_job(), torch_wheel_file(tmp_path, VERSION_PY.format(cuda="13.0")), SERVED)
    job = dataclasses.replace(local_job(), accelerator=Accelerator.parse("cu126"))
    with pytest.raises(TorchMismatch) as raised:
        check_torch_wheel(job, torch_wheel_file(tmp_path, VERSION_PY.format(cuda="13.0")), SERVED)
    assert str(raised.value) == (
        "http://mirror.test/t.whl served torch 2.14.1+cu130 (CUDA 13.0), but "
        "causal-conv1d-1.7.0+pt214cu126-cp311-x86_64 needs torch 2.14.1 (CUDA 12.6, cxx11 ABI)"
    )


@pytest.mark.parametrize("content", [None, "__version__ = (", "import os\nos.system('echo owned')\n"])
def test_a_wheel_without_a_readable_version_file_is_refused(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "torch.whl"
    if content is None:
        path.write_bytes(b"not a zip")
    else:
        torch_wheel_file(tmp_path, content).rename(path)
    with pytest.raises(TorchMismatch, match="served"):
        check_torch_wheel(local_job(), path, SERVED)
