"""Profile files: a profile written whole or not at all, and read back with every problem.

Reading checks the structure and reports every problem at once, each naming
the file, the entry (by index, with its key when that could be read) and the
field; the values are checked against the registered schemas when the
profile is imported (:mod:`.importer`).
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._support.checks import is_count
from .._support.documents import kind, read_document
from .._support.files import (
    LOCK_TIMEOUT,
    file_lock,
    remove_stray_temporaries,
    write_atomically,
)
from ..errors import Problem, ProfileError, TuningValidationError
from ..machine.selectors import CpuSelector
from ..tuning.schema import KernelTuningKey, value_problems
from .model import PROFILE_FORMAT, DeploymentProfile, Evidence, ProfileEntry, profile_text

_ENTRY_FIELDS = ("key", "threads", "values")
#: what an entry merged from several machines adds (see .merge)
_OPTIONAL_FIELDS = ("evidence", "library_version")


# --- writing and reading --------------------------------------------------------------------


def write_deployment_profile(profile: DeploymentProfile, path: str | os.PathLike[str]) -> Path:
    """Write ``profile`` whole or not at all (temporary sibling, fsync, replace).

    Under the file's lock, so the temporaries of a writer killed earlier are removed.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target, LOCK_TIMEOUT):
        remove_stray_temporaries(target)
        write_atomically(target, profile_text(profile))
    return target


def read_deployment_profile(path: str | os.PathLike[str]) -> DeploymentProfile:
    """Read and check a profile file; :class:`ProfileError` lists every problem.

    Each problem names the file, the entry (by index, with its key when that
    could be read) and the field.
    """
    document = read_document(Path(path), PROFILE_FORMAT)
    if document.status != "ok":
        problems = document.problems or (Problem("", "no such file", file=document.path),)
        raise ProfileError(problems, context="deployment profile not read")
    return profile_from_document(document.data, document.path)


def profile_from_document(data: Mapping[str, Any], path: str,
                          within: str | None = None) -> DeploymentProfile:
    """A profile from a checked document's data; every problem raised at once.

    ``within`` says which profile of a deployment file it is, for the messages.
    """
    problems: list[Problem] = []

    def problem(name: str, message: str) -> None:
        problems.append(Problem(name, message, entry=within, file=path))

    name = data["name"]
    if not name.strip():
        problem("name", "expected a non-empty string")
    if type(data["priority"]) is not int:
        problem("priority", f"expected an integer, got {kind(data['priority'])}")
    selector_name = data["selector_name"]
    if selector_name is not None and not isinstance(selector_name, str):
        problem("selector_name", f"expected a string or null, got {kind(selector_name)}")
    selector = None
    try:
        selector = CpuSelector.from_dict(data["selector"])
    except TuningValidationError as error:
        problems += [Problem(f"selector.{p.field}".rstrip("."), p.message, entry=within,
                             file=path) for p in error.problems]
    if selector is not None and (selector.minimum_threads or selector.maximum_threads):
        problem("selector", "a profile's selector names no thread bounds: its entries do")
    if not all(isinstance(p, dict) for p in data["provenance"]):
        problem("provenance", "expected a list of mappings")
    indexed = [(index, entry) for index, raw in enumerate(data["entries"])
               if (entry := _entry(index, raw, path, problems, within)) is not None]
    problems += _overlapping(indexed, path, within)
    entries = [entry for _, entry in indexed]
    if problems:
        raise ProfileError(problems, context="deployment profile not read")
    return DeploymentProfile(name, selector, tuple(entries), data["priority"], selector_name,
                             types.MappingProxyType(dict(data["versions"])),
                             tuple(types.MappingProxyType(p) for p in data["provenance"]),
                             path, within)


def _entry(index: int, raw: object, path: str, problems: list[Problem],
           within: str | None) -> ProfileEntry | None:
    """One entry, or None with its every problem added (where it is, said only then)."""
    if not isinstance(raw, dict):
        problems.append(Problem("", f"expected a mapping with the fields key, threads, values, "
                                    f"got {kind(raw)}", entry=_entry_label(within, index),
                                file=path))
        return None
    found = [Problem(str(name), "unknown field; expected key, threads, values (and "
                                       "evidence, library_version)")
             for name in raw if name not in _ENTRY_FIELDS + _OPTIONAL_FIELDS]
    found += [Problem(name, "missing") for name in _ENTRY_FIELDS if name not in raw]
    key = None
    if "key" in raw:
        try:
            key = _key(raw["key"])
        except TuningValidationError as error:
            found += error.problems
    threads = raw.get("threads")
    if "threads" in raw and not (isinstance(threads, list) and len(threads) == 2
                                 and all(is_count(t, minimum=1) for t in threads)
                                 and threads[0] <= threads[1]):
        found.append(Problem("threads", f"expected [low, high] with 1 <= low <= high, got "
                                        f"{threads!r}"))
    values = raw.get("values", {})
    found += value_problems(values)
    evidence = _evidence(raw.get("evidence", {}), values, found)
    version = raw.get("library_version")
    if not (version is None or (isinstance(version, str) and version)):
        found.append(Problem("library_version", f"expected a version string, got "
                                                f"{kind(version)}"))
    if found:
        where = _entry_label(within, index, key)
        problems += [p.located(entry=where, file=path) for p in found]
        return None
    return ProfileEntry(key, (threads[0], threads[1]), types.MappingProxyType(dict(values)),
                        types.MappingProxyType(evidence), version)


def _evidence(raw: object, values: object, found: list[Problem]) -> dict[str, Evidence]:
    """A merged entry's evidence, per parameter of its values; a problem for each that is not."""
    if not isinstance(raw, dict):
        found.append(Problem("evidence", f"expected a mapping of parameters, got {kind(raw)}"))
        return {}
    evidence = {}
    for name, data in raw.items():
        if not isinstance(values, dict) or name not in values:
            found.append(Problem(f"evidence.{name}", "evidence for a parameter the entry has "
                                                     "no value of"))
            continue
        try:
            evidence[name] = Evidence.from_dict(data)
        except ValueError as error:
            found.append(Problem(f"evidence.{name}", str(error)))
    return evidence


@functools.lru_cache(maxsize=4096)
def _parsed_key(fields: tuple) -> KernelTuningKey:
    return KernelTuningKey.from_dict(dict(fields))


def _key(raw: object) -> KernelTuningKey:
    """An entry's key, parsed once per spelling: a profile repeats each key per thread range."""
    if isinstance(raw, dict) and all(isinstance(v, str | int) for v in raw.values()):
        return _parsed_key(tuple(raw.items()))
    return KernelTuningKey.from_dict(raw)


def _entry_label(within: str | None, index: int, key: KernelTuningKey | None = None) -> str:
    label = f"entry {index}" + (f" ({key})" if key is not None else "")
    return f"{within}, {label}" if within else label


def _overlapping(entries: Sequence[tuple[int, ProfileEntry]], path: str,
                 within: str | None) -> list[Problem]:
    """Two entries of one key whose thread ranges share a count say two things at once."""
    problems: list[Problem] = []
    by_key: dict[KernelTuningKey, list[tuple[int, ProfileEntry]]] = {}
    for index, entry in entries:
        by_key.setdefault(entry.key, []).append((index, entry))
    for key, group in by_key.items():
        group.sort(key=lambda item: item[1].threads)
        for (first, before), (index, after) in zip(group, group[1:], strict=False):
            if after.threads[0] <= before.threads[1]:
                problems.append(Problem(
                    "threads", f"{list(after.threads)} overlaps entry {first}'s "
                               f"{list(before.threads)}: a duplicate entry for this key",
                    entry=_entry_label(within, index, key), file=path))
    return problems
