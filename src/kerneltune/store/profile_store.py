"""CalibrationProfileStore: a backend's calibration kept across processes and runs.

Every mutation takes the file's inter-process lock, re-reads the file, applies
itself to what is there now (so another process's profiles are kept), writes
the result atomically (:func:`~kerneltune._support.files.write_atomically`) and only
then adopts it as the in-memory snapshot. A file the store cannot interpret
is reported, left byte for byte and never adopted: the snapshot stays as it
was, and so does the file until someone removes it. Lookups read the
snapshot only: they never touch the file or take a lock.

Statuses. Loading (the constructor and ``reload``): ``loaded``, ``not_found``
(no file yet: no profiles), ``disabled``, ``unreadable``, ``malformed`` and
``unsupported_version``. Mutations: ``stored``, ``installed``, ``cleared``,
``invalidated``; ``unchanged`` (nothing to clear or invalidate);
``empty_policy`` and ``policy_rejected`` (nothing stored); and, leaving the
file and the snapshot as they were, ``unreadable``, ``malformed``,
``unsupported_version``, ``lock_timeout`` and ``write_failed``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import filelock

from .._support.documents import kind
from .._support.files import (
    LOCK_TIMEOUT,
    file_lock,
    remove_stray_temporaries,
    user_file_path,
    write_atomically,
)
from .._support.reprs import brief_repr
from ..errors import Problem, TuningValidationError
from .file import read_profiles, serialise
from .keys import (
    CalibrationProfileKey,
    MeasurementLike,
    StructuralProperties,
    measurements_of,
    name_problems,
)
from .lookup import CalibrationProfileLookup, lookup_in
from .records import (
    CALIBRATED,
    OVERRIDE,
    CalibrationProfile,
    Serializer,
    Snapshot,
    Validator,
    policy_refusal,
)

ENVIRONMENT_VARIABLE = "KERNELTUNE_CALIBRATION_PROFILES"
#: beside ``kernel_tuning.yaml``, the kernel tuning cache, in the same directory
FILE_NAME = "calibration_profiles.json"

_READABLE = ("ok", "not_found")


def default_calibration_profile_path() -> Path | None:
    """The store file of this user, or None when ``KERNELTUNE_CALIBRATION_PROFILES=off``.

    ``KERNELTUNE_CALIBRATION_PROFILES`` names another file; otherwise it is
    the kernel tuning cache's sibling in platformdirs' user cache directory.
    """
    return user_file_path(ENVIRONMENT_VARIABLE, FILE_NAME)


def _texts(problems: Iterable[Problem]) -> list[str]:
    return [str(problem) for problem in problems]


@brief_repr
@dataclass(frozen=True, repr=False)
class CalibrationProfileLoadReport:
    """What a load found: its status, the profiles now in memory and the file's problems."""

    status: str
    path: str | None
    profiles: int = 0
    problems: tuple[Problem, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"status": self.status, "path": self.path, "profiles": self.profiles,
                "problems": _texts(self.problems)}


@brief_repr
@dataclass(frozen=True, repr=False)
class CalibrationProfileUpdateReport:
    """What a mutation did: ``stored`` is the profile it stored or installed, ``removed`` the
    profiles it replaced, cleared or invalidated; ``written`` says whether the file was
    replaced. ``removed_temporaries`` counts crashed writers' leftovers cleaned under the lock.
    """

    status: str
    path: str | None
    stored: CalibrationProfile | None = None
    removed: tuple[CalibrationProfile, ...] = ()
    written: bool = False
    problems: tuple[Problem, ...] = ()
    removed_temporaries: int = 0

    def to_dict(self) -> dict[str, object]:
        return {"status": self.status, "path": self.path,
                "stored": None if self.stored is None else self.stored.to_dict(),
                "removed": [profile.to_dict() for profile in self.removed],
                "written": self.written, "problems": _texts(self.problems),
                "removed_temporaries": self.removed_temporaries}


#: a mutation: the snapshot it makes of the current one, what it stored, what it removed
_Change = Callable[[Snapshot], tuple[Snapshot, CalibrationProfile | None,
                                     tuple[CalibrationProfile, ...]]]


def _removal(drop: Callable[[CalibrationProfile], bool]) -> _Change:
    def change(snapshot: Snapshot):
        kept, removed = snapshot.without(drop)
        return kept, None, removed

    return change


def _key(key: object) -> CalibrationProfileKey:
    if not isinstance(key, CalibrationProfileKey):
        raise TuningValidationError([Problem("key", f"expected a CalibrationProfileKey, got "
                                                    f"{kind(key)}")])
    return key


class CalibrationProfileStore:
    """Calibrated profiles and user overrides of accelerated backends, persisted in one file.

    ``path`` defaults to :func:`default_calibration_profile_path`;
    ``persistence_enabled=False`` keeps everything in memory and touches no
    file (nor does ``KERNELTUNE_CALIBRATION_PROFILES=off`` for the default
    path). The constructor loads the file; :attr:`load_report` says what it
    found. One store may be shared by threads: mutations are serialised, and a
    lookup sees the snapshot before or after a concurrent mutation.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None,
                 persistence_enabled: bool = True, *, lock_timeout: float = LOCK_TIMEOUT):
        target = Path(path) if path is not None else default_calibration_profile_path()
        self._path = target if persistence_enabled else None
        self._lock_timeout = lock_timeout
        self._mutex = threading.Lock()
        self._snapshot = Snapshot()
        self._load_report = self.reload()

    @property
    def path(self) -> Path | None:
        """The file, or None when persistence is off."""
        return self._path

    @property
    def persistence_enabled(self) -> bool:
        return self._path is not None

    @property
    def load_report(self) -> CalibrationProfileLoadReport:
        """What the last load (the constructor's or :meth:`reload`'s) found."""
        return self._load_report

    def reload(self) -> CalibrationProfileLoadReport:
        """Adopt what the file holds now; a file that cannot be used leaves the snapshot as is."""
        with self._mutex:
            if self._path is None:
                report = CalibrationProfileLoadReport("disabled", None,
                                                      len(self._snapshot.profiles))
            else:
                status, profiles, problems = read_profiles(self._path)
                if status in _READABLE:
                    self._snapshot = Snapshot.of(profiles)
                report = CalibrationProfileLoadReport(
                    "loaded" if status == "ok" else status, str(self._path),
                    len(self._snapshot.profiles), problems)
            self._load_report = report
            return report

    def profiles(self) -> tuple[CalibrationProfile, ...]:
        """Every stored profile, calibrated or override, with its key and source, in file order."""
        return self._snapshot.profiles

    def lookup(self, exact_key: CalibrationProfileKey | None = None,
               structural_properties: StructuralProperties | None = None,
               force_portable: bool = False, validate: Validator | None = None
               ) -> CalibrationProfileLookup:
        """The profile to use for ``exact_key``'s execution (see :mod:`kerneltune.store.lookup`).

        ``structural_properties`` (the model's, as the backend describes it)
        admits portable profiles; ``force_portable`` skips the exact ones;
        ``validate`` is the backend's check of a policy, called on candidates
        in precedence order until one passes.
        """
        return lookup_in(self._snapshot, exact_key, structural_properties, force_portable,
                         validate)

    def store(self, key: CalibrationProfileKey, measurements: Iterable[MeasurementLike],
              serialize: Serializer, validate: Validator | None = None
              ) -> CalibrationProfileUpdateReport:
        """Store a calibrated policy for ``key``, replacing the previous one of that key.

        ``serialize`` is called once, before the lock is taken; an empty policy
        or one ``validate`` refuses stores nothing and says so.
        """
        return self._put(_key(key), measurements_of(measurements), serialize, validate,
                         CALIBRATED, "stored")

    def install_override(self, key: CalibrationProfileKey, serialize: Serializer,
                         validate: Validator | None = None) -> CalibrationProfileUpdateReport:
        """Install a user's policy for ``key``, which lookups prefer to any calibrated one."""
        return self._put(_key(key), (), serialize, validate, OVERRIDE, "installed")

    def clear_override(self, key: CalibrationProfileKey) -> CalibrationProfileUpdateReport:
        """Remove the override of ``key``; its calibrated profile, if any, applies again."""
        slot = (OVERRIDE, _key(key))
        return self._update(_removal(lambda profile: profile.slot == slot), "cleared")

    def invalidate(self, backend: str, implementation_version: str | None = None
                   ) -> CalibrationProfileUpdateReport:
        """Remove every profile, calibrated or override, of ``backend`` (of one version, if given).

        What a backend calls when its kernels change in a way its
        implementation version does not capture (a driver update, say).
        """
        problems = name_problems(backend, "backend")
        if implementation_version is not None:
            problems += name_problems(implementation_version, "implementation_version")
        if problems:
            raise TuningValidationError(problems, context="invalidate")
        return self._update(_removal(lambda profile: profile.key.backend == backend and (
            implementation_version in (None, profile.key.implementation_version))),
            "invalidated")

    # --- mutations ----------------------------------------------------------------------------

    def _put(self, key: CalibrationProfileKey, measurements: tuple, serialize: Serializer,
             validate: Validator | None, source: str, status: str
             ) -> CalibrationProfileUpdateReport:
        policy = serialize()
        if not isinstance(policy, str):
            raise TuningValidationError([Problem("serialize", f"returned {kind(policy)}; a "
                                                              f"policy is a string")])
        path = None if self._path is None else str(self._path)
        if not policy:
            return CalibrationProfileUpdateReport("empty_policy", path, problems=(Problem(
                "policy", "the backend serialised an empty policy; nothing stored"),))
        refusal = policy_refusal(validate, policy)
        if refusal is not None:
            return CalibrationProfileUpdateReport("policy_rejected", path, problems=(Problem(
                "policy", f"the backend refused the policy: {refusal}; nothing stored"),))
        profile = CalibrationProfile(key, policy, measurements, source)

        def put(snapshot: Snapshot):
            changed, old = snapshot.with_profile(profile)
            return changed, profile, () if old is None else (old,)

        return self._update(put, status)

    def _update(self, change: _Change, status: str) -> CalibrationProfileUpdateReport:
        """Apply ``change`` under the lock to the file as it is now, write it, then adopt it."""
        with self._mutex:
            if self._path is None:
                self._snapshot, stored, removed = change(self._snapshot)
                return CalibrationProfileUpdateReport(
                    status if stored or removed else "unchanged", None, stored, removed)
            path = str(self._path)
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                with file_lock(self._path, self._lock_timeout):
                    found, profiles, problems = read_profiles(self._path)
                    if found not in _READABLE:
                        return CalibrationProfileUpdateReport(found, path, problems=problems)
                    snapshot, stored, removed = change(Snapshot.of(profiles))
                    cleaned = 0
                    if stored or removed:
                        cleaned = remove_stray_temporaries(self._path)
                        write_atomically(self._path, serialise(snapshot.profiles))
                    self._snapshot = snapshot
            except filelock.Timeout:
                return CalibrationProfileUpdateReport("lock_timeout", path, problems=(Problem(
                    "", f"another process held the lock for more than {self._lock_timeout} s",
                    file=path),))
            except OSError as error:
                return CalibrationProfileUpdateReport("write_failed", path, problems=(Problem(
                    "", f"could not write the calibration profiles: {error}", file=path),))
            return CalibrationProfileUpdateReport(
                status if stored or removed else "unchanged", path, stored, removed,
                written=bool(stored or removed), removed_temporaries=cleaned)
