"""Print the compiler flags of each ISA variant, from archspec, for meson.build.

meson.build asks, for its C++ compiler and the host CPU family:

    python tools/isa_flags.py COMPILER VERSION FAMILY VARIANT...

and reads one line `<variant><TAB><flags>` per variant. baseline takes the flags of the family's
root target (x86_64: -march=x86-64 -mtune=generic), or none where archspec has none (an
unknown family, compiler or version): it must build everywhere. A named variant without
flags is an error (exit status 1): it would be baseline code under a name the loader ranks
higher.
"""

from __future__ import annotations

import sys

import archspec.cpu

BASELINE = "baseline"


def variant_flags(compiler: str, version: str, family: str, variant: str) -> str:
    """archspec's optimisation flags of VARIANT; SystemExit for a named variant without any."""
    target = archspec.cpu.TARGETS.get(family if variant == BASELINE else variant)
    try:
        flags = target.optimization_flags(compiler, version) if target else ""
    except Exception as error:  # a compiler archspec knows, at a version it rejects
        if variant != BASELINE:
            sys.exit(f"no {compiler} {version} flags for ISA variant {variant}: {error}")
        flags = ""
    if not flags and variant != BASELINE:
        sys.exit(f"archspec has no {compiler} {version} flags for ISA variant {variant}")
    return flags


def main(argv: list[str]) -> None:
    compiler, version, family, *variants = argv
    for variant in variants:
        print(variant + "\t" + variant_flags(compiler, version, family, variant))


if __name__ == "__main__":
    main(sys.argv[1:])
