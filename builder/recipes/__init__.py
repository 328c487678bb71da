"""Recipes: what each package needs done to its unpacked sdist before it builds. Patches are small functions,
registered by name in PATCHES and applied by version range from matrix.yaml."""

from __future__ import annotations

from .patches import PATCHES

__all__ = ["PATCHES"]
