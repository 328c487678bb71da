"""Recipes: what each package needs done to its unpacked sdist before it builds. apply_recipe() makes the job's
archs, version label and torch pin stick; patches are small functions, registered by name in PATCHES and applied
by version range from matrix.yaml."""

from __future__ import annotations

from builder.steps.recipes.patches import PATCHES
from builder.steps.recipes.recipe import RecipeResult, apply_recipe

__all__ = ["PATCHES", "RecipeResult", "apply_recipe"]
