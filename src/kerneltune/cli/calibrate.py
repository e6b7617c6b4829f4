"""``kerneltune calibrate``: measure the kernels here, per thread count, and keep the winners."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .._support.files import write_atomically
from ..machine.threads import available_threads
from .common import (
    FAILURE,
    PARTIAL,
    UsageError,
    add_command,
    add_library,
    parse_value,
    positive_int,
)

if TYPE_CHECKING:
    from ..calibration import CalibrationOptions, CalibrationReport, Steadiness



def _options(args: argparse.Namespace, threads: int | None) -> CalibrationOptions:
    from ..calibration import CalibrationOptions

    return CalibrationOptions(
        threads=threads, effort=args.effort, time_budget_per_key=args.time_budget_per_key,
        time_budget=args.time_budget, memory_budget=args.memory_budget,
        minimum_margin=args.margin, seed=args.seed, parameter=args.parameter,
        values=[parse_value(v) for v in args.values or ()],
        maximum_interference=args.maximum_interference)


def _calibrate(args: argparse.Namespace) -> int:
    from ..calibration import calibrate_registered_kernels, spinning_blas_warning, thread_counts

    selected = _check_selection(args)
    _check_combination(args)
    threads = args.threads or thread_counts(available_threads())
    if warning := spinning_blas_warning(max(threads)):
        print(f"warning: {warning}")
    if args.profile:
        return _calibrate_profile(args, threads)
    from ..pipeline.calibrate import Progress

    reports, unsteady, cache_failed = [], False, False
    progress = Progress(sys.stderr, selected)  # a line per key on a terminal
    for count in threads:
        options = _options(args, count)
        progress.start(count, 0)
        try:
            report = calibrate_registered_kernels(
                library=args.library, kernels=args.kernel or (),
                implementations=args.implementation or (),
                element_types=args.element_type or (), only_missing=args.only_missing,
                options=options, on_report=lambda report: progress.advance(str(report.key)))
        finally:
            progress.clear()
        reports.append(report)
        print(f"threads {count}: {len(report.calibrated)} keys calibrated in "
              f"{report.seconds:.1f} s, {len(report.withheld)} withheld, "
              f"{len(report.stopped)} stopped, "
              f"{len(report.skipped) - len(report.stopped)} skipped, "
              f"{len(report.unsupported)} unsupported")
        for calibrated in report.calibrated:
            _print_decisions(calibrated)
        for withheld in report.withheld:
            print(f"  {withheld.key}: {withheld.reason}")
        for skipped in report.skipped:
            print(f"  skipped {skipped.key}: {skipped.reason}")
        _print_steadiness(report.steadiness)
        interfered = [str(r.key) for r in report.calibrated
                      if r.interference is not None and r.interference.discarded]
        if interfered:
            print(f"  {len(interfered)} keys had measurements discarded under interference "
                  f"and taken again: {', '.join(interfered)}")
        still = (all(probe.steady for probe in report.steadiness) and not report.withheld
                 and not interfered)
        unsteady |= not still
        if args.save and not still and args.require_steady:
            print("  not saved to the cache: keys were measured with the machine slower than "
                  "its reference state, under interference, or withheld (--require-steady)")
        elif args.save:
            from ..cache.kernel_tuning_cache import update_kernel_tuning_cache

            saved = update_kernel_tuning_cache(report.successful_profiles)
            print(f"  cache {saved.path}: {saved.status}, {len(saved.added)} added, "
                  f"{len(saved.replaced)} replaced")
            for problem in saved.problems:
                print(f"  cache: {problem}")
            cache_failed |= bool(saved.problems)
    if args.report:
        text = json.dumps([r.to_dict() for r in reports], indent=1, default=str)
        write_atomically(Path(args.report), text + "\n")
        print(f"report written to {args.report}")
    if not any(r.calibrated for r in reports) and any(r.unfinished for r in reports):
        print("nothing calibrated: every key measured was withheld (other processes took "
              "the machine's CPUs) or stopped by its budget")
        return FAILURE
    if cache_failed:
        return FAILURE
    if any(r.unfinished for r in reports) or (args.require_steady and unsteady):
        return PARTIAL
    return 0


def _print_decisions(report: CalibrationReport) -> None:
    """The changes published, and those a confirmation turned down, with its figures."""
    in_effect = {decision.parameter: decision for decision in report.decisions}
    for decision in in_effect.values():
        confirmation = decision.confirmation
        if decision.changed:
            confirmed = "" if confirmation is None else f" ({confirmation.describe()})"
            print(f"  {report.key}  {decision.parameter}: {decision.baseline} -> "
                  f"{decision.value}{confirmed}")
        elif confirmation is not None:
            print(f"  {report.key}  {decision.parameter}: kept {decision.value}, "
                  f"{decision.reason.removeprefix('kept: ')}")


def _check_combination(args: argparse.Namespace) -> None:
    """Options that would be ignored in this mode are a usage error, never dropped."""
    if args.profile:
        given = [flag for flag, value in (("--report", args.report), ("--save", args.save),
                                          ("--only-missing", args.only_missing)) if value]
        if given:
            raise UsageError(f"{', '.join(given)} cannot go with --profile: its reports are "
                             f"written beside the profile (NAME.reports.json), and a farm's "
                             f"profile is baked, not cached")
    else:
        given = [flag for flag, value in (("--selector", args.selector),
                                          ("--output", args.output), ("--name", args.name),
                                          ("--restart", args.restart)) if value]
        if given:
            raise UsageError(f"{', '.join(given)} only go with --profile")


def _check_selection(args: argparse.Namespace) -> int:
    """How many calibratable keys the selection matches; none is a mistake, never an empty
    success."""
    from ..calibration import is_calibratable
    from ..tuning.keyfilter import KeyFilter
    from ..tuning.registry import default_registry

    selection = KeyFilter.of(args.library, tuple(args.kernel or ()),
                             tuple(args.implementation or ()), tuple(args.element_type or ()))
    keys = default_registry.snapshot().keys()
    selected = sum(selection.matches(key) and is_calibratable(key) for key in keys)
    if not selected:
        given = ", ".join(f"--{name.replace('_', '-')} {' '.join(values)}" for name, values in
                          (("library", [args.library] if args.library else None),
                           ("kernel", args.kernel), ("implementation", args.implementation),
                           ("element_type", args.element_type)) if values)
        raise UsageError(f"no calibratable key matches {given}: `kerneltune kernel --list` "
                         f"lists them")
    return selected


def _calibrate_profile(args: argparse.Namespace, threads: Sequence[int]) -> int:
    from ..pipeline import calibrate_machine

    result = calibrate_machine(
        args.selector, output=args.output, name=args.name, threads=threads,
        options=_options(args, None), kernels=args.kernel or (),
        element_types=args.element_type or (), implementations=args.implementation or (),
        library=args.library, restart=args.restart, require_steady=args.require_steady)
    for note in result.notes:
        print(f"checkpoint {note}")
    print(result.table())
    for unfinished in result.unfinished:
        print(f"  {unfinished}")
    if not result.written:
        print(f"profile not written to {result.profile_path}: keys were withheld, measured "
              f"under interference or in a slow state (--require-steady); reports to "
              f"{result.reports_path}")
        return PARTIAL
    print(f"profile written to {result.profile_path} ({len(result.profile.entries)} entries), "
          f"reports to {result.reports_path}")
    return PARTIAL if result.unfinished else 0


def _print_steadiness(watched: Sequence[Steadiness]) -> None:
    from ..calibration.steadiness import STEADY_TOLERANCE

    for steadiness in watched:
        for trace in steadiness.probes:
            if trace.samples:
                print(f"  machine probe of {steadiness.library} ({trace.aspect}): "
                      f"{trace.lowest:.3g} to {trace.highest:.3g} over {len(trace.samples)} "
                      f"probes, reference state {trace.reference:.3g}")
            if trace.error is not None:
                print(f"  warning: the {trace.aspect} probe of {steadiness.library} stopped: "
                      f"{trace.error}")
        if steadiness.remeasured:
            print(f"  {len(steadiness.remeasured)} keys measured again: a probe said the "
                  f"machine was more than {STEADY_TOLERANCE:.0%} slower than its reference "
                  f"state while they were measured, or their measurements contradicted each "
                  f"other; {len(set(steadiness.remeasured) - set(steadiness.unsettled))} of "
                  f"them settled")
        if steadiness.unsettled:
            print(f"  warning: {len(steadiness.unsettled)} keys were measured only while a "
                  f"probe said the machine was more than {STEADY_TOLERANCE:.0%} slower than "
                  f"its reference state, or changing, and crossovers move with it: they "
                  f"keep their values in use where they found fewer threads faster, and "
                  f"their other values may not repeat; calibrate again on a quieter machine "
                  f"before shipping them")
            for key in steadiness.unsettled:
                print(f"    {key}")


def register(commands: argparse._SubParsersAction) -> None:
    from ..calibration import EFFORTS, CalibrationOptions

    defaults = CalibrationOptions()
    calibrate = add_command(
        commands, "calibrate", "measure the kernels on this machine for each thread count "
                               "and publish the winners for this process; --save keeps them "
                               "in the user cache, --report keeps every measurement, "
                               "--profile writes a deployment profile", _calibrate,
        examples=["kerneltune calibrate --effort quick --save",
                  "kerneltune calibrate --kernel Add --threads 1 --threads 2 "
                  "--report add.json",
                  "kerneltune calibrate --profile --selector zen4 --effort normal"])
    calibrate.add_argument("--threads", type=positive_int, action="append",
                           help="a thread count to calibrate for (repeat for several; default "
                                "1, 2, 4, ... and the CPUs this process may use)")
    calibrate.add_argument("--effort", default=defaults.effort, choices=tuple(EFFORTS),
                           help="how long to measure (default: %(default)s)")
    add_library(calibrate)
    calibrate.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    calibrate.add_argument("--element-type", action="append",
                           help="only this element type, e.g. FLOAT (repeatable)")
    calibrate.add_argument("--implementation", action="append",
                           help="only this ISA variant (repeatable)")
    calibrate.add_argument("--only-missing", action="store_true",
                           help="skip keys with a calibrated profile for this execution")
    calibrate.add_argument("--time-budget", type=float, help="seconds for each thread count")
    calibrate.add_argument("--time-budget-per-key", type=float, help="seconds per key")
    calibrate.add_argument("--memory-budget", type=int, default=defaults.memory_budget,
                           help="bytes of inputs and output one case may take "
                                "(default: %(default)s)")
    calibrate.add_argument("--margin", type=float, default=defaults.minimum_margin,
                           help="fraction a value must win by to replace the one in use "
                                "(default: %(default)s)")
    calibrate.add_argument("--seed", type=int, default=defaults.seed,
                           help="seed of the inputs measured (default: %(default)s)")
    calibrate.add_argument("--parameter", help="compare values of this parameter instead of "
                                               "searching (with --values)")
    calibrate.add_argument("--values", nargs="+", help="the values --parameter compares")
    calibrate.add_argument("--report", help="write every report (JSON) to this file")
    calibrate.add_argument("--save", action="store_true",
                           help="persist the calibrated values to the user calibration cache "
                                "(KERNELTUNE_CACHE), where later processes load them")
    calibrate.add_argument("--require-steady", action="store_true",
                           help=f"exit with status {PARTIAL} (as keys withheld or stopped "
                                f"do anyway) and save nothing to the cache of a thread count "
                                f"(with --profile: leave the profile as it was) with keys "
                                f"measured under interference, or only while the machine "
                                f"probe saw the machine slower than its reference state")
    calibrate.add_argument("--maximum-interference", type=float, metavar="SHARE",
                           help="discard and take again a measurement where other processes "
                                "took more than this share of its threads' time (default: "
                                "KERNELTUNE_MAXIMUM_INTERFERENCE, else 0.25; 1 keeps all)")
    calibrate.add_argument("--profile", action="store_true",
                           help="write a deployment profile of this machine bound to "
                                "--selector (default: this processor's vendor/family/model), "
                                "resuming from a checkpoint of an interrupted run")
    calibrate.add_argument("--selector", help="a selector file or a shipped selector's name")
    calibrate.add_argument("--output", help="the profile file (default: profiles/NAME.yaml)")
    calibrate.add_argument("--name", help="the profile's name (default: this machine's)")
    calibrate.add_argument("--restart", action="store_true",
                           help="discard the checkpoint of an interrupted run")
