"""The build job: one wheel for one (package version, torch, accelerator, Python), and its variant label."""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.utils import canonicalize_name

from builder.plan.accelerator import Accelerator, base_python, format_label, torch_minor
from builder.plan.arch import Arch


@dataclass(frozen=True, kw_only=True)
class UpstreamFiles:
    """Files the sdist lacks (csrc/ of old releases), from upstream's release commit, pinned by content."""

    repo: str  # owner/name on the forge
    commit: str
    paths: tuple[str, ...]
    tree_digest: str  # builder.steps.upstream.tree_digest of ``paths``


@dataclass(frozen=True, kw_only=True)
class Sdist:
    filename: str
    sha256: str
    url: str | None = None  # None: look it up on the registry by filename
    upstream: UpstreamFiles | None = None


# The patches matrix.yaml may name. The plan checks names only; the functions are builder.steps.recipes.patches,
# which registers exactly these (the plan layer does not import the build steps).
PATCH_NAMES = frozenset({"cxx20", "drop-buildtools", "split-causal-conv1d-bwd"})


@dataclass(frozen=True, kw_only=True)
class PatchRef:
    """A recipe patch (a function in builder.steps.recipes) and the ranges it applies to."""

    name: str
    versions: str = ""  # package version specifier, "" = all
    torch: str = ""  # torch version specifier, "" = all


@dataclass(frozen=True, kw_only=True)
class Recipe:
    env: tuple[tuple[str, str], ...] = ()
    abi_env: str | None = None
    arch_control: str = "gencode-rewrite"
    patches: tuple[PatchRef, ...] = ()
    import_names: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Job:
    package: str
    version: str
    sdist: Sdist
    recipe: Recipe
    torch: str
    accelerator: Accelerator
    python: str
    cxx11_abi: bool
    archs: tuple[Arch, ...]  # parsed once: a plan (or a test) may name them as matrix.yaml spells them
    manylinux: str
    platform: str = "x86_64"
    label: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", format_label(self.torch, self.accelerator))
        archs: tuple[Arch | str, ...] = self.archs
        object.__setattr__(self, "archs", tuple(a if isinstance(a, Arch) else Arch.parse(a) for a in archs))

    @property
    def python_tag(self) -> str:
        """``cp311``; a free-threaded Python keeps its suffix (``cp313t``), as its ABI tag and pages do."""
        return "cp" + self.python.replace(".", "")

    @property
    def interpreter_tag(self) -> str:
        """The wheel's interpreter tag: ``cp313`` for both 3.13 and the free-threaded 3.13t (PEP 703)."""
        return "cp" + base_python(self.python).replace(".", "")

    @property
    def abi_tag(self) -> str:
        """The wheel's ABI tag: ``cp313``, or ``cp313t`` for the free-threaded build."""
        return self.python_tag

    @property
    def local_version(self) -> str:
        """The version the wheel carries, in METADATA and filename alike: ``1.7.0+pt214cu130``."""
        return f"{self.version}+{self.label}"

    @property
    def identifier(self) -> str:
        """Stable and selectable with fnmatch: ``causal-conv1d-1.7.0+pt214cu130-cp311-x86_64``."""
        return f"{self.package}-{self.local_version}-{self.python_tag}-{self.platform}"

    @property
    def torch_minor(self) -> str:
        return torch_minor(self.torch)

    @property
    def torch_requirement(self) -> str:
        """What the wheel's Requires-Dist pins: the job's torch minor, any patch or local build."""
        return f"torch=={self.torch_minor}.*"

    @property
    def dist_name(self) -> str:
        """The distribution name as wheel filenames spell it (PEP 427 / binary distribution format)."""
        return canonicalize_name(self.package).replace("-", "_")

    def as_matrix_entry(self) -> dict[str, object]:
        """One row of GitHub Actions' ``strategy.matrix.include``."""
        return {
            "id": self.identifier,
            "package": self.package,
            "version": self.version,
            "label": self.label,
            "torch": self.torch,
            "accelerator": self.accelerator.name,
            "toolkit": f"{self.accelerator.kind} {self.accelerator.version}",
            "python": self.python,
            "python_tag": self.python_tag,
            "cxx11_abi": self.cxx11_abi,
            "archs": ";".join(map(str, self.archs)),
            "manylinux": self.manylinux,
            "platform": self.platform,
        }
