"""The container engine behind one small interface: docker, or podman where that is what the machine has.

Both speak the same command line for what wheelwright needs (build, image inspect, import, save, load, run), so one
class drives either; a missing engine or a stopped daemon is one ToolchainError that says how to get one running.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from builder.core.errors import ToolchainError
from builder.core.runner import ENGINE_INFO, ENGINE_QUERY, Completed, DeadlinePassed, run
from builder.core.settings import setting

ENGINES = ("docker", "podman")
START_DOCKER = (
    "install it with `apt-get install docker.io` and start the daemon: `dockerd > /var/log/dockerd.log 2>&1 &` "
    "(or `systemctl start docker`); podman works too (`apt-get install podman`); WHEELWRIGHT_ENGINE picks one"
)


@dataclass(frozen=True, kw_only=True)
class Mount:
    """A bind mount; ``source`` must exist on the host."""

    source: Path
    target: Path
    read_only: bool = False

    def flag(self) -> str:
        return f"type=bind,source={self.source},target={self.target}" + (",readonly" if self.read_only else "")


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One container run: the image, the command, and what it sees of the host."""

    image: str
    command: tuple[str, ...]
    mounts: tuple[Mount, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    # names the container takes from the engine's own environment: secrets, never on its command line
    inherit: tuple[str, ...] = ()
    workdir: Path | None = None
    name: str | None = None


class Engine(Protocol):
    """What the container backend and `wheelwright images` need from an engine."""

    name: str

    def image_id(self, tag: str) -> str | None: ...
    def build(
        self, context: Path, dockerfile: Path, tag: str, build_args: Mapping[str, str], *, log_path: Path | None = None
    ) -> None: ...
    def import_rootfs(self, tarball: Path, tag: str, *, log_path: Path | None = None) -> None: ...
    def save(self, tag: str, tarball: Path, *, log_path: Path | None = None) -> None: ...
    def load(self, tarball: Path, *, log_path: Path | None = None) -> None: ...
    def run(
        self, spec: RunSpec, *, log_path: Path | None = None, on_line: Callable[[str], None] | None = None
    ) -> None: ...
    def pull_digest(self, reference: str, *, log_path: Path | None = None) -> str: ...


class CliEngine:
    """docker or podman, through its command line."""

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self.name = Path(executable).name

    def _run(self, args: Sequence[str | os.PathLike[str]], step: str, **kwargs: Any) -> Completed:
        return run([self.executable, *args], step=step, **kwargs)

    def image_id(self, tag: str) -> str | None:
        result = self._run(
            ["image", "inspect", "--format", "{{json .Id}}", tag],
            "inspect image",
            capture=True,
            check=False,
            deadline=ENGINE_QUERY,
        )
        return json.loads(result.output.splitlines()[-1]) if result.returncode == 0 else None

    def build(
        self, context: Path, dockerfile: Path, tag: str, build_args: Mapping[str, str], *, log_path: Path | None = None
    ) -> None:
        args: list[str | os.PathLike[str]] = ["build", "--file", dockerfile, "--tag", tag]
        for key, value in build_args.items():
            args += ["--build-arg", f"{key}={value}"]
        self._run([*args, context], f"build image {tag}", log_path=log_path)

    def import_rootfs(self, tarball: Path, tag: str, *, log_path: Path | None = None) -> None:
        self._run(
            ["import", "--change", 'CMD ["/bin/bash"]', tarball, tag],
            f"import {tarball.name} as {tag}",
            log_path=log_path,
        )

    def save(self, tag: str, tarball: Path, *, log_path: Path | None = None) -> None:
        self._run(["save", "--output", tarball, tag], f"save image {tag}", log_path=log_path)

    def load(self, tarball: Path, *, log_path: Path | None = None) -> None:
        self._run(["load", "--input", tarball], f"load {tarball.name}", log_path=log_path)

    def run(self, spec: RunSpec, *, log_path: Path | None = None, on_line: Callable[[str], None] | None = None) -> None:
        self._run(run_arguments(spec), f"run {spec.image}", log_path=log_path, on_line=on_line)

    def pull_digest(self, reference: str, *, log_path: Path | None = None) -> str:
        """Pull ``reference`` and return the registry digest it resolved to (``sha256:...``)."""
        self._run(["pull", reference], f"pull {reference}", log_path=log_path)
        result = self._run(
            ["image", "inspect", "--format", "{{json .RepoDigests}}", reference],
            "inspect digest",
            capture=True,
            deadline=ENGINE_QUERY,
        )
        digests = json.loads(result.output.splitlines()[-1]) or []
        if not digests:
            raise ToolchainError(f"{reference}: the engine reports no registry digest after pulling it")
        return str(digests[0]).split("@", 1)[1]


def run_arguments(spec: RunSpec) -> list[str]:
    """``run --rm ...`` for a spec; the container ends with its command and leaves nothing behind."""
    args = ["run", "--rm", "--init"]
    if spec.name:
        args += ["--name", spec.name]
    for mount in spec.mounts:
        args += ["--mount", mount.flag()]
    for key, value in sorted(spec.env.items()):
        args += ["--env", f"{key}={value}"]
    for key in sorted(spec.inherit):
        args += ["--env", key]
    if spec.workdir:
        args += ["--workdir", str(spec.workdir)]
    return [*args, spec.image, *spec.command]


def find_engine(
    preferred: str | None = None,
    *,
    which: Callable[[str], str | None] = shutil.which,
    responds: Callable[[str], bool] | None = None,
) -> CliEngine:
    """The engine to use: ``preferred`` (or $WHEELWRIGHT_ENGINE), else docker, else podman; it must answer."""
    wanted = preferred or setting("WHEELWRIGHT_ENGINE")
    names = (wanted,) if wanted else ENGINES
    found = [(name, path) for name in names if (path := which(name))]
    if not found:
        looked = wanted or " or ".join(ENGINES)
        raise ToolchainError(f"no container engine: {looked} is not installed", tip=START_DOCKER)
    responds = responds or _responds
    for name, path in found:
        if responds(path):
            return CliEngine(path)
    raise ToolchainError(
        f"{found[0][0]} is installed but its daemon does not answer (`{found[0][0]} info` failed)", tip=START_DOCKER
    )


def _responds(executable: str) -> bool:
    """Whether the engine's daemon answers ``info``; one that hangs is an error naming it and the deadline."""
    command = [executable, "info", "--format", "{{.ServerVersion}}"]
    try:
        return run(command, step="engine info", capture=True, check=False, deadline=ENGINE_INFO).returncode == 0
    except DeadlinePassed:
        seconds = ENGINE_INFO.seconds()
        raise ToolchainError(
            f"`{executable} info` did not answer within {seconds:g} s (total deadline): its daemon hangs",
            tip=f"check the daemon (`{Path(executable).name} info`); restart it if it does not answer: " + START_DOCKER,
        ) from None
