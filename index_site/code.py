"""The code that writes the site, as one digest: what a complete run left (quiet.py), what it kept of each release
(summaries.py), the blocks' digests (blocks.py) and every page group's digest (render.py) hold only while it is the
same. A wheelwright whose code or data reads differently renders and checks everything again on its first run.

The inputs are every file the index's output depends on: index_site's modules and templates, and what it imports of
builder (core, the label and release facts of plan, the doctor served as doctor.py) with the torch facts file
(which Pythons a torch shipped: the pages for people show it). tests/unit/test_index_code.py walks index_site's
imports and fails where one of them is missing here."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

# What index_site imports of builder.plan, with what those import in turn (the test above finds them)
_PLAN = ("accelerator.py", "arch.py", "facts.py", "facts_file.py", "releases.py")


def code_inputs() -> list[Path]:
    """The files code_digest is made of, in order."""
    package = Path(__file__).parent
    builder = package.parent / "builder"
    paths = [*package.glob("*.py"), *(package / "templates").rglob("*"), *(builder / "doctor").glob("*.py")]
    paths += [*(builder / "core").glob("*.py"), *(builder / "plan" / name for name in _PLAN)]
    paths.append(builder / "data" / "torch.toml")
    return sorted(path for path in paths if path.is_file())


@functools.cache
def code_digest() -> str:
    """The digest of code_inputs: each file's path in the checkout (another's in full) and bytes. Worked out once a
    process: a run asks several times, and some 80 files do not change under a process."""
    digest = hashlib.sha256()
    root = Path(__file__).parents[1]
    for path in code_inputs():
        name = path.relative_to(root) if path.is_relative_to(root) else path
        digest.update(name.as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
