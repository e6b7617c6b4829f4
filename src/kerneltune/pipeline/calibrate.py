"""One farm machine's job: calibrate the thread matrix, then leave a selector-bound profile.

Refuses before measuring anything on a machine its selector does not match.
Calibrates every selected key for each thread count (1, 2, 4, ... and the CPUs
this process may use), journals each finished key (:mod:`.checkpoint`), and
writes ``profiles/<name>.yaml`` with the batch reports as JSON beside it. A
run killed part-way and started again with the same arguments measures only
the keys it had not finished.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .._support.files import write_atomically
from .._support.reprs import brief_repr
from ..calibration import (
    CalibrationOptions,
    InterferenceSource,
    calibrate_kernel_thresholds,
    thread_counts,
)
from ..calibration.report import CalibrationReport
from ..errors import CalibrationError, KernelTuningError, ProfileError
from ..machine.descriptor import CpuDescriptor
from ..machine.detect import get_cpu_descriptor
from ..machine.selector_files import NamedSelector, processor_selector, read_selector
from ..machine.threads import available_threads
from ..profiles.export import export_deployment_profile, machine_mismatches, report_digest
from ..profiles.files import write_deployment_profile
from ..profiles.model import DeploymentProfile
from ..tuning.keyfilter import KeyFilter
from ..tuning.registry import KernelTuningRegistry, default_registry
from ..tuning.schema import KernelTuningKey
from .checkpoint import Checkpoint, RecordCheck, identity_of

#: where profiles go unless ``output`` says otherwise
PROFILES_DIRECTORY = Path("profiles")


@dataclass(frozen=True)
class ThreadSummary:
    """One thread count of a machine calibration."""

    threads: int
    calibrated: int
    changed: int
    resumed: int
    #: keys left out on purpose: unsupported, or skipped by the selection's rules
    skipped: int
    seconds: float
    #: keys withheld (not measured cleanly) or stopped by a budget, each with why: they keep
    #: the values in use
    unfinished: tuple[str, ...] = ()
    #: whether every key was measured steadily, without interference
    steady: bool = True


@brief_repr
@dataclass(frozen=True, repr=False)
class MachineCalibration:
    """What a machine calibration left: the profile, its files and a summary per thread count."""

    profile: DeploymentProfile
    profile_path: Path
    reports_path: Path
    summaries: tuple[ThreadSummary, ...]
    notes: tuple[str, ...] = ()
    #: False when ``require_steady`` kept an unsteady calibration from replacing the profile
    written: bool = True

    def table(self) -> str:
        lines = [f"{'threads':>7} {'keys':>5} {'changed':>8} {'resumed':>8} "
                 f"{'unfinished':>10} {'skipped':>8} {'seconds':>8}"]
        lines += [f"{s.threads:>7} {s.calibrated:>5} {s.changed:>8} {s.resumed:>8} "
                  f"{len(s.unfinished):>10} {s.skipped:>8} {s.seconds:>8.1f}"
                  for s in self.summaries]
        return "\n".join(lines)

    @property
    def unfinished(self) -> tuple[str, ...]:
        """Each key withheld or stopped by a budget, with its thread count and why."""
        return tuple(f"threads {s.threads}: {line}" for s in self.summaries
                     for line in s.unfinished)


def machine_name(processor: CpuDescriptor) -> str:
    """A profile name for this machine: vendor, microarchitecture, family and model."""
    parts = (processor.vendor, processor.microarchitecture, processor.family, processor.model)
    return "-".join(str(part).lower().replace("_", "-") for part in parts if part is not None)


def calibrate_machine(
    selector: str | NamedSelector | None = None,
    *,
    output: str | Path | None = None,
    name: str | None = None,
    threads: Sequence[int] | None = None,
    options: CalibrationOptions | None = None,
    kernels: Iterable[str] = (),
    element_types: Iterable[object] = (),
    implementations: Iterable[str] = (),
    library: str | None = None,
    restart: bool = False,
    progress: IO[str] | None = None,
    registry: KernelTuningRegistry = default_registry,
    require_steady: bool = False,
    interference: InterferenceSource | None = None,
) -> MachineCalibration:
    """Calibrate this machine for each thread count and write its profile.

    ``selector`` is a selector file, a shipped selector's name or a
    :class:`NamedSelector`; by default this processor's exact vendor/family/model.
    ``options`` give the effort and budgets (their ``threads`` is ignored: the
    matrix is ``threads``, by default 1, 2, 4, ... and the CPUs this process may
    use). Raises :class:`ProfileError` before measuring when the machine does
    not match the selector, and :class:`CalibrationError` after it, writing
    nothing, when every key was withheld. With ``require_steady``, a
    calibration with keys unsettled, withheld or measured under interference
    writes its reports but leaves the profile as it was (``written`` False).
    ``interference`` is where what other processes take is read (default: this
    process's counters).
    """
    processor = get_cpu_descriptor()
    if isinstance(selector, NamedSelector):
        named = selector
    else:
        named = read_selector(selector) if selector is not None else processor_selector(processor)
    failed = machine_mismatches(named.selector, processor, named.path)
    if failed:
        raise ProfileError(failed, context=f"this machine does not match the selector "
                                           f"{named.name!r}")
    name = name or machine_name(processor)
    profile_path = Path(output) if output is not None else PROFILES_DIRECTORY / f"{name}.yaml"
    options = options or CalibrationOptions()
    matrix = sorted(set(threads or thread_counts(available_threads())))
    selection = KeyFilter.of(library, tuple(kernels), tuple(implementations),
                             tuple(element_types))
    keys = list(filter(selection.matches, registry.snapshot().keys()))
    if not keys:
        raise ValueError("no registered key matches the selection: a profile of no entries "
                         "is not written")
    arguments = {"selector": named.selector.to_dict(), "name": name, "threads": matrix,
                 "options": options.to_dict(), "keys": sorted(map(str, keys))}
    checkpoint, notes = Checkpoint.open(profile_path.with_suffix(".checkpoint.jsonl"),
                                        identity_of(arguments, processor.to_dict()), restart,
                                        check=_resumable(keys, matrix, registry))
    reporter = Progress(progress if progress is not None else sys.stderr, len(keys))
    batches, summaries = [], []
    try:
        for count in matrix:
            batch, summary = _calibrate_count(count, keys, options, checkpoint, reporter,
                                              registry, interference)
            batches.append(batch)
            summaries.append(summary)
    finally:
        checkpoint.close(remove=False)
    if not any(s.calibrated for s in summaries) and any(s.unfinished for s in summaries):
        raise CalibrationError(
            f"nothing calibrated: every key was withheld (measured under interference) or "
            f"stopped by its budget ({sum(len(s.unfinished) for s in summaries)} keys); no "
            f"profile written to {profile_path}")
    profile = export_deployment_profile(batches, named, name)
    written = not require_steady or all(s.steady for s in summaries)
    if written:
        write_deployment_profile(profile, profile_path)
    reports_path = profile_path.with_suffix(".reports.json")
    write_atomically(reports_path, json.dumps(batches, indent=1, sort_keys=True, default=str)
                     + "\n")
    # keys left unfinished are measured by the next run with these arguments, the others
    # resumed; an unsteady run not written is measured again whole
    checkpoint.close(remove=not written or not any(s.unfinished for s in summaries))
    return MachineCalibration(profile, profile_path, reports_path, tuple(summaries),
                              notes, written)


def _resumable(keys: Sequence[KernelTuningKey], matrix: Sequence[int],
               registry: KernelTuningRegistry) -> RecordCheck:
    """What a checkpoint record must be to be resumed: a report this calibration would have
    written, of one of its keys and thread counts, with values the key's schema accepts."""
    by_label = {str(key): key for key in keys}
    snapshot = registry.snapshot()

    def check(threads: int, label: str, report: dict) -> str | None:
        key = by_label.get(label)
        if threads not in matrix or key is None:
            return f"{label} on {threads} threads is not a key this calibration measures"
        shape = {"key": dict, "values": dict, "decisions": list, "environment": dict,
                 "options": dict, "execution": dict}
        if any(not isinstance(report.get(name, {}), kind) for name, kind in shape.items()) or \
                not {"key", "values", "decisions"} <= report.keys():
            return "not a calibration report (its key, values and decisions)"
        try:
            if KernelTuningKey.from_dict(report["key"]) != key:
                return f"the report is of another key than {label}"
            schema = snapshot.schema(key)
            schema.configure(report["values"])
        except (KernelTuningError, TypeError, ValueError) as error:
            return f"the report's values: {error}"
        if not all(isinstance(d, dict) and isinstance(d.get("parameter"), str)
                   and d["parameter"] in report["values"] and d["parameter"] in schema.parameters
                   and isinstance(d.get("changed"), bool) for d in report["decisions"]):
            return "a decision of the report names no parameter of its values"
        measured = report.get("execution", {}).get("effective_threads", threads)
        if measured != threads:
            return f"the report was measured on {measured!r} threads, not {threads}"
        return None

    return check


def _calibrate_count(count: int, keys: Sequence, options: CalibrationOptions,
                     checkpoint: Checkpoint, reporter: Progress,
                     registry: KernelTuningRegistry,
                     interference: InterferenceSource | None) -> tuple[dict, ThreadSummary]:
    """One thread count: the keys not yet finished, then the batch with the resumed ones."""
    finished = checkpoint.finished(count)
    remaining = [key for key in keys if str(key) not in finished]
    reporter.start(count, len(finished))

    def record(report: CalibrationReport) -> None:
        checkpoint.record(count, str(report.key), report.to_dict())
        reporter.advance(str(report.key))

    start = time.perf_counter()
    batch = calibrate_kernel_thresholds(
        remaining, dataclasses.replace(options, threads=count), registry=registry,
        on_report=record, interference=interference)
    document = batch.to_dict()
    fresh = {str(report.key) for report in batch.calibrated}
    resumed = [report for key, report in finished.items() if key not in fresh]
    document["calibrated"] = resumed + document["calibrated"]
    document["successful_profiles"] = [
        {"key": report["key"], "values": report["values"], "report_digest": report_digest(report)}
        for report in resumed] + document["successful_profiles"]
    calibrated = len(document["calibrated"])
    changed = sum(1 for report in document["calibrated"] for decision in report["decisions"]
                  if decision["changed"])
    interfered = any(r.interference is not None and r.interference.discarded
                     for r in batch.calibrated)
    summary = ThreadSummary(count, calibrated, changed, len(resumed),
                            len(batch.skipped) - len(batch.stopped) + len(batch.unsupported),
                            time.perf_counter() - start,
                            tuple(f"{w.key}: {w.reason}" for w in batch.unfinished),
                            all(p.steady for p in batch.steadiness) and not batch.withheld
                            and not interfered)
    reporter.finish(summary)
    return document, summary


class Progress:
    """Progress on a stream: a line rewritten in place on a terminal, one per count elsewhere."""

    def __init__(self, stream: IO[str], keys: int):
        self.stream, self.keys = stream, keys
        self.interactive = bool(getattr(stream, "isatty", lambda: False)())
        self.threads, self.done, self.measured, self.begun = 0, 0, 0, time.perf_counter()

    def start(self, threads: int, resumed: int) -> None:
        self.threads, self.done, self.begun = threads, resumed, time.perf_counter()
        self.measured = 0

    def advance(self, key: str) -> None:
        self.done += 1
        self.measured += 1
        if not self.interactive:
            return
        used = time.perf_counter() - self.begun
        left = used / self.measured * max(self.keys - self.done, 0)
        self.stream.write(f"\rthreads {self.threads}: key {min(self.done, self.keys)} of "
                          f"{self.keys} ({key}), {used:.0f} s used, about {left:.0f} s left "
                          f"\033[K")
        self.stream.flush()

    def clear(self) -> None:
        """Take the line rewritten in place off the terminal."""
        if self.interactive:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def finish(self, summary: ThreadSummary) -> None:
        self.clear()
        self.stream.write(f"threads {summary.threads}: {summary.calibrated} keys "
                          f"({summary.resumed} resumed), {summary.changed} values changed, "
                          f"{len(summary.unfinished)} keys unfinished, "
                          f"{summary.seconds:.1f} s\n")
        self.stream.flush()
