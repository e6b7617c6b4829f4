"""``kerneltune profiles``: export, bake, import, explain, validate and verify profiles."""

from __future__ import annotations

import argparse
import os

from .common import (
    FAILURE,
    UsageError,
    add_command,
    add_json,
    add_library,
    add_option,
    add_threads,
    print_json,
    table,
    warn,
)

#: the gaps a bake prints for a person; --json has all of them
SHOWN_GAPS = 10


def _export(args: argparse.Namespace) -> int:
    from ..calibration.curves import read_calibration_reports
    from ..profiles.export import export_deployment_profile
    from ..profiles.files import write_deployment_profile

    reports = [batch for path in args.reports for batch in read_calibration_reports(path)]
    profile = export_deployment_profile(reports, args.selector, args.name, args.priority)
    written = write_deployment_profile(profile, args.output)
    if args.json:
        print_json(profile.to_dict())
    print(f"profile {profile.name!r} written to {written} ({len(profile.entries)} entries)")
    return 0


def _bake(args: argparse.Namespace) -> int:
    from ..pipeline import bake
    from ..pipeline.baking import summarise_gaps
    from ..tuning.keyfilter import KeyFilter

    scope = KeyFilter.of(args.library, tuple(args.kernel or ()), (),
                         tuple(args.element_type or ()))
    report = bake(args.profiles, args.output, require_complete=args.require_complete,
                  expected_selectors=args.expect or (), reports=args.reports or (),
                  scope=scope)
    if args.json:
        print_json(report.to_dict())
    else:
        for merge in report.merges:
            print(merge.describe())
        for name, keys in report.coverage.items():
            covered = sum(1 for row in keys.values() if row["covered"])
            print(f"{name}: {covered} of {len(keys)} keys covered")
        gaps = list(report.gaps) if args.verbose else summarise_gaps(report.gaps)
        for gap in gaps[:None if args.verbose else SHOWN_GAPS]:
            print(f"  gap: {gap}")
        if len(gaps) > SHOWN_GAPS and not args.verbose:
            print(f"  ... and {len(gaps) - SHOWN_GAPS} more (--verbose lists every gap)")
    for problem in report.problems:
        warn("profiles bake", problem)
    if not report.written:
        warn("profiles bake", f"nothing written to {args.output}")
        return FAILURE
    if not args.json:
        print(f"written {args.output} (sha256 {report.digest})")
    return 0


def _imported(files: list[str], registry: object, as_json: bool, command: str,
              processor: object = None) -> tuple[int, object]:
    from ..profiles.importer import import_deployment_profiles
    from ..tuning.libraries import not_installed_lines

    report = import_deployment_profiles(files, registry=registry, processor=processor)
    if as_json:
        print_json(report.to_dict())
    for file in report.files:
        if not as_json:
            unread = (f", {len(file.unread)} profiles for other processors unread"
                      if file.unread else "")
            other = file.not_applicable - sum(file.not_installed.values())
            print(f"{file.path}: {file.status}, {file.imported} entries for this machine, "
                  f"{other} for other machines{unread}")
            for line in not_installed_lines(file.not_installed):
                print(f"  {line}")
        for line in (*file.problems, *file.warnings):
            warn(command, line)
    return (0 if all(file.status == "imported" for file in report.files) else FAILURE), report


def _validate(args: argparse.Namespace) -> int:
    from ..pipeline import validate_deployment_files

    # A registry of the libraries alone: what the files hold is checked against this
    # kerneltune, not against the profiles and cache this process started with.
    registry = _libraries_alone()
    report = validate_deployment_files(args.files, registry=registry,
                                       reports=args.reports or ())
    if args.json:
        print_json(report.to_dict())
    else:
        for file in report.files:
            print(f"{file.path}: {file.status}, {len(file.profiles)} profiles, "
                  f"{file.entries} entries checked")
        for merge in report.merges:
            print(merge.describe())
    for line in report.problems:
        warn("profiles validate", line)
    return 0 if report.ok else FAILURE


def _import(args: argparse.Namespace) -> int:
    from ..machine.detect import get_cpu_descriptor
    from ..profiles.environment import ENVIRONMENT_VARIABLE
    from ..profiles.importer import profile_paths
    from ..tuning.explanation import Explanation, explain
    from ..tuning.registry import default_registry

    files = args.files
    if not files:
        spec = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
        if not spec:
            raise UsageError(f"give the files to import, or set {ENVIRONMENT_VARIABLE} as "
                             f"the processes that use them do")
        files = [str(path) for path in profile_paths(spec)]
    status, report = _imported(files, default_registry, args.json, "profiles import",
                               get_cpu_descriptor())
    if not args.json:
        names = {file.name for file in report.files if file.imported}
        everything = explain(threads=args.threads)
        rows = tuple(row for row in everything.keys
                     if row.resolution.source.profile_name in names)
        print(f"{len(rows)} keys resolve from them here:")
        print(Explanation(everything.execution, rows).table(changed_only=args.changed))
    return status


def _explain(args: argparse.Namespace) -> int:
    import dataclasses

    from .. import startup_report
    from ..tuning.explanation import explain
    from ..tuning.registry import default_registry

    if args.descriptor is None:
        registry, imported = default_registry, startup_report().profiles
    else:
        registry, imported = _described_registry(args.descriptor)
    keys = [key for key in registry.snapshot().keys()  # noqa: SIM118
            if args.library is None or key.library == args.library]
    missing = {} if imported is None else imported.not_installed
    if args.library is not None:
        missing = {name: count for name, count in missing.items() if name == args.library}
        if not keys and not missing:
            raise UsageError(f"--library {args.library}: no key of that library is registered "
                             f"and no deployment file holds one (kerneltune libraries lists "
                             f"the libraries)")
    explanation = explain(descriptor=args.descriptor, threads=args.threads, registry=registry,
                          keys=keys)
    explanation = dataclasses.replace(explanation, not_installed=missing)
    if args.json:
        print_json(explanation.to_dict())
    else:
        print(explanation.table(changed_only=args.changed))
    return 0


def _described_registry(descriptor: str) -> tuple[object, object]:
    """What a process on ``descriptor``'s processor would have registered at start-up (the
    libraries and the deployment files, whose profiles for that processor this one left
    unread; the user cache is this machine's), and the import's report (None: no files)."""
    from ..machine.descriptor_files import read_cpu_descriptor
    from ..profiles.environment import ENVIRONMENT_VARIABLE
    from ..profiles.importer import import_deployment_profiles, profile_paths

    registry, report = _libraries_alone(), None
    spec = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if spec:
        report = import_deployment_profiles(profile_paths(spec), registry=registry,
                                            processor=read_cpu_descriptor(descriptor))
        for line in report.problems:
            warn("profiles explain", line)
    return registry, report


def _libraries_alone() -> object:
    """A registry of the kernel libraries ``import kerneltune`` loads, and nothing else."""
    from ..tuning.libraries import load_kernel_libraries
    from ..tuning.registry import KernelTuningRegistry

    registry = KernelTuningRegistry()
    load_kernel_libraries(registry)
    return registry


def _verify(args: argparse.Namespace) -> int:
    from ..profiles.verification import DEFAULTS, verify_deployment_profiles

    report = verify_deployment_profiles(args.files or None, threads=args.threads,
                                        time_budget=args.time_budget, margin=args.margin,
                                        force=args.force)
    if args.json:
        print_json(report.to_dict())
    else:
        rows = [(row.key, row.outcome, "yes" if row.measured else "no",
                 ", ".join(f"{name}={value}" for name, value in row.shipped.items()), row.reason)
                for row in report.keys if row.outcome != DEFAULTS]
        if rows:
            print(table(rows, ("key", "outcome", "measured", "shipped", "why")))
        print(report.summary())
    for line in (*report.problems, *report.warnings):
        warn("profiles verify", line)
    return 0 if all(file.status == "imported" for file in report.files) else FAILURE


def _add_changed(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--changed", action="store_true",
                        help="only the keys whose values differ from the portable defaults, "
                             "each value with its default")


def _add_reports(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reports", nargs="+", action="extend", metavar="JSON",
                        help="calibration reports (calibrate --profile writes NAME.reports.json "
                             "beside each profile, found without this) by which profiles of one "
                             "selector are merged")


def register(commands: argparse._SubParsersAction) -> None:
    group = commands.add_parser(
        "profiles", help="export, bake, import, explain, validate and verify deployment "
                         "profiles",
        description="Deployment profiles: calibrations bound to a processor selector, merged "
                    "into one deployment file an image ships (docs/design.md).")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")

    export = add_command(
        actions, "export", "turn calibration reports (calibrate --report) into a profile "
                           "bound to a selector", _export,
        examples=["kerneltune calibrate --threads 1 --threads 2 --report here.json",
                  "kerneltune profiles export here.json --selector zen4 --name zen4-c7a "
                  "--output profiles/zen4-c7a.yaml"])
    export.add_argument("reports", nargs="+", help="calibration report files (JSON)")
    export.add_argument("--selector", required=True,
                        help="a selector file or a shipped selector's name")
    export.add_argument("--name", required=True, help="the profile's name")
    export.add_argument("--output", required=True, help="the profile file to write")
    export.add_argument("--priority", type=int, default=0,
                        help="breaks ties with profiles of equal specificity "
                             "(default: %(default)s)")
    add_json(export)

    baking = add_command(
        actions, "bake", "merge profiles into one deployment file, checking coverage", _bake,
        description="Merge profiles into one deployment file, checking every entry and the "
                    "coverage. Profiles of one selector (runs of one machine type: the same "
                    "selector, priority, ISA variants and thread ranges) are merged by the "
                    "evidence of their calibration reports, NAME.reports.json beside each "
                    "profile or given with --reports: the value the machines agree on, else "
                    "one whose advantage the pooled samples confirm, else the value in use.",
        examples=["kerneltune profiles bake profiles/*.yaml --output image/kerneltune.yaml",
                  "kerneltune profiles bake profiles/*.yaml --output d.yaml "
                  "--require-complete --expect zen4 --expect neoverse_v1",
                  "kerneltune profiles bake zen3-1.yaml zen3-2.yaml --reports "
                  "reports/*.json --output d.yaml"])
    baking.add_argument("profiles", nargs="+", help="profile files (or deployment files)")
    baking.add_argument("--output", required=True, help="the deployment file to write")
    baking.add_argument("--require-complete", action="store_true",
                        help="fail on any coverage gap or expected selector without a profile")
    baking.add_argument("--expect", action="append",
                        help="a selector (file or name) that must have a profile (repeatable)")
    baking.add_argument("--kernel", action="append",
                        help="cover only this kernel, e.g. Add (repeatable): what the farm "
                             "calibrates")
    add_option(baking, "--element-type", action="append",
               help="cover only this element type, e.g. FLOAT (repeatable)")
    add_library(baking)
    baking.add_argument("--verbose", action="store_true",
                        help="list every gap, not a line per profile and kernel")
    _add_reports(baking)
    add_json(baking)

    importing = add_command(
        actions, "import", "import profile or deployment files on this machine, as a process "
                           "given KERNELTUNE_DEPLOYMENT_PROFILES does, and show what every "
                           "kernel then gets", _import,
        examples=["kerneltune profiles import image/kerneltune.yaml"])
    importing.add_argument("files", nargs="*",
                           help="profile or deployment files (default: those "
                                "KERNELTUNE_DEPLOYMENT_PROFILES names)")
    add_threads(importing, "the threads of the process to show")
    _add_changed(importing)
    add_json(importing)

    validate = add_command(
        actions, "validate", "check profile or deployment files against this kerneltune; exit "
                             "1 on any problem (an image build step)", _validate,
        examples=["kerneltune profiles validate image/kerneltune.yaml || exit 1"])
    validate.add_argument("files", nargs="+", help="profile or deployment files")
    _add_reports(validate)
    add_json(validate)

    explaining = add_command(
        actions, "explain", "what every kernel gets on a machine, and why", _explain,
        examples=["kerneltune profiles explain",
                  "kerneltune cpu > m.yaml; kerneltune profiles explain --descriptor m.yaml "
                  "--threads 8"])
    explaining.add_argument("--descriptor",
                            help="a processor descriptor file (default: this machine)")
    add_threads(explaining)
    add_library(explaining)
    _add_changed(explaining)
    add_json(explaining)

    verify = add_command(
        actions, "verify", "measure the files' values in use here against the defaults, once "
                           "per machine and file, and demote in the user cache those slower "
                           "here (a first-boot step)", _verify,
        examples=["kerneltune profiles verify /opt/kerneltune/deployment.yaml",
                  "KERNELTUNE_DEPLOYMENT_PROFILES=d.yaml kerneltune profiles verify --threads 2 "
                  "--time-budget 60"])
    verify.add_argument("files", nargs="*",
                        help="profile or deployment files (default: those "
                             "KERNELTUNE_DEPLOYMENT_PROFILES names)")
    add_threads(verify, "the threads of the execution verified")
    verify.add_argument("--time-budget", type=float, default=30.0, metavar="SECONDS",
                        help="stop measuring after this long; the keys left stay unverified "
                             "(default: %(default)s)")
    verify.add_argument("--margin", type=float, default=0.05,
                        help="how much faster the defaults must be, confirmed at 99%%, to "
                             "demote a value "
                             "(default: %(default)s)")
    verify.add_argument("--force", action="store_true",
                        help="measure again the keys verified or demoted before")
    add_json(verify)
