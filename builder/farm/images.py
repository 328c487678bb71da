"""Builder images: which ones a plan needs (one per toolkit family and version), their Dockerfiles, build args and
build contexts (with the CUDA toolkit an image carries), the base they start from, and building them through an
Engine, with the bootstrapped base and the built images kept under the cache so a fresh daemon loads them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator, model_validator

from builder.core.data import load_data, validate
from builder.core.errors import ConfigError, ToolchainError, WheelwrightError
from builder.core.files import parse_toml
from builder.core.resources import IMAGE_BASES
from builder.core.runner import run
from builder.core.settings import cache_root, setting_path
from builder.farm.engine import Engine
from builder.plan.accelerator import Accelerator, python_key
from builder.plan.job import Job
from builder.steps import toolchain
from builder.steps.toolchain import ToolkitSource

log = logging.getLogger(__name__)

DEFAULT_BASE = "bullseye"
CONTEXT_FILES = ("install-python.sh", "rocm/fix-bf16-header.sh")
TOOLKIT_CONTEXT = "toolkit"  # the context's folder the Dockerfile copies to CARRIED_AT (empty when none is carried)
CARRIED_AT = Path("/opt/wheelwright/toolkit")


def _debian_sources(carries: tuple[str, ...]) -> tuple[str, ...]:
    """A carried toolkit is one the host's provider unpacks into a folder of its own: a Debian source."""
    debian = [source.name for source in toolchain.load_sources() if source.kind == "debian"]
    for name in carries:
        if name not in debian:
            raise ValueError(f"{name!r} is not a Debian source of builder/data/toolkits.toml (those are: "
                             f"{', '.join(debian)})")
    return carries


class Base(BaseModel):
    """Where an image starts: a locally bootstrapped Debian, or a registry image pinned by digest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str
    kind: Literal["debootstrap", "registry"]
    glibc: str
    toolkit: Literal["mounted", "image"]  # mounted: the host's, at run time; image: the base ships it
    carries: Annotated[tuple[str, ...], AfterValidator(_debian_sources)] = ()  # copied in rather than mounted
    families: tuple[str, ...]
    pythons: tuple[str, ...]
    runner_python: str
    compiler_packages: str = ""  # installed into the image where the base's compiler is too old
    cc: str = ""  # CC/CXX for the container's builds ("" = the base's default)
    cxx: str = ""
    suite: str = ""
    image: str = ""
    repository: str = ""
    digests: dict[str, str] | None = None

    @field_validator("carries")
    @classmethod
    def _carries_only_where_mounted(cls, carries: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        toolkit = info.data.get("toolkit")  # declared above, so checked already
        if carries and toolkit != "mounted":
            raise ValueError(f"the base ships its own toolkit (toolkit = {toolkit!r}); only a base whose toolkit is "
                             "mounted can carry one instead")
        return carries

    def reference(self, family: str, version: str) -> str:
        """The FROM reference; a registry base without a pinned digest says so instead of floating on a tag."""
        if self.kind == "debootstrap":
            return self.image
        tag = f"{family}{version}"
        digest = (self.digests or {}).get(tag)
        return f"{self.repository}:{tag}@{digest}" if digest else f"{self.repository}:{tag}"

    def pinned(self, family: str, version: str) -> bool:
        return self.kind == "debootstrap" or f"{family}{version}" in (self.digests or {})


class ImagesFile(BaseModel):
    """builder/data/images.toml: [bases.NAME] tables, each named by its key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bases: dict[str, Base]

    @model_validator(mode="before")
    @classmethod
    def _named(cls, raw: object) -> object:
        bases = raw.get("bases") if isinstance(raw, Mapping) else None
        if not isinstance(raw, Mapping) or not isinstance(bases, Mapping):
            return raw
        named = {k: {**v, "name": k} if isinstance(v, Mapping) else v for k, v in bases.items()}
        return {**raw, "bases": named}


def load_bases(text: str | None = None) -> dict[str, Base]:
    """The bases of builder/data/images.toml (or of ``text``, read as that file), checked."""
    if text is None:
        return dict(load_data(IMAGE_BASES, ImagesFile, what="the image bases").bases)
    return dict(validate(parse_toml(text, IMAGE_BASES.source), ImagesFile, IMAGE_BASES.source).bases)


def carried_toolkit(base: Base, accelerator: Accelerator) -> ToolkitSource | None:
    """The toolkit an image of ``accelerator`` on ``base`` carries, if any of ``carries`` serves it: as a job picks
    its source, the exact release first, then toolkits.toml's order."""
    chosen = tuple(source for source in toolchain.load_sources() if source.name in base.carries)
    return next(iter(toolchain.serving(accelerator, chosen)), None) if chosen else None


def docker_dir() -> Path:
    """The Dockerfiles and their context (the repository's docker/ folder)."""
    folder = setting_path("WHEELWRIGHT_DOCKER_DIR") or Path(__file__).resolve().parents[2] / "docker"
    if not (folder / "cuda.Dockerfile").is_file():
        raise ToolchainError(
            f"no Dockerfiles at {folder}", tip="run from a wheelwright checkout or set WHEELWRIGHT_DOCKER_DIR"
        )
    return folder


@dataclass(frozen=True, kw_only=True)
class ImageSpec:
    """One builder image: a toolkit family and version on a base, with the Pythons its jobs need and the toolkit it
    carries inside (copied from the host's cache when it is built), if any."""

    accelerator: Accelerator
    base: Base
    pythons: tuple[str, ...]
    carried: ToolkitSource | None = None

    @property
    def family(self) -> str:
        return "cuda" if self.accelerator.kind == "cuda" else "rocm"

    @property
    def name(self) -> str:
        """``cuda13.0``, ``rocm6.0``: what the workflow's build jobs are grouped by."""
        return f"{self.family}{self.accelerator.version}"

    @property
    def dockerfile(self) -> str:
        return f"{self.family}.Dockerfile"

    @property
    def mounts_toolkit(self) -> bool:
        """Whether a job's container gets the host's toolkit mounted: the base ships none and the image carries none."""
        return self.base.toolkit == "mounted" and self.carried is None

    @property
    def toolkit_origin(self) -> str:
        """Where a job in this image gets its toolkit, in words (`images list`)."""
        if self.carried is not None:
            return f"carries {self.carried.name}"
        return "the host's, mounted" if self.mounts_toolkit else "the base's"

    @property
    def cuda_home(self) -> Path:
        """Where the image's toolkit is: the base's own, the one it carries, or the host's mounted at run time."""
        release = self.carried.release if self.carried else self.accelerator.version
        return Path(f"/usr/local/cuda-{release}")

    @property
    def build_args(self) -> dict[str, str]:
        args = {"BASE": self.base.reference(self.family, self.accelerator.version)}
        if self.family == "cuda":
            args.update(CUDA_VERSION=self.accelerator.version, CUDA_HOME=str(self.cuda_home), TOOLKIT=self.toolkit)
        else:
            args.update(ROCM_VERSION=self.accelerator.version)
        args.update(
            PYTHONS=" ".join(self.pythons),
            RUNNER_PYTHON=self.base.runner_python,
            COMPILER_PACKAGES=self.base.compiler_packages,
        )
        return args

    @property
    def toolkit(self) -> str:
        """The carried toolkit as its source pins it (so the tag changes when it does): "" for none."""
        source = self.carried
        if source is None:
            return ""
        return f"{source.name}: {' '.join(source.packages)} ({source.suite} {' '.join(source.components)})"

    def content_hash(self, folder: Path) -> str:
        """Dockerfile, context scripts and build args: change any and the tag changes (a cache key, too)."""
        digest = hashlib.sha256()
        for relative in (self.dockerfile, *CONTEXT_FILES):
            digest.update(relative.encode() + b"\0" + (folder / relative).read_bytes())
        digest.update(repr(sorted(self.build_args.items())).encode())
        return digest.hexdigest()[:12]

    def tag(self, folder: Path) -> str:
        return f"wheelwright/builder:{self.name}-{self.base.name}-{self.content_hash(folder)}"

    def not_buildable(self) -> str | None:
        """Why this image is rendered and linted but not built here, or None."""
        if self.family not in self.base.families:
            return f"base {self.base.name} has no {self.family} images"
        missing = [p for p in self.pythons if p not in self.base.pythons]
        if missing:
            has = ", ".join(self.base.pythons)
            return f"base {self.base.name} cannot provide Python {', '.join(missing)} (it has {has})"
        if not self.base.pinned(self.family, self.accelerator.version):
            reference = self.base.reference(self.family, self.accelerator.version)
            return f"{reference} has no pinned digest (`wheelwright images pin`)"
        return None


def images_for(
    jobs: Sequence[Job], base_name: str = DEFAULT_BASE, bases: Mapping[str, Base] | None = None
) -> list[ImageSpec]:
    """The images a plan needs, in plan order. ROCm has no local base: its images use manylinux_2_28's."""
    bases = bases or load_bases()
    if base_name not in bases:
        raise ConfigError(f"--base {base_name!r} is not in builder/data/images.toml; known: {', '.join(bases)}")
    pythons: dict[Accelerator, dict[str, None]] = {}
    for job in jobs:
        pythons.setdefault(job.accelerator, {})[job.python] = None
    specs = []
    for accelerator, minors in pythons.items():
        family = "cuda" if accelerator.kind == "cuda" else "rocm"
        base = (
            bases[base_name]
            if family in bases[base_name].families
            else next(b for b in bases.values() if family in b.families)
        )
        ordered = tuple(sorted(minors, key=python_key))
        carried = carried_toolkit(base, accelerator)
        specs.append(ImageSpec(accelerator=accelerator, base=base, pythons=ordered, carried=carried))
    return specs


def image_for(job: Job, specs: Sequence[ImageSpec]) -> ImageSpec:
    return next(spec for spec in specs if spec.accelerator == job.accelerator)


# -- render ----------------------------------------------------------------------------------------------------------


def render(spec: ImageSpec, destination: Path, folder: Path | None = None, *, toolkit: Path | None = None) -> Path:
    """A self-contained build context for one image: Dockerfile, scripts, the toolkit it carries (``toolkit``, else
    the provider's unpacked folder, provided now), build args, and the command that builds it."""
    folder = folder or docker_dir()
    target = destination / spec.name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    shutil.copy2(folder / spec.dockerfile, target / "Dockerfile")
    for relative in CONTEXT_FILES:
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(folder / relative, target / relative)
    home = toolkit or carried_home(spec)
    if home is None:
        (target / TOOLKIT_CONTEXT).mkdir()  # the Dockerfile's COPY needs the folder; an empty one adds nothing
    else:
        link_tree(home, target / TOOLKIT_CONTEXT)
    args = "".join(f"  --build-arg {key}='{value}' \\\n" for key, value in spec.build_args.items())
    (target / "build.sh").write_text(
        f"#!/bin/sh\n# {spec.name} on {spec.base.name}: {spec.not_buildable() or 'buildable'}\n"
        f"exec docker build --file Dockerfile \\\n{args}  --tag {spec.tag(folder)} .\n"
    )
    (target / "build.sh").chmod(0o755)
    return target


def carried_home(spec: ImageSpec) -> Path | None:
    """The host's unpacked folder of the toolkit ``spec`` carries (``root/`` and the ``tree/`` its links reach),
    downloaded and unpacked by the provider if it is not in the cache yet; None when the image carries none."""
    if spec.carried is None:
        return None
    toolchain.provide_debian(spec.carried)
    return toolchain.debian_root(spec.carried)


def link_tree(source: Path, target: Path) -> None:
    """A copy of ``source`` made of hard links where both sides are on one file system (a toolkit is a gigabyte),
    of copies where not; symbolic links stay links (Debian's toolkit links its root/ into its tree/)."""

    def link(from_path: str, to_path: str) -> None:
        try:
            os.link(from_path, to_path)
        except OSError:
            shutil.copy2(from_path, to_path)

    shutil.copytree(source, target, symlinks=True, copy_function=link)


# -- the local base --------------------------------------------------------------------------------------------------


def ensure_base(engine: Engine, base: Base, *, log_path: Path | None = None) -> str:
    """The base image in the engine: already there, else imported from the cached root tarball, else bootstrapped."""
    if base.kind != "debootstrap" or engine.image_id(base.image):
        return "present"
    tarball = cache_root() / "bases" / f"{base.suite}.tar"
    how = "cached"
    if not tarball.is_file():
        bootstrap_rootfs(base.suite, tarball, log_path=log_path)
        how = "bootstrapped"
    engine.import_rootfs(tarball, base.image, log_path=log_path)
    return how


def bootstrap_rootfs(suite: str, tarball: Path, *, log_path: Path | None = None) -> None:
    """debootstrap a minimal Debian ``suite`` from the Debian archive and pack it; renamed into place when whole."""
    if os.geteuid() != 0:
        raise ToolchainError(
            f"bootstrapping Debian {suite} needs root (debootstrap)", tip="run as root, or `docker load` a base image"
        )
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{suite}-", dir=tarball.parent) as work:
        root = Path(work) / "root"
        run(
            ["debootstrap", "--variant=minbase", "--include=ca-certificates", suite, root],
            step=f"debootstrap {suite}",
            log_path=log_path,
        )
        staging = Path(work) / "rootfs.tar"
        with tarfile.open(staging, "w") as archive:
            for entry in sorted(root.iterdir()):
                archive.add(entry, arcname=entry.name)
        staging.rename(tarball)


# -- build -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Built:
    spec: ImageSpec
    tag: str
    how: str  # present | loaded | built
    seconds: float


def saved_image(tag: str) -> Path:
    return cache_root() / "images" / (tag.replace("/", "_").replace(":", "_") + ".tar")


def ensure_image(engine: Engine, spec: ImageSpec, *, log_path: Path | None = None, save: bool = True) -> Built:
    """The image in the engine: present, loaded from the cache's saved copy, or built (then saved for next time)."""
    reason = spec.not_buildable()
    if reason:
        raise WheelwrightError(f"image {spec.name} cannot be built here: {reason}")
    folder = docker_dir()
    tag = spec.tag(folder)
    start = time.monotonic()
    if engine.image_id(tag):
        return Built(spec=spec, tag=tag, how="present", seconds=0.0)
    saved = saved_image(tag)
    if saved.is_file():
        engine.load(saved, log_path=log_path)
        return Built(spec=spec, tag=tag, how="loaded", seconds=round(time.monotonic() - start, 1))
    ensure_base(engine, spec.base, log_path=log_path)
    (cache_root() / "images").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".context-{spec.name}-", dir=cache_root() / "images") as work:
        context = render(spec, Path(work), folder)
        engine.build(context, context / "Dockerfile", tag, spec.build_args, log_path=log_path)
    if save:
        saved.parent.mkdir(parents=True, exist_ok=True)
        for stale in saved.parent.glob(f"{saved.name.rsplit('-', 1)[0]}-*.tar"):
            stale.unlink()  # an older build of the same image and base
        engine.save(tag, saved.with_suffix(".partial"), log_path=log_path)
        saved.with_suffix(".partial").rename(saved)
    return Built(spec=spec, tag=tag, how="built", seconds=round(time.monotonic() - start, 1))
