"""Explain: what every kernel would resolve to on a machine, and why each other candidate lost.

For this process, or for any processor described by a descriptor file and a
thread count, without detecting anything: which profile, file and entry each
registered key would get, with what values, and every rejected candidate with
its reason code (``selector:<field>``, ``threads``, ``abi``, ``tier``,
``priority``, ...). A key whose values involve BLAS and came from a profile
calibrated with another BLAS library than this process's is flagged.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .._support.reprs import brief_repr
from ..machine.blas import blas_difference, blas_label, current_blas, narrower_than
from ..machine.descriptor import CpuDescriptor, CpuExecutionDescriptor
from ..machine.descriptor_files import read_cpu_descriptor
from ..machine.detect import current_execution
from ..machine.selectors import Tier
from .libraries import not_installed_lines
from .registry import KernelTuningRegistry, TuningSnapshot, default_registry
from .resolution import KernelTuningProfile, Resolution
from .schema import KernelTuningKey, TuningValue

#: rejections of profiles of another key (another element type or tuning ABI): not shown
_OTHER_KEYS = ("element_type", "abi")


@brief_repr
@dataclass(frozen=True, repr=False)
class KeyExplanation:
    """One key: its resolution (values, source, rejected candidates) and any warning.

    ``evidence`` says, a line per parameter, what decided the values of an entry a
    bake merged from several machines' calibrations (see ``kerneltune.profiles.merge``).
    ``library_version`` is the installed version of the key's kernel library.
    """

    key: KernelTuningKey
    resolution: Resolution
    changed: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    #: the portable default of each changed parameter
    defaults: Mapping[str, TuningValue] = field(default_factory=dict)
    library_version: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {**self.resolution.to_dict(), "library_version": self.library_version,
                "changed": list(self.changed), "defaults": dict(self.defaults),
                "warnings": list(self.warnings), "evidence": list(self.evidence)}


@brief_repr
@dataclass(frozen=True, repr=False)
class Explanation:
    """What every selected key resolves to on ``execution``.

    ``not_installed`` counts, per kernel library not installed here, the entries the
    deployment files hold for this machine (they wait for the library, unused).
    """

    execution: CpuExecutionDescriptor
    keys: tuple[KeyExplanation, ...]
    not_installed: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {"execution": self.execution.to_dict(), "keys": [k.to_dict() for k in self.keys],
                "not_installed": dict(sorted(self.not_installed.items()))}

    def summary(self) -> str:
        """One line: keys, those whose values differ from the defaults, candidates rejected,
        warnings."""
        changed = sum(1 for row in self.keys if row.changed)
        rejected = sum(1 for row in self.keys for candidate in row.resolution.rejected
                       if candidate.reason not in _OTHER_KEYS)
        warnings = sum(len(row.warnings) for row in self.keys)
        return (f"{len(self.keys)} keys, {changed} with values other than the defaults, "
                f"{rejected} candidates rejected, {warnings} warnings")

    def table(self, changed_only: bool = False) -> str:
        """A readable table: a line per key (``changed_only``: per key whose values differ
        from the defaults, each with its default), its rejected profile candidates
        indented, and the :meth:`summary` last."""
        processor = self.execution.processor
        lines = [f"{processor.vendor} family {processor.family} model {processor.model} "
                 f"({processor.microarchitecture}), {self.execution.effective_threads} threads"]
        for row in self.keys:
            if changed_only and not row.changed:
                continue
            source = row.resolution.source
            where = f" {source.profile_name} ({source.origin})" if source.origin else ""
            values = ", ".join(f"{name}={row.resolution.values[name]}"
                               + (f" (default {row.defaults[name]})" if changed_only else "")
                               for name in row.changed)
            lines.append(f"{row.key}: {source.tier.label}{where}"
                         + (f": {values}" if values else ""))
            lines += [f"    rejected {candidate.profile_name} ({candidate.origin}): "
                      f"{candidate.reason}" for candidate in row.resolution.rejected
                      if candidate.reason not in _OTHER_KEYS]
            lines += [f"    warning: {warning}" for warning in row.warnings]
            lines += [f"    evidence: {line}" for line in row.evidence]
        lines += not_installed_lines(self.not_installed)
        lines.append(self.summary())
        return "\n".join(lines)


def explain(
    execution: CpuExecutionDescriptor | None = None,
    *,
    descriptor: CpuDescriptor | str | os.PathLike[str] | None = None,
    threads: int | None = None,
    keys: Iterable[KernelTuningKey] | None = None,
    registry: KernelTuningRegistry | None = None,
) -> Explanation:
    """Resolve every key (or ``keys``) for ``execution``, or for ``descriptor`` on ``threads``.

    A descriptor (a :class:`CpuDescriptor` or a descriptor file) describes
    another machine: nothing is detected, and its affinity is taken as
    ``threads`` CPUs on as many physical cores as it has.
    """
    registry = registry if registry is not None else default_registry
    if execution is None:
        execution = (current_execution(threads) if descriptor is None
                     else _described(descriptor, threads))
    snapshot = registry.snapshot()
    chosen = sorted(keys if keys is not None else snapshot.keys(), key=_order)
    # this process's BLAS libraries, looked for once and only where a key's values need them;
    # none for a described machine
    loaded_blas = functools.cache(current_blas) if descriptor is None else None
    return Explanation(execution, tuple(_row(snapshot, key, execution,
                                             registry.library_version(key.library),
                                             loaded_blas)
                                        for key in chosen))


def _order(key: KernelTuningKey) -> tuple:
    return (key.library, key.kernel, key.element_type, key.implementation, key.tuning_abi)


def _described(descriptor: CpuDescriptor | str | os.PathLike[str],
               threads: int | None) -> CpuExecutionDescriptor:
    processor = (descriptor if isinstance(descriptor, CpuDescriptor)
                 else read_cpu_descriptor(descriptor))
    count = threads or processor.logical_cores or 1
    cores = min(count, processor.physical_cores) if processor.physical_cores else None
    return CpuExecutionDescriptor(processor, count, frozenset(range(count)), cores)


def _row(snapshot: TuningSnapshot, key: KernelTuningKey, execution: CpuExecutionDescriptor,
         library_version: str | None,
         loaded_blas: Callable[[], list[dict[str, object]]] | None) -> KeyExplanation:
    resolution = snapshot.resolve(key, execution)
    defaults = snapshot.schema(key).default_values()
    changed = tuple(name for name, value in resolution.values.items()
                    if defaults.get(name) != value)
    warnings: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    if resolution.source.tier not in (Tier.DEFAULTS, Tier.CALIBRATED):
        profile = next((p for p in snapshot.profiles(key)
                        if p.digest == resolution.source.digest), None)
        if profile is not None:
            warnings = _blas_warning(profile) + _version_note(profile, library_version)
            found = (profile.provenance or {}).get("evidence") or {}
            evidence = tuple(f"{name}: {found[name].describe()}" for name in sorted(found))
    elif resolution.source.tier is Tier.DEFAULTS and loaded_blas is not None:
        warnings = _narrower_blas_note(key, resolution, loaded_blas)
    return KeyExplanation(key, resolution, changed, warnings, evidence,
                          {name: defaults[name] for name in changed}, library_version)


def _version_note(profile: KernelTuningProfile, installed: str | None) -> tuple[str, ...]:
    """A note when the values were calibrated with another version of the key's library: they
    still apply (the tuning ABI, not the version, says whether they mean the same)."""
    calibrated = (profile.provenance or {}).get("library_version")
    if calibrated is None or installed is None or calibrated == installed:
        return ()
    return (f"calibrated with {profile.key.library} {calibrated}, {installed} installed "
            f"(same tuning ABI {profile.key.tuning_abi}: the values apply)",)


def _narrower_blas_note(key: KernelTuningKey, resolution: Resolution,
                        loaded_blas: Callable[[], list[dict[str, object]]]) -> tuple[str, ...]:
    """A note where the defaults decide BLAS thresholds and a BLAS this process loaded runs
    kernels for fewer instructions than the key's variant's defaults assume (kernels for
    the processor), so a session keeps such a key's products of several rows off BLAS
    (docs/kernels.md, A BLAS behind the processor)."""
    if not any("blas" in name for name in resolution.values):
        return ()
    narrower = [blas_label(blas) for blas in loaded_blas()
                if narrower_than(blas, key.implementation)]
    if not narrower:
        return ()
    return (f"BLAS thresholds are the portable defaults, and {', '.join(narrower)} runs "
            f"kernels for fewer instructions than the defaults of {key.implementation} "
            f"assume: a session takes the "
            f"compiled paths for the products of several rows",)


def _blas_warning(profile: KernelTuningProfile) -> tuple[str, ...]:
    """Flag values deciding BLAS thresholds that were calibrated with another BLAS."""
    if profile.provenance is None or not any("blas" in name for name in profile.values):
        return ()
    difference = blas_difference(profile.provenance.get("machines", ()))
    return () if difference is None else (f"BLAS thresholds {difference}",)
