"""Calibration functions per key, and the batch that runs them and publishes once.

Only code registers calibration functions (the kernel library does at import,
into the registry it registers its schemas with, which keeps them); nothing
read from a model or a file can start a measurement. A batch selects keys,
runs each function against the current generation's values, and publishes
every calibrated profile in one generation only after all of them succeeded:
an exception or an invalid value leaves the registry as it was. Calibration
never writes the cache; pass ``successful_profiles`` to
``update_kernel_tuning_cache`` for that.
"""

from __future__ import annotations

import dataclasses
import os
import time
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from threadpoolctl import threadpool_info, threadpool_limits

from .._support.version import __version__
from ..errors import CalibrationError, Problem, TuningValidationError
from ..machine.descriptor import CpuExecutionDescriptor
from ..machine.detect import current_execution
from ..machine.openmp import wait_policy
from ..tuning.keyfilter import KeyFilter
from ..tuning.machine_probes import PARALLEL
from ..tuning.registry import (
    KernelTuningProfile,
    KernelTuningRegistry,
    TuningSnapshot,
    default_registry,
)
from ..tuning.schema import KernelTuningKey
from .confirmation import confirm_decisions
from .context import CalibrationContext
from .interference import (
    MAXIMUM_SHARE,
    InterferenceSource,
    KeyInterference,
    ProcessInterference,
)
from .measure import BudgetExhausted, Deadline
from .options import CalibrationOptions
from .report import CalibrationBatchReport, CalibrationReport, KeyOutcome
from .search import Comparison, Setting, compare_settings
from .steadiness import PARALLEL_FLOOR, SteadinessMonitor

CalibrationFunction = Callable[[CalibrationContext], Mapping[str, Any] | None]


def register_kernel_calibration_function(
    key: KernelTuningKey, fn: CalibrationFunction, *,
    registry: KernelTuningRegistry = default_registry,
) -> None:
    """Make ``key`` calibratable by ``fn`` in ``registry`` (a later registration for the key
    replaces it; other registries do not see it).

    ``fn(context)`` measures the real kernel through the
    :class:`~.context.CalibrationContext` and records decisions there; it may
    also return values. A function with a ``workload(context)`` method returning a
    :class:`Workload` also supports explicit comparisons (``options.parameter``).
    """
    if not isinstance(key, KernelTuningKey):
        raise TypeError(f"expected a KernelTuningKey, got {key!r}")
    if not callable(fn):
        raise TypeError(f"expected a callable calibration function, got {fn!r}")
    registry.register_calibration_function(key, fn)


def calibration_function(key: KernelTuningKey, *,
                         registry: KernelTuningRegistry = default_registry
                         ) -> CalibrationFunction | None:
    return registry.calibration_function(key)


def is_calibratable(key: KernelTuningKey, *,
                    registry: KernelTuningRegistry = default_registry) -> bool:
    return registry.calibration_function(key) is not None


def has_calibrated_profile(snapshot: TuningSnapshot, key: KernelTuningKey,
                           execution: CpuExecutionDescriptor) -> bool:
    """Whether ``snapshot`` holds a calibrated profile of ``key`` for this execution identity."""
    return any(p.execution is not None and p.execution.identity == execution.identity
               for p in snapshot.profiles(key))


def _execution(options: CalibrationOptions) -> CpuExecutionDescriptor:
    execution = current_execution(options.threads)
    available = len(execution.affinity)
    if execution.effective_threads > available:
        raise CalibrationError(
            f"cannot calibrate for {execution.effective_threads} threads: this process may "
            f"run on {available} CPUs; calibrate on a machine (or affinity) with at least as "
            f"many CPUs as threads")
    return execution


#: Environment variables that change what a measurement sees: the OpenMP threads' wait
#: policy and placement, the BLAS library's threads, kernels and spinning, a forced ISA
#: variant.
ENVIRONMENT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND", "OMP_PLACES",
                         "OMP_NUM_THREADS", "OMP_DYNAMIC", "OMP_THREAD_LIMIT",
                         "GOMP_CPU_AFFINITY", "KMP_AFFINITY", "KMP_BLOCKTIME",
                         "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_THREAD_TIMEOUT",
                         "MKL_NUM_THREADS",
                         "BLIS_NUM_THREADS", "KERNELTUNE_ISA")
_POOL_FIELDS = ("user_api", "internal_api", "version", "architecture", "threading_layer",
                "num_threads")


def _environment() -> dict[str, object]:
    """The variables set, the OpenMP wait policy they make and the thread pools loaded.

    A crossover measured with spinning OpenMP threads is one with spinning threads,
    and a BLAS crossover one with that BLAS.
    """
    return {
        "variables": {name: os.environ[name] for name in ENVIRONMENT_VARIABLES
                      if name in os.environ},
        "wait_policy": wait_policy().as_dict(),
        "thread_pools": [{field: pool.get(field) for field in _POOL_FIELDS}
                         for pool in threadpool_info()],
    }


#: OpenBLAS's threads spin for ``2 ** OPENBLAS_THREAD_TIMEOUT`` cycles after a call (28
#: unless set to a positive number); up to 2 ** 12, about a microsecond, is less than any
#: sample
_QUIET_BLAS_TIMEOUT = 12


def spinning_blas_warning(threads: int) -> str | None:
    """Why measurements on ``threads`` threads would wait behind the BLAS library's threads.

    A search that times a BLAS product and a compiled one interleaved, on
    more than one thread, starts each compiled sample while OpenBLAS's
    threads (its pthreads build, numpy's wheels) still spin, about 0.1 s
    by default: the compiled kernel's OpenMP thread waits for a scheduler
    tick, and the BLAS crossovers are measured on stalls (docs/calibration.md,
    Spinning BLAS threads). OpenBLAS reads ``OPENBLAS_THREAD_TIMEOUT`` once,
    when it loads, so only the environment of the process can fix it.
    """
    if threads < 2:
        return None
    spinning = any(pool.get("internal_api") == "openblas"
                   and pool.get("threading_layer") == "pthreads" for pool in threadpool_info())
    setting = os.environ.get("OPENBLAS_THREAD_TIMEOUT", "").strip()
    if not spinning or (setting.isdecimal() and 0 < int(setting) <= _QUIET_BLAS_TIMEOUT):
        return None
    now = f"is {setting!r}" if setting else "is not set"
    return (f"OPENBLAS_THREAD_TIMEOUT {now}: OpenBLAS's threads spin after every BLAS call "
            f"and stall the compiled kernels measured next on {threads} threads, so BLAS "
            f"crossovers come out wrong; calibrate (and deploy) with OPENBLAS_THREAD_TIMEOUT=4 "
            f"in the environment before numpy is imported")


def _versions(key: KernelTuningKey, library_version: str | None) -> dict[str, object]:
    return {"kerneltune": __version__, "library": key.library,
            "library_version": library_version, "implementation": key.implementation,
            "tuning_abi": key.tuning_abi}


def _compare(context: CalibrationContext, fn: CalibrationFunction) -> None:
    options, parameter = context.options, context.options.parameter
    workload = fn.workload(context)
    active = context.baseline[parameter]
    values = [active] + [v for v in options.values if v != active]
    configs = [context.configure({parameter: value}) for value in values]
    settings = [Setting(f"{parameter}={value}", {parameter: value}, workload.make_run(config))
                for value, config in zip(values, configs, strict=True)]
    result = compare_settings(context, Comparison(workload.cases, settings, workload.tolerance))
    context.comparison.extend(result.table)
    context.decide(parameter, result.chosen.values[parameter], result.reason, result.candidates)


def _calibrate(key: KernelTuningKey, fn: CalibrationFunction, snapshot: TuningSnapshot,
               execution: CpuExecutionDescriptor, options: CalibrationOptions,
               total: Deadline | None, inputs: dict, environment: Mapping[str, object],
               interference: InterferenceSource | None, library_version: str | None
               ) -> CalibrationReport:
    """One key: its function's searches, then each change confirmed against the values in
    use (see :func:`.confirmation.confirm_decisions`), with what other processes took;
    ``library_version`` is its library's, recorded in the report's versions."""
    start = time.perf_counter()
    deadline = Deadline(start + options.seconds_per_key, "per-key")
    if total is not None and total.at < deadline.at:
        deadline = total
    baseline = snapshot.resolve(key, execution).values
    context = CalibrationContext(key, snapshot.schema(key), execution, options, baseline,
                                 deadline, inputs, interference)
    before = None if interference is None else interference.reading(steal=True)
    if options.parameter is not None:
        _compare(context, fn)
    else:
        try:
            returned = fn(context)
            decided = {d.parameter for d in context.decisions}
            for name, value in (returned or {}).items():
                if name not in decided:
                    context.decide(name, value, "returned by the calibration function")
            if context.stopped_early is None:
                confirm_decisions(context, fn.workload(context)
                                  if callable(getattr(fn, "workload", None)) else None)
        except BudgetExhausted as exhausted:  # a search that did not stop by itself
            context.stop(str(exhausted))
    lost = None
    if before is not None:
        shares = [seen.share or 0.0 for seen in context.kept]
        lost = KeyInterference(len(context.kept),
                               tuple(seen.share or 0.0 for seen in context.discarded),
                               max(shares, default=None),
                               interference.since(before, context.threads))
    return CalibrationReport(
        key=key, execution=execution, options=types.MappingProxyType(options.to_dict()),
        baseline=context.baseline, values=context.values, decisions=tuple(context.decisions),
        seconds=time.perf_counter() - start, versions=_versions(key, library_version),
        stopped_early=context.stopped_early, comparison=tuple(context.comparison),
        environment=environment, contradictions=tuple(context.contradictions),
        interference=lost)


def _skip_reason(key: KernelTuningKey, fn: CalibrationFunction | None, snapshot: TuningSnapshot,
                 execution: CpuExecutionDescriptor, options: CalibrationOptions,
                 only_missing: bool) -> tuple[str, str] | None:
    """("unsupported" | "skipped", reason) for a key that will not be calibrated."""
    if fn is None:
        return "unsupported", "no calibration function is registered for this key"
    parameter = options.parameter
    if parameter is not None:
        if parameter not in snapshot.schema(key).parameters:
            return "skipped", f"the key has no parameter {parameter!r}"
        if not callable(getattr(fn, "workload", None)):
            return "unsupported", "its calibration function offers no workload to compare on"
    if only_missing and has_calibrated_profile(snapshot, key, execution):
        return "skipped", (f"a calibrated profile for this execution "
                           f"({execution.effective_threads} threads) is published")
    return None


def _measure_keys(
    queue: Iterable[KernelTuningKey],
    calibrate: Callable[[KernelTuningKey, dict], CalibrationReport],
    monitor: SteadinessMonitor,
    remeasure_factor: float,
    total: Deadline | None,
    on_report: Callable[[CalibrationReport], None] | None = None,
) -> tuple[dict[KernelTuningKey, CalibrationReport], list[KeyOutcome], list[KeyOutcome],
           list[KernelTuningKey], list[KernelTuningKey]]:
    """Each key once; then, while probes say the machine was slow for some (or their own
    measurements contradict each other, or other processes took their CPUs), those
    again, and once more each key that decided to run calls on fewer threads.

    Measuring again waits for the probe to see the machine in its reference
    state before each key, and stops when every key is settled or after
    ``remeasure_factor`` times the first pass's time: a slow spell may outlast
    any budget. Of a key's measurements, the steadiest stands (see
    ``state``; the latest among equals): one taken deeper in a slow spell
    describes the machine less well than the one it would replace. A spell
    too short or too narrow for the probes still makes fewer threads win, and
    only those decisions (docs/calibration.md, Measuring again): such a key
    is measured again, and among equally steady measurements one
    without such a decision stands, as a neighbour only ever slows the machine
    down. A key that could not be measured cleanly (its budget ran out
    discarding measurements under interference, its CPUs were stolen, or its
    parallel probe fell below the floor) is withheld unless measuring it again
    succeeds. Returns the reports of keys calibrated, the keys a budget
    stopped, the keys withheld, the keys measured again and those never
    settled. A second measurement cut short by a budget leaves the first one
    standing.
    """
    reports: dict[KernelTuningKey, CalibrationReport] = {}
    stopped: list[KeyOutcome] = []
    withheld: dict[KernelTuningKey, KeyOutcome] = {}
    # keys of one element type run together and share their inputs, dropped at the next type
    inputs: dict[tuple, object] = {}
    last: tuple[str, dict[str, float]] | None = None  # the library probed last, its rates

    def measure(key: KernelTuningKey) -> CalibrationReport:
        nonlocal last
        if inputs and next(iter(inputs))[0] != key.element_type:
            inputs.clear()
        before = last[1] if last and last[0] == key.library else monitor.sample(key.library)
        report = calibrate(key, inputs)
        last = (key.library, monitor.sample(key.library))
        probes = {aspect: tuple(rates[aspect] for rates in (before, last[1]) if aspect in rates)
                  for aspect in sorted({*before, *last[1]})}
        return dataclasses.replace(report, machine_probe=types.MappingProxyType(probes))

    def interfered(report: CalibrationReport) -> str | None:
        """Why a report cannot be published: measured under interference."""
        lost, limit = report.interference, limit_of(report)
        if report.stopped_early and lost is not None and lost.discarded:
            return (f"withheld: not measured cleanly before the {report.stopped_early}; "
                    f"{lost.describe()}")
        if lost is not None and lost.stolen(limit):
            return f"withheld: its CPUs were stolen; {lost.describe()}"
        if monitor.starved(report.key.library, report.machine_probe):
            rates = report.machine_probe.get(PARALLEL, ())
            return (f"withheld: the machine could not run {report.execution.effective_threads} "
                    f"threads (parallel probe {min(rates):.3g}, below {PARALLEL_FLOOR})")
        return None

    def limit_of(report: CalibrationReport) -> float:
        limit = report.options.get("maximum_interference")
        return limit if isinstance(limit, float | int) else MAXIMUM_SHARE

    def record(key: KernelTuningKey, report: CalibrationReport) -> None:
        """A report that stands: withheld while it was measured under interference."""
        reason = interfered(report)
        if reason is not None:
            withheld[key] = KeyOutcome(key, reason, report)
            return
        withheld.pop(key, None)
        reports[key] = report
        if on_report is not None:
            on_report(report)

    def stands(key: KernelTuningKey, report: CalibrationReport) -> bool:
        """Whether a key's new measurement replaces its standing one: a withheld key's
        when it was not cut short by a plain budget, another key's when it is clean and
        at least as steady."""
        if key in withheld:
            return not report.stopped_early or interfered(report) is not None
        return (not report.stopped_early and interfered(report) is None
                and state(report) >= state(reports[key]))

    def state(report: CalibrationReport) -> tuple[bool, bool, bool, float]:
        """How steady and fast the machine was while a key was measured: whether its
        measurements agreed, whether it was in the reference state, whether it found
        fewer threads faster nowhere, then its slowest probe against the reference state
        (infinite without a probe, so that measurements nobody judged count as equals)."""
        return (not report.contradictions,
                monitor.settled(report.key.library, report.machine_probe),
                not _fewer_threads(report),
                monitor.standing(report.key.library, report.machine_probe))

    def unsettled() -> list[KernelTuningKey]:
        return [key for key, report in reports.items() if report.contradictions
                or not monitor.settled(key.library, report.machine_probe)]

    def doubtful() -> list[KernelTuningKey]:
        """The withheld keys, the unsettled ones, then those measured once that decided
        fewer threads."""
        keys = [*withheld, *unsettled()]
        return keys + [key for key, report in reports.items()
                       if key not in keys and key not in remeasured and _fewer_threads(report)]

    start = time.perf_counter()
    for key in queue:
        if total is not None and total.remaining <= 0:
            stopped.append(KeyOutcome(key, "total time budget exhausted before this key"))
            continue
        report = measure(key)
        if report.stopped_early and interfered(report) is None:
            stopped.append(KeyOutcome(key, f"not published: {report.stopped_early}", report))
        else:
            record(key, report)
    until = time.perf_counter() + remeasure_factor * (time.perf_counter() - start)
    if total is not None:
        until = min(until, total.at)
    remeasured: list[KernelTuningKey] = []
    pending = doubtful()
    while pending and time.perf_counter() < until:
        for key in pending:
            latest = last[1] if last and last[0] == key.library else None
            rates, settled = monitor.await_reference(key.library, until, latest)
            last = (key.library, rates)
            if not settled or time.perf_counter() >= until:
                break  # the slow spell outlasted the time allowed
            report = measure(key)
            if stands(key, report):
                record(key, report)
            if key not in remeasured:
                remeasured.append(key)
        pending = doubtful()
    return reports, stopped, list(withheld.values()), remeasured, unsettled()


def _fewer_threads(report: CalibrationReport) -> set[int]:
    """The decisions in effect that run calls on fewer threads, by index.

    A parameter's decision in effect is its last: a search may decide a parameter again
    (a verification reverting it), and the earlier decisions stay as its history.
    """
    last = {decision.parameter: index for index, decision in enumerate(report.decisions)}
    return {index for index in last.values() if report.decisions[index].fewer_threads}


def _withhold_fewer_threads(report: CalibrationReport) -> CalibrationReport:
    """A key never measured steadily keeps its values in use where it decided fewer threads.

    A neighbour that slows the machine's parallel speed moves every
    serial/parallel crossover up and can make one thread beat two: of all
    decisions, those running calls on fewer threads are the ones a slow spell
    also produces, so a key never measured in the reference state publishes
    the others only. (Decisions for more threads stand: the spell worked
    against them. Withholding a whole such key was tried; it lost grains far
    below their values in use, measured alike in every state.)
    """
    withheld = _fewer_threads(report)
    if not withheld:
        return report
    decisions = tuple(
        dataclasses.replace(d, value=d.baseline, fewer_threads=False,
                            reason=f"withheld, the key never measured steadily: {d.value} "
                                   f"would run calls on fewer threads, as a slow spell makes "
                                   f"them win; {d.reason}")
        if index in withheld else d for index, d in enumerate(report.decisions))
    values = {**report.values, **{report.decisions[index].parameter:
                                  report.decisions[index].baseline for index in withheld}}
    return dataclasses.replace(report, decisions=decisions, values=types.MappingProxyType(values))


def calibrate_kernel_thresholds(
    keys: Iterable[KernelTuningKey],
    options: CalibrationOptions | None = None,
    *,
    registry: KernelTuningRegistry = default_registry,
    only_missing: bool = False,
    on_report: Callable[[CalibrationReport], None] | None = None,
    interference: InterferenceSource | None = None,
) -> CalibrationBatchReport:
    """Calibrate exactly ``keys`` (each must have a registered schema) and publish once.

    The calibration functions and machine probes are those registered in ``registry``.
    ``on_report(report)`` is called whenever a key's standing report is made or
    replaced by a steadier one: what a checkpoint keeps of a run that may be killed.
    ``interference`` is where what other processes take is read (default: this
    process's counters, :class:`~.interference.ProcessInterference`).

    A key that the machine probes never saw measured in the reference state
    (``steadiness[...].unsettled``) publishes its steadiest measurement
    without its decisions for fewer threads (see :class:`~.report.Decision`);
    a key that could not be measured cleanly is withheld (``withheld``).
    """
    keys = list(dict.fromkeys(keys))
    snapshot = registry.snapshot()
    registered = set(snapshot.keys())
    unknown = [Problem("key", "no tuning schema is registered for this key", entry=str(k))
               for k in keys if k not in registered]
    if unknown:
        raise TuningValidationError(unknown, context="calibration")
    options = options or CalibrationOptions()
    # the limit in force, as the reports record it
    options = dataclasses.replace(options, maximum_interference=options.interference_limit)
    execution = _execution(options)
    start = time.perf_counter()
    total = None if options.time_budget is None else Deadline(start + options.time_budget,
                                                              "total")
    skipped, unsupported, queue = [], [], {}
    with threadpool_limits(limits=execution.effective_threads, user_api="blas"):
        environment = types.MappingProxyType(_environment())
        for key in sorted(keys, key=lambda k: k.element_type):
            fn = registry.calibration_function(key)
            verdict = _skip_reason(key, fn, snapshot, execution, options, only_missing)
            if verdict is None:
                queue[key] = fn
            else:
                (unsupported if verdict[0] == "unsupported" else skipped).append(
                    KeyOutcome(key, verdict[1]))
        monitor = SteadinessMonitor((k.library for k in queue), execution.effective_threads,
                                    registry=registry,
                                    floor=PARALLEL_FLOOR if options.interference_limit < 1
                                    else 0.0)
        source = interference if interference is not None else ProcessInterference()
        reports, stopped, withheld, remeasured, unsettled = _measure_keys(
            queue, lambda key, inputs: _calibrate(key, queue[key], snapshot, execution, options,
                                                  total, inputs, environment, source,
                                                  registry.library_version(key.library)),
            monitor, options.level.remeasure_factor, total, on_report)
        steadiness = monitor.finish(remeasured, unsettled)
    skipped += stopped
    calibrated = tuple(_withhold_fewer_threads(report) if key in unsettled else report
                       for key, report in reports.items())
    profiles = [KernelTuningProfile(report.key, report.values, execution=execution,
                                    origin="calibration", report_digest=report.digest)
                for report in calibrated]
    generation = None
    if profiles:
        registry.register_profiles(profiles)
        generation = registry.generation
    return CalibrationBatchReport(calibrated, tuple(skipped), tuple(unsupported),
                                  tuple(profiles), execution, generation,
                                  time.perf_counter() - start, steadiness, tuple(withheld),
                                  tuple(stopped))


def calibrate_registered_kernels(
    library: str | None = None,
    kernels: Iterable[str] | str = (),
    implementations: Iterable[str] | str = (),
    element_types: Iterable[object] | object = (),
    device: str | None = None,
    only_missing: bool = False,
    options: CalibrationOptions | None = None,
    *,
    registry: KernelTuningRegistry = default_registry,
    on_report: Callable[[CalibrationReport], None] | None = None,
    interference: InterferenceSource | None = None,
) -> CalibrationBatchReport:
    """Calibrate every registered key the selection matches (all of them when it is empty).

    Keys without a calibration function in ``registry`` are reported as unsupported; with
    ``only_missing``, keys that already have a calibrated profile for this
    execution (this processor and thread count) are skipped.
    """
    selection = KeyFilter.of(library, kernels, implementations, element_types, device)
    keys = filter(selection.matches, registry.snapshot().keys())
    return calibrate_kernel_thresholds(keys, options, registry=registry,
                                       only_missing=only_missing, on_report=on_report,
                                       interference=interference)
