"""Merging several calibrations of one selector by their evidence, not by the last file.

A farm calibrates each machine type more than once (two instances of one type,
or one runner on several days), because one run on one shared machine can be
unlucky. The bake merges their profiles into one: for each key, thread range
and parameter it decides from every machine's calibration report.

- Machines whose reports say the key was measured under interference (other
  processes took more than :data:`~kerneltune.calibration.interference.MAXIMUM_SHARE`
  of its CPUs' time), or whose machine probes read more than
  :data:`~kerneltune.calibration.steadiness.STEADY_TOLERANCE` below the fastest
  machine's for the key (it was measured in a slower state), are counted out for
  the key, with the reason. So is a machine that did not calibrate the key.
- When the machines counted in agree, their value is published.
- When they disagree, a value other than the one in use on the farm is
  published only if most machines counted in chose it and its advantage over the
  value in use is confirmed on the pooled samples: every machine's comparison of
  that value with the value in use (the one that confirmed it there, or the one
  that turned it down) is pooled, point by point, and the test calibration uses
  (:func:`~kerneltune.calibration.confirmation.confirm`, the largest of the
  machines' margins) decides. Each point's ratio is of one machine's samples: one
  machine's times are never set against another's. A machine whose search found
  no win keeps the value in use without a comparison, so it leaves nothing to
  pool: the majority is its say.
- When every machine counted in confirmed a change of a number in one direction
  (each lowered a threshold, to 4096 and to 8192), the change nearest the value in
  use is published: the move every machine's evidence covers.
- Otherwise the value in use stays: "machines disagree".

Each merged entry records its :class:`~.model.Evidence` per parameter. The result
does not depend on the order the profiles come in: machines are taken by name.
"""

from __future__ import annotations

import collections
import os
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .._support.version import __version__
from ..calibration.confirmation import Confirmation, confirm
from ..calibration.interference import MAXIMUM_SHARE, KeyInterference
from ..calibration.steadiness import STEADY_TOLERANCE
from ..errors import Problem, ProfileError
from ..tuning.schema import KernelTuningKey, TuningValue
from .export import report_digest
from .model import (
    AGREE,
    BEATEN,
    CONFIRMED,
    COUNTED_OUT,
    DISAGREE,
    DeploymentProfile,
    Evidence,
    ProfileEntry,
)

#: ``check(key, values)``: why a merged entry's values cannot go together, or None
ValuesCheck = Callable[[KernelTuningKey, Mapping[str, TuningValue]], "str | None"]


@dataclass(frozen=True)
class MachineRun:
    """One calibrating run: its profile and the batch reports it was exported from
    (one per thread count, as ``calibrate --profile`` writes them beside it)."""

    profile: DeploymentProfile
    batches: tuple[Mapping, ...]

    @property
    def name(self) -> str:
        return self.profile.name


@dataclass(frozen=True)
class _Comparison:
    """One machine's comparison of ``candidate`` with ``in_use`` for one parameter."""

    in_use: TuningValue
    candidate: TuningValue
    confirmation: Confirmation


@dataclass(frozen=True)
class _Measured:
    """What one machine says of one parameter of one key and thread range."""

    value: TuningValue
    in_use: TuningValue
    comparison: _Comparison | None


def mergeable(profiles: Sequence[DeploymentProfile]) -> str | None:
    """Why ``profiles`` cannot be merged (None when they can): one selector, priority, set of
    ISA variants and thread ranges, and each its own name."""
    first = profiles[0]
    for other in profiles[1:]:
        if other.selector != first.selector or other.priority != first.priority:
            return "their selectors or priorities differ"
        if _shape(other) != _shape(first):
            return (f"their ISA variants or thread ranges differ ({_describe_shape(first)} "
                    f"against {_describe_shape(other)})")
    names = collections.Counter(profile.name for profile in profiles)
    twice = sorted(name for name, count in names.items() if count > 1)
    if twice:
        return (f"more than one is named {', '.join(map(repr, twice))}: each run needs its "
                f"own name (calibrate --name)")
    return None


def _shape(profile: DeploymentProfile) -> tuple[frozenset, frozenset]:
    return (frozenset(entry.key.implementation for entry in profile.entries),
            frozenset(entry.threads for entry in profile.entries))


def _describe_shape(profile: DeploymentProfile) -> str:
    implementations, ranges = _shape(profile)
    return (f"{', '.join(sorted(implementations))} on threads "
            f"{', '.join(f'{a}-{b}' if b > a else str(a) for a, b in sorted(ranges))}")


def by_digest(batches: Sequence[object]) -> dict[str, Mapping]:
    """Batch reports by the digest a profile's provenance names them by (each digest is a
    whole report's serialisation: computed once per batch, whatever the profiles)."""
    return {report_digest(batch): batch for batch in batches if isinstance(batch, Mapping)}


def batches_of(profile: DeploymentProfile, found: Mapping[str, Mapping]) -> tuple[Mapping, ...]:
    """The batch reports of ``found`` (:func:`by_digest`) that ``profile`` was exported from
    (its provenance names their digests), in thread order."""
    wanted = {digest for provenance in profile.provenance
              for digest in dict(provenance.get("report_digests") or {}).values()}
    return tuple(found[digest] for digest in sorted(wanted & found.keys(),
                                                    key=lambda d: _threads(found[d])))


def missing_reports(profile: DeploymentProfile, batches: Sequence[Mapping]) -> list[int]:
    """The thread counts of ``profile`` that no batch of ``batches`` reports."""
    have = {_threads(batch) for batch in batches}
    return sorted(set(profile.thread_counts) - have)


def _threads(batch: Mapping) -> int:
    execution = batch.get("execution")
    threads = execution.get("effective_threads") if isinstance(execution, Mapping) else None
    return threads if isinstance(threads, int) else 0


def merge_runs(runs: Sequence[MachineRun], check: ValuesCheck | None = None
               ) -> DeploymentProfile:
    """One profile of ``runs`` (profiles :func:`mergeable` accepts, each with its reports),
    each entry decided by the evidence and recording it.

    ``check`` says why values cannot go together: a merged entry it refuses keeps the
    value in use for the parameters the machines disagreed on. Raises
    :class:`ProfileError` for profiles that cannot be merged.
    """
    ordered = sorted(runs, key=lambda run: run.name)
    why = mergeable([run.profile for run in ordered]) if ordered else "no profile to merge"
    if why is not None:
        raise ProfileError([Problem("profiles", why, file=run.profile.place) for run in ordered],
                           context="profiles not merged")
    reports = [_reports_by_key(run) for run in ordered]
    entries: dict[tuple[KernelTuningKey, tuple[int, int]], dict[str, ProfileEntry]] = {}
    for run in ordered:
        for entry in run.profile.entries:
            entries.setdefault((entry.key, entry.threads), {})[run.name] = entry
    merged = []
    for (key, threads), by_machine in entries.items():
        found = {run.name: by_key.get((key, threads[0])) for run, by_key in
                 zip(ordered, reports, strict=True) if run.name in by_machine}
        merged.append(_merged_entry(key, threads, by_machine, found,
                                    [run.name for run in ordered], check))
    first = ordered[0].profile
    return DeploymentProfile(
        name=_common_name([run.name for run in ordered]), selector=first.selector,
        entries=tuple(sorted(merged, key=_entry_order)), priority=first.priority,
        selector_name=first.selector_name if len({r.profile.selector_name for r in ordered}) == 1
        else None,
        versions=_versions([run.profile for run in ordered]),
        provenance=tuple(types.MappingProxyType({**provenance, "profile": run.name})
                         for run in ordered for provenance in run.profile.provenance))


def _entry_order(entry: ProfileEntry) -> tuple:
    key = entry.key
    return (key.library, key.kernel, key.element_type, key.implementation, key.tuning_abi,
            entry.threads)


def _reports_by_key(run: MachineRun) -> dict[tuple[KernelTuningKey, int], Mapping]:
    """The run's key reports by key and thread count (a report that cannot be read is
    left out: its machine is counted out of that key, for want of evidence)."""
    found = {}
    for batch in run.batches:
        for report in batch.get("calibrated", ()):
            try:
                key = KernelTuningKey.from_dict(report["key"])
            except (KeyError, TypeError, ValueError):
                continue
            found[key, _threads(batch)] = report
    return found


def _merged_entry(key: KernelTuningKey, threads: tuple[int, int],
                  entries: Mapping[str, ProfileEntry], reports: Mapping[str, Mapping | None],
                  everyone: Sequence[str], check: ValuesCheck | None) -> ProfileEntry:
    out = {name: "did not calibrate the key" for name in everyone if name not in entries}
    out |= {name: "no calibration report of the key" for name, report in reports.items()
            if report is None}
    out |= {name: f"its report of the key cannot be read ({why})"
            for name, report in reports.items()
            if report is not None and (why := _unreadable(report))}
    present = {name: report for name, report in reports.items()
               if report is not None and name not in out}
    for name, report in present.items():
        reason = _interference(report)
        if reason:
            out[name] = reason
    out |= _slower_states(present)
    counted = [name for name in entries if name not in out]
    parameters = sorted({name for entry in entries.values() for name in entry.values})
    evidence = {}
    for parameter in parameters:
        said = {name: _measured(present[name], entries[name], parameter) for name in present
                if name in entries}
        said = {name: measured for name, measured in said.items() if measured is not None}
        decided = _decide({name: said[name] for name in counted if name in said}, out, said)
        if decided is not None:
            evidence[parameter] = decided
    # a parameter no report speaks of has no value in use to fall back on: left to the
    # tiers below the profile
    values = {name: _published(found, entries, name) for name, found in evidence.items()}
    problem = check(key, values) if check is not None else None
    if problem is not None:
        for name, found in evidence.items():
            if found.reason in (CONFIRMED, BEATEN):
                evidence[name] = Evidence(DISAGREE, found.in_use, found.machines, (),
                                          found.counted_out, found.compared, found.ratio,
                                          found.low, found.high)
                values[name] = found.in_use
    versions = [entry.library_version for entry in entries.values() if entry.library_version]
    return ProfileEntry(key, threads, types.MappingProxyType(values),
                        types.MappingProxyType(evidence), max(versions, default=None))


def _published(evidence: Evidence, entries: Mapping[str, ProfileEntry],
               parameter: str) -> TuningValue:
    """The value the evidence publishes: the agreeing machines' value, or the value in use."""
    if evidence.reason in (AGREE, CONFIRMED, BEATEN):
        return entries[evidence.agreed[0]].values[parameter]
    return evidence.in_use


def _unreadable(report: object) -> str | None:
    """What in a key report is not what calibration writes (None when it reads)."""
    if not isinstance(report, Mapping):
        return "not an object"
    decisions = report.get("decisions", [])
    if not isinstance(decisions, list) or not all(isinstance(d, Mapping) for d in decisions):
        return "'decisions' is not a list of objects"
    probes = report.get("machine_probe") or {}
    if not isinstance(probes, Mapping) or not all(isinstance(r, list) for r in probes.values()):
        return "'machine_probe' is not an object of lists"
    return None


def _interference(report: Mapping) -> str | None:
    """Why a key report counts as measured under interference, or None."""
    data = report.get("interference")
    if data is None:
        return None
    try:
        interference = KeyInterference.from_dict(data)
    except ValueError as error:
        return f"its interference record cannot be read ({error})"
    taken = None if interference.whole is None else interference.whole.taken_share
    if ((interference.worst_kept or 0.0) > MAXIMUM_SHARE or interference.stolen()
            or (taken or 0.0) > MAXIMUM_SHARE):
        return f"measured under interference ({interference.describe()})"
    return None


def _slower_states(reports: Mapping[str, Mapping]) -> dict[str, str]:
    """Machines whose probes, around the key, read more than the steadiness tolerance below
    the fastest machine's: measured in a slower state than the others."""
    states: dict[str, dict[str, float]] = {}
    for name, report in reports.items():
        for aspect, rates in dict(report.get("machine_probe") or {}).items():
            rates = [r for r in rates if isinstance(r, int | float) and not isinstance(r, bool)]
            if rates:
                states.setdefault(aspect, {})[name] = min(rates)
    out = {}
    for aspect, by_machine in sorted(states.items()):
        fastest = max(by_machine, key=lambda name: (by_machine[name], name))
        reference = by_machine[fastest]
        for name, state in sorted(by_machine.items()):
            if state < (1.0 - STEADY_TOLERANCE) * reference and name not in out:
                out[name] = (f"its {aspect} probe read {state:.2f}, more than "
                             f"{STEADY_TOLERANCE:.0%} below {fastest}'s {reference:.2f}: "
                             f"measured in a slower state")
    return out


def _measured(report: Mapping, entry: ProfileEntry, parameter: str) -> _Measured | None:
    """What a machine's report says of ``parameter``: the value in effect, the value in use
    before, and the comparison that decided between a change and it (None when the
    parameter has no value or decision there)."""
    if parameter not in entry.values:
        return None
    decisions = [d for d in report.get("decisions", ())
                 if isinstance(d, Mapping) and d.get("parameter") == parameter]
    if not decisions:
        return _Measured(entry.values[parameter], entry.values[parameter], None)
    last = decisions[-1]
    in_use = last.get("baseline", entry.values[parameter])
    comparison = None
    confirmation = _confirmation(last.get("confirmation"))
    if confirmation is not None:
        # a change turned down is the decision before the one that put the value back
        changed = last if last.get("changed") else next(
            (d for d in reversed(decisions[:-1]) if d.get("changed")), None)
        if changed is not None:
            comparison = _Comparison(in_use, changed.get("value"), confirmation)
    return _Measured(entry.values[parameter], in_use, comparison)


def _confirmation(data: object) -> Confirmation | None:
    if data is None:
        return None
    try:
        return Confirmation.from_dict(data)
    except ValueError:
        return None


def _decide(said: Mapping[str, _Measured], out: Mapping[str, str],
            everyone: Mapping[str, _Measured]) -> Evidence | None:
    """One parameter's evidence from what the machines counted in ``said``: agreement, a
    confirmed value, or the value in use (``everyone``'s, when every machine is counted
    out; None when no report speaks of the parameter)."""
    machines = tuple(sorted(said))
    if not said:
        if not everyone:
            return None
        in_use = _most_common([m.in_use for m in everyone.values()])
        return Evidence(COUNTED_OUT, in_use, (), (), dict(sorted(out.items())))
    in_use = _most_common([measured.in_use for measured in said.values()])
    values = {name: measured.value for name, measured in said.items()}
    distinct = sorted(set(map(_hashable, values.values())), key=repr)
    if len(distinct) == 1:
        value = values[machines[0]]
        pooled = _pooled(said, in_use, value) if value != in_use else None
        return _evidence(AGREE, in_use, machines, machines, out, value, pooled)
    challengers = [values[next(n for n in machines if _hashable(values[n]) == h)]
                   for h in distinct if h != _hashable(in_use)]
    pooled = {repr(v): _pooled(said, in_use, v) for v in challengers}
    chosen = {repr(v): sum(values[name] == v for name in machines) for v in challengers}
    # a run whose search found no win leaves no comparison to pool: a majority stands for it
    confirmed = [v for v in challengers if pooled[repr(v)] is not None
                 and pooled[repr(v)].confirmed and 2 * chosen[repr(v)] > len(machines)]
    if confirmed:
        (value,) = confirmed
        agreed = tuple(name for name in machines if values[name] == value)
        return _evidence(CONFIRMED, in_use, machines, agreed, out, value, pooled[repr(value)])
    nearest = _nearest_move(said, in_use)
    if nearest is not None:  # one of the challengers: its pooled comparison is made
        agreed = tuple(name for name in machines if values[name] == nearest)
        return _evidence(BEATEN, in_use, machines, agreed, out, nearest,
                         pooled[repr(nearest)])
    # the challenger most machines chose is the one the evidence speaks of
    challenger = max(challengers, key=lambda v: (chosen[repr(v)], -challengers.index(v)))
    agreed = tuple(name for name in machines if values[name] == in_use)
    return _evidence(DISAGREE, in_use, machines, agreed, out, challenger,
                     pooled[repr(challenger)])


def _nearest_move(said: Mapping[str, _Measured], in_use: TuningValue) -> TuningValue | None:
    """When every machine confirmed a change of a number in one direction from the value in
    use, the change nearest to it: the move every machine's evidence covers (a threshold
    lowered to 4096 by one machine and to 8192 by another is lowered to 8192 by both);
    else None."""
    numbers = [m.value for m in said.values()]
    if not all(_is_number(v) for v in (*numbers, in_use)):
        return None
    if not all(m.comparison is not None and m.comparison.candidate == m.value
               and m.comparison.in_use == in_use and m.comparison.confirmation.confirmed
               for m in said.values()):
        return None
    if all(v > in_use for v in numbers):
        return min(numbers)
    if all(v < in_use for v in numbers):
        return max(numbers)
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _evidence(reason: str, in_use: TuningValue, machines: tuple[str, ...],
              agreed: tuple[str, ...], out: Mapping[str, str], compared: TuningValue,
              pooled: Confirmation | None) -> Evidence:
    if pooled is None or not pooled.points:
        return Evidence(reason, in_use, machines, agreed, dict(sorted(out.items())))
    return Evidence(reason, in_use, machines, agreed, dict(sorted(out.items())), compared,
                    pooled.ratio, pooled.low, pooled.high)


def _pooled(said: Mapping[str, _Measured], in_use: TuningValue, value: TuningValue
            ) -> Confirmation | None:
    """Every machine's comparison of ``value`` with ``in_use``, point by point, in one test
    (None when no machine kept the samples of one)."""
    comparisons = [said[name].comparison for name in sorted(said)]
    found = [c.confirmation for c in comparisons if c is not None and c.in_use == in_use
             and c.candidate == value and c.confirmation.samples]
    if not found:
        return None
    points = [point for confirmation in found for point in confirmation.samples]
    return confirm([a for a, _ in points], [b for _, b in points],
                   max(confirmation.margin for confirmation in found),
                   max(confirmation.confidence for confirmation in found))


def _hashable(value: TuningValue) -> object:
    return tuple(value) if isinstance(value, list) else value


def _most_common(values: Sequence[TuningValue]) -> TuningValue:
    """The value most machines had in use (the first such in machine order on a tie)."""
    counts = collections.Counter(map(_hashable, values))
    best = max(counts.values())
    return next(value for value in values if counts[_hashable(value)] == best)


#: what separates the words of a run's name (``x86_64-avx2-2``)
_SEPARATORS = "-_."


def _common_name(names: Sequence[str]) -> str:
    """The runs' shared name: the words their names begin with (``zen3-1`` and ``zen3-10``
    give ``zen3``), else all of them joined."""
    prefix = os.path.commonprefix(list(names))
    while prefix and not all(len(name) == len(prefix) or name[len(prefix)] in _SEPARATORS
                             for name in names):
        prefix = prefix[:-1]
    prefix = prefix.rstrip(_SEPARATORS)
    return prefix if prefix else "+".join(names)


def _versions(profiles: Sequence[DeploymentProfile]) -> dict[str, object]:
    """The newest kernel library version each run names, and this kerneltune's."""
    libraries: dict[str, list[str]] = {}
    for profile in profiles:
        for name, version in dict(profile.versions.get("kernel_libraries") or {}).items():
            libraries.setdefault(name, []).append(str(version))
    return {"kerneltune": __version__,
            "kernel_libraries": {name: max(found) for name, found in sorted(libraries.items())}}
