"""Every data file and template wheelwright opens at run time, named once.

Code opens these through the names below, never by a path of its own, and setup.py declares the package data from
``PACKAGE_DATA`` here: a file the code reads cannot be missing from the wheel. This module imports only the standard
library, because setup.py loads it by path before wheelwright is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


@dataclass(frozen=True)
class Resource:
    """A file inside one of wheelwright's packages, e.g. ``torch.toml`` in ``builder.data``."""

    package: str
    name: str

    @property
    def source(self) -> str:
        """The path in the repository, for messages: ``builder/data/torch.toml``."""
        return f"{self.package.replace('.', '/')}/{self.name}"

    def traversable(self) -> Traversable:
        return resources.files(self.package).joinpath(self.name)

    def read_text(self) -> str:
        return self.traversable().read_text(encoding="utf-8")

    def read_bytes(self) -> bytes:
        return self.traversable().read_bytes()


# -- data files (builder/data) -----------------------------------------------------------------------------------
TORCH_FACTS = Resource("builder.data", "torch.toml")  # torch releases: Pythons, toolkits, ABI, manylinux, archs
RECIPE_FACTS = Resource("builder.data", "recipes.toml")  # per-package facts about upstream setup.py files
REPAIR_EXCLUDES = Resource("builder.data", "repair.toml")  # sonames torch provides; never grafted
BUILD_REQUIREMENTS = Resource("builder.data", "build-requirements.txt")  # the build venv's pinned tools
TOOLKITS = Resource("builder.data", "toolkits.toml")  # where each CUDA version's toolkit and host compiler come from
ARCH_FACTS = Resource("builder.data", "archs.toml")  # SASS a toolkit range miscompiles, per package
IMAGE_BASES = Resource("builder.data", "images.toml")  # builder-image bases: glibc, compiler, Pythons, digests
COMPILE_COSTS = Resource("builder.data", "compile-costs.toml")  # seed per-(unit, arch) costs for plan --estimate
DEVICE_REUSE = Resource("builder.data", "device-reuse.toml")  # torch versions whose device steps are the same
PLATFORM_FACTS = Resource("builder.data", "platforms.toml")  # CPU platforms: ELF machine, suffix, page size, cross

# -- code run as a file (not imported) ---------------------------------------------------------------------------
RECIPE_PRELUDE = Resource("builder.steps.recipes", "prelude.py")  # prepended to an upstream setup.py
OBJCACHE_SCRIPT = Resource("builder.steps.programs", "objcache.py")  # PYTORCH_NVCC wrapper, run by path
NVCC_PLAN_SCRIPT = Resource("builder.steps.programs", "nvcc_plan.py")  # the wrapper's core pool, imported beside it
STAGECACHE_SCRIPT = Resource("builder.steps.programs", "stagecache.py")  # the pool's device-step cache, beside it
CROSS_CC_SCRIPT = Resource("builder.steps.programs", "cross_cc.py")  # the cross compiler's wrapper, run by path

# -- templates (index_site/templates), loaded by jinja2's PackageLoader -----------------------------------------
TEMPLATE_PACKAGE = "index_site"
TEMPLATE_FOLDER = "templates"
TEMPLATES = tuple(
    Resource(TEMPLATE_PACKAGE, f"{TEMPLATE_FOLDER}/{name}")
    for name in (
        "_macros.html", "base.html", "coverage.html", "landing.html", "setup.html",
        "simple_project.html", "simple_root.html", "site.css", "site.js",
    )
)

# What a build reads besides the job itself; the resume hash covers each one's bytes (builder/farm/build.py).
# torch.toml and archs.toml are not here: the facts a job is planned from (ABI, manylinux, archs, toolkit version)
# are fields of the job.
BUILD_DATA = (RECIPE_FACTS, REPAIR_EXCLUDES, BUILD_REQUIREMENTS, TOOLKITS, RECIPE_PRELUDE, OBJCACHE_SCRIPT,
              NVCC_PLAN_SCRIPT, STAGECACHE_SCRIPT, PLATFORM_FACTS, CROSS_CC_SCRIPT)

# Files that are not Python modules, by package: setup.py's package_data. (.py files ship as modules anyway.)
NOT_MODULES = (
    TORCH_FACTS,
    RECIPE_FACTS,
    REPAIR_EXCLUDES,
    BUILD_REQUIREMENTS,
    TOOLKITS,
    ARCH_FACTS,
    IMAGE_BASES,
    COMPILE_COSTS,
    DEVICE_REUSE,
    PLATFORM_FACTS,
    *TEMPLATES,
)
PACKAGE_DATA: dict[str, list[str]] = {}
for _resource in NOT_MODULES:
    PACKAGE_DATA.setdefault(_resource.package, []).append(_resource.name)
del _resource
