"""The index, serve and publish subcommands through `wheelwright`'s entry point: exit codes and messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.cli import index as index_cli
from builder.cli.main import main
from scripts.bench.wheels import WheelSpec, make_wheel


@pytest.fixture
def output(tmp_path: Path) -> Path:
    for label in ("pt214cu130", "pt213cu130"):
        make_wheel(tmp_path / "dist", WheelSpec(label=label))
    make_wheel(tmp_path / "dist", WheelSpec(filename="causal_conv1d-1.7.0-cp311-cp311-linux_x86_64.whl"))
    return tmp_path


def test_index_writes_the_site_and_reports_variants_and_rejects(
    output: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["index", "--output", str(output), "--base-url", "https://w.example/"]) == 0
    captured = capsys.readouterr()
    assert "Indexed 2 wheels in 2 variants" in captured.out
    assert "pip install PACKAGE -f https://w.example/whl/pt213cu130.html" in captured.out
    assert "no variant label" in captured.err
    assert (output / "site" / "index.html").is_file()


def test_serve_without_a_site_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "ERROR" in err and "no site to serve" in err and "Traceback" not in err


def test_publish_needs_a_bucket(
    output: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WHEELWRIGHT_BUCKET", raising=False)
    assert main(["index", "--output", str(output)]) == 0
    assert main(["publish", "--output", str(output)]) == 7
    assert "no bucket given" in capsys.readouterr().err


def test_an_index_run_checks_every_twin_with_one_maker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The maker keeps the fat wheel its last slim check read (builder/steps/twins.py): one per run, not per call."""
    from builder.steps import twins

    makers: list[object] = []
    monkeypatch.setattr(twins.VariantTwins, "problems", lambda self, wheel, twin: makers.append(self) or [])
    checker = index_cli._Twins()
    assert checker.problems(tmp_path / "a.whl", tmp_path / "a-sm90.whl") == []
    assert checker.problems(tmp_path / "a.whl", tmp_path / "a-sm80.whl") == []
    assert len(makers) == 2 and makers[0] is makers[1]
