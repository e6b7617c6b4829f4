"""``kerneltune kernel``: list the kernels, show one's values and their sources, tune it here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..errors import UnknownKernelError
from ..tuning.keyfilter import KeyFilter
from ..tuning.registry import default_registry
from ..tuning.schema import KernelTuningKey, TuningParameter, TuningValue
from .common import (
    FAILURE,
    PARTIAL,
    UsageError,
    add_command,
    add_json,
    add_library,
    add_option,
    add_threads,
    parse_value,
    print_json,
    table,
    warn,
)

if TYPE_CHECKING:
    from ..calibration import CalibrationBatchReport, CalibrationOptions
    from ..calibration.parameters import KernelTuningParameters
    from ..machine.descriptor import CpuExecutionDescriptor

#: ``--parameter NAME=default,...``: the word that stands for the value in use
ACTIVE = "default"
#: the most values one ``--parameter`` comparison times
MAX_VALUES = 64


def _source(row: KernelTuningParameters) -> str:
    source = row.active_source
    return source.tier.label + (f" {source.profile_name}" if source.profile_name else "")


def _order(key: KernelTuningKey) -> tuple:
    return (key.kernel, key.element_type, key.implementation, key.library, key.tuning_abi)


def _selected(args: argparse.Namespace) -> list[KernelTuningKey]:
    selection = KeyFilter.of(args.library, args.kernel or (), args.implementation or (),
                             args.element_type or ())
    keys = sorted(filter(selection.matches, default_registry.snapshot().keys()), key=_order)
    if not keys:
        known = sorted({key.kernel for key in default_registry.snapshot().keys()})  # noqa: SIM118
        raise UnknownKernelError(
            "no registered kernel matches"
            + (f" --library {args.library}" if args.library else "")
            + (f" --kernel {args.kernel}" if args.kernel else "")
            + (f" --element-type {args.element_type}" if args.element_type else "")
            + (f" --implementation {args.implementation}" if args.implementation else "")
            + f"; kernels: {', '.join(known)} (kerneltune kernel --list)")
    return keys


def _execution(args: argparse.Namespace) -> CpuExecutionDescriptor:
    from ..machine.detect import current_execution

    return current_execution(args.threads)


def _list(args: argparse.Namespace) -> int:
    from ..calibration.parameters import kernel_tuning_parameters

    if args.kernel or args.element_type or args.implementation or args.library:
        _selected(args)  # a filter that matches nothing is a usage error, not an empty list
    report = kernel_tuning_parameters(args.kernel, args.library, args.implementation,
                                      args.element_type, execution=_execution(args))
    if args.json:
        print_json(report.to_dict())
        return 0
    ordered = sorted(report.parameters, key=lambda row: _order(row.key))
    rows = [(row.key.kernel, row.key.element_type_name, row.key.implementation, row.key.library,
             row.key.tuning_abi, len(row.defaults), "yes" if row.calibratable else "no",
             _source(row), ", ".join(f"{name}={row.active[name]} (default {default})"
                                     for name, default in _changed(row).items()) or "-")
            for row in ordered if _changed(row) or not args.changed]
    print(table(rows, ("kernel", "dtype", "implementation", "library", "abi", "parameters",
                       "calibratable", "active", "changed")))
    print(_summary(report.parameters))
    return 0


def _changed(row) -> dict[str, TuningValue]:
    """The default of each parameter whose active value differs from it."""
    return {name: default for name, default in row.defaults.items()
            if row.active.get(name) != default}


def _summary(rows) -> str:
    changed = [row for row in rows if _changed(row)]
    return (f"{len(rows)} keys, {len(changed)} with values other than the defaults "
            f"({sum(len(_changed(row)) for row in changed)} values), "
            f"{sum(1 for row in rows if row.calibratable)} calibratable")


def _show(args: argparse.Namespace) -> int:
    from ..calibration.parameters import kernel_tuning_parameters

    _selected(args)  # an unknown kernel is a usage error, not an empty listing
    report = kernel_tuning_parameters(args.kernel, args.library, args.implementation,
                                      args.element_type, args.path,
                                      execution=_execution(args))
    if args.json:
        print_json(report.to_dict())
        return 0
    cache = report.cache
    print(f"{report.execution.effective_threads} threads; cache {cache.path or 'disabled'}: "
          f"{cache.status}")
    schema_of = default_registry.snapshot().schema
    for row in sorted(report.parameters, key=lambda row: _order(row.key)):
        if args.changed and not _changed(row):
            continue
        print(f"\n{row.key}")
        print(f"  active values from: {_source(row)}; cached for this execution: "
              f"{row.cached_source or 'nothing'}; "
              + ("calibratable (--tune)" if row.calibratable
                 else "no calibration function (kerneltune cache set)"))
        cached = row.cached or {}
        print(table([(p.name, _allowed(p), row.defaults[p.name],
                      cached.get(p.name, "-"), row.active[p.name])
                     for p in schema_of(row.key).parameters.values()
                     if p.name in _changed(row) or not args.changed],
                    ("parameter", "allowed", "default", "cached", "active")))
    print(f"\n{_summary(report.parameters)}")
    return 0


def _allowed(parameter: TuningParameter) -> str:
    if parameter.choices is not None:
        return " | ".join(map(str, parameter.choices))
    low = "" if parameter.minimum is None else f"{parameter.minimum:g}"
    high = "" if parameter.maximum is None else f"{parameter.maximum:g}"
    span = f" {low}..{high}" if low or high else ""
    return parameter.type.__name__ + span


def _comparison(text: str, keys: Sequence[KernelTuningKey], execution: CpuExecutionDescriptor
                ) -> tuple[str, list[TuningValue]]:
    """``NAME=default,V1,...`` checked against every key's schema before anything is measured."""
    name, sign, listed = text.partition("=")
    if not sign or not name or not listed:
        raise UsageError(f"--parameter: expected NAME={ACTIVE},VALUE,..., got {text!r}")
    snapshot = default_registry.snapshot()
    words = [word.strip() for word in listed.split(",")]
    values: list[TuningValue] = []
    for key in keys:
        parameters = snapshot.schema(key).parameters
        if name not in parameters:
            raise UsageError(f"--parameter: {key} has no parameter {name!r}; it has "
                             f"{', '.join(parameters)}")
        active = snapshot.resolve(key, execution).values[name]
        distinct = {active}
        for word in words:
            if word == ACTIVE:
                continue
            value, problem = parameters[name].check(parse_value(word))
            if problem is not None:
                raise UsageError(f"--parameter {name}: {word!r}: {problem}")
            distinct.add(value)
            if value not in values:
                values.append(value)
        if len(distinct) < 2:
            raise UsageError(f"--parameter {name}: give at least two distinct values (the value "
                             f"in use, {active!r}, is {ACTIVE!r})")
        if len(distinct) > MAX_VALUES:
            raise UsageError(f"--parameter {name}: {len(distinct)} distinct values; at most "
                             f"{MAX_VALUES}")
    return name, values


def _options(args: argparse.Namespace, parameter: str | None,
             values: Sequence[TuningValue]) -> CalibrationOptions:
    """The API's options with what the command line gave over them (no second copy)."""
    from ..calibration import CalibrationOptions

    given = {"effort": args.effort, "time_budget": args.time_budget,
             "time_budget_per_key": args.time_budget_per_key,
             "memory_budget": args.memory_budget, "minimum_margin": args.margin,
             "seed": args.seed}
    return CalibrationOptions(threads=args.threads, parameter=parameter, values=values,
                              **{name: value for name, value in given.items()
                                 if value is not None})


def _tune(args: argparse.Namespace) -> int:
    from ..cache.kernel_tuning_cache import update_kernel_tuning_cache
    from ..calibration import calibrate_kernel_thresholds, is_calibratable

    keys = _selected(args)
    runnable = [key for key in keys if is_calibratable(key)]
    if not runnable:
        raise UsageError(f"{args.kernel} has no calibration function: set its values with "
                         f"'kerneltune cache set --kernel {args.kernel} ...'")
    parameter, values = None, []
    if args.parameter is not None:
        parameter, values = _comparison(args.parameter, runnable, _execution(args))
    print(f"tuning {len(runnable)} keys of {args.kernel}", file=sys.stderr)
    batch = calibrate_kernel_thresholds(
        runnable, _options(args, parameter, values),
        on_report=lambda report: print(f"  {report.key}: measured in {report.seconds:.1f} s",
                                       file=sys.stderr))
    saved = update_kernel_tuning_cache(batch.successful_profiles, args.path)
    if args.json:
        print_json({"calibration": batch.to_dict(), "cache": saved.to_dict()})
    else:
        _print_tuning(batch, parameter)
        print(f"cache {saved.path or 'disabled'}: {saved.status}, {len(saved.added)} added, "
              f"{len(saved.replaced)} replaced")
    for outcome in (*batch.withheld, *batch.skipped, *batch.unsupported):
        warn("kernel", f"{outcome.key} not tuned: {outcome.reason}")
    problems = [str(p) for p in saved.problems]
    for problem in problems:
        warn("kernel", f"cache: {problem}")
    if problems or not batch.calibrated:
        return FAILURE
    return PARTIAL if batch.unfinished else 0


def _print_tuning(batch: CalibrationBatchReport, parameter: str | None) -> None:
    print(f"{len(batch.calibrated)} keys tuned for {batch.execution.effective_threads} threads "
          f"in {batch.seconds:.1f} s")
    for report in batch.calibrated:
        print(f"\n{report.key} ({report.seconds:.1f} s)")
        if parameter is not None:
            print(_comparison_table(report.comparison, report.values[parameter]))
        for decision in report.decisions:
            confirmed = decision.confirmation
            print(f"  {decision.parameter}: {decision.baseline} -> {decision.value}\n"
                  f"      {decision.reason}"
                  + (f"\n      confirmed: {confirmed.describe()}"
                     if decision.changed and confirmed is not None else ""))


def _comparison_table(rows: Sequence[Mapping[str, object]], chosen: TuningValue) -> str:
    """Value, milliseconds (the cases' medians summed), speedup over the value in use (the
    geometric mean over the cases), and the value kept."""
    lines = []
    for index, row in enumerate(rows):
        (value,) = row["values"].values()
        notes = ["in use"] * (index == 0) + ["selected"] * (value == chosen)
        lines.append((value, f"{row['seconds'] * 1e3:.3f}", f"{row['speedup']:.3f}",
                      ", ".join(notes)))
    return table(lines, ("value", "ms", "speedup", ""))


def _kernel(args: argparse.Namespace) -> int:
    if args.list:
        if args.tune or args.parameter:
            raise UsageError("--list takes no --tune or --parameter")
        return _list(args)
    if not args.kernel:
        raise UsageError("give --list, or --kernel NAME")
    if args.parameter is not None and not args.tune:
        raise UsageError("--parameter compares values while tuning: add --tune")
    budgets = (args.time_budget, args.time_budget_per_key, args.memory_budget)
    if not args.tune and any(budget is not None for budget in budgets):
        raise UsageError("--time-budget, --time-budget-per-key and --memory-budget limit "
                         "tuning: add --tune")
    return _tune(args) if args.tune else _show(args)


def register(commands: argparse._SubParsersAction) -> None:
    from ..calibration import EFFORTS, CalibrationOptions

    defaults = CalibrationOptions()
    kernel = add_command(
        commands, "kernel", "list the tunable kernels, show one kernel's values and where "
                            "they come from, tune it on this machine", _kernel,
        examples=["kerneltune kernel --list",
                  "kerneltune kernel --kernel Gemm --element-type FLOAT",
                  "kerneltune kernel --kernel Add --tune            # every element type, "
                  "persisted to the cache",
                  "kerneltune kernel --kernel Add --element-type FLOAT --tune "
                  "--parameter parallel.minimum_elements=default,4096,65536"])
    kernel.add_argument("--list", action="store_true",
                        help="list the registered kernel keys (those --kernel, --element-type "
                             "and --implementation select)")
    kernel.add_argument("--kernel", help="the kernel, e.g. Add or Gemm")
    add_library(kernel)
    kernel.add_argument("--changed", action="store_true",
                        help="only the keys and values that differ from the portable defaults, "
                             "each with its default")
    add_option(kernel, "--element-type", help="only this element type, e.g. FLOAT")
    add_option(kernel, "--implementation", help="only this implementation (ISA variant)")
    add_threads(kernel)
    kernel.add_argument("--path", help="the calibration cache (default: the user cache, "
                                       "KERNELTUNE_CACHE)")
    kernel.add_argument("--tune", action="store_true",
                        help="calibrate the kernel here and persist the values to the cache")
    kernel.add_argument("--parameter", metavar=f"NAME={ACTIVE},V1,V2,...",
                        help=f"with --tune: time these values of one parameter on the "
                             f"kernel's calibration workload ({ACTIVE!r} is the value in use, "
                             f"the baseline) and keep the fastest; 2 to {MAX_VALUES} values")
    kernel.add_argument("--effort", choices=tuple(EFFORTS),
                        help=f"how long to measure (default: {defaults.effort})")
    add_option(kernel, "--time-budget", type=float, metavar="SECONDS",
               help="stop tuning after this long, keeping what is undecided")
    add_option(kernel, "--time-budget-per-key", type=float, metavar="SECONDS",
               help="seconds per key (default: the effort's)")
    add_option(kernel, "--memory-budget", type=int, metavar="BYTES",
               help=f"bytes of inputs and output one case may take "
                    f"(default: {defaults.memory_budget})")
    kernel.add_argument("--margin", type=float,
                        help=f"fraction a value must win by to replace the one in use "
                             f"(default: {defaults.minimum_margin})")
    kernel.add_argument("--seed", type=int,
                        help=f"seed of the inputs measured (default: {defaults.seed})")
    add_json(kernel)
