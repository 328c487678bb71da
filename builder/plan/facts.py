"""Torch release facts (builder/data/torch.toml): read and checked whole by facts_file.py's pydantic models, which
are imported only here, when the file is read, into releases.py's frozen dataclasses the plan uses."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from builder.core.errors import FactsError
from builder.core.resources import TORCH_FACTS
from builder.plan.releases import TorchFacts


def parse_facts(raw: Mapping[str, Any], source: str) -> TorchFacts:
    from builder.core.data import validate
    from builder.plan.facts_file import FactsFile

    return validate(raw, FactsFile, source, error=FactsError).facts()


def load_facts(path: Path | None = None) -> TorchFacts:
    if path is None:
        return _default_facts()
    from builder.core.data import load_data
    from builder.plan.facts_file import FactsFile

    return load_data(path, FactsFile, what="the torch facts", error=FactsError).facts()


@functools.cache
def _default_facts() -> TorchFacts:
    from builder.core.data import load_data
    from builder.plan.facts_file import FactsFile

    return load_data(TORCH_FACTS, FactsFile, what="the torch facts", error=FactsError).facts()
