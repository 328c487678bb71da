"""Rendered pages: golden files (review their diffs; `pytest --update-golden` rewrites them), the attributes
PEP 503/592/658/714 clients read, escaping, and the PEP 691 JSON form against a schema of the spec."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import markupsafe
import pytest

from builder.core.ledger import LedgerEntry
from builder.doctor.standalone import standalone_source
from index_site import layout
from index_site.catalog import Catalog
from index_site.render import render_site
from index_site.report import ScanStats
from scripts.bench.wheels import indexed_wheel

GOLDEN = Path(__file__).parent.parent / "golden" / "index_site"
BASE = "https://wheels.example.org/"


CATALOG = Catalog(
    wheels=(
        indexed_wheel("causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl", "a"),
        indexed_wheel("causal_conv1d-1.7.0+pt214cu130-cp312-cp312-linux_x86_64.whl", "b"),
        indexed_wheel("causal_conv1d-1.7.0+pt213cu130-cp311-cp311-linux_x86_64.whl", "c", requires_python="<4,>=3.9"),
        indexed_wheel("causal_conv1d-1.6.1+pt24rocm61-cp311-cp311-linux_x86_64.whl", "d", requires_python=None),
        indexed_wheel(
            "mamba_ssm-2.3.2.post1+pt214cu130-cp311-cp311-linux_x86_64.whl",
            "e",
            summary="<script>alert('mamba')</script>",
        ),
    ),
    rejected=(),
    failures=(
        LedgerEntry(
            job_id="causal-conv1d-1.7.0+pt214cu130-cp313-x86_64",
            package="causal-conv1d",
            version="1.7.0",
            label="pt214cu130",
            torch="2.14.1",
            accelerator="cu130",
            python="3.13",
            input_hash="0" * 64,
            status="failed",
            phase="compile",
            reason='nvcc fatal: "<script>" unsupported',
        ),
    ),
    stats=ScanStats(),
)


@pytest.fixture(scope="module")
def pages() -> dict[str, bytes]:
    return render_site(CATALOG, base_url=BASE)


def test_pages_match_golden_files(pages: dict[str, bytes], update_golden: bool) -> None:
    # doctor.py is generated from builder.doctor's code, not from the catalog: tests/unit/test_doctor_standalone.py
    pages = {path: content for path, content in pages.items() if path != layout.DOCTOR}
    if update_golden:
        for path, content in pages.items():
            (GOLDEN / path).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / path).write_bytes(content)
    golden = {p.relative_to(GOLDEN).as_posix() for p in GOLDEN.rglob("*") if p.is_file()}
    assert golden == set(pages), "pages added or removed; rerun with --update-golden and review the diff"
    for path, content in pages.items():
        assert content == (GOLDEN / path).read_bytes(), f"{path} differs from its golden file (--update-golden)"


def test_the_site_carries_doctor_py_pointing_at_itself(pages: dict[str, bytes]) -> None:
    assert pages[layout.DOCTOR] == standalone_source(BASE).encode()
    assert f"DEFAULT_INDEX_URL = {BASE.rstrip('/')!r}" in pages[layout.DOCTOR].decode()
    landing = pages[layout.LANDING].decode()
    assert f"curl -s {BASE.rstrip('/')}/doctor.py | python -" in landing and 'href="doctor.py"' in landing


def test_one_find_links_page_and_one_index_per_variant(pages: dict[str, bytes]) -> None:
    page = pages["whl/pt213cu130.html"].decode()
    assert page.count("<a ") == 1 and "pt214cu130" not in page
    assert "whl/pt214cu130/simple/causal-conv1d/index.html" in pages
    assert "whl/pt214cu130/simple/mamba-ssm/index.html" in pages
    assert "whl/pt213cu130/simple/mamba-ssm/index.html" not in pages
    assert pages["simple/causal-conv1d/index.html"].decode().count("<a ") == 4


def test_links_carry_hash_metadata_and_escaped_requires_python(pages: dict[str, bytes]) -> None:
    page = pages["whl/pt213cu130/simple/causal-conv1d/index.html"].decode()
    href = "../../causal_conv1d-1.7.0%2Bpt213cu130-cp311-cp311-linux_x86_64.whl#sha256=" + "c" * 64
    assert f'<a href="{href}"' in page
    assert 'data-requires-python="&lt;4,&gt;=3.9"' in page
    assert f'data-core-metadata="sha256={"c" * 63}m">' in page
    # PEP 714's name only: the legacy attribute leads pip 22.3-23.1 to refuse a non-normalised Name
    assert "dist-info-metadata" not in page
    assert all("dist-info-metadata" not in text.decode() for text in pages.values())
    assert '<meta name="pypi:repository-version" content="1.1">' in page
    assert "data-requires-python" not in pages["whl/pt24rocm61.html"].decode()


def test_hostile_metadata_and_reasons_are_escaped_on_the_landing_page(pages: dict[str, bytes]) -> None:
    landing = pages["index.html"].decode()
    assert landing.count("<script") == 1  # the page's own progressive script, nothing from a wheel or the ledger
    assert "&lt;script&gt;alert(&#39;mamba&#39;)&lt;/script&gt;" in landing
    assert "nvcc fatal: &#34;&lt;script&gt;&#34; unsupported" in landing


PROJECT_SCHEMA = {
    "type": "object",
    "required": ["meta", "name", "files", "versions"],
    "properties": {
        "meta": {"type": "object", "required": ["api-version"], "properties": {"api-version": {"const": "1.1"}}},
        "name": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$"},
        "versions": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["filename", "url", "hashes", "size", "upload-time"],
                "properties": {
                    "filename": {"type": "string"},
                    "url": {"type": "string"},
                    "hashes": {
                        "type": "object",
                        "required": ["sha256"],
                        "properties": {"sha256": {"pattern": "^[0-9a-f]{64}$"}},
                    },
                    "requires-python": {"type": "string"},
                    "core-metadata": {"type": "object", "required": ["sha256"]},
                    "size": {"type": "integer", "minimum": 0},
                    "upload-time": {"type": "string", "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$"},
                    "yanked": {"type": ["boolean", "string"]},
                },
            },
        },
    },
}


def test_json_pages_follow_pep_691_and_700(pages: dict[str, bytes]) -> None:
    project = json.loads(pages["json/causal-conv1d/index.json"])
    jsonschema.validate(project, PROJECT_SCHEMA)
    assert project["versions"] == ["1.6.1+pt24rocm61", "1.7.0+pt213cu130", "1.7.0+pt214cu130"]
    first = project["files"][0]
    assert first["url"] == "../../whl/pt24rocm61/causal_conv1d-1.6.1%2Bpt24rocm61-cp311-cp311-linux_x86_64.whl"
    assert first["upload-time"] == "2023-11-14T22:13:20.500000Z" and first["size"] == 12_345_678
    root = json.loads(pages["whl/pt214cu130/json/index.json"])
    assert root == {"meta": {"api-version": "1.1"}, "projects": [{"name": "causal-conv1d"}, {"name": "mamba-ssm"}]}


def test_landing_matrix_cells_link_their_setup_page_and_say_their_state(pages: dict[str, bytes]) -> None:
    landing = pages["index.html"].decode()
    # the row's one title is said once on the row; cells it does not describe stop it
    row = ('<tr title="linux_x86_64; GPU archs not recorded"><th scope=rowgroup rowspan=1 title="">2.14'
           '<th scope=row>CUDA 13.0<td><a class=b href="select/pt214cu130-cp311.html">✓</a>')
    assert row in landing
    failed = ('<td title=""><a class=f href="select/pt214cu130-cp313.html" '
              'aria-describedby="causal-conv1d-1.7.0-f1">✗</a>')
    assert failed in landing
    assert '<td title=""><a class=u href="select/pt213cu130-cp312.html">–</a>' in landing  # shipped, not planned
    text = re.sub(r"<[^>]+>", "", landing)
    assert "pip install causal-conv1d==1.7.0+pt214cu130 -f https://wheels.example.org/whl/pt214cu130.html" in text
    assert text.count(" -f https://") == 4  # pip and uv for each of the two packages, in the selector; none per cell


def test_setup_pages_and_manifest_are_served_and_published_as_their_kind(pages: dict[str, bytes]) -> None:
    from index_site import layout

    assert layout.kind_of("wheels.json").content_type == "application/json"
    assert layout.kind_of("select/pt214cu130-cp311.html").tier == layout.Tier.SETUP
    assert layout.kind_of("coverage/causal-conv1d.html").tier == layout.Tier.COVERAGE
    assert layout.Tier.ROOT < layout.Tier.SETUP < layout.Tier.COVERAGE < layout.Tier.LANDING
    setup = pages["select/pt214cu130-cp313.html"].decode()
    assert "failed in compile: nvcc fatal: &#34;&lt;script&gt;&#34; unsupported" in setup
    assert 'href="../whl/pt214cu130.html"' in setup and 'aria-current="true">3.13</a>' in setup
    assert layout.kind_of("wheels.json").tier == layout.Tier.ROOT  # it links the release files
    assert layout.kind_of("wheels/causal-conv1d/1.7.0.json").tier == layout.Tier.PROJECT  # they link wheels
    release = json.loads(pages["wheels.json"])["releases"][0]
    assert release["url"] == f"https://wheels.example.org/wheels/{release['package']}/{release['version']}.json"
    path = release["url"].removeprefix("https://wheels.example.org/")
    assert json.loads(pages[path])["wheels"][0]["url"].startswith("https://wheels.example.org/whl/")


def test_project_pages_written_out_in_python_are_the_templates_and_json_dumps_bytes() -> None:
    """render.py formats the PEP 503 project page and the PEP 691 entries itself, through lines.py (a project's page
    lists thousands of wheels); they must be the bytes templates/simple_project.html and json.dumps(sort_keys=True)
    give."""
    from index_site import render

    wheels = render._ordered(CATALOG.wheels)
    page = "simple/causal-conv1d/index.html"
    lines = render._lines(page, wheels)
    links = "".join(lines.anchors)
    expected = render._render("simple_project.html", page=page, title="Links for <x>", links=markupsafe.Markup(links),
                              api_version=render.API_VERSION)
    assert render.simple_page("Links for <x>", links) == expected
    for wheel, entry in zip(wheels, lines.entries, strict=True):
        reference = {
            "filename": wheel.filename,
            "url": layout.wheel_href(page, wheel.name.label, wheel.filename),
            "hashes": {"sha256": wheel.sha256},
            "core-metadata": {"sha256": wheel.metadata.sha256},
            "size": wheel.size,
            "upload-time": render._iso_time(wheel.upload_time),
            "yanked": False,
            **({"requires-python": wheel.metadata.requires_python} if wheel.metadata.requires_python else {}),
        }
        assert entry == json.dumps(reference, sort_keys=True, separators=(",", ":"))


def _render_counting(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, bytes], int]:
    """Every page in a new jinja2 environment (as a new process makes one), and how many templates it compiled."""
    import jinja2

    from index_site import render

    compiled = []
    original = jinja2.Environment.compile

    def counting(self: jinja2.Environment, *args: object, **kwargs: object) -> object:
        compiled.append(1)
        return original(self, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    render._environment.cache_clear()
    try:
        return render_site(CATALOG, base_url=BASE), len(compiled)
    finally:
        render._environment.cache_clear()
        monkeypatch.setattr(jinja2.Environment, "compile", original)


@pytest.mark.parametrize("damage", ["kept", "truncated", "garbage", "emptied", "folder-is-a-file"])
def test_compiled_templates_are_kept_and_a_damaged_cache_renders_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """A new process renders from the templates the last one compiled (none compiled again); a cache file that is
    damaged, or a cache folder that cannot be made, costs the compile and never changes a byte of a page."""
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path))
    folder = tmp_path / "templates"
    if damage == "folder-is-a-file":
        folder.write_text("not a folder")
    first, compiled_first = _render_counting(monkeypatch)
    assert compiled_first > 0
    cached = sorted(folder.iterdir()) if folder.is_dir() else []
    assert len(cached) == (0 if damage == "folder-is-a-file" else compiled_first)
    for path in cached:
        content = path.read_bytes()
        path.write_bytes({"kept": content, "truncated": content[: len(content) // 2], "garbage": b"\0" * 64,
                          "emptied": b""}[damage])
    again, compiled_again = _render_counting(monkeypatch)
    assert again == first
    assert compiled_again == (0 if damage == "kept" else compiled_first)
    third, compiled_third = _render_counting(monkeypatch)  # what the damaged run compiled is kept again
    assert third == first
    assert compiled_third == (compiled_first if damage == "folder-is-a-file" else 0)


@pytest.mark.parametrize(
    "listed",
    [
        ("a-1.0-py3-none-any.whl", "../../whl/x/a-1.0-py3-none-any.whl", "ab" * 32, "cd" * 32, ">=3.9", 12, "t"),
        ("a&b<1>.whl", "../x/a&b<1>.whl", "ab" * 32, "'\"", "<3,>=2", 0, None),
        ("a-1.0-variants.json", "a-1.0-variants.json", "ef" * 32, None, None, None, None),
        ("é-1.0.whl", "é-1.0.whl", "ab" * 32, "cd" * 32, "", 1, None),
    ],
)
def test_one_formatter_gives_the_bytes_markupsafe_and_json_dumps_give(listed: tuple[object, ...]) -> None:
    """lines.py formats both kinds of project page (render.py's and the variant channel's) by hand: the anchor is
    what markupsafe.escape makes of each part, the entry what json.dumps(sort_keys=True) makes of the document."""
    from index_site.lines import Listed, ProjectLines

    record = Listed(*listed)  # type: ignore[arg-type]
    lines = ProjectLines()
    lines.add(record)
    escape = markupsafe.escape
    python = record.requires_python
    requires = f' data-requires-python="{escape(python)}"' if python is not None else ""
    core = f' data-core-metadata="{escape("sha256=" + record.metadata_sha256)}"' if record.metadata_sha256 else ""
    href, name = escape(record.href), escape(record.filename)
    assert lines.anchors == [f'    <a href="{href}#sha256={record.sha256}"{requires}{core}>{name}</a><br>\n']
    reference = {
        "filename": record.filename,
        "url": record.href,
        "hashes": {"sha256": record.sha256},
        "yanked": False,
        **({"core-metadata": {"sha256": record.metadata_sha256}} if record.metadata_sha256 is not None else {}),
        **({"requires-python": python} if python is not None else {}),
        **({"size": record.size} if record.size is not None else {}),
        **({"upload-time": record.upload_time} if record.upload_time is not None else {}),
    }
    assert lines.entries == [json.dumps(reference, sort_keys=True, separators=(",", ":"))]
