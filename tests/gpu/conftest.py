"""The GPU tests' options (scripts/gpu/acceptance.py passes them, one stage at a time), the gate that skips every
`gpu` test with the reason where torch sees no CUDA device, third-party warnings shown rather than raised, and the
`record` fixture whose detail and data go into the JSON report (--report) the driver turns into a stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scripts.gpu.data import AcceptanceData, load_acceptance
from tests.gpu.device import unavailable_reason
from tests.gpu.options import Given, add_options
from tests.gpu.report import Recorded, Report

GIVEN = pytest.StashKey[Given]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "part(name): a part of the seed checklist (--parts picks some)")
    config.stash[GIVEN] = Given.of(config)
    report = config.getoption("--report")
    config.pluginmanager.register(Report(Path(report) if report else None), Report.NAME)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a CUDA device every `gpu` test is skipped, saying why; the checklist's parts not asked for are not
    run; mamba-ssm and causal-conv1d warn about their own use of torch (torch.cuda.amp's deprecations): that is
    theirs to fix, not a check's failure."""
    parts = config.stash[GIVEN].parts
    ours = [item for item in items if Path(item.path).is_relative_to(Path(__file__).parent)]
    dropped = [item for item in ours if parts and (mark := item.get_closest_marker("part")) and mark.args[0] not in
               parts]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]
    ours = [item for item in ours if item not in dropped]
    for item in ours:
        item.add_marker(pytest.mark.filterwarnings("default"))
    gpu = [item for item in ours if item.get_closest_marker("gpu")]
    reason = unavailable_reason() if gpu else None
    if reason is not None:
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``package``: each package the stage checks (--packages; an arch variant's stage: its one package)."""
    if "package" in metafunc.fixturenames:
        data, given = load_acceptance(), Given.of(metafunc.config)
        chosen = (data.arch.package,) if given.variant else given.packages or data.packages
        metafunc.parametrize("package", [p for p in data.packages if p in chosen])


@pytest.fixture(scope="session")
def acceptance() -> AcceptanceData:
    return load_acceptance()


@pytest.fixture(scope="session")
def given(request: pytest.FixtureRequest) -> Given:
    return request.config.stash[GIVEN]


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Recorded:
    """What a passing test says it compared (``detail``) and measured (``data``), for the report."""
    return Report.of(request.config).recorded(request.node.nodeid)


@pytest.fixture(scope="session")
def stage_data(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The stage's own data (the checklist's table, ptx_speed's ratios), beside its tests' results."""
    return Report.of(request.config).data
