"""Recipes: what each package needs done to its unpacked sdist before it builds. apply_recipe() makes the job's
archs, version label and torch pin stick; patches are small functions, registered by name in PATCHES and applied
by version range from matrix.yaml. prelude.py is no module of ours: its text is pasted at the top of an upstream
setup.py (standard library and setuptools only, Python 3.9+); only a test imports it as a module."""

from __future__ import annotations

from builder.steps.recipes.patches import PATCHES
from builder.steps.recipes.recipe import RecipeResult, apply_recipe

__all__ = ["PATCHES", "RecipeResult", "apply_recipe"]
