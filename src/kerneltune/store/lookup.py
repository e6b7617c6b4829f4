"""Which stored profile a backend gets for one execution, and why each other one was not it.

Precedence, highest first: an exact override, a portable override, an exact
calibrated profile, a portable calibrated profile; ``force_portable`` skips
both exact ones. The first candidate whose policy the backend's validator
accepts is selected. Finding it costs at most four index lookups and the
validator calls, whatever the store holds; the reasons for every other stored
profile are worked out when ``rejected`` is first read.

Reason codes: ``backend``, ``operator``, ``implementation_version`` (an
outdated, or newer, implementation), ``model``, ``processor``,
``thread_count``, ``structure``, ``force_portable`` (an exact profile the
lookup skipped), ``policy_rejected`` (the validator refused it) and
``lower_precedence`` (it matches, but a higher tier was selected).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from .._support.documents import kind
from .._support.reprs import brief_repr
from ..errors import Problem, TuningValidationError
from .keys import CalibrationProfileKey, StructuralProperties, structure_of
from .records import (
    CALIBRATED,
    OVERRIDE,
    CalibrationProfile,
    Slot,
    Snapshot,
    Validator,
    policy_refusal,
)

#: the exact fields a profile must share with the lookup, and the reason code of each
_EXACT_REASONS = (("model_digest", "model", "model digest"),
                  ("processor", "processor", "processor"),
                  ("thread_count", "thread_count", "thread count"))


@dataclass(frozen=True)
class RejectedCalibrationProfile:
    """A stored profile the lookup did not select: a stable reason code and a message for people."""

    profile: CalibrationProfile
    reason: str
    message: str

    def to_dict(self) -> dict[str, object]:
        return {"tier": self.profile.tier, "key": self.profile.key.to_dict(),
                "reason": self.reason, "message": self.message}


def _structure_text(properties: tuple[tuple[str, str], ...]) -> str:
    return "{" + ", ".join(f"{name}={value!r}" for name, value in properties) + "}"


@brief_repr
@dataclass(frozen=True, repr=False)
class CalibrationProfileLookup:
    """The profile selected for a lookup (None when none fits), with the other profiles' reasons.

    ``refused`` are the candidates whose policy the validator refused, in
    precedence order; ``rejected`` is every stored profile but the selected
    one, with its reason, in precedence order and then file order.
    ``profiles`` is the snapshot the lookup ran on.
    """

    selected: CalibrationProfile | None
    exact_key: CalibrationProfileKey
    structural_properties: tuple[tuple[str, str], ...] | None = None
    force_portable: bool = False
    refused: tuple[RejectedCalibrationProfile, ...] = ()
    profiles: tuple[CalibrationProfile, ...] = field(default=(), repr=False, compare=False)

    @functools.cached_property
    def rejected(self) -> tuple[RejectedCalibrationProfile, ...]:
        refused = {rejection.profile.slot: rejection for rejection in self.refused}
        rejected = []
        for profile in sorted(self.profiles, key=lambda p: p.precedence):
            if profile is self.selected:
                continue
            rejection = refused.get(profile.slot)
            if rejection is None:
                reason = self._mismatch(profile.key) or (
                    "lower_precedence", f"it matches, but ranks below the selected "
                                        f"{self.selected.tier} profile")  # type: ignore[union-attr]
                rejection = RejectedCalibrationProfile(profile, *reason)
            rejected.append(rejection)
        return tuple(rejected)

    def _mismatch(self, key: CalibrationProfileKey) -> tuple[str, str] | None:
        """The first way ``key`` differs from what was looked up, or None when it matches."""
        wanted = self.exact_key
        for name, code, label in (("backend", "backend", "backend"),
                                  ("operator_name", "operator", "operator"),
                                  ("implementation_version", "implementation_version",
                                   "implementation version")):
            if getattr(key, name) != getattr(wanted, name):
                return code, (f"{label} {getattr(key, name)!r}; the lookup is for "
                              f"{getattr(wanted, name)!r}")
        if key.exact:
            if self.force_portable:
                return "force_portable", "an exact profile; the lookup takes portable ones only"
            for name, code, label in _EXACT_REASONS:
                if getattr(key, name) != getattr(wanted, name):
                    return code, (f"{label} {getattr(key, name)!r}; the lookup's is "
                                  f"{getattr(wanted, name)!r}")
            return None
        if self.structural_properties is None:
            return "structure", "a portable profile; the lookup gave no structural properties"
        if key.structural_properties != self.structural_properties:
            return "structure", (f"structure {_structure_text(key.structural_properties)}; the "
                                 f"lookup's is {_structure_text(self.structural_properties)}")
        return None

    def to_dict(self) -> dict[str, object]:
        return {"selected": None if self.selected is None else self.selected.to_dict(),
                "tier": None if self.selected is None else self.selected.tier,
                "rejected": [rejection.to_dict() for rejection in self.rejected]}


def _request(exact_key: object, structural_properties: StructuralProperties | None
             ) -> tuple[tuple[tuple[str, str], ...] | None, list[Problem]]:
    """The lookup's structure, and what is wrong with its arguments."""
    problems = []
    if not isinstance(exact_key, CalibrationProfileKey):
        problems.append(Problem("exact_key", "missing; a lookup needs the exact key of the "
                                             "execution" if exact_key is None else
                                f"expected a CalibrationProfileKey, got {kind(exact_key)}"))
    elif not exact_key.exact:
        problems.append(Problem("exact_key", "a portable key; give the exact key of the "
                                             "execution, and its structure as "
                                             "structural_properties"))
    if structural_properties is None:
        return None, problems
    structure, found = structure_of(structural_properties, "structural_properties")
    if not (structure or found):
        found = [Problem("structural_properties", "empty; give None for no portable lookup")]
    return structure, problems + found


def lookup_in(snapshot: Snapshot, exact_key: CalibrationProfileKey | None,
              structural_properties: StructuralProperties | None, force_portable: bool,
              validate: Validator | None) -> CalibrationProfileLookup:
    """Select from ``snapshot`` by precedence; raise TuningValidationError for bad arguments."""
    structure, problems = _request(exact_key, structural_properties)
    if problems:
        raise TuningValidationError(problems, context="calibration profile lookup")
    assert exact_key is not None
    portable = exact_key.portable(structure) if structure else None
    order: list[Slot] = []
    for source in (OVERRIDE, CALIBRATED):
        if not force_portable:
            order.append((source, exact_key))
        if portable is not None:
            order.append((source, portable))
    selected, refused = None, []
    for slot in order:
        profile = snapshot.index.get(slot)
        if profile is None:
            continue
        refusal = policy_refusal(validate, profile.policy)
        if refusal is None:
            selected = profile
            break
        refused.append(RejectedCalibrationProfile(profile, "policy_rejected",
                                                  f"the backend refused its policy: {refusal}"))
    return CalibrationProfileLookup(selected, exact_key, structure, bool(force_portable),
                                    tuple(refused), snapshot.profiles)
