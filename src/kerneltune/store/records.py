"""Stored calibration profiles, the backend's policy checks, and the immutable snapshot.

A profile is a backend's opaque policy string for one key, with the
measurements that chose it and its source: ``calibrated`` (measured) or
``override`` (installed by a user). The store holds them in a snapshot that
is replaced whole, never changed in place, so a lookup that runs while
another thread updates sees the snapshot before or after the update.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .._support.documents import kind
from ..errors import Problem, TuningValidationError
from .keys import CalibrationMeasurement, CalibrationProfileKey, measurements_of

CALIBRATED = "calibrated"
OVERRIDE = "override"
SOURCES = (CALIBRATED, OVERRIDE)
#: lookup precedence, highest first: (source, key kind)
TIERS = ((OVERRIDE, "exact"), (OVERRIDE, "portable"), (CALIBRATED, "exact"),
         (CALIBRATED, "portable"))

#: what a backend supplies to serialise its policy: called once per store or override
Serializer = Callable[[], str]
#: a backend's check of a serialised policy: None accepts it, a string says why not
Validator = Callable[[str], "str | None"]

Slot = tuple[str, CalibrationProfileKey]


@dataclass(frozen=True)
class CalibrationProfile:
    """A backend's policy for one key, the measurements behind it and where it came from.

    ``policy`` is opaque here: only the backend that wrote it knows what it
    means, which is why lookups take the backend's validator.
    """

    key: CalibrationProfileKey
    policy: str
    measurements: tuple[CalibrationMeasurement, ...] = ()
    source: str = CALIBRATED

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.key, CalibrationProfileKey):
            problems.append(Problem("key", f"expected a CalibrationProfileKey, got "
                                           f"{kind(self.key)}"))
        if not isinstance(self.policy, str):
            problems.append(Problem("policy", f"expected a string, got {kind(self.policy)}"))
        elif not self.policy:
            problems.append(Problem("policy", "empty; a profile needs a policy"))
        if self.source not in SOURCES:
            problems.append(Problem("source", f"expected one of {', '.join(SOURCES)}, got "
                                              f"{self.source!r}"))
        try:
            object.__setattr__(self, "measurements", measurements_of(self.measurements))
        except TuningValidationError as error:
            problems += error.problems
        if problems:
            raise TuningValidationError(problems, context="calibration profile")

    @property
    def slot(self) -> Slot:
        """What a profile replaces: the one of the same source and key."""
        return (self.source, self.key)

    @property
    def tier(self) -> str:
        """Its lookup precedence in words: ``exact override`` ... ``portable calibrated``."""
        return f"{self.key.kind} {self.source}"

    @property
    def precedence(self) -> int:
        """0 for an exact override, the highest, to 3 for a portable calibrated profile."""
        return TIERS.index((self.source, self.key.kind))

    def to_dict(self) -> dict[str, object]:
        return {"source": self.source, "key": self.key.to_dict(),
                "measurements": [m.to_dict() for m in self.measurements],
                "policy": self.policy}


def policy_refusal(validate: Validator | None, policy: str) -> str | None:
    """Why the backend refuses ``policy``, or None when it accepts it (or has no validator).

    A ``ValueError`` the validator raises (a parser's, say) is a refusal too;
    any other exception is the backend's bug and propagates.
    """
    if validate is None:
        return None
    try:
        verdict = validate(policy)
    except ValueError as error:
        return str(error) or type(error).__name__
    if verdict is None:
        return None
    if isinstance(verdict, str):
        return verdict or "refused by the backend's validator"
    raise TuningValidationError([Problem("validate", f"returned {kind(verdict)}; a validator "
                                                     f"returns None to accept a policy or a "
                                                     f"string saying why not")])


@dataclass(frozen=True)
class Snapshot:
    """Every profile of a store, in file order, and their index by slot; never changed."""

    profiles: tuple[CalibrationProfile, ...] = ()
    index: Mapping[Slot, CalibrationProfile] = field(default_factory=dict, repr=False,
                                                     compare=False)

    @classmethod
    def of(cls, profiles: Iterable[CalibrationProfile]) -> Snapshot:
        profiles = tuple(profiles)
        return cls(profiles, {profile.slot: profile for profile in profiles})

    def with_profile(self, profile: CalibrationProfile
                     ) -> tuple[Snapshot, CalibrationProfile | None]:
        """The snapshot with ``profile`` in its slot (where the old one was), and the old one."""
        old = self.index.get(profile.slot)
        if old is None:
            return Snapshot.of((*self.profiles, profile)), None
        return Snapshot.of(profile if p is old else p for p in self.profiles), old

    def without(self, drop: Callable[[CalibrationProfile], bool]
                ) -> tuple[Snapshot, tuple[CalibrationProfile, ...]]:
        """The snapshot without the profiles ``drop`` selects, and those profiles."""
        removed = tuple(p for p in self.profiles if drop(p))
        if not removed:
            return self, ()
        return Snapshot.of(p for p in self.profiles if not drop(p)), removed
