"""What a re-index takes from the index state without judging a file again (catalog._Judging.held, twins._held):
whole releases compared as lists, and only while every file of one would settle as its row. Each case moves one
thing that must send its release (and no other) back to the file-by-file path."""

from __future__ import annotations

from pathlib import Path

import pytest

from index_site import inputs, twins
from index_site.catalog import _Judging
from index_site.state import TwinRow, WheelRow

RELEASES = ("causal_conv1d-1.7.0", "causal_conv1d-1.8.0")
TAGS = ("cp311-cp311-linux_x86_64", "cp312-cp312-linux_x86_64")


def _wheel(name: str, inode: int, verdict: str = "") -> WheelRow:
    return WheelRow(name, inode, 10, 20, 30, "content", verdict, "0" * 64, "1" * 64, 5, None, None, 0.0, None, "")


def _twin(name: str, inode: int, wheel: WheelRow, verdict: str = "") -> TwinRow:
    text = ":".join(map(str, wheel.identity))
    return TwinRow(name, inode, 11, 21, 31, wheel.filename, text, verdict, "2" * 64, "3" * 64, 6, None, "", 0, "{}")


def _site() -> tuple[dict[str, dict[str, WheelRow]], dict[str, dict[str, TwinRow]]]:
    wheels: dict[str, dict[str, WheelRow]] = {}
    twin_rows: dict[str, dict[str, TwinRow]] = {}
    inode = 100
    for release in RELEASES:
        for tag in TAGS:
            inode += 2
            wheel = _wheel(f"{release}+pt214cu130-{tag}.whl", inode)
            wheels.setdefault(release, {})[wheel.filename] = wheel
            twin = _twin(twins.twin_name(wheel.filename), inode + 1, wheel)
            twin_rows.setdefault(release, {})[twin.filename] = twin
    return wheels, twin_rows


def _flat(releases: dict[str, dict[str, object]]) -> dict[str, object]:
    return {name: row for rows in releases.values() for name, row in rows.items()}


@pytest.mark.parametrize("change", ["nothing", "a wheel moved", "a wheel gone", "a wheel added"])
def test_a_release_of_wheels_is_taken_whole_only_while_each_file_keeps_its_row_s_identity(change: str) -> None:
    releases, _ = _site()
    known = _flat(releases)
    listed = {name: row.identity for name, row in known.items()}
    first = next(iter(releases[RELEASES[1]]))
    if change == "a wheel moved":
        listed[first] = (1, 2, 3, 4)
    elif change == "a wheel gone":
        del listed[first]
    elif change == "a wheel added":
        listed[first.replace("1.8.0", "1.8.0.1")] = (5, 6, 7, 8)
    rows, misses = _Judging(Path("dist"), listed, known, releases).held()  # type: ignore[arg-type]
    same = {name for name in listed if name in known and known[name].identity == listed[name]}  # type: ignore[attr-defined]
    assert misses == sorted(listed.keys() - same)
    assert set(rows) == same and len(misses) == (change in ("a wheel moved", "a wheel added"))


@pytest.mark.parametrize("change", [
    "nothing", "a twin moved", "its wheel moved", "its wheel refused", "paired with another wheel", "refused twin",
    "a twin not listed",
])
def test_a_release_of_twins_is_taken_whole_only_while_each_would_settle_as_its_row(change: str) -> None:
    wheel_releases, twin_releases = _site()
    wheels: dict[str, WheelRow] = _flat(wheel_releases)  # type: ignore[assignment]
    listed = {name: row.identity for name, row in _flat(twin_releases).items()}  # type: ignore[attr-defined]
    moved_release = twin_releases[RELEASES[0]]
    name, row = next(iter(moved_release.items()))
    if change == "a twin moved":
        listed[name] = (1, 2, 3, 4)
    elif change == "its wheel moved":
        wheels[row.wheel] = wheels[row.wheel]._replace(ctime_ns=99)
    elif change == "its wheel refused":
        wheels[row.wheel] = wheels[row.wheel]._replace(verdict="refused")
    elif change == "paired with another wheel":
        other = next(w for w in wheels if w != row.wheel and w.startswith(RELEASES[0]))
        moved_release[name] = row._replace(wheel=other, wheel_identity=":".join(map(str, wheels[other].identity)))
    elif change == "refused twin":
        moved_release[name] = row._replace(verdict="not its wheel's")
    elif change == "a twin not listed":
        del listed[name]
    expected = twins._expected(wheels)
    held = twins._held(twin_releases, listed, wheels, expected)  # type: ignore[arg-type]
    untouched = set(twin_releases[RELEASES[1]])
    assert set(held) == (untouched | set(moved_release) if change == "nothing" else untouched)


def test_expected_twin_names_are_twin_name_s_for_accepted_wheels_only() -> None:
    names = [
        "causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl",
        "causal_conv1d-1.7.0+pt214cu130-1-cp311-cp311-linux_x86_64.whl",  # a build tag
        "mamba_ssm-2.0.0.post1+pt213rocm61-cp312-cp312-manylinux_2_28_x86_64.whl",
    ]
    rows = {name: _wheel(name, inode) for inode, name in enumerate(names)}
    rows["refused-1.0-py3-none-any.whl"] = _wheel("refused-1.0-py3-none-any.whl", 9, verdict="no label")
    assert twins._expected(rows) == {twins.twin_name(name): name for name in names}


def test_slim_names_are_found_whole_and_only_among_the_listed() -> None:
    slim = "causal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu130sm90.whl"
    listed = {
        slim: 1,
        "causal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu130.whl": 2,
        "x\ncausal_conv1d-1.6.0-cp311-cp311-linux_x86_64-pt214cu130sm80.whl": 3,  # its second line is no file
        "causal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu130sm100a.whl": 4,
    }
    assert twins._slim_names(listed) == [slim, "causal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu130sm100a.whl"]


@pytest.mark.parametrize(
    "name",
    [
        "causal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu130.whl",
        "causal_conv1d-1.7.0-1-cp311-cp311-linux_x86_64-pt214cu130.whl",  # a build tag
        "causal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu130sm90a.whl",  # a slim wheel's
        "mamba_ssm-2.2.4-cp312-cp312-linux_aarch64-pt24rocm61.whl",
        "causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl",  # a wheel's name, not a twin's
        "causal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu130.whl\nx.whl",  # a newline after a twin's name
        "x\ncausal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu130.whl",  # a twin's name on its second line
        "Causal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu130.whl",
        "causal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu130.whl.whl",
        ".whl",
    ],
)
def test_twin_names_found_whole_as_twin_name_matches_each(name: str) -> None:
    """The listing's one search of all names finds a name exactly where TWIN_NAME matches it alone."""
    neighbours = ["causal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu130.whl", "junk.whl"]
    found = inputs.twin_names(sorted({name, *neighbours}))
    assert (name in found) == bool(inputs.TWIN_NAME.match(name))
    assert "junk.whl" not in found
