"""A small variant channel for selection tests (the integration test and tests/gpu/test_variant_selection.py): three
verified-then-converted builds of causal-conv1d 1.7.0, torch stubs, a venv per torch, and the one-URL uv command."""

from __future__ import annotations

import dataclasses
import hashlib
import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from builder.plan.accelerator import Accelerator
from builder.plan.job import Job
from builder.steps import provenance, slim
from builder.steps.variant import make_twin
from scripts.bench.wheels import job_wheel, wheel_of_files, with_provenance
from tests.jobs import local_job

BUILDS = (  # (torch, accelerator, archs): three variants of 1.7.0
    ("2.14.1", "cu130", ("9.0", "12.0+PTX")),
    ("2.14.1", "cu126", ("8.0", "9.0")),
    ("2.13.0", "cu130", ("9.0",)),
)
TORCHES = ("2.14.1", "2.13.0", "2.12.0")  # 2.12: a torch the channel holds no build for


def write_channel(output: Path) -> Path:
    """dist/ and variant/ under ``output`` as the build leaves them, plus torch stub wheels; returns their folder."""
    (output / "dist").mkdir(parents=True, exist_ok=True)
    for torch, accelerator, archs in BUILDS:
        job = dataclasses.replace(local_job(), torch=torch, accelerator=Accelerator.parse(accelerator), archs=archs,
                                  python=f"{sys.version_info.major}.{sys.version_info.minor}")
        files = {"causal_conv1d/__init__.py": f'LABEL = "{job.label}"\n'.encode()}
        wheel = job_wheel(output / "dist", job, files, platform="manylinux_2_28_x86_64")
        make_twin(with_provenance(wheel, job), output / "variant")
    torch_wheels = output / "torch"
    torch_wheels.mkdir(exist_ok=True)
    for version in TORCHES:
        wheel_of_files(torch_wheels, name="torch", version=version, python_tag="py3", platform="any", pure=True,
                   requires=(), files={"torch/__init__.py": f'__version__ = "{version}"\n'.encode()})
    return torch_wheels


def write_slims(output: Path, label: str = "pt214cu130", archs: tuple[str, ...] = ("9.0", "12.0")) -> list[Path]:
    """Slim variants of the ``label`` build of write_channel, as the build cuts them (builder/steps/slim.py), but
    from a wheel with no GPU library: the payload is the fat wheel's, the provenance names it and the slim archs."""
    (fat,) = (output / "dist").glob(f"*+{label}-*.whl")
    job = job_of(label)
    made = []
    for arch in archs:
        work = output / "cut" / arch
        work.mkdir(parents=True, exist_ok=True)
        wheel = Path(shutil.copy(fat, work / fat.name))
        provenance.embed(wheel, slim.cut_record(slim.Origin.of(fat), job, arch))
        made.append(make_twin(wheel, output / "variant", label=slim.slim_label(label, arch)).path)
    return made


def job_of(label: str) -> Job:
    """The job of BUILDS whose label is ``label``."""
    torch, accelerator, planned = next(b for b in BUILDS if f"pt{b[0].replace('.', '')[:3]}{b[1]}" == label)
    return dataclasses.replace(local_job(), torch=torch, accelerator=Accelerator.parse(accelerator), archs=planned,
                               python=f"{sys.version_info.major}.{sys.version_info.minor}")


def installed_variant(python: Path) -> str | None:
    """The label of the variant.json of the installed causal-conv1d (a null carries its fat twin's), or None."""
    found = list(Path(python).parent.parent.glob("lib/python*/site-packages/causal_conv1d-*.dist-info/variant.json"))
    return next(iter(json.loads(found[0].read_text())["variants"])) if found else None


def venv_with_torch(uv: Path, root: Path, torch_wheels: Path, torch: str, env: dict[str, str]) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", root / "venv"], env=env, check=True)
    python = root / "venv" / "bin" / "python"
    subprocess.run([uv, "pip", "install", "--python", python, "--no-index", "-f", torch_wheels, f"torch=={torch}"],
                   env=env, check=True, capture_output=True)
    return python


def uv_one_url(uv: Path, python: Path, env: dict[str, str], index: str) -> subprocess.CompletedProcess:
    """The landing page's uv command, as a user runs it (it may fail: the caller judges the outcome)."""
    command = [uv, "pip", "install", "--python", python, "--preview-features", "wheel-variants", "causal-conv1d",
               "--index-url", index]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def installed(python: Path) -> tuple[str | None, str]:
    """(label of the installed causal-conv1d or None, torch version) in ``python``'s environment."""
    probe = ("import importlib.util, torch; spec = importlib.util.find_spec('causal_conv1d');"
             "label = __import__('causal_conv1d').LABEL if spec else None; print(label, torch.__version__)")
    label, torch = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    return (None if label == "None" else label), torch


def landing_uv_command(site: Path) -> str:
    """The landing page's one uv command for any torch, as a user copies it (tags and entities undone)."""
    page = (site / "index.html").read_text()
    block = re.search(r'<section class="variant-channel".*?<div class="cmd"><code>(.*?)</code>', page, re.DOTALL)
    assert block is not None, "the landing page shows no uv block"
    return html.unescape(re.sub(r"<[^>]+>", "", block.group(1)))


def run_in_venv(uv: Path, command: str, python: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``command`` through bash in the activated venv of ``python`` (its python first on PATH, as after activate),
    with the pinned ``uv`` next on PATH."""
    venv = python.parent.parent
    env = {**env, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}:{uv.parent}:{env.get('PATH', '')}"}
    return subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=120, check=False)


def declare_torch_provider(site: Path, root: str, provider: dict[str, object]) -> None:
    """Rewrite the ``abi_dependency`` provider of causal-conv1d 1.7.0's variants.json under ``site/root`` and the
    hash its project page links it with (an experiment on how uv treats other provider declarations)."""
    folder = site / root / "causal-conv1d"
    document_path = folder / "causal_conv1d-1.7.0-variants.json"
    document = json.loads(document_path.read_text())
    document["providers"]["abi_dependency"] = provider
    data = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
    document_path.write_bytes(data)
    page = folder / "index.html"
    digest = hashlib.sha256(data).hexdigest()
    page.write_text(re.sub(r"(variants\.json#sha256=)[0-9a-f]{64}", rf"\g<1>{digest}", page.read_text()))
