"""The ``kerneltune`` command line.

Each subcommand is a thin shell over the public API, so anything it prints can
also be had from Python; errors are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import yaml

from . import __version__
from .cpu import FILE_FORMAT, SCHEMA_VERSION, current_execution, detect_cpu_descriptor
from .errors import KernelTuningError


def _cpu(args: argparse.Namespace) -> None:
    if args.root is not None or args.machine is not None:
        processor = detect_cpu_descriptor(args.root or "/", args.machine)
    else:
        processor = current_execution().processor
    document = {"format": FILE_FORMAT, "schema_version": SCHEMA_VERSION, **processor.to_dict()}
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(yaml.safe_dump(document, sort_keys=False), end="")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kerneltune", description="Processor-aware tuning of compute-kernel thresholds.")
    parser.add_argument("--version", action="version", version=f"kerneltune {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    cpu = commands.add_parser(
        "cpu", help="print this processor's descriptor (KERNELTUNE_CPU_DESCRIPTOR reads it back)")
    cpu.add_argument("--root", help="detect from a copied sysroot instead of this machine")
    cpu.add_argument("--machine", help="architecture of --root (x86_64, aarch64)")
    cpu.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    cpu.set_defaults(run=_cpu)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        args.run(args)
    except KernelTuningError as error:
        print(f"kerneltune {args.command}: {error}", file=sys.stderr)
        return 2
    return 0
