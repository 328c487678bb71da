"""`make check` refuses a function over 60 lines anywhere in the checkout, naming the file, the line and the length;
hidden folders (the venv, the carry) and build outputs are not the checkout's code."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import check_function_length


def function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly ``lines`` lines, its def included."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}() -> None:\n{body}{indent}    return None\n"


def test_a_function_over_the_limit_is_named_with_its_place_and_length(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(function("short", 60) + "\n\nclass Box:\n" + function("long", 61, "    "))
    assert check_function_length.main(["--root", str(tmp_path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "ERROR pkg/mod.py:64: long is 61 lines (at most 60): split out a step"
    ]
    assert check_function_length.main(["--root", str(tmp_path), "--limit", "61"]) == 0


@pytest.mark.parametrize("folder", [".venv/lib", ".carry", "build/lib", "wheelwright.egg-info", "tools/node_modules"])
def test_what_is_not_the_checkouts_code_is_not_read(tmp_path: Path, folder: str) -> None:
    (tmp_path / folder).mkdir(parents=True)
    (tmp_path / folder / "vendored.py").write_text(function("huge", 200))
    assert check_function_length.main(["--root", str(tmp_path)]) == 0
