"""The calibration profile file: versioned JSON, one profile a line, read whole or not at all.

The file is written only by the store, so anything it cannot interpret (a
bad entry, two profiles in one slot, a newer version) makes the whole file
unusable: it is reported, and the store neither adopts nor overwrites it.
``json`` writes every string with escapes and every finite float as its
``repr``, so both come back exactly; with ``ensure_ascii`` the file is ASCII,
and any Python string, a lone surrogate included, survives it::

    {"format": "kerneltune-calibration-profiles", "schema_version": 1,
     "profiles": [
      {"source": "calibrated", "key": {"backend": "example_gpu", ...}, "measurements": [...],
       "policy": "..."}
     ]}
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from .._support.documents import DocumentFormat, collector_paused, kind, read_document
from ..errors import Problem, TuningValidationError
from .keys import CalibrationMeasurement, CalibrationProfileKey, prefixed
from .records import CalibrationProfile

PROFILES_FORMAT = DocumentFormat(
    "kerneltune-calibration-profiles", 1,
    {"format": str, "schema_version": int, "profiles": list},
    what="calibration profile file")
_PROFILE_FIELDS = ("source", "key", "measurements", "policy")
_KEY_FIELDS = ("backend", "operator_name", "implementation_version", "model_digest",
               "processor", "thread_count", "structural_properties")
_MEASUREMENT_FIELDS = ("name", "value", "unit")


def serialise(profiles: Iterable[CalibrationProfile]) -> str:
    """The file's text: the header, then one profile per line, so a diff shows what changed."""
    header = PROFILES_FORMAT.opening()
    lines = [json.dumps(profile.to_dict(), ensure_ascii=True, allow_nan=False)
             for profile in profiles]
    body = ",\n".join(f"  {line}" for line in lines)
    return f'{header},\n "profiles": [' + (f"\n{body}\n " if lines else "") + "]}\n"


def _fields(data: object, allowed: tuple[str, ...], required: Iterable[str], what: str
            ) -> list[Problem]:
    """What is wrong with the shape of a mapping read from the file."""
    if not isinstance(data, dict):
        return [Problem("", f"expected {what} (a mapping), got {kind(data)}")]
    return ([Problem(str(name), f"unknown field; expected {', '.join(allowed)}")
             for name in data if name not in allowed]
            + [Problem(name, "missing") for name in required if name not in data])


def _built(build, data: dict, field: str, problems: list[Problem]):
    """``build(**data)``, or None with its problems (under ``field``) added to ``problems``."""
    try:
        return build(**data)
    except TuningValidationError as error:
        problems += prefixed(error.problems, field) if field else error.problems
        return None


def profile_from(data: object) -> tuple[CalibrationProfile | None, list[Problem]]:
    """One profile of the file, or every problem that keeps it from being one."""
    problems = _fields(data, _PROFILE_FIELDS, _PROFILE_FIELDS, "a profile")
    if problems:
        return None, problems
    assert isinstance(data, dict)
    key_problems = _fields(data["key"], _KEY_FIELDS, _KEY_FIELDS[:3], "a key")
    key = None
    if key_problems:
        problems += prefixed(key_problems, "key")
    else:
        key = _built(CalibrationProfileKey, data["key"], "key", problems)
    measurements = data["measurements"]
    if not isinstance(measurements, list):
        problems.append(Problem("measurements", f"expected a list, got {kind(measurements)}"))
        measurements = []
    built = []
    for index, item in enumerate(measurements):
        where = f"measurements[{index}]"
        item_problems = _fields(item, _MEASUREMENT_FIELDS, _MEASUREMENT_FIELDS, "a measurement")
        if item_problems:
            problems += prefixed(item_problems, where)
        else:
            built.append(_built(CalibrationMeasurement, item, where, problems))
    if problems:
        return None, problems
    profile = _built(CalibrationProfile, {**data, "key": key, "measurements": built}, "", problems)
    return profile, problems


def read_profiles(target: Path) -> tuple[str, tuple[CalibrationProfile, ...], tuple[Problem, ...]]:
    """The file's status (as :func:`~kerneltune._support.documents.read_document` says)
    and its profiles.

    Any profile that cannot be read, or that shares its slot with another,
    makes the file ``malformed``: every problem is named, and no profile is
    returned.
    """
    with collector_paused():
        document = read_document(target, PROFILES_FORMAT)
        if document.status != "ok":
            return document.status, (), document.problems
        assert document.data is not None
        return _profiles_of(document.data["profiles"], document.path)


def _profiles_of(items: list, path: str
                 ) -> tuple[str, tuple[CalibrationProfile, ...], tuple[Problem, ...]]:
    profiles: list[CalibrationProfile] = []
    problems: list[Problem] = []
    slots: dict[object, int] = {}
    for index, data in enumerate(items):
        profile, found = profile_from(data)
        entry = f"profile {index}"
        problems += [p.located(file=path, entry=entry) for p in found]
        if profile is None:
            continue
        first = slots.setdefault(profile.slot, index)
        if first != index:
            problems.append(Problem("key", f"profile {first} has the same key and source; "
                                           f"neither is believed", entry=entry,
                                    file=path))
        profiles.append(profile)
    if problems:
        return "malformed", (), tuple(problems)
    return "ok", tuple(profiles), ()
