"""Package data comes from builder/core/resources.py, the one list of the files wheelwright opens at run time;
everything else is in pyproject.toml."""

import importlib.util
import sys
from pathlib import Path

from setuptools import setup

_spec = importlib.util.spec_from_file_location(
    "_resources", Path(__file__).parent / "builder" / "core" / "resources.py"
)
assert _spec is not None and _spec.loader is not None
_resources = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _resources  # dataclasses look their module up there
_spec.loader.exec_module(_resources)

setup(package_data=_resources.PACKAGE_DATA)
