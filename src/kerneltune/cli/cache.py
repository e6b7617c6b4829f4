"""``kerneltune cache``: where the calibration cache is, what it holds, load, remove, set."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence

from ..cache.entries import CacheEntry
from ..cache.kernel_tuning_cache import (
    inspect_kernel_tuning_cache,
    load_kernel_tuning_cache,
    remove_kernel_tuning_cache,
)
from ..cache.location import DISABLED, ENVIRONMENT_VARIABLE, cache_path
from ..errors import UnknownKernelError
from ..tuning.registry import default_registry
from .common import (
    FAILURE,
    add_command,
    add_json,
    add_library,
    add_option,
    add_threads,
    assignment,
    parse_value,
    print_json,
    require,
    table,
    warn,
)

#: statuses of a cache that can be read (a missing or disabled cache is not a failure)
_READABLE = ("ok", "not_found", "disabled")


def _where(path: str | None) -> str:
    return path or f"none: persistence is off ({ENVIRONMENT_VARIABLE}={DISABLED})"


def _entries(entries: Iterable[CacheEntry], changed_only: bool = False) -> str:
    rows = []
    for entry in entries:
        defaults = _defaults(entry)
        differing = _differing(entry, defaults)
        shown = {name: value for name, value in entry.values.items()
                 if not changed_only or name in differing or not defaults}
        if shown:
            rows.append(("-" if entry.index is None else entry.index, entry.key,
                         entry.execution.effective_threads, entry.source,
                         ", ".join(f"{name}={value}" + (f" (default {defaults[name]})"
                                                        if changed_only and name in defaults
                                                        else "")
                                   for name, value in shown.items())))
    return table(rows, ("entry", "key", "threads", "source", "values"))


def _differing(entry: CacheEntry, defaults: dict[str, object]) -> set[str]:
    """The parameters whose cached value is not the portable default."""
    return {name for name, value in entry.values.items() if defaults.get(name, value) != value}


def _defaults(entry: CacheEntry) -> dict[str, object]:
    """The portable defaults of the entry's key (none when no schema is registered for it)."""
    try:
        return dict(default_registry.snapshot().schema(entry.key).default_values())
    except UnknownKernelError:
        return {}


def _print(args: argparse.Namespace, report, summary: str = "",
           entries: Sequence[CacheEntry] = (), rejected: Sequence[str] = ()) -> None:
    """A cache report: JSON, or its status line and entries; the entries it left out and
    its problems go to stderr."""
    if args.json:
        print_json(report.to_dict())
    else:
        if entries:  # a listing ends with its summary
            print(f"{_where(report.path)}: {report.status}")
            print(_entries(entries, getattr(args, "changed", False)))
            if summary:
                print(summary.removeprefix(", "))
        else:
            print(f"{_where(report.path)}: {report.status}{summary}")
    command = f"cache {args.action}"
    for label in rejected:
        for entry in getattr(report, label):
            warn(command, f"{label} entry {entry.index}: {entry.reason}")
    for problem in report.problems:
        warn(command, problem)


def _path(args: argparse.Namespace) -> int:
    target = cache_path(args.path)
    if args.json:
        print_json({"path": None if target is None else str(target),
                    "exists": target is not None and target.is_file()})
    else:
        print(_where(None if target is None else str(target)))
    return 0


def _inspect(args: argparse.Namespace) -> int:
    inspection = inspect_kernel_tuning_cache(args.path)
    changed = sum(1 for entry in inspection.entries if _differing(entry, _defaults(entry)))
    _print(args, inspection, f", {len(inspection.entries)} entries ({changed} with values "
                             f"other than the defaults), {len(inspection.invalid)} invalid, "
                             f"{len(inspection.duplicate)} duplicate, "
                             f"{len(inspection.problems)} problems",
           inspection.entries, ("invalid", "duplicate"))
    return 0 if inspection.status in _READABLE else FAILURE


def _load(args: argparse.Namespace) -> int:
    report = load_kernel_tuning_cache(path=args.path)
    _print(args, report, f", {len(report.loaded)} entries published for this processor, "
                         f"{len(report.incompatible)} for others, {len(report.missing)} keys "
                         f"without an entry for this execution",
           rejected=("stale", "invalid", "duplicate"))
    return 0 if report.status in ("loaded", *_READABLE) else FAILURE


def _remove(args: argparse.Namespace) -> int:
    report = remove_kernel_tuning_cache(args.path)
    _print(args, report)
    return 0 if report.status in ("removed", "not_found", "disabled") else FAILURE


def _set(args: argparse.Namespace) -> int:
    from ..calibration.parameters import set_kernel_tuning_parameters
    from ..machine.detect import current_execution

    require(args, "--element-type")
    values = {name: parse_value(text) for name, text in args.values}
    report = set_kernel_tuning_parameters(
        args.kernel, args.element_type, values, args.implementation, args.abi, args.path,
        load=False, library=args.library, execution=current_execution(args.threads))
    _print(args, report, entries=(*report.added, *report.replaced))
    return 0 if report.status == "updated" else FAILURE


def register(commands: argparse._SubParsersAction) -> None:
    group = commands.add_parser(
        "cache", help="the calibration cache: path, inspect, load, remove, set",
        description="The calibration cache: one file per user (KERNELTUNE_CACHE names "
                    "another, KERNELTUNE_CACHE=off turns it off) that every process loads "
                    "at import.")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, summary: str, run, examples: list[str]) -> argparse.ArgumentParser:
        parser = add_command(actions, name, summary, run, examples=examples)
        parser.add_argument("--path", help="this cache file instead of the user's")
        add_json(parser)
        return parser

    action("path", "print the cache file this process uses", _path,
           ["kerneltune cache path", "KERNELTUNE_CACHE=/srv/tuning.yaml kerneltune cache path"])
    inspecting = action("inspect", "list what the cache holds, without publishing anything; "
                                   "exit 1 when the file cannot be read", _inspect,
                        ["kerneltune cache inspect", "kerneltune cache inspect --changed",
                         "kerneltune cache inspect --path farm.yaml --json"])
    inspecting.add_argument("--changed", action="store_true",
                            help="only the values that differ from the portable defaults, "
                                 "each with its default")
    action("load", "load the cache as a process does at import, and report what it "
                   "published and left out", _load,
           ["kerneltune cache load --path farm.yaml"])
    action("remove", "delete the cache file under its lock (later processes start from the "
                     "profiles and defaults)", _remove,
           ["kerneltune cache remove"])
    setting = action(
        "set", "persist values of one kernel for this execution, by hand; they are checked "
               "against its schema first", _set,
        ["kerneltune cache set --kernel Add --element-type FLOAT "
         "parallel.minimum_elements=65536",
         "kerneltune cache set --kernel Gemm --element-type FLOAT --threads 8 "
         "algorithm.tile_m=96"])
    setting.add_argument("--kernel", required=True, help="the kernel, e.g. Add or Gemm")
    add_library(setting)
    add_option(setting, "--element-type", help="the element type, e.g. FLOAT (required)")
    add_option(setting, "--implementation",
               help="the implementation, when several are registered")
    setting.add_argument("--abi", type=int, help="the tuning ABI, when several are registered")
    add_threads(setting)
    setting.add_argument("values", nargs="+", type=assignment, metavar="NAME=VALUE")
