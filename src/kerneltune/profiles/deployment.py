"""Deployment files, and reading profiles from any file: only what a reader wants is parsed.

``nox -s bake`` (:mod:`kerneltune.pipeline.baking`) writes deployment files: every
profile of a fleet whole, in one file an image carries, read by every process at
start-up. So that start-up costs what matches the host rather than what the fleet
holds, a deployment file (version 2) puts an *index* first: per profile its name,
priority, selector, the ISA variants and kernel libraries of its entries, how many
entries it has, and where its *section* lies (offset and length from the start of
the body) with the section's SHA-256. A reader reads the header, picks the sections
it wants from the index, and reads, checks and parses those alone; the coverage
table the bake computed comes last, after the sections. The file's digest is the
SHA-256 of everything before the body, which holds every section's digest. The
bake checks the whole file once; :func:`read_profiles` with no ``wanted`` reads and
checks every section, their order and the end of the file.

A profile file written by kerneltune is read the same way: its header (one field a
line, up to the entries) says whose it is, and a profile a reader does not want is
left unread. Version 1 deployment files (no index) and files in any other layout
are read whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from .._support.documents import (
    Contents,
    DocumentFormat,
    check_envelope,
    maximum_bytes,
    open_regular,
    parse_document,
    read_bounded,
    strict_json,
    unreadable,
)
from .._support.files import (
    LOCK_TIMEOUT,
    file_lock,
    remove_stray_temporaries,
    write_atomically,
)
from ..errors import Problem, ProfileError
from .files import profile_from_document
from .model import PROFILE_FORMAT, DeploymentProfile, profile_text

#: the deployment file's format: its header, the index and the sections, then the coverage
DEPLOYMENT_FORMAT = DocumentFormat(
    "kerneltune-deployment-file", 2,
    {"format": str, "schema_version": int, "index": list, "profiles": list, "coverage": dict},
    what="deployment file")
#: the first version, without an index: still read, whole
DEPLOYMENT_FORMAT_1 = DocumentFormat(
    "kerneltune-deployment-file", 1,
    {"format": str, "schema_version": int, "coverage": dict, "profiles": list},
    what="deployment file")
#: an index row's fields and their types
INDEX_FIELDS: Mapping[str, type | tuple[type, ...]] = {
    "name": str, "priority": int, "selector": dict, "implementations": list,
    "libraries": list, "entries": int, "offset": int, "length": int, "sha256": str}
#: what separates two sections in the body
_SEPARATOR = b",\n"
#: what the files read here are, for messages
WHAT = "deployment profile"
#: the start of a header line of kerneltune's layout: ``"name": `` (then a value and a comma,
#: or ``[`` opening a list)
_FIELD_NAME = re.compile(rb' *("[a-z_]+"): ')
#: what follows the last section: the end of the list, then the coverage table
_TAIL = re.compile(rb'\n? \],\n "coverage": (.*)\n\}\n', re.DOTALL)


@dataclass(frozen=True)
class IndexRow:
    """One profile of a deployment file as its index describes it, before it is read."""

    name: str
    priority: int
    selector: Mapping[str, object]
    implementations: tuple[str, ...]
    libraries: tuple[str, ...]
    entries: int
    offset: int
    length: int
    sha256: str


@dataclass(frozen=True)
class ReadProfiles:
    """What a file gave a reader: its status, the profiles read, those left unread.

    ``unread`` are the profiles ``wanted`` turned down (from a deployment file's
    index, or a profile file's header), never parsed or checked; ``digest`` names
    the file (None when it was not read far enough to know it).
    """

    status: str
    profiles: tuple[DeploymentProfile, ...] = ()
    problems: tuple[Problem, ...] = ()
    digest: str | None = None
    unread: tuple[IndexRow, ...] = ()


def deployment_text(profiles: Iterable[DeploymentProfile], coverage: Mapping[str, object]
                    ) -> tuple[bytes, str]:
    """The file's bytes and its digest: the header with the index, the sections, the coverage."""
    ordered = sorted(profiles, key=lambda p: (p.name, p.priority))
    sections = [profile_text(profile, indent="  ").rstrip("\n").encode() for profile in ordered]
    index, offset = [], 0
    for profile, section in zip(ordered, sections, strict=True):
        index.append({
            "name": profile.name, "priority": profile.priority,
            "selector": profile.selector.to_dict(),
            "implementations": sorted({entry.key.implementation for entry in profile.entries}),
            "libraries": sorted({entry.key.library for entry in profile.entries}),
            "entries": len(profile.entries), "offset": offset, "length": len(section),
            "sha256": hashlib.sha256(section).hexdigest()})
        offset += len(section) + len(_SEPARATOR)
    header = (f"{{\n \"format\": {json.dumps(DEPLOYMENT_FORMAT.name)},\n"
              f" \"schema_version\": {DEPLOYMENT_FORMAT.schema_version},\n"
              f" \"index\": {json.dumps(index, sort_keys=True)},\n \"profiles\": [\n").encode()
    body = _SEPARATOR.join(sections) + (b"\n" if sections else b"")
    tail = f" ],\n \"coverage\": {json.dumps(coverage, sort_keys=True)}\n}}\n".encode()
    return header + body + tail, hashlib.sha256(header).hexdigest()


def write_deployment_file(profiles: Iterable[DeploymentProfile], coverage: Mapping[str, object],
                          path: str | os.PathLike[str]) -> str:
    """Write the file whole or not at all, read-only from its first moment; return its digest.

    Under the file's lock, so the temporaries of a writer killed earlier are removed.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text, digest = deployment_text(profiles, coverage)
    with file_lock(target, LOCK_TIMEOUT):
        remove_stray_temporaries(target)
        write_atomically(target, text, mode=0o444)
    return digest


def read_profiles(path: str | os.PathLike[str],
                  wanted: Callable[[IndexRow], bool] | None = None) -> ReadProfiles:
    """The profiles of a profile file or a deployment file, never raising for its content.

    ``wanted`` picks, from a deployment file's index (or a profile file's header,
    as a row without a position), the profiles to read; the others are left
    unread. Without it, everything is read and checked.
    """
    target = Path(path)
    stream = open_regular(target, WHAT)
    if isinstance(stream, Contents):
        return _failed(stream)
    with stream:
        try:
            scanned = _header(stream)
            if scanned is not None:
                fields, opened, start = scanned
                if (opened == "profiles" and fields.get("format") == DEPLOYMENT_FORMAT.name
                        and fields.get("schema_version") == DEPLOYMENT_FORMAT.schema_version):
                    return _read_indexed(stream, str(target), fields, start, wanted)
                if opened == "entries" and wanted is not None and fields.get("format") == \
                        PROFILE_FORMAT.name:
                    row = _profile_row(fields)
                    if row is not None and not wanted(row):
                        return ReadProfiles("ok", unread=(row,))
        except OSError as error:
            return _failed(unreadable(str(target), WHAT, error.strerror or str(error)))
        except MemoryError:
            return _failed(unreadable(str(target), WHAT, "not enough memory to read it"))
    return _read_whole(target)


def _failed(contents: Contents) -> ReadProfiles:
    return ReadProfiles(contents.status, problems=contents.problems or (
        Problem("", "no such file", file=contents.path),))


def _read_whole(target: Path) -> ReadProfiles:
    """A file in no layout :func:`_header` knows, a version 1 deployment file or a profile
    file read whole: parsed and checked at once."""
    contents = read_bounded(target, WHAT)
    if contents.data is None:
        return _failed(contents)
    path, data = contents.path, contents.data
    document = parse_document(data, path, PROFILE_FORMAT, DEPLOYMENT_FORMAT, DEPLOYMENT_FORMAT_1)
    if document.status != "ok":
        return ReadProfiles(document.status, problems=document.problems)
    digest = hashlib.sha256(data).hexdigest()
    try:
        if document.data["format"] == PROFILE_FORMAT.name:
            return ReadProfiles("ok", (profile_from_document(document.data, path),),
                                digest=digest)
        if document.data["schema_version"] == DEPLOYMENT_FORMAT.schema_version:
            # an indexed file in another layout than the writer's: its index is not trusted
            return ReadProfiles("malformed", problems=(Problem(
                "", "a version 2 deployment file must keep the layout the bake writes (the "
                    "header a field a line, then the sections its index locates)",
                file=path),))
        return ReadProfiles("ok", _profiles_of(document.data["profiles"], path), digest=digest)
    except ProfileError as error:
        return ReadProfiles("malformed", problems=error.problems)


def _header(stream: BinaryIO) -> tuple[dict[str, Any], str, int] | None:
    """The fields of a file in kerneltune's one-field-a-line layout, up to the list that
    follows them (its name), and the offset where that list's items begin; None for a
    file in any other layout, or whose header alone is over :func:`maximum_bytes`."""
    limit = maximum_bytes()
    if stream.readline(8) != b"{\n":
        return None
    fields: dict[str, Any] = {}
    position = 2
    while position <= limit:
        line = stream.readline(limit + 1 - position)
        position += len(line)
        match = _FIELD_NAME.match(line)
        if match is None or not line.endswith(b"\n"):
            return None
        name, value = json.loads(match[1]), line[match.end():-1]
        comma = value.endswith(b",")
        value = value[:-1] if comma else value
        if name in fields or not comma and value != b"[":
            return None
        if value == b"[" and not comma:
            return fields, name, position
        try:
            fields[name] = strict_json(value)
        except ValueError:
            return None
    return None


def _profile_row(fields: Mapping[str, Any]) -> IndexRow | None:
    """A profile file's header as the index row a reader decides on (no position)."""
    if not isinstance(fields.get("name"), str) or not isinstance(fields.get("selector"), dict):
        return None
    priority = fields.get("priority")
    return IndexRow(fields["name"], priority if type(priority) is int else 0,
                    fields["selector"], (), (), 0, 0, 0, "")


def _read_indexed(stream: BinaryIO, path: str, fields: Mapping[str, Any], start: int,
                  wanted: Callable[[IndexRow], bool] | None) -> ReadProfiles:
    """The wanted sections of a version 2 deployment file, each checked against its digest."""
    stream.seek(0)
    digest = hashlib.sha256(stream.read(start)).hexdigest()
    rows, problems = _index(fields, path)
    if problems:
        return ReadProfiles("malformed", problems=tuple(problems), digest=digest)
    if wanted is None:
        problems = _layout(stream, rows, start, path)
    limit = maximum_bytes()
    profiles, unread = [], []
    for number, row in enumerate(rows):
        if wanted is not None and not wanted(row):
            unread.append(row)
            continue
        within = f"profile {number} ({row.name})"
        if row.length > limit:
            problems.append(Problem("", f"{row.length:,} bytes, more than the {limit:,} a "
                                        f"profile may have", entry=within, file=path))
            continue
        stream.seek(start + row.offset)
        section = stream.read(row.length)
        if len(section) != row.length or hashlib.sha256(section).hexdigest() != row.sha256:
            problems.append(Problem("sha256", "the section is not what the index says (the "
                                              "file was changed or cut)", entry=within,
                                    file=path))
            continue
        try:
            profile = profile_from_document(_section(section, path, within), path, within)
        except ProfileError as error:
            problems += error.problems
            continue
        if _row_of(profile, row.offset, row.length, row.sha256) != row:
            problems.append(Problem("index", "the index describes another profile than its "
                                             "section holds", entry=within, file=path))
            continue
        profiles.append(profile)
    if problems:
        return ReadProfiles("malformed", problems=tuple(problems), digest=digest)
    return ReadProfiles("ok", tuple(profiles), digest=digest, unread=tuple(unread))


def _row_of(profile: DeploymentProfile, offset: int, length: int, sha256: str) -> IndexRow:
    """The index row of ``profile``, its section placed as given."""
    return IndexRow(profile.name, profile.priority, profile.selector.to_dict(),
                    tuple(sorted({entry.key.implementation for entry in profile.entries})),
                    tuple(sorted({entry.key.library for entry in profile.entries})),
                    len(profile.entries), offset, length, sha256)


def _index(fields: Mapping[str, Any], path: str) -> tuple[list[IndexRow], list[Problem]]:
    """The index rows, or every problem with them."""
    index = fields.get("index")
    if not isinstance(index, list) or set(fields) != {"format", "schema_version", "index"}:
        return [], [Problem("index", "expected the header fields format, schema_version and "
                                     "index, then the profiles", file=path)]
    rows, problems = [], []
    for number, raw in enumerate(index):
        where = f"index row {number}"
        if not isinstance(raw, dict) or set(raw) != set(INDEX_FIELDS):
            problems.append(Problem("index", f"expected the fields {', '.join(INDEX_FIELDS)}",
                                    entry=where, file=path))
            continue
        wrong = [name for name, expected in INDEX_FIELDS.items()
                 if not isinstance(raw[name], expected) or isinstance(raw[name], bool)
                 or (expected is int and raw[name] < 0 and name != "priority")
                 or (expected is list and not all(isinstance(item, str) for item in raw[name]))]
        if wrong:
            problems += [Problem(f"index.{name}", f"expected {INDEX_FIELDS[name].__name__}",
                                 entry=where, file=path) for name in wrong]
            continue
        rows.append(IndexRow(raw["name"], raw["priority"], raw["selector"],
                             tuple(raw["implementations"]), tuple(raw["libraries"]),
                             raw["entries"], raw["offset"], raw["length"], raw["sha256"]))
    return rows, problems


def _layout(stream: BinaryIO, rows: list[IndexRow], start: int, path: str) -> list[Problem]:
    """Whether the sections follow each other as the index says, and the file ends well."""
    position = 0
    for number, row in enumerate(rows):
        if row.offset != position:
            return [Problem("index.offset", f"{row.offset}, where the section after the one "
                                            f"before begins at {position}",
                            entry=f"index row {number}", file=path)]
        position += row.length + len(_SEPARATOR)
    end = position - len(_SEPARATOR) if rows else 0
    stream.seek(start + end)
    tail = stream.read(maximum_bytes() + 1)
    match = _TAIL.fullmatch(tail)
    try:
        ending = json.loads(match[1]) if match and bool(rows) == bool(match[0][:1] == b"\n") \
            else None
    except ValueError:
        ending = None
    if not isinstance(ending, dict):
        return [Problem("coverage", "the file does not end with the coverage table after the "
                                    "sections (it was changed or cut)", file=path)]
    return []


def _section(section: bytes, path: str, within: str) -> Mapping[str, Any]:
    document = parse_document(section, path, PROFILE_FORMAT)
    if document.status != "ok":
        raise ProfileError([p.located(entry=within) for p in document.problems],
                           context="deployment file not read")
    return document.data


def _profiles_of(documents: list, path: str) -> tuple[DeploymentProfile, ...]:
    """The profiles of a version 1 deployment document; every problem raised at once."""
    problems: list[Problem] = []
    profiles = []
    for index, document in enumerate(documents):
        name = document.get("name") if isinstance(document, dict) else None
        within = f"profile {index}" + (f" ({name})" if isinstance(name, str) else "")
        status, found = check_envelope(document, path, PROFILE_FORMAT)
        if status != "ok":
            problems += [p.located(entry=within) for p in found]
            continue
        try:
            profiles.append(profile_from_document(document, path, within))
        except ProfileError as error:
            problems += error.problems
    if problems:
        raise ProfileError(problems, context="deployment file not read")
    return tuple(profiles)
