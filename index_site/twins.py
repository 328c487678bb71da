"""Which variant twins (``OUTPUT/variant``, PEP 825) the site publishes: the twin of each wheel of dist/ the catalog
accepted, made where it is missing, published only while it matches that wheel by content (payload, metadata,
provenance) as checked for the identities both files have now. Twins without an accepted wheel (withdrawn or
refused), twins that fail the check and files that are not twins are refused and named.

Making and comparing twins is the build step's (builder/steps/variant.py): the CLI hands it in as a TwinMaker,
since the index may not import the build steps. What the index reads of a twin itself (its name, METADATA,
variant.json, provenance, digest) it reads here, within bounds."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import operator
import os
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from builder.core.archive import Archive
from builder.core.errors import WheelwrightError
from builder.core.hashing import FileIdentity, identity_if_regular, open_regular, sha256_stream
from index_site.catalog import Deriver, Judged
from index_site.inputs import TWIN_NAME, Listing, variant_listing
from index_site.report import Rejection, TwinReport
from index_site.state import FILENAME, ROW_IDENTITY, IndexState, TwinRow, WheelRow, accepted, columns
from index_site.summaries import Summaries, text_map
from index_site.wheels import (
    MAX_METADATA_BYTES,
    MAX_PROVENANCE_BYTES,
    METADATA,
    PROVENANCE,
    VARIANT_JSON,
    RejectedWheel,
    WheelName,
    check_metadata,
    read_dist_info,
)

log = logging.getLogger(__name__)

MAX_VARIANT_BYTES = 1 << 20
NO_CHECKER = "no twin checker was given (the CLI gives one), so no twin is made or published"
_FEATURE = re.compile(r"^[a-z0-9_.]+$")


class TwinMaker(Protocol):
    """The build step's side of the twins (builder/steps/twins.py's VariantTwins)."""

    def make(self, wheel: Path, folder: Path) -> Path:
        """Write the twin of ``wheel`` into ``folder``; WheelwrightError says why it cannot be made."""
        ...

    def problems(self, wheel: Path, twin: Path) -> list[str]:
        """Where ``twin`` is not the twin of ``wheel`` by content; empty when it is."""
        ...

    def derive(self, file: BinaryIO, archive: Archive, twin: BinaryIO | None = None) -> Derived | None:
        """The twin ``make`` writes for the wheel open as ``file`` (``archive``, opened by the index for its
        bounded reads), worked out without writing it, and compared with ``twin`` where given; None where it cannot
        say."""
        ...


class Derived(Protocol):
    """The twin the twin step makes of a wheel: a file with these bytes' digest is that twin (builder/steps/
    variant.py's DerivedTwin)."""

    @property
    def name(self) -> str: ...
    @property
    def sha256(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def members(self) -> Mapping[str, bytes]: ...  # METADATA, variant.json, wheelwright.json of its .dist-info
    @property
    def matched(self) -> bool: ...  # the file it was compared with holds exactly these bytes


def _expected(wheels: Mapping[str, WheelRow]) -> dict[str, str]:
    """{twin_name(wheel): wheel} of every accepted wheel, in their order: the names taken apart column by column
    (loops in C: one name of 100,000 each run)."""
    names = list(map(FILENAME, accepted(wheels)))
    parts = list(map(_SPLIT_NAME, map(_STEM, names)))  # [dist, version, tag]
    versions = list(map(_SPLIT_VERSION, map(_SECOND, parts)))  # [public, label]
    twins = map(_TWIN_NAME, map(_FIRST, parts), map(_FIRST, versions), map(_THIRD, parts), map(_SECOND, versions))
    return dict(zip(twins, names, strict=True))


def _expected_by_release(summaries: Summaries) -> dict[str, str]:
    """_expected of every release's rows, as ``summaries`` kept it while the release's rows are the same: a run
    works out the twin names of the releases whose rows it changed, not of every wheel."""
    expected: dict[str, str] = {}
    for of_release in summaries.by_release("wheels", "twin names", _expected, text_map).values():
        expected.update(of_release)
    return expected


_STEM, _SPLIT_NAME = operator.methodcaller("removesuffix", ".whl"), operator.methodcaller("split", "-", 2)
_SPLIT_VERSION = operator.methodcaller("split", "+", 1)
_FIRST, _SECOND, _THIRD = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)
_TWIN_NAME = "{}-{}-{}-{}.whl".format  # dist, public version, tags, label: a twin's name


def _slim_names(listed: Mapping[str, object]) -> list[str]:
    """The names among ``listed`` that end like a slim wheel's (``...-pt214cu130sm90.whl``), found by one search of
    all of them joined (a line each), not a search of each."""
    return [name for name in _SLIM_NAME.findall("\n".join(listed)) if name in listed]  # a name may hold a newline


_SLIM_NAME = re.compile(r"^[^\n]*sm[0-9]+[af]?\.whl$", re.MULTILINE)


def _held(
    releases: Mapping[str, Mapping[str, TwinRow]],
    listed: Mapping[str, FileIdentity],
    wheels: Mapping[str, WheelRow],
    wanted: Mapping[str, str],
    summaries: Summaries | None = None,
) -> dict[str, TwinRow]:
    """The rows of the releases whose every twin would settle as its row (_Settler._checked): its file keeps the
    identity the row has, and the row agrees with its wheel's (_agrees). Each release is compared as lists, in C:
    a line of Python per twin took 0.05 CPU-s of a +1 at 10,000 wheels. Whether a release's twin rows agree with
    its wheel rows is kept in ``summaries`` while both are the same. The others are settled one by one."""
    held: dict[str, TwinRow] = {}
    for release, of_release in releases.items():
        rows = list(of_release.values())
        if not rows or list(map(listed.get, of_release)) != list(map(ROW_IDENTITY, rows)):
            continue
        work = functools.partial(_agrees, of_release, wheels, wanted)
        if summaries is None:
            agrees = work()
        else:
            agrees = summaries.part(release, "twins agree", summaries.key_of_both(release), work, _is_agreement)
        if agrees == "yes":
            held.update(of_release)
    return held


def _agrees(of_release: Mapping[str, TwinRow], wheels: Mapping[str, WheelRow], wanted: Mapping[str, str]) -> str:
    """"yes" where every twin of a release was published, and its row names the wheel it is the twin of (``wanted``:
    the expected twin and slim names, with their wheels), accepted, at the identity that wheel's row has; else "no"."""
    rows = list(of_release.values())
    paired = list(map(_TWIN_WHEEL, rows))
    if any(map(_TWIN_VERDICT, rows)) or list(map(wanted.get, of_release)) != paired:
        return "no"
    wheel_rows: list[Any] = list(map(wheels.get, paired))  # all accepted: each is wanted's
    texts = map(_IDENTITY_TEXT, *zip(*map(ROW_IDENTITY, wheel_rows), strict=True))
    return "yes" if list(texts) == list(map(_TWIN_WHEEL_IDENTITY, rows)) else "no"


def _is_agreement(value: object) -> bool:
    """Whether a kept value is _agrees's (a damaged state's is worked out again)."""
    return value == "yes" or value == "no"


_TWIN_WHEEL, _TWIN_WHEEL_IDENTITY, _TWIN_VERDICT = (columns(TwinRow, f) for f in ("wheel", "wheel_identity", "verdict"))
_IDENTITY_TEXT = "{}:{}:{}:{}".format  # FileIdentity's text, as a twin's row holds its wheel's


def _as_judged(listed: Mapping[str, FileIdentity], rows: Mapping[str, TwinRow]) -> dict[str, Sequence[int]]:
    """The files of variant/ with the identity each was judged at: its row's, where it has one (every row's file
    is among those listed). Taken in C, a dict copied and updated, not a line of Python per twin."""
    judged: dict[str, Sequence[int]] = dict(listed)
    judged.update(zip(rows, map(ROW_IDENTITY, rows.values()), strict=True))
    return judged


def twin_name(filename: str) -> str:
    """``causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl`` -> ``causal_conv1d-1.7.0-cp311-cp311-
    linux_x86_64-pt214cu130.whl`` (builder/steps/variant.py's variant_filename, for an accepted name; one split of
    the name for its parts and its label: every wheel, every run)."""
    dist, version, tag = filename.removesuffix(".whl").split("-", 2)
    public, label = version.split("+", 1)
    return _TWIN_NAME(dist, public, tag, label)


def settle_twins(
    judged: Judged,
    dist: Path,
    folder: Path,
    state: IndexState,
    maker: TwinMaker | None,
    found: Listing | None = None,
    summaries: Summaries | None = None,
) -> TwinReport:
    """The twins to publish (``found``: the folder as variant_listing() found it, if this run has listed it already);
    missing ones are made, changed ones checked again, and the state brought up to date. ``summaries`` keeps each
    release's expected twin names, and whether its twin rows agree with its wheel rows, for the next run."""
    listed, refused = found or variant_listing(folder)
    listed, refused = dict(listed), list(refused)
    strays = list(refused)
    known = state.twins()
    settler = _Settler(judged.rows, dist, folder, known, listed, maker, judged.fresh_twins)
    expected = _expected(judged.rows) if summaries is None else _expected_by_release(summaries)
    # A slim wheel is published with its fat wheel only, never made here (it takes the compile's objects)
    fats = {name: fat for name in _slim_names(listed) if (fat := _fat_twin(name))}  # a few, or none
    slims = {name: expected[fat] for name, fat in sorted(fats.items()) if fat in expected}
    held = _held(state.twin_releases(), listed, judged.rows, {**expected, **slims}, summaries)
    for name in sorted(expected.keys() - held.keys(), key=expected.__getitem__):  # in their wheels' order
        settler.settle(name, expected[name])
    for name, wheel in slims.items():
        if name not in held:
            settler.settle(name, wheel)
    expected.update(slims)
    refused += settler.refused + [_orphan(name, judged) for name in sorted(listed.keys() - expected.keys())]
    rows = {**held, **settler.rows}
    state.write(
        twins=[row for name, row in settler.rows.items() if known.get(name) is not row],
        twins_gone=known.keys() - rows.keys(),
        wheels=settler.notes,
    )
    published = tuple(row for row in map(rows.__getitem__, sorted(rows)) if not row.verdict)
    if maker is None:  # none published without the twin step; the rows a run with it checked stay for the next such
        refused += [Rejection(filename=row.filename, reason=f"{row.filename}: {NO_CHECKER}; not published")
                    for row in published]
        published = ()
    for rejection in refused:
        log.info("variant twin not published: %s", rejection.reason)
    return TwinReport(
        folder=os.fspath(folder),
        published=published,
        made=tuple(settler.made),
        remade=tuple(settler.remade),
        refused=tuple(sorted(refused, key=lambda rejection: rejection.filename)),
        without={why: tuple(names) for why, names in sorted(settler.without.items())},
        fresh=settler.fresh,
        listing=_as_judged(settler.listed, rows),
        strays=bool(strays),
    )


def _fat_twin(name: str) -> str:
    """The fat twin's name of a slim wheel's (``...-pt214cu130sm90.whl`` -> ``...-pt214cu130.whl``); "" for others."""
    if not _SLIM.search(name.removesuffix(".whl")):  # most names: no need to match the whole name
        return ""
    match = TWIN_NAME.match(name)
    label = match["label"] if match else ""
    return name.replace(f"-{label}.whl", f"-{_SLIM.sub('', label)}.whl") if _SLIM.search(label) else ""


_SLIM = re.compile(r"sm[0-9]+[af]?$")


def _orphan(name: str, judged: Judged) -> Rejection:
    match = TWIN_NAME.match(name)
    assert match is not None  # listing keeps only such names
    label = _SLIM.sub("", match["label"])
    wheel = f"{match['dist']}-{match['version']}+{label}{match['build'] or ''}-{match['tag']}.whl"
    row = judged.rows.get(wheel)
    why = row.verdict if row is not None else next((r.reason for r in judged.unjudged if r.filename == wheel), "")
    reason = f"its wheel was refused ({why})" if why else f"no wheel {wheel} in dist/ (withdrawn?)"
    return Rejection(filename=name, reason=f"{name}: {reason}; not published")


class _Settler:
    """Settles each expected twin in turn and gathers the rows, notes and reports of the run."""

    def __init__(
        self,
        wheels: Mapping[str, WheelRow],
        dist: Path,
        folder: Path,
        known: Mapping[str, TwinRow],
        listed: dict[str, FileIdentity],
        maker: TwinMaker | None,
        derived: Mapping[tuple[str, str], bytes],
    ) -> None:
        self.wheels, self.dist, self.folder, self.known, self.listed = wheels, dist, folder, known, listed
        self.maker = maker
        self.derived: dict[str, dict[str, bytes]] = defaultdict(dict)  # twin: {member: bytes} the catalog derived
        for (twin, member), data in derived.items():
            self.derived[twin][member] = data
        self.rows: dict[str, TwinRow] = {}
        self.notes: list[WheelRow] = []  # wheel rows with a new reason why no twin can be made
        self.made: list[str] = []
        self.remade: list[Rejection] = []
        self.refused: list[Rejection] = []
        self.without: dict[str, list[str]] = defaultdict(list)
        self.fresh: dict[tuple[str, str], bytes] = {}  # (twin, member): the bytes read of it this run

    def settle(self, name: str, wheel: str) -> None:
        wheel_row = self.wheels[wheel]
        if name not in self.listed and not self._make(name, wheel, wheel_row):
            return
        row = self._checked(name, wheel, wheel_row, fresh=name in self.made)
        if row is None:
            return
        if self.maker is not None or row is self.known.get(name):  # no verdict without the twin step is kept
            self.rows[name] = row
        if row.verdict:
            self.refused.append(Rejection(filename=name, reason=f"{name}: {row.verdict}; not published"))

    def _make(self, name: str, wheel: str, wheel_row: WheelRow) -> bool:
        """Make the missing twin; False (and why, noted on the wheel's row) where none can be made."""
        if wheel_row.twin is not None:  # known, for this very file
            self.without[wheel_row.twin].append(wheel)
            return False
        if self.maker is None:
            self.without[NO_CHECKER].append(wheel)
            return False
        try:
            path = self.maker.make(self.dist / wheel, self.folder)
        except WheelwrightError as error:
            why = str(error).removeprefix(f"{wheel}: ")
            self.notes.append(wheel_row._replace(twin=why))
            self.without[why].append(wheel)
            return False
        if path.name != name:  # the step names twins as twin_name does: a bug, not a wheel's fault
            raise RuntimeError(f"{wheel}: its twin was made as {path.name}, not {name}")
        self.listed[name] = FileIdentity.of(os.lstat(path))
        self.made.append(name)
        log.info("%s: variant twin %s made", wheel, name)
        return True

    def _checked(self, name: str, wheel: str, wheel_row: WheelRow, *, fresh: bool) -> TwinRow | None:
        """The twin's row, checked again unless the state holds one for both files' identities now; a twin found
        wrong is made again once (it may be stale, or tampered with). None: a file changed while being checked."""
        wheel_identity = "{}:{}:{}:{}".format(*ROW_IDENTITY(wheel_row))  # FileIdentity's text, of the row's identity
        old = self.known.get(name)
        if (
            old is not None
            and ROW_IDENTITY(old) == self.listed[name]
            and old.wheel_identity == wheel_identity
            and old.wheel == wheel
        ):
            return old
        row = self._check(name, wheel, wheel_identity, made=fresh)
        if row is None or not row.verdict or fresh or self.maker is None or _fat_twin(name):
            return row  # a wrong slim wheel is refused, never remade: only its build can make it
        self.remade.append(Rejection(filename=name, reason=f"{name}: {row.verdict}"))
        (self.folder / name).unlink(missing_ok=True)
        del self.listed[name]
        for member in [key for key in self.fresh if key[0] == name]:  # what was read of the file just removed
            del self.fresh[member]
        if not self._make(name, wheel, wheel_row):
            return None
        return self._check(name, wheel, wheel_identity, made=True)

    def _check(self, name: str, wheel: str, wheel_identity: str, *, made: bool) -> TwinRow | None:
        """The twin's row: the index's own reading of it, and the twin step's comparison with its wheel (which
        making it has just done)."""
        path = self.folder / name
        try:
            found = read_derived(path, self.wheels[wheel], self.derived.get(name, {})) if self.maker else None
            identity, facts = found or read_twin(path)
            if made or found:
                problems = []
            else:
                problems = self.maker.problems(self.dist / wheel, path) if self.maker else [NO_CHECKER]
        except RejectedWheel as error:
            identity, facts, problems = self.listed[name], {}, [str(error).removeprefix(f"{name}: ")]
        except OSError as error:
            log.info("%s: %s; checked again next run", name, error)
            return None
        wheel_now = FileIdentity.of(os.lstat(self.dist / wheel))
        if FileIdentity.of(os.lstat(path)) != identity or str(wheel_now) != wheel_identity:
            log.info("%s or its wheel changed while being checked; checked again next run", name)
            return None
        verdict = "; ".join(problems)
        self.fresh.update(((name, member), data) for member, data in facts.get("read", {}).items())
        return _row(name, identity, wheel, wheel_identity, verdict[:2000], facts)


def _row(
    name: str, identity: FileIdentity, wheel: str, wheel_identity: str, verdict: str, facts: Mapping[str, Any]
) -> TwinRow:
    return TwinRow(
        name, *identity, wheel, wheel_identity, verdict, facts.get("sha256", ""), facts.get("metadata_sha256", ""),
        facts.get("metadata_size", 0), facts.get("requires_python"), facts.get("provenance_sha256", ""),
        facts.get("provenance_size", 0), json.dumps(facts.get("variant", {}), sort_keys=True),
    )


def read_twin(path: Path) -> tuple[FileIdentity, dict[str, Any]]:
    """What the index shows of the twin at ``path``, read from one open descriptor within bounds, with the
    identity the file had throughout; RejectedWheel says what is wrong with it."""
    match = TWIN_NAME.match(path.name)
    if match is None:
        raise RejectedWheel(f"{path.name}: not a variant twin's name")
    wanted = {METADATA: MAX_METADATA_BYTES, VARIANT_JSON: MAX_VARIANT_BYTES, PROVENANCE: MAX_PROVENANCE_BYTES}
    with os.fdopen(open_regular(path), "rb") as file:
        identity = FileIdentity.of(os.fstat(file.fileno()))
        found = read_dist_info(file, path.name, wanted, required=(METADATA, VARIANT_JSON))
        project, version = match["dist"].replace("_", "-"), match["version"]  # a twin's dist is lower case
        metadata = check_metadata(found[METADATA], path.name, project, version)
        variant = variant_facts(found[VARIANT_JSON], match["label"], path.name)
        file.seek(0)
        sha256 = sha256_stream(file)
        if FileIdentity.of(os.fstat(file.fileno())) != identity:
            raise OSError(f"{path.name}: changed while it was being read")
    provenance = found.get(PROVENANCE, b"")
    return identity, {
        "read": {member: found[member] for member in (METADATA, PROVENANCE) if member in found},
        "sha256": sha256,
        "metadata_sha256": metadata.sha256,
        "metadata_size": metadata.size,
        "requires_python": metadata.requires_python,
        "provenance_sha256": _sha256(provenance) if provenance else "",
        "provenance_size": len(provenance),
        "variant": variant,
    }


def deriver(maker: TwinMaker | None, folder: Path) -> Deriver | None:
    """What the catalog asks of the twin step while it reads a wheel with provenance: the facts of the twin the
    step makes of it (as a twin row would state them, kept in the wheel's row) and that twin's files. Where
    ``folder`` holds that twin already (the build writes both), its bytes are compared as they are worked out, and
    the facts keep its identity: read_derived then need not hash it (a 200 MB twin's bytes hashed once, not twice)."""
    if maker is None:
        return None

    def derive(file: BinaryIO, archive: Archive, name: WheelName) -> tuple[str, dict[tuple[str, str], bytes]] | None:
        twin = twin_name(name.filename)
        derived, compared = _derived_against(maker, file, archive, folder / twin)
        if derived is None or derived.name != twin:
            return None
        found = derived.members
        metadata, provenance = found.get(METADATA, b""), found.get(PROVENANCE, b"")
        try:
            variant = variant_facts(found.get(VARIANT_JSON, b""), name.label, derived.name)
        except RejectedWheel:
            return None
        facts = [derived.sha256, derived.size, _sha256(metadata), len(metadata), _sha256(provenance) if provenance
                 else "", len(provenance), json.dumps(variant, sort_keys=True), compared and list(compared)]
        read = {(derived.name, member): data for member, data in ((METADATA, metadata), (PROVENANCE, provenance))}
        return json.dumps(facts), {key: data for key, data in read.items() if data}

    return derive


def _derived_against(
    maker: TwinMaker, file: BinaryIO, archive: Archive, path: Path
) -> tuple[Derived | None, FileIdentity | None]:
    """The twin derived from the wheel open as ``file``, compared with the file at ``path`` where there is one of
    _COMPARED_FROM bytes or more; that file's identity where it held exactly the derived bytes and kept its identity
    throughout, else None."""
    listed = identity_if_regular(path)  # none yet (the twin step makes it), or no regular file (settling refuses it)
    if listed is None or listed.size < _COMPARED_FROM:
        return maker.derive(file, archive), None
    try:
        fd = open_regular(path)
    except OSError:  # gone, or replaced by something else, since
        return maker.derive(file, archive), None
    with os.fdopen(fd, "rb") as twin:
        before = FileIdentity.of(os.fstat(twin.fileno()))
        derived = maker.derive(file, archive, twin)
        held = derived is not None and derived.matched and FileIdentity.of(os.fstat(twin.fileno())) == before
    return derived, before if held else None


# A twin this small is hashed where it is settled rather than compared while derived: opening it beside its wheel
# costs some 28 µs (CPU, this machine), the digest of 40 kB. A CUDA extension's twin is megabytes; the bench's and
# the tests' synthetic ones are a few kB, and 10,000 of them indexed cold cost 0.13 CPU-s more compared.
_COMPARED_FROM = 1 << 20


def read_derived(path: Path, wheel: WheelRow, fresh: Mapping[str, bytes]) -> tuple[FileIdentity, dict[str, Any]] | None:
    """What the index shows of the twin at ``path`` if its bytes are those of the twin the step derived from its
    wheel (``wheel``'s row; one read, to hash the file, unless the file still has the identity it had when the
    catalog compared it with the derived bytes): the derived twin's facts, with ``fresh``, its files as the
    catalog derived them this run, by member (none where the wheel was not read again). Its METADATA is the
    wheel's with the version made public at the Version line, so it names the same project and Requires-Python.
    None if they are not its bytes, or nothing was derived."""
    try:
        sha256, size, metadata_sha256, metadata_size, provenance_sha256, provenance_size, variant, *compared = (
            json.loads(wheel.derived)
        )
    except (ValueError, TypeError):
        return None
    with os.fdopen(open_regular(path), "rb") as file:
        identity = FileIdentity.of(os.fstat(file.fileno()))
        held = compared == [list(identity)]  # the bytes compared with the derived twin's, and unmoved since
        if identity.size != size or not (held or sha256_stream(file) == sha256):
            return None
        if FileIdentity.of(os.fstat(file.fileno())) != identity:
            raise OSError(f"{path.name}: changed while it was being read")
    return identity, {
        "read": dict(fresh),
        "sha256": sha256,
        "metadata_sha256": metadata_sha256,
        "metadata_size": metadata_size,
        "requires_python": wheel.requires_python,
        "provenance_sha256": provenance_sha256,
        "provenance_size": provenance_size,
        "variant": json.loads(variant),
    }


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def variant_facts(data: bytes, label: str, where: str) -> dict[str, Any]:
    """The properties and providers of a twin's variant.json, which must describe exactly ``label`` (its name's),
    each property a list of plain values; RejectedWheel otherwise."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise RejectedWheel(f"{where}: {VARIANT_JSON} is not JSON ({str(error)[:200]})") from None
    variants = document.get("variants") if isinstance(document, dict) else None
    if not isinstance(variants, dict) or list(variants) != [label]:
        described = sorted(variants) if isinstance(variants, dict) else variants
        raise RejectedWheel(f"{where}: {VARIANT_JSON} describes {described!r}, the filename {label}")
    properties, providers = variants[label], document.get("providers", {})
    if not _properties_ok(properties):
        raise RejectedWheel(f"{where}: {VARIANT_JSON}'s properties are not {{namespace: {{feature: [values]}}}}")
    if not isinstance(providers, dict) or not all(isinstance(p, dict) for p in providers.values()):
        raise RejectedWheel(f"{where}: {VARIANT_JSON}'s providers are not {{namespace: {{...}}}}")
    return {"properties": properties, "providers": providers}


def _properties_ok(properties: object) -> bool:
    return isinstance(properties, dict) and all(
        isinstance(features, dict)
        and _FEATURE.match(namespace)
        and all(
            _FEATURE.match(feature) and isinstance(values, list) and all(isinstance(v, str) for v in values)
            for feature, values in features.items()
        )
        for namespace, features in properties.items()
    )

