"""``kerneltune libraries``: the kernel libraries installed, and what each registered here."""

from __future__ import annotations

import argparse

from .common import FAILURE, add_command, add_json, print_json, table, warn


def _libraries(args: argparse.Namespace) -> int:
    from .. import startup_report

    loads = startup_report().libraries
    if args.json:
        print_json({"libraries": [load.to_dict() for load in loads]})
    else:
        rows = [(load.name, load.version or "-", load.distribution or "-", load.status,
                 ",".join(load.implementations) or "-", load.keys, load.calibratable)
                for load in loads]
        print(table(rows, ("library", "version", "distribution", "status", "implementations",
                           "keys", "calibratable")))
    for load in loads:
        if load.problem:
            warn("libraries", f"{load.name} (distribution {load.distribution}): {load.problem}")
    return FAILURE if any(load.problem for load in loads) else 0


def register(commands: argparse._SubParsersAction) -> None:
    libraries = add_command(
        commands, "libraries", "list the kernel libraries installed, their versions and what "
                               "each registered for this processor", _libraries,
        description="List every kernel library installed (entry points of the group "
                    "kerneltune.kernel_libraries) with its version, distribution, load status, "
                    "implementations for this processor, tuning keys and calibratable keys. "
                    "KERNELTUNE_KERNEL_LIBRARIES=name1,name2 (or none) restricts which load; "
                    "the others are listed as 'not selected'. Exit status 1 when one failed "
                    "to load.",
        examples=["kerneltune libraries",
                  "kerneltune libraries --json",
                  "KERNELTUNE_KERNEL_LIBRARIES=kerneltune_cpu kerneltune libraries"])
    add_json(libraries)
