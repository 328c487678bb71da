"""Split one CUDA translation unit by its explicit template instantiations into several, generated from the
source itself: each part is the file with all but its share of the ``template void f<...>(...);`` lines, so every
kernel is compiled in exactly one part, from the same code. A TU whose one arch is a build's critical path
(causal-conv1d's backward, 330-400 s for sm_90 alone) becomes parts the core pool runs side by side."""

from __future__ import annotations

import re
from pathlib import Path

from builder.core.errors import RecipeError

# an explicit instantiation definition: `template` not followed by a parameter list; `extern template` is a
# declaration and stays in every part
_INSTANTIATION = re.compile(r"^template\s+(?!<)[^;{}]*\)\s*;[ \t]*$", re.MULTILINE)


def instantiations(text: str) -> list[re.Match[str]]:
    return list(_INSTANTIATION.finditer(text))


def split_text(text: str, parts: int, where: str) -> list[str]:
    """The texts of ``parts`` TUs; instantiation i goes to part i mod parts (neighbours differ in the dtypes, so
    the heavier kernel families spread over every part). All instantiations must follow the code they need."""
    found = instantiations(text)
    if len(found) < parts:
        raise RecipeError(f"{where}: {len(found)} explicit instantiations, fewer than the {parts} parts asked for")
    body_end = found[0].start()
    if any(
        line.strip() and not _INSTANTIATION.fullmatch(line.strip()) and not line.strip().startswith("//")
        for line in text[body_end:].splitlines()
    ):
        raise RecipeError(f"{where}: code between the explicit instantiations; the split needs them at the end")
    body = text[:body_end]
    shares: list[list[str]] = [[] for _ in range(parts)]
    for index, match in enumerate(found):
        shares[index % parts].append(match[0])
    return [f"{body}// wheelwright: part {k + 1} of {parts} of the explicit instantiations\n" + "\n".join(share) + "\n"
            for k, share in enumerate(shares)]


def split_tu(root: Path, relative: str, parts: int) -> list[str]:
    """Write ``<stem>_partK.cu`` beside ``relative`` and put them in setup.py's sources in its place; returns the
    changes, [] when setup.py does not list it (the patch then fails: upstream moved on)."""
    setup = root / "setup.py"
    text = setup.read_text()
    quoted = re.search(rf"""(["']){re.escape(relative)}\1,?""", text)
    source = root / relative
    if quoted is None or not source.is_file():
        return []
    where = f"{relative}"
    names = []
    for index, part in enumerate(split_text(source.read_text(), parts, where), start=1):
        name = f"{Path(relative).with_suffix('').as_posix()}_part{index}.cu"
        (root / name).write_text(part)
        names.append(name)
    quote = quoted[1]
    replacement = ", ".join(f"{quote}{name}{quote}" for name in names) + ("," if quoted[0].endswith(",") else "")
    setup.write_text(text[: quoted.start()] + replacement + text[quoted.end():])
    return [f"{relative}: split into {parts} TUs by its explicit instantiations ({', '.join(names)})"]
