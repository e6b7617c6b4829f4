"""``kerneltune report``: a calibration report's decisions as a table, and its crossover plots.

The report is what ``kerneltune calibrate --report FILE`` writes (a list of batch
reports, one per thread count, or one). ``--json`` prints
``ReportCurves.to_dict()`` (:mod:`kerneltune.calibration.curves`)::

    {"file": FILE,
     "keys": [{"key": {...}, "name": "library/Kernel/isa/TYPE (cpu, abi N)",
               "threads": 2,
               "status": "calibrated" | "withheld" | "skipped" | "unsupported",
               "reason": null | why it was not calibrated, "seconds", "stopped_early",
               "interference": null | {"kept", "discarded": [shares others took],
                                       "worst_kept", "whole": {...}},
               "decisions": [{"parameter", "baseline", "value", "changed", "measured",
                              "reason", "kind", "candidates": number measured,
                              "confirmation": null | {"ratio", "low", "high", "points",
                                                      "rounds", "margin", "confidence",
                                                      "confirmed", "samples"},
                              "reference", "selected_label", "units": {case: unit},
                              "marks": [{"label", "size", "role"}],
                              "series": [{"case", "label",
                                          "points": [{"size", "seconds", "q1", "q3",
                                                      "relative"}]}]}]}]}

``kind`` is crossover, threads, comparison, verification or unmeasured; a mark's
``role`` is selected, previous or measured; seconds are per call.

Given a profile or deployment file instead, it shows what decided each entry a bake
merged from several runs (its evidence, :class:`kerneltune.profiles.model.Evidence`);
``--json`` prints ``{"file", "profiles": [{"name", "runs", "entries": [{"key", "name",
"threads", "values", "evidence": {parameter: Evidence.to_dict()}}]}]}``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from collections.abc import Sequence

from ..calibration.curves import DecisionCurves, KeyCurves, read_report_curves
from ..calibration.plot import MAXIMUM_PANELS, plot_report
from ..profiles.deployment import read_profiles
from ..profiles.model import DeploymentProfile, ProfileEntry
from .common import (
    UsageError,
    add_command,
    add_json,
    add_library,
    add_option,
    positive_int,
    print_json,
    table,
)

#: the narrowest the reason column is wrapped to, however narrow the terminal
_REASON_WIDTH = 40


def _value(decision: DecisionCurves) -> str:
    if decision.changed:
        return f"{decision.baseline} -> {decision.value}"
    return f"{decision.value} (kept)"


def _heading(entry: KeyCurves, columns: int) -> str:
    head = f"{entry.key}, {entry.threads_text}: "
    if entry.status == "calibrated":
        head += "calibrated" + (f" in {entry.seconds:.1f} s" if entry.seconds is not None else "")
    else:
        head += f"{entry.status}: {(entry.reason or '').removeprefix(entry.status + ': ')}"
    if entry.stopped_early:
        head += f" (stopped early: {entry.stopped_early})"
    if entry.interference is not None:
        head += "\n" + textwrap.fill(f"interference: {entry.interference.describe()}",
                                     max(columns, _REASON_WIDTH), subsequent_indent="  ")
    return head


def _reason(decision: DecisionCurves) -> str:
    """Why, with the confirmation a published change stands on."""
    if decision.changed and decision.confirmation is not None:
        return f"{decision.reason}; confirmed: {decision.confirmation.describe()}"
    return decision.reason


def _decisions(entry: KeyCurves, columns: int) -> str:
    """One row per decision; the reason wrapped onto rows of its own to fit ``columns``."""
    header = ("parameter", "baseline -> value", "points", "reason")
    cells = [(d.parameter, _value(d), str(d.candidates)) for d in entry.decisions]
    widths = [max(len(row[i]) for row in [header[:3], *cells]) for i in range(3)]
    width = max(_REASON_WIDTH, columns - sum(widths) - 2 * len(widths))
    rows = []
    for cell, decision in zip(cells, entry.decisions, strict=True):
        lines = textwrap.wrap(_reason(decision), width) or [""]
        rows.append((*cell, lines[0]))
        rows += [("", "", "", line) for line in lines[1:]]
    return table(rows, header)


def _matches(text: str, wanted: str | None) -> bool:
    return wanted is None or wanted.casefold() in text.casefold()


def _entry_selected(args: argparse.Namespace, entry: ProfileEntry) -> bool:
    key, (low, high) = entry.key, entry.threads
    return (_matches(str(key), args.key)
            and (args.library is None or key.library == args.library)
            and (args.kernel is None or key.kernel.lower() == args.kernel.lower())
            and (args.element_type is None
                 or key.element_type_name == args.element_type.upper())
            and (args.threads is None or low <= args.threads <= high))


def _profiles(args: argparse.Namespace, profiles: Sequence[DeploymentProfile]) -> int:
    """The evidence of each merged entry of ``profiles`` (a profile or deployment file)."""
    if args.plot:
        raise UsageError(f"{args.file} is a profile: its curves are in the calibration reports "
                         f"of its runs (plot those)")
    document: dict[str, object] = {"file": args.file, "profiles": []}
    lines = []
    for profile in profiles:
        runs = sorted({str(p["profile"]) for p in profile.provenance if "profile" in p})
        chosen = [(entry, {name: evidence for name, evidence in sorted(entry.evidence.items())
                           if _matches(name, args.parameter)
                           and (entry.values[name] != evidence.in_use or not args.changed)})
                  for entry in profile.entries if _entry_selected(args, entry)]
        chosen = [(entry, evidence) for entry, evidence in chosen if evidence]
        document["profiles"].append({"name": profile.name, "runs": runs, "entries": [
            {"key": entry.key.to_dict(), "name": str(entry.key), "threads": list(entry.threads),
             "values": dict(entry.values),
             "evidence": {name: e.to_dict() for name, e in evidence.items()}}
            for entry, evidence in chosen]})
        lines.append(f"{profile.name}: " + (f"merged from {', '.join(runs)}" if runs
                                            else "one run, no merge evidence"))
        for entry, evidence in chosen:
            low, high = entry.threads
            lines.append(f"  {entry.key}, threads {low if low == high else f'{low}-{high}'}")
            lines += [f"    {name} = {entry.values[name]}: {e.describe()}"
                      for name, e in evidence.items()]
    filtered = (args.key, args.parameter, args.kernel, args.element_type, args.threads)
    if not any(p["entries"] for p in document["profiles"]) and (
            any(value is not None for value in filtered) or args.changed):
        raise UsageError(f"no merged entry of {args.file} matches the filters")
    if args.json:
        print_json(document)
    else:
        print("\n".join(lines))
    return 0


def _report(args: argparse.Namespace) -> int:
    read = read_profiles(args.file)
    if read.status == "ok":
        return _profiles(args, read.profiles)
    every = read_report_curves(args.file)
    curves = every.select(args.key, args.parameter, kernel=args.kernel,
                          element_type=args.element_type, threads=args.threads,
                          changed=args.changed, library=args.library)
    if not curves.keys:
        given = (("--key", args.key), ("--parameter", args.parameter),
                 ("--library", args.library), ("--kernel", args.kernel),
                 ("--element-type", args.element_type), ("--threads", args.threads),
                 ("--changed", args.changed or None))
        wanted = " and ".join(f"{name} {value!r}" if value is not True else name
                              for name, value in given if value is not None)
        raise UsageError(f"nothing in {args.file} matches {wanted}")
    drawn = None
    if args.plot:  # first: a missing matplotlib fails before anything is printed
        drawn = plot_report(curves, args.plot)
    if args.json:
        print_json(curves.to_dict())
    else:
        columns = shutil.get_terminal_size((100, 24)).columns
        blocks = [_heading(entry, columns) + ("\n" + _decisions(entry, columns) if entry.decisions
                                     else "") for entry in curves.keys]
        print("\n\n".join(blocks))
    if drawn is not None:
        # beside --json's document, not in it
        stream = sys.stderr if args.json else sys.stdout
        panels = len(drawn.panels)
        print(f"plot written to {drawn.path} ({panels} panel{'s' * (panels != 1)})",
              file=stream)
        if drawn.left_out:
            print(f"{drawn.left_out} more measured decisions not drawn: choose with --kernel, "
                  f"--element-type, --threads, --changed, --key or --parameter", file=stream)
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    report = add_command(
        commands, "report", "show what a calibration report decided and why: a table of "
                            "the decisions, and with --plot the crossover curves", _report,
        description="Show what a calibration report (calibrate --report FILE) decided: per "
                    "key, each parameter's value before and after, how many points were "
                    "measured and why. --plot draws the measurements behind each decision "
                    "(time per call against size for each path, or each candidate value "
                    "relative to the value in use), with the selected threshold marked; it "
                    "needs matplotlib: pip install kerneltune[plot].",
        examples=["kerneltune calibrate --kernel Add --threads 2 --report add.json",
                  "kerneltune report add.json",
                  "kerneltune report add.json --plot add.png --parameter minimum_elements",
                  "kerneltune report reports.json --key Gemm/x86_64_v4/FLOAT --json"])
    report.add_argument("file", help="a calibration report (JSON), as calibrate --report "
                                     "writes it, or a profile or deployment file (the evidence "
                                     "of its merged entries)")
    report.add_argument("--plot", metavar="PNG",
                        help="draw the crossover curves of the measured decisions into this "
                             f"PNG file (at most {MAXIMUM_PANELS} panels)")
    report.add_argument("--key", help="only keys whose name contains this, e.g. Add or "
                                      "Gemm/x86_64_v4/FLOAT (case-insensitive)")
    report.add_argument("--parameter", help="only parameters whose name contains this, e.g. "
                                            "minimum_elements (case-insensitive)")
    add_library(report)
    report.add_argument("--kernel", help="only this kernel's keys, e.g. Gemm")
    add_option(report, "--element-type", help="only keys of this element type, e.g. FLOAT")
    report.add_argument("--threads", type=positive_int,
                        help="only the batch of this thread count")
    report.add_argument("--changed", action="store_true",
                        help="only the decisions that changed the value in use")
    add_json(report)
