"""``kerneltune corpus``: which values of one kernel's parameters run a corpus of ONNX cases
fastest, each parameter set measured in its own worker. Advisory: nothing is saved."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..calibration.confirmation import CONFIDENCE
from ..corpus.analysis import CRITERIA, LATENCY_CRITERIA, SPEEDUP_CRITERIA, SetMetrics
from ..corpus.search import (
    DEFAULT_CRITERION,
    DEFAULT_MARGIN,
    DEFAULT_REPEAT,
    DEFAULT_TIMEOUT,
    DEFAULT_WARMUP,
    MAX_SETS,
    CorpusProgress,
    CorpusSearchReport,
    search_corpus_parameters,
)
from .common import (
    FAILURE,
    UsageError,
    add_command,
    add_json,
    add_option,
    add_threads,
    assignment,
    parse_value,
    print_json,
    require,
    table,
    warn,
)

#: the suffixes ``CorpusSearchReport.write`` takes, checked before anything is measured
REPORT_SUFFIXES = (".json", ".csv")
#: options whose default is the API's: the command passes them only when given
API_OPTIONS = ("criterion", "repeat", "warmup", "timeout", "margin")


def _parameter(text: str) -> tuple[str, list[object]]:
    """``NAME=V1,V2,...``; the kernel's schema checks the values before anything runs."""
    name, listed = assignment(text)
    words = [word.strip() for word in listed.split(",")]
    if not all(words):
        raise argparse.ArgumentTypeError(f"expected NAME=V1,V2,..., got {text!r}")
    return name, [parse_value(word) for word in words]


def _parameters(given: Sequence[tuple[str, list[object]]]) -> dict[str, list[object]]:
    parameters: dict[str, list[object]] = {}
    for name, values in given:
        if name in parameters:
            raise UsageError(f"--parameter {name} is given twice; list its values in one: "
                             f"{name}=V1,V2,...")
        parameters[name] = values
    return parameters


def _check(args: argparse.Namespace) -> None:
    """What the search would only find out after collecting the cases, or after measuring."""
    require(args, "--element-type")
    try:
        re.compile(args.pattern)
    except re.error as error:
        raise UsageError(f"invalid case pattern {args.pattern!r}: {error}") from None
    if args.output is not None and Path(args.output).suffix.lower() not in REPORT_SUFFIXES:
        raise UsageError(f"--output {args.output}: the report is written as "
                         f"{' or '.join(REPORT_SUFFIXES)}")


def _progress(update: CorpusProgress) -> None:
    print(f"set {update.set_index} ({update.set_index + 1}/{update.sets_total}), case "
          f"{update.cases_done}/{update.cases_total}: {update.case} {update.status}",
          file=sys.stderr)


def _milliseconds(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4f}"


def _speedup(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.3f}"


def _completeness(report: CorpusSearchReport, metrics: SetMetrics) -> str:
    if metrics.complete:
        return "yes"
    statuses = Counter(r.status for r in report.results
                       if r.set_index == metrics.set_index and r.latency_seconds is None)
    return "no (" + ", ".join(f"{count} {status}" for status, count in statuses.items()) + ")"


def _sets_table(report: CorpusSearchReport) -> str:
    """Per set: the searched values, whether every case has a latency, and every metric."""
    rows = []
    for values, metrics in zip(report.sets, report.analysis.sets, strict=True):
        index = metrics.set_index
        notes = ["active, baseline"] * (index == 0) + ["selected"] * (index == report.selected)
        rows.append((index, *(values[name] for name in report.parameters),
                     _completeness(report, metrics),
                     *map(_milliseconds, (metrics.latency_sum, metrics.latency_average,
                                          metrics.latency_median, metrics.latency_max)),
                     *map(_speedup, (metrics.speedup_average, metrics.speedup_median,
                                     metrics.speedup_max)),
                     "; ".join(notes)))
    return table(rows, ("set", *report.parameters, "complete", "sum ms", "average ms",
                        "median ms", "max ms", "average speedup", "median speedup",
                        "max speedup", ""))


def _persisting(args: argparse.Namespace, report: CorpusSearchReport,
                values: Mapping[str, object]) -> str:
    """The command that keeps the searched values of the selected set in the user cache."""
    key = report.key
    words = ["kerneltune", "cache", "set", "--kernel", key.kernel, "--element-type",
             key.element_type_name]
    if args.implementation is not None:
        words += ["--implementation", key.implementation]
    if args.threads is not None:
        words += ["--threads", str(args.threads)]
    words += [f"{name}={values[name]}" for name in report.parameters]
    return " ".join(map(shlex.quote, words))


def _print_report(args: argparse.Namespace, report: CorpusSearchReport) -> None:
    analysis = report.analysis
    print(f"{report.key}: {len(report.sets)} parameter sets on {len(analysis.cases)} cases; "
          f"a case's latency is the median of {report.repeat} runs after {report.warmup} "
          f"untimed")
    if report.corpus.skipped:
        print(f"{len(report.corpus.skipped)} cases matching {report.corpus.pattern!r} left out "
              f"(they do not run {report.key.kernel} {report.key.element_type_name} here; "
              f"--json says why)")
    print(f"criterion: {analysis.criterion} "
          f"({'maximised' if analysis.maximised else 'minimised'}; ties go to the lower set)\n")
    print(_sets_table(report))
    values = report.selected_values
    if values is None:
        return
    print()
    if report.confirmation is not None:
        print(f"set {report.fastest} against set 0, both run again (ABBA): "
              f"{report.confirmation.describe()}")
    if report.selected == 0:
        print("selected: set 0, the active values; nothing to change"
              if report.fastest == 0 else
              "selected: set 0: no set beats the values in use; nothing to change")
        return
    searched = ", ".join(f"{name}={values[name]}" for name in report.parameters)
    print(f"selected: set {report.selected}: {searched}\n"
          f"advisory: nothing was saved. To keep these values here:\n"
          f"  {_persisting(args, report, values)}\n"
          f"or kerneltune.set_kernel_tuning_parameters() from Python.")


def _nothing_selected(report: CorpusSearchReport) -> str:
    if report.analysis.maximised and not report.analysis.baseline_complete:
        return (f"nothing selected: criterion {report.analysis.criterion} needs a complete "
                f"baseline (set 0), and set 0 has cases without a latency")
    return "nothing selected: no parameter set has a latency for every case"


def _corpus(args: argparse.Namespace) -> int:
    parameters = _parameters(args.parameter)
    _check(args)
    given = {name: getattr(args, name) for name in API_OPTIONS
             if getattr(args, name) is not None}
    report = search_corpus_parameters(
        args.pattern, parameters, args.kernel, args.element_type, cases_dirs=args.cases or (),
        implementation=args.implementation, threads=args.threads, progress=_progress, **given)
    if args.json:
        print_json(report.to_dict())
    else:
        _print_report(args, report)
    if args.output is not None:
        written = report.write(args.output)
        print(f"report written to {written}", file=sys.stderr if args.json else sys.stdout)
    for failure in report.failures:
        warn("corpus", f"set {failure.set_index}, {failure.case}: {failure.status}: "
                        f"{failure.message}")
    if report.selected is None:
        warn("corpus", _nothing_selected(report))
    return FAILURE if report.failures or report.selected is None else 0


#: --help's description; the formatter keeps its lines as written
DESCRIPTION = """\
Measure every parameter set, the Cartesian product of the --parameter values, on
the ONNX cases whose name REGEX matches: onnx's node test cases and the --cases
folders (onnx's layout: model.onnx, test_data_set_*/input_*.pb and output_*.pb).
Set 0 holds the values active here (the user cache's included) and is the
speedup baseline. Each set runs in a fresh worker process whose only cache is a
temporary file holding that set; the user cache is not written and nothing is
saved. A set with a case that timed out is incomplete and never selected.

Progress goes to stderr. Exit status 1 when a case gives wrong outputs or fails,
or no set can be selected; 2 for arguments the search cannot run with."""


def register(commands: argparse._SubParsersAction) -> None:
    corpus = add_command(
        commands, "corpus", "measure parameter sets of one kernel on a corpus of ONNX cases, "
                            "each set in its own worker, and advise the fastest", _corpus,
        description=DESCRIPTION, hidden_aliases=("backend",),
        examples=["kerneltune corpus '^test_add' --kernel Add --element-type FLOAT "
                  "--parameter parallel.minimum_elements=4096,65536",
                  "kerneltune corpus '^test_add' --kernel Add --element-type FLOAT "
                  "--parameter parallel.minimum_elements=4096,65536 "
                  "--parameter parallel.maximum_threads=1,2 --criterion median-speedup",
                  "kerneltune corpus '^my_' --cases models/ --kernel Gemm --element-type FLOAT "
                  "--parameter algorithm.tile_m=32,64,96 --json > gemm.json",
                  "kerneltune corpus '^test_add' --kernel Add --element-type FLOAT "
                  "--parameter parallel.minimum_elements=1,4096 --output add.csv"])
    corpus.add_argument("pattern", metavar="REGEX",
                         help="the cases whose name this regular expression matches (re.search)")
    corpus.add_argument("--parameter", action="append", type=_parameter, required=True,
                         metavar="NAME=V1,V2,...",
                         help="values of one parameter to try (repeatable: the sets are the "
                              f"Cartesian product, at most {MAX_SETS} with the active values)")
    corpus.add_argument("--kernel", required=True, help="the kernel, e.g. Add or Gemm")
    add_option(corpus, "--element-type", help="the element type, e.g. FLOAT (required)")
    add_option(corpus, "--implementation",
               help="the implementation, when several are registered")
    corpus.add_argument("--criterion", choices=CRITERIA, metavar="CRITERION",
                         help=f"how the set is selected: a latency ({', '.join(LATENCY_CRITERIA)}; "
                              f"minimised) or a speedup over set 0 ({', '.join(SPEEDUP_CRITERIA)}; "
                              f"maximised); default: {DEFAULT_CRITERION}")
    corpus.add_argument("--cases", action="append", metavar="DIR",
                         help="a case folder, or a folder of case folders (repeatable)")
    corpus.add_argument("--repeat", type=int, metavar="N",
                         help="timed runs per case, whose median is its latency "
                              f"(default: {DEFAULT_REPEAT})")
    corpus.add_argument("--warmup", type=int, metavar="N",
                         help=f"untimed runs per case before those (default: {DEFAULT_WARMUP})")
    corpus.add_argument("--timeout", type=float, metavar="SECONDS",
                         help="seconds one case may take in a worker before the set is "
                              f"incomplete (default: {DEFAULT_TIMEOUT:g})")
    corpus.add_argument("--margin", type=float, metavar="FRACTION",
                         help="how much faster than set 0 the fastest set must be, confirmed "
                              f"at {CONFIDENCE * 100:.0f}%% on both run again, to be "
                              f"selected (default: {DEFAULT_MARGIN:g})")
    add_threads(corpus)
    corpus.add_argument("--output", metavar="FILE",
                         help="also write the report to FILE: .json as --json prints it, or "
                              ".csv, a line per set and case")
    add_json(corpus)
