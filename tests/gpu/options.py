"""The GPU tests' options, which scripts/gpu/acceptance.py passes one stage at a time, read once into ``Given``: a
test takes the `given` fixture and asks for what it needs (a stage that does not give it skips the test, saying
so); tests/unit builds a ``Given`` of its own to run the judging on recorded reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# (option, help); each takes one value, --arm may be given again
OPTIONS = (
    ("--report", "write each test's result, detail and data, and the stage's data, as JSON here"),
    ("--packages", "comma-separated: the data file's packages to check (default: all of them)"),
    ("--variant", "the arch variant ([arch.variants]) whose stage this is"),
    ("--index-url", "the served site's root URL"),
    ("--dist-dir", "the build's dist/ folder"),  # not --dist: pytest-xdist's
    ("--pip-report", "pip install --report's JSON"),
    ("--doctor-report", "the site's doctor.py --json output"),
    ("--doctor-cli-report", "`wheelwright doctor --json`'s output"),
    ("--sdist-dir", "the fetch cache's sdists folder (causal-conv1d's own tests come from its sdist)"),
    ("--workers", "pytest-xdist workers for causal-conv1d's suite (default: 16)"),
    ("--suite-timeout", "seconds before causal-conv1d's suite is stopped (default: 300)"),
    ("--suite-log", "pytest's whole output of causal-conv1d's suite"),
    ("--parts", "the seed checklist's parts, comma-separated (default: all)"),
    ("--leak-seconds", "each leak run's length (default: the data file's)"),
    ("--arm", "NAME=PYTHON: a ptx_speed arm (sass, and each PTX variant) and its venv's interpreter"),
    ("--ptx-out", "where ptx_speed's measurements and its workers' logs go"),
    ("--sass-reference", "the SASS wheel ptx_speed times against, for the record"),
    ("--uv", "the uv binary the variant selection runs (default: on PATH, or beside this Python)"),
    ("--pretend", "SM:DRIVER: force uv's NVIDIA provider, for a dry run of the variant selection without a GPU"),
)
PARTS = ("seed", "batch", "decode", "perf", "leak")


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpu", "GPU acceptance (tests/gpu; scripts/gpu/acceptance.py passes these)")
    for name, text in OPTIONS:
        group.addoption(name, action="append" if name == "--arm" else "store", help=text)
    group.addoption("--quick", action="store_true", help="a subset of causal-conv1d's suite; counts not compared")


@dataclass(frozen=True, kw_only=True)
class Given:
    """The options a stage gave; None where it gave none."""

    packages: tuple[str, ...] | None = None
    variant: str | None = None
    index_url: str | None = None
    dist_dir: Path | None = None
    pip_report: Path | None = None
    doctor_report: Path | None = None
    doctor_cli_report: Path | None = None
    sdist_dir: Path | None = None
    workers: int = 16
    suite_timeout: float = 300.0
    suite_log: Path | None = None
    quick: bool = False
    parts: tuple[str, ...] | None = None
    leak_seconds: float | None = None
    arms: dict[str, Path] = field(default_factory=dict)
    ptx_out: Path | None = None
    sass_reference: str | None = None
    uv: Path | None = None
    pretend: str | None = None

    def need(self, name: str) -> Any:
        """The option's value, or a skip naming it."""
        value = getattr(self, name)
        if value is None:
            pytest.skip(f"--{name.replace('_', '-')} not given (scripts/gpu/acceptance.py gives it)")
        return value

    @classmethod
    def of(cls, config: pytest.Config) -> Given:
        """From the command line; a bad value is one usage error naming the option."""
        raw = {name.removeprefix("--").replace("-", "_"): config.getoption(name) for name, _ in OPTIONS}
        paths = ("dist_dir", "pip_report", "doctor_report", "doctor_cli_report", "sdist_dir", "suite_log", "ptx_out",
                 "uv")
        values: dict[str, Any] = {key: Path(raw[key]) for key in paths if raw[key]}
        values |= {key: raw[key] for key in ("variant", "index_url", "sass_reference", "pretend") if raw[key]}
        values |= {key: _number(key, raw[key]) for key in ("workers", "suite_timeout", "leak_seconds") if raw[key]}
        if raw["packages"]:
            values["packages"] = tuple(raw["packages"].split(","))
        if raw["parts"] is not None:
            values["parts"] = _parts(raw["parts"])
        values["arms"] = dict(_arm(text) for text in raw["arm"] or ())
        return cls(quick=bool(config.getoption("--quick")), **values)


def _number(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise pytest.UsageError(f"--{key.replace('_', '-')} wants a positive number, not {text!r}")
    return int(value) if key == "workers" else value


def _parts(text: str) -> tuple[str, ...]:
    names = {part.strip() for part in text.split(",") if part.strip()}
    unknown = sorted(names - set(PARTS)) or ([] if names else ["(none given)"])
    if unknown:
        raise pytest.UsageError(f"--parts: unknown checklist part {', '.join(unknown)}; the parts are "
                                f"{', '.join(PARTS)}")
    return tuple(part for part in PARTS if part in names)


def _arm(text: str) -> tuple[str, Path]:
    name, sep, python = text.partition("=")
    if not sep or not name or not python:
        raise pytest.UsageError(f"--arm {text!r} is not NAME=PYTHON")
    return name, Path(python)
