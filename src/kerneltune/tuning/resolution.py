"""What the registry holds and answers: tuning profiles, and resolutions with their source.

A :class:`KernelTuningProfile` binds values of one key to a processor selector
or to one calibrated execution; a :class:`Resolution` is the complete values
resolution chose for a key and an execution, with their :class:`TuningSource`
and every :class:`RejectedCandidate`. All are immutable values; the registry
(:mod:`kerneltune.tuning.registry`) owns the generations they live in.
"""

from __future__ import annotations

import functools
import json
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import Problem, TuningValidationError
from ..machine.selectors import CpuSelector, Tier
from .schema import KernelTuningKey, TuningValue

if TYPE_CHECKING:
    from ..machine.descriptor import CpuExecutionDescriptor


def _plain(value: object) -> object:
    """JSON-able form with sets sorted, so digests are the same in every process."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, frozenset | set):
        return sorted(_plain(v) for v in value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class KernelTuningProfile:
    """Values for one key, bound to a processor selector or to one calibrated execution.

    Exactly one of ``selector`` and ``execution`` is given. ``values`` may be
    partial: the kernel's defaults fill in the rest. ``origin`` says where the
    profile came from (a file, ``"api"``, ``"calibration"``) for diagnostics,
    and ``provenance`` how it was made (a deployment profile's calibrating
    machines and environment); neither is part of the profile's identity.
    """

    key: KernelTuningKey
    values: Mapping[str, TuningValue]
    selector: CpuSelector | None = None
    execution: CpuExecutionDescriptor | None = None
    priority: int = 0
    name: str | None = None
    origin: str | None = None
    report_digest: str | None = None
    provenance: Mapping[str, object] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.key, KernelTuningKey):
            problems.append(Problem("key", f"expected a KernelTuningKey, got {self.key!r}"))
        if (self.selector is None) == (self.execution is None):
            problems.append(Problem("selector", "give exactly one of selector and execution"))
        if self.selector is not None and not isinstance(self.selector, CpuSelector):
            problems.append(Problem("selector", f"expected a CpuSelector, got {self.selector!r}"))
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            problems.append(Problem("priority", f"expected an integer, got {self.priority!r}"))
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            problems.append(Problem("name", f"expected a non-empty string, got {self.name!r}"))
        # the concrete types first: the Mapping ABC's check is slow, and runs for every entry
        if not isinstance(self.values, dict | types.MappingProxyType | Mapping):
            problems.append(Problem("values", f"expected a mapping, got {self.values!r}"))
        if problems:
            raise TuningValidationError(problems, context="tuning profile")
        object.__setattr__(self, "values", types.MappingProxyType(dict(self.values)))

    @property
    def tier(self) -> Tier:
        return Tier.CALIBRATED if self.execution is not None else self.selector.tier

    @functools.cached_property
    def digest(self) -> str:
        """Content digest: key, binding and values, so equal profiles share it across processes."""
        binding = (
            {"selector": self.selector.to_dict()}
            if self.selector is not None
            else {"execution": _plain(self.execution.identity)}
        )
        content = {"key": self.key.to_dict(), **binding, "priority": self.priority,
                   "values": _plain(dict(self.values))}
        import hashlib  # here: a process that digests no profile never loads it

        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()

    @property
    def label(self) -> str:
        return self.name or f"{self.tier.label}:{self.digest[:12]}"


@dataclass(frozen=True)
class TuningSource:
    """Where a resolved set of values came from."""

    tier: Tier
    profile_name: str | None = None
    digest: str | None = None
    origin: str | None = None
    priority: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {"tier": self.tier.label, "profile_name": self.profile_name, "digest": self.digest,
                "origin": self.origin, "priority": self.priority}


@dataclass(frozen=True)
class RejectedCandidate:
    """A profile that was considered for a key and not used, with a reason code.

    Codes: ``selector:<field>``, ``threads``, ``execution``, ``tier``,
    ``priority``, ``element_type``, ``abi`` and ``tuning`` (excluded by the
    requested tuning mode, profile name or digest).
    """

    profile_name: str
    digest: str
    tier: Tier
    priority: int
    reason: str
    origin: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"profile_name": self.profile_name, "digest": self.digest, "tier": self.tier.label,
                "priority": self.priority, "reason": self.reason, "origin": self.origin}


@dataclass(frozen=True, eq=False)
class Resolution:
    """The complete values for one key and execution, with their source.

    ``rejected`` is computed on first access: listing every other candidate
    is diagnostics, and resolution itself must stay cheap.
    """

    key: KernelTuningKey
    values: Mapping[str, TuningValue]
    source: TuningSource
    generation: int
    overridden: tuple[str, ...] = ()
    base_source: TuningSource | None = None
    _explain: Callable[[], tuple[RejectedCandidate, ...]] = field(default=tuple, repr=False)

    @classmethod
    def _fast(cls, key, values, source, generation, explain) -> Resolution:
        """The common case (no overrides) without the frozen-dataclass ``__init__``.

        Building a frozen dataclass sets each field through
        ``object.__setattr__``, which was a third of the cost of a resolution.
        """
        resolution = object.__new__(cls)
        resolution.__dict__.update(key=key, values=values, source=source, generation=generation,
                                   overridden=(), base_source=None, _explain=explain)
        return resolution

    @functools.cached_property
    def rejected(self) -> tuple[RejectedCandidate, ...]:
        return self._explain()

    def to_dict(self) -> dict[str, object]:
        return {
            "key": self.key.to_dict(),
            "values": dict(self.values),
            "source": self.source.to_dict(),
            "base_source": self.base_source.to_dict() if self.base_source else None,
            "overridden": list(self.overridden),
            "generation": self.generation,
            "rejected": [r.to_dict() for r in self.rejected],
        }


@dataclass(frozen=True)
class AccessCounts:
    """Monotonic registry counters: a steady-state session run must not move them."""

    snapshots: int
    lookups: int
    resolutions: int
