"""``kerneltune cpu``: this processor's descriptor, the ISA variant it runs, its selectors,
and the OpenMP wait policy of this environment; with ``--selector``, its own selector file."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from ..errors import KernelTuningError
from ..kernels.variants import installed_variants, select_variant
from ..machine.descriptor import CpuDescriptor
from ..machine.descriptor_files import FILE_FORMAT, SCHEMA_VERSION
from ..machine.detect import current_execution, detect_cpu_descriptor
from ..machine.openmp import wait_policy
from ..machine.selector_files import processor_selector, selector_text, shipped_selectors
from .common import UsageError, add_command, add_json, print_json


def _variant(processor: CpuDescriptor) -> str | None:
    try:
        return select_variant(processor)
    except KernelTuningError:  # nothing installed runs there: say so rather than fail
        return None


def _cpu(args: argparse.Namespace) -> None:
    copied = args.root is not None or args.machine is not None
    if args.root is not None and not (Path(args.root) / "proc" / "cpuinfo").is_file():
        raise UsageError(f"--root {args.root}: no proc/cpuinfo there to detect a processor "
                         f"from (a copied sysroot holds proc/ and sys/)")
    if copied:
        processor = detect_cpu_descriptor(args.root or "/", args.machine)
    else:
        processor = current_execution().processor
    if args.selector:
        print(selector_text(processor_selector(processor)), end="")
        return
    # this process's environment, which says nothing of a copied machine's
    policy = None if copied else wait_policy()
    document = {"format": FILE_FORMAT, "schema_version": SCHEMA_VERSION, **processor.to_dict()}
    variant = _variant(processor)
    selectors = [named for named in shipped_selectors()
                 if named.selector.matches_processor(processor)]
    if args.json:
        print_json({"descriptor": document, "isa_variant": variant,
                    "installed_variants": list(installed_variants()),
                    "selectors": [named.name for named in selectors],
                    "wait_policy": None if policy is None else policy.as_dict()})
        return
    # Comments, so that the output stays a descriptor file KERNELTUNE_CPU_DESCRIPTOR reads.
    print(yaml.safe_dump(document, sort_keys=False), end="")
    print(f"# ISA variant: {variant or 'none of the installed ones runs here'} "
          f"(installed: {', '.join(installed_variants()) or 'none'})")
    print(f"# shipped selectors matching: {', '.join(n.name for n in selectors) or 'none'}")
    if policy is not None:
        print(f"# OpenMP wait policy: {policy.summary()}")


def register(commands: argparse._SubParsersAction) -> None:
    cpu = add_command(
        commands, "cpu", "print this processor's descriptor, its ISA variant and the shipped "
                         "selectors it matches", _cpu,
        examples=["kerneltune cpu > this-machine.yaml   # a descriptor file, read back by "
                  "KERNELTUNE_CPU_DESCRIPTOR",
                  "kerneltune cpu --json",
                  "kerneltune cpu --selector > my-machine.yaml   # profiles for processors "
                  "like this one",
                  "kerneltune cpu --root sysroot/ --machine aarch64   # a copied machine"])
    cpu.add_argument("--root", help="detect from a copied sysroot instead of this machine")
    cpu.add_argument("--machine", help="architecture of --root (x86_64, aarch64)")
    output = cpu.add_mutually_exclusive_group()
    output.add_argument("--selector", action="store_true",
                        help="print instead the selector file of this processor's vendor, family "
                             "and model (what nox -s calibrate binds a profile to by default)")
    add_json(output)
