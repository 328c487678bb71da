"""Rewrite a wheel's archive: the members it holds, changed or added files, a fresh RECORD, and bytes that depend
only on the contents (entries sorted, .dist-info last, one timestamp from SOURCE_DATE_EPOCH, fixed permissions), so
the same files always make the same wheel."""

from __future__ import annotations

import base64
import hashlib
import os
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import WheelError

_EPOCH_FLOOR = 315532800  # 1980-01-01, the earliest time a zip entry can hold
_DEFAULT_EPOCH = _EPOCH_FLOOR  # without SOURCE_DATE_EPOCH: the bytes must not depend on when the build ran


@dataclass(frozen=True, kw_only=True)
class Member:
    data: bytes
    executable: bool = False


def read_members(wheel: Path) -> dict[str, Member]:
    """Every file of ``wheel`` by its archive name (directories dropped)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            return {
                info.filename: Member(data=archive.read(info), executable=bool((info.external_attr >> 16) & 0o111))
                for info in archive.infolist()
                if not info.is_dir()
            }
    except (zipfile.BadZipFile, OSError, KeyError) as error:
        raise WheelError(f"{wheel}: not a readable wheel ({error})") from None


def dist_info_dir(members: Mapping[str, Member], where: str) -> str:
    """The one top-level ``*.dist-info`` folder of the wheel."""
    found = {name.split("/", 1)[0] for name in members if name.split("/", 1)[0].endswith(".dist-info")}
    if len(found) != 1:
        raise WheelError(f"{where}: expected one .dist-info folder, found {sorted(found) or 'none'}")
    return found.pop()


def record_digest(data: bytes) -> str:
    """RECORD's hash notation: ``sha256=<urlsafe base64, no padding>``."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def source_date_epoch() -> int:
    raw = os.environ.get("SOURCE_DATE_EPOCH", "")
    try:
        return max(int(raw), _EPOCH_FLOOR) if raw else _DEFAULT_EPOCH
    except ValueError:
        raise WheelError(f"SOURCE_DATE_EPOCH={raw!r} is not a number of seconds") from None


def _order(name: str, dist_info: str) -> tuple[int, str]:
    """Payload first, then .dist-info, RECORD last (the order wheel tools write and installers expect)."""
    if name == f"{dist_info}/RECORD":
        return (2, name)
    return (1 if name.startswith(dist_info + "/") else 0, name)


def write_wheel(path: Path, members: Mapping[str, Member]) -> Path:
    """Write ``members`` (RECORD is regenerated) as a reproducible wheel at ``path``, atomically."""
    dist_info = dist_info_dir(members, path.name)
    record_name = f"{dist_info}/RECORD"
    files = {name: member for name, member in members.items() if name != record_name}
    lines = [f"{name},{record_digest(m.data)},{len(m.data)}" for name, m in sorted(files.items())]
    files[record_name] = Member(data=("\n".join([*lines, f"{record_name},,"]) + "\n").encode())
    stamp = time.gmtime(source_date_epoch())[:6]
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(temporary, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for name in sorted(files, key=lambda n: _order(n, dist_info)):
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100755 if files[name].executable else 0o100644) << 16
            archive.writestr(info, files[name].data)
    os.replace(temporary, path)
    return path
