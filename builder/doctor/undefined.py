"""``doctor --explain`` on an ``undefined symbol`` line, answered in full: the symbol demangled, the torch releases
that export it and those that do not, the torch the extension was built for (its provenance, else the symbol index),
and the install line for the torch of the environment the extension lives in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder.doctor.fix import find_fix
from builder.doctor.labels import PACKAGES
from builder.doctor.probe import ProbeFailed, collect
from builder.doctor.symbolcheck import UNDEFINED, exporters, extension_built_for, releases, shown, symbol_index
from builder.doctor.verdicts import diagnose


def undefined_answers(text: str, python: str, index_url: str | None) -> list[dict[str, Any]]:
    """One answer per distinct (extension, symbol) of the ``undefined symbol`` lines in ``text``."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for match in UNDEFINED.finditer(text):
        key = (match["path"] or "", match["symbol"])
        if key not in seen:
            seen[key] = _answer(match["path"], match["symbol"], python, index_url)
    return list(seen.values())


def _answer(path_text: str | None, symbol: str, python: str, index_url: str | None) -> dict[str, Any]:
    answer: dict[str, Any] = {"symbol": symbol, "demangled": shown(symbol), "extension": path_text}
    entries = symbol_index()
    if entries:
        yes, no = exporters(symbol, entries)
        answer["exported_by"], answer["not_exported_by"] = releases(yes), releases(no)
    path = Path(path_text) if path_text else None
    if path is not None and path.is_file():
        answer["built_for"] = _provenance_torch(path) or extension_built_for(path)
        answer.update(_fix(path, _interpreter_of(path) or python, index_url))
    return answer


def _interpreter_of(extension: Path) -> str | None:
    """The Python of the environment an extension is installed in: ``<env>/lib/pythonX.Y/site-packages/x.so``."""
    for parent in extension.parents:
        if parent.name == "site-packages" and parent.parent.name.startswith("python"):
            for name in (parent.parent.name, "python3", "python"):
                candidate = parent.parent.parent.parent / "bin" / name
                if candidate.is_file():
                    return str(candidate)
    return None


def _owner(extension: Path) -> str | None:
    module = extension.name.split(".")[0]
    return next((name for name, modules in PACKAGES.items() if module in modules), None)


def _provenance_torch(extension: Path) -> str | None:
    """What a wheelwright wheel's provenance says it was built against: ``torch 2.12.1 (pt212cu130)``."""
    owner = _owner(extension)
    if owner is None:
        return None
    for record in extension.parent.glob(f"{owner.replace('-', '_')}-*.dist-info/wheelwright.json"):
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        torch = data.get("torch") if isinstance(data, dict) else None
        if isinstance(torch, dict) and torch.get("version"):
            return f"torch {torch['version']} ({data.get('label')}), as its wheelwright.json records"
    return None


def _fix(extension: Path, python: str, index_url: str | None) -> dict[str, Any]:
    """The install line for the environment's own torch (doctor's usual fix, for the extension's package)."""
    owner = _owner(extension)
    if owner is None:
        return {}
    try:
        env = collect(python, packages=(owner,))
    except ProbeFailed as error:
        return {"fix_note": f"cannot read the environment of {python}: {error}"}
    answer: dict[str, Any] = {"python": env.executable, "torch": env.torch.version}
    for diagnosis in diagnose(env):
        fix = find_fix(env, diagnosis, index_url)
        if fix is not None:
            answer.update({"fix_note": fix.note, "pip": fix.pip, "uv": fix.uv})
    return answer


def render_answers(answers: list[dict[str, Any]]) -> list[str]:
    lines = []
    for answer in answers:
        lines.append(f"undefined symbol `{answer['demangled']}`")
        if "exported_by" in answer:
            lines.append(f"  exported by torch {answer['exported_by']}; not by {answer['not_exported_by']}")
        else:
            lines.append("  (no torch symbol index here: `wheelwright facts symbols` builds one)")
        if answer.get("built_for"):
            lines.append(f"  {Path(answer['extension']).name} was built for {answer['built_for']}")
        if answer.get("torch"):
            lines.append(f"  this environment ({answer['python']}) has torch {answer['torch']}")
        if answer.get("pip"):
            lines += [f"  fix: {answer['fix_note'].rstrip('.')}:", f"    {answer['pip']}"]
        elif answer.get("fix_note"):
            lines.append(f"  fix: {answer['fix_note']}")
    return lines
