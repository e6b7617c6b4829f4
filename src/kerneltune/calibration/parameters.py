"""The developer's view of tuning on one machine: list, set, and fill in the cache.

:func:`kernel_tuning_parameters` answers "what does this kernel use here, and
why": its defaults, what the cache holds for this execution, and what
resolution picks. :func:`set_kernel_tuning_parameters` persists a chosen
partial update as a manual cache entry. :func:`propose_kernel_tuning_updates`
finds the keys this execution has no cached values for, and
:func:`apply_kernel_tuning_updates` calibrates those that can be and persists
them: proposing never measures, and applying is always an explicit call.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .._support.reprs import brief_repr
from ..cache.kernel_tuning_cache import (
    CacheEntry,
    classify_entries,
    entries_from_profiles,
    inspect_kernel_tuning_cache,
    update_cache_entries,
    update_kernel_tuning_cache,
)
from ..cache.location import cache_path
from ..cache.reports import CacheInspection, CacheUpdateReport
from ..errors import Problem, TuningValidationError, UnknownKernelError
from ..machine.descriptor import CpuExecutionDescriptor
from ..machine.detect import current_execution
from ..tuning.keyfilter import KeyFilter
from ..tuning.registry import (
    KernelTuningProfile,
    KernelTuningRegistry,
    TuningSource,
    default_registry,
)
from ..tuning.schema import KernelTuningKey, TuningValue, element_type_name, element_type_number
from .batch import calibrate_kernel_thresholds, is_calibratable
from .options import CalibrationOptions
from .report import CalibrationBatchReport

PathLike = str | os.PathLike[str]


def _cache_summary(inspection: CacheInspection) -> dict[str, object]:
    return {"status": inspection.status, "path": inspection.path,
            "problems": [str(p) for p in inspection.problems]}


def _keys(keys: Iterable[KernelTuningKey]) -> list[dict[str, object]]:
    return [key.to_dict() for key in keys]


@dataclass(frozen=True)
class KernelTuningParameters:
    """One key on this execution: defaults, the cached values, and what resolution uses.

    ``cached`` is the cache entry for exactly this execution (None when there
    is none), ``cached_source`` whether it was calibrated or set by hand;
    ``active`` and ``active_source`` are what a session created now would use.
    """

    key: KernelTuningKey
    defaults: Mapping[str, TuningValue]
    cached: Mapping[str, TuningValue] | None
    cached_source: str | None
    active: Mapping[str, TuningValue]
    active_source: TuningSource
    calibratable: bool

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key.to_dict(), "defaults": dict(self.defaults),
                "cached": None if self.cached is None else dict(self.cached),
                "cached_source": self.cached_source, "active": dict(self.active),
                "active_source": self.active_source.to_dict(),
                "calibratable": self.calibratable}


@brief_repr
@dataclass(frozen=True, repr=False)
class KernelTuningParameterReport:
    execution: CpuExecutionDescriptor
    cache: CacheInspection
    parameters: tuple[KernelTuningParameters, ...]

    def to_dict(self) -> dict[str, object]:
        return {"effective_threads": self.execution.effective_threads,
                "cache": _cache_summary(self.cache),
                "parameters": [p.to_dict() for p in self.parameters]}


def kernel_tuning_parameters(
    kernel: str | None = None,
    library: str | None = None,
    implementation: str | None = None,
    element_type: object = None,
    path: PathLike | None = None,
    *,
    execution: CpuExecutionDescriptor | None = None,
    registry: KernelTuningRegistry = default_registry,
) -> KernelTuningParameterReport:
    """Every selected registered key with its defaults, cached and active values.

    Reads the cache without publishing anything, so what it lists as cached
    may differ from what is active until the cache is loaded.
    """
    selection = KeyFilter.of(library, kernel or (), implementation or (),
                                   () if element_type is None else element_type)
    execution = execution or current_execution()
    inspection = inspect_kernel_tuning_cache(path)
    cached = {entry.slot: entry for entry in inspection.entries}
    snapshot = registry.snapshot()
    rows = []
    for key in filter(selection.matches, snapshot.keys()):
        entry = cached.get((key, execution.identity))
        resolution = snapshot.resolve(key, execution)
        rows.append(KernelTuningParameters(
            key, snapshot.schema(key).default_values(),
            None if entry is None else entry.values, None if entry is None else entry.source,
            resolution.values, resolution.source, is_calibratable(key, registry=registry)))
    return KernelTuningParameterReport(execution, inspection, tuple(rows))


def one_key(keys: Iterable[KernelTuningKey], kernel: str, element_type: object,
             implementation: str | None, tuning_abi: int | None,
             library: str | None) -> KernelTuningKey:
    """The one registered key these fields name; an ambiguity asks for the missing field."""
    number = element_type_number(element_type)
    wanted = {"library": library, "implementation": implementation, "tuning_abi": tuning_abi}
    candidates = [
        key for key in keys
        if key.kernel == kernel and key.element_type == number
        and all(value is None or getattr(key, name) == value for name, value in wanted.items())
    ]
    if not candidates:
        given = ", ".join(f"{name} {value!r}" for name, value in wanted.items()
                          if value is not None)
        raise UnknownKernelError(f"no tuning schema is registered for kernel {kernel!r} and "
                                 f"element type {element_type_name(number)}"
                                 + (f" with {given}" if given else ""))
    if len(candidates) > 1:
        problems = []
        for name in wanted:
            choices = sorted({getattr(key, name) for key in candidates})
            if len(choices) > 1:
                problems.append(Problem(name, f"{len(candidates)} registered keys match; give "
                                              f"{name}= one of {', '.join(map(str, choices))}"))
        raise TuningValidationError(problems, context=f"{kernel} "
                                                      f"{element_type_name(number)}: ambiguous")
    return candidates[0]


def set_kernel_tuning_parameters(
    kernel: str,
    element_type: object,
    values: Mapping[str, object],
    implementation: str | None = None,
    tuning_abi: int | None = None,
    path: PathLike | None = None,
    load: bool = True,
    *,
    library: str | None = None,
    execution: CpuExecutionDescriptor | None = None,
    registry: KernelTuningRegistry = default_registry,
) -> CacheUpdateReport:
    """Persist ``values`` for one kernel and element type as a manual entry for this execution.

    The values are merged over the entry already cached for this key and
    execution (under the cache lock, so a concurrent update is not lost), and
    the merged entry must pass the schema as a whole: invalid values raise and
    nothing is written. ``load`` then publishes the persisted entry in this
    process, as a load of the cache would.
    """
    snapshot = registry.snapshot()
    key = one_key(snapshot.keys(), kernel, element_type, implementation, tuning_abi, library)
    execution = execution or current_execution()
    slot = (key, execution.identity)

    def merged(existing: Sequence[CacheEntry]) -> list[CacheEntry]:
        before = next((entry.values for entry in existing if entry.slot == slot), {})
        profile = KernelTuningProfile(key, {**before, **values}, execution=execution,
                                      origin="manual")
        return entries_from_profiles([profile], "manual", snapshot)

    # Fail before taking the lock (and also when persistence is off); the
    # merge is done again under the lock, on the file as it is then.
    merged(inspect_kernel_tuning_cache(path).entries)
    report = update_cache_entries(cache_path(path), merged)
    if load and report.status == "updated":
        written = (report.added + report.replaced)[0]
        registry.register_profiles([written.profile(report.path)])
    return report


@dataclass(frozen=True)
class KernelTuningProposal:
    """Which selected keys the cache covers for this execution, and what to do about the rest.

    ``missing_calibratable`` keys have a calibration function
    (:func:`apply_kernel_tuning_updates` measures them); ``missing_manual``
    keys have a schema only, so their values can only be set by hand.
    """

    execution: CpuExecutionDescriptor
    cache: CacheInspection
    covered: tuple[KernelTuningKey, ...]
    missing_calibratable: tuple[KernelTuningKey, ...]
    missing_manual: tuple[KernelTuningKey, ...]

    def to_dict(self) -> dict[str, object]:
        return {"effective_threads": self.execution.effective_threads,
                "cache": _cache_summary(self.cache), "covered": _keys(self.covered),
                "missing_calibratable": _keys(self.missing_calibratable),
                "missing_manual": _keys(self.missing_manual)}


def propose_kernel_tuning_updates(
    library: str | None = None,
    kernels: Iterable[str] | str = (),
    implementations: Iterable[str] | str = (),
    element_types: Iterable[object] | object = (),
    path: PathLike | None = None,
    execution: CpuExecutionDescriptor | None = None,
    *,
    device: str | None = None,
    registry: KernelTuningRegistry = default_registry,
) -> KernelTuningProposal:
    """Read-only: a key is covered when the cache holds a valid entry for exactly this execution."""
    selection = KeyFilter.of(library, kernels, implementations, element_types, device)
    execution = execution or current_execution()
    inspection = inspect_kernel_tuning_cache(path)
    snapshot = registry.snapshot()
    found = classify_entries(inspection.entries, selection, execution, snapshot,
                             inspection.path, all_thread_counts=False)
    covered = {entry.key for entry in found.usable}
    selected = list(filter(selection.matches, snapshot.keys()))
    missing = [key for key in selected if key not in covered]
    return KernelTuningProposal(
        execution, inspection, tuple(key for key in selected if key in covered),
        tuple(key for key in missing if is_calibratable(key, registry=registry)),
        tuple(key for key in missing if not is_calibratable(key, registry=registry)))


@dataclass(frozen=True)
class KernelTuningApplication:
    """What applying a proposal did: the proposal, the calibration batch and the cache update."""

    proposal: KernelTuningProposal
    calibration: CalibrationBatchReport | None
    cache: CacheUpdateReport | None

    def to_dict(self) -> dict[str, object]:
        return {"proposal": self.proposal.to_dict(),
                "calibration": None if self.calibration is None else self.calibration.to_dict(),
                "cache": None if self.cache is None else self.cache.to_dict()}


def apply_kernel_tuning_updates(
    library: str | None = None,
    kernels: Iterable[str] | str = (),
    implementations: Iterable[str] | str = (),
    element_types: Iterable[object] | object = (),
    path: PathLike | None = None,
    options: CalibrationOptions | None = None,
    *,
    device: str | None = None,
    registry: KernelTuningRegistry = default_registry,
) -> KernelTuningApplication:
    """Calibrate the missing calibratable keys of the proposal and persist what succeeded.

    The proposal is made for the execution calibration measures
    (``options.threads``); calibration publishes its profiles as it always
    does, and they are then written to the cache.
    """
    options = options or CalibrationOptions()
    execution = current_execution(options.threads)
    proposal = propose_kernel_tuning_updates(library, kernels, implementations, element_types,
                                             path, execution, device=device, registry=registry)
    if not proposal.missing_calibratable:
        return KernelTuningApplication(proposal, None, None)
    batch = calibrate_kernel_thresholds(proposal.missing_calibratable, options,
                                        registry=registry)
    update = None
    if batch.successful_profiles:
        update = update_kernel_tuning_cache(batch.successful_profiles, path, registry=registry)
    return KernelTuningApplication(proposal, batch, update)
