"""A benchmark's processes on the instructions of a processor of an ISA variant's level.

The peers pick their kernels from CPUID when they load: onnxruntime's MLAS and numpy's
OpenBLAS would run AVX-512 kernels against kerneltune's ``x86_64_v3`` variant on an
AVX-512 machine, a pairing no user of that variant meets. Where Linux and the processor
support CPUID faulting, a preloaded library (``cpuid_mask.c``, compiled here with the C
compiler that built Python) hides the features a processor of the variant's level lacks,
so every runtime in the benchmark's processes, kerneltune's BLAS included, runs as on such
a processor. The baseline's level is ``x86_64_v2``: numpy 2 needs it. The dynamic loader
picks glibc's own string routines before the mask holds, on the full processor.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sysconfig
import tempfile
from pathlib import Path

#: the level of the processors each variant below the machine's own runs on
LEVELS = {"baseline": "x86_64_v2", "x86_64_v3": "x86_64_v3"}
#: /proc/cpuinfo feature name -> (CPUID leaf, subleaf or None for any, register, bit), for
#: the features beyond x86_64_v2 that select a library's kernels
BITS = {
    "fma": (0x1, None, "ecx", 12), "movbe": (0x1, None, "ecx", 22),
    "avx": (0x1, None, "ecx", 28), "f16c": (0x1, None, "ecx", 29),
    "bmi1": (0x7, 0, "ebx", 3), "avx2": (0x7, 0, "ebx", 5), "bmi2": (0x7, 0, "ebx", 8),
    "avx512f": (0x7, 0, "ebx", 16), "avx512dq": (0x7, 0, "ebx", 17),
    "avx512ifma": (0x7, 0, "ebx", 21), "avx512pf": (0x7, 0, "ebx", 26),
    "avx512er": (0x7, 0, "ebx", 27), "avx512cd": (0x7, 0, "ebx", 28),
    "avx512bw": (0x7, 0, "ebx", 30), "avx512vl": (0x7, 0, "ebx", 31),
    "avx512vbmi": (0x7, 0, "ecx", 1), "avx512_vbmi2": (0x7, 0, "ecx", 6),
    "vaes": (0x7, 0, "ecx", 9), "vpclmulqdq": (0x7, 0, "ecx", 10),
    "avx512_vnni": (0x7, 0, "ecx", 11), "avx512_bitalg": (0x7, 0, "ecx", 12),
    "avx512_vpopcntdq": (0x7, 0, "ecx", 14),
    "avx512_4vnniw": (0x7, 0, "edx", 2), "avx512_4fmaps": (0x7, 0, "edx", 3),
    "avx512_vp2intersect": (0x7, 0, "edx", 8), "amx_bf16": (0x7, 0, "edx", 22),
    "avx512_fp16": (0x7, 0, "edx", 23), "amx_tile": (0x7, 0, "edx", 24),
    "amx_int8": (0x7, 0, "edx", 25),
    "avx_vnni": (0x7, 1, "eax", 4), "avx512_bf16": (0x7, 1, "eax", 5),
    "abm": (0x80000001, None, "ecx", 5), "xop": (0x80000001, None, "ecx", 11),
    "fma4": (0x80000001, None, "ecx", 16),
}
#: what the preloaded library reads, and what it sets when the mask holds
CLEAR_VARIABLE = "KERNELTUNE_BENCH_CPUID_CLEAR"
MASKED_VARIABLE = "KERNELTUNE_BENCH_CPUID_MASKED"
#: the level the benchmark's processes see, recorded with the results when the mask holds
LEVEL_VARIABLE = "KERNELTUNE_BENCH_INSTRUCTIONS"
SOURCE = Path(__file__).resolve().parent / "cpuid_mask.c"


def hidden(level: str) -> list[str]:
    """The features of :data:`BITS` a processor of ``level`` (an archspec target) lacks."""
    import archspec.cpu

    features = archspec.cpu.TARGETS[level].features
    return [name for name in BITS if name not in features]


def clear_masks(level: str) -> str:
    """The preloaded library's entries hiding :func:`hidden` ``(level)``."""
    masks: dict[tuple, int] = {}
    for name in hidden(level):
        leaf, subleaf, register, bit = BITS[name]
        masks[leaf, subleaf, register] = masks.get((leaf, subleaf, register), 0) | 1 << bit
    return ",".join(f"{leaf:#x}.{'' if subleaf is None else f'{subleaf}.'}{register}={mask:#x}"
                    for (leaf, subleaf, register), mask in masks.items())


def preloaded_library() -> Path | None:
    """The compiled ``cpuid_mask.c``, built once per source in the temporary directory; None
    (and why, printed) when it cannot be built."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    library = Path(tempfile.gettempdir()) / f"kerneltune-bench-cpuid-{digest}.so"
    if not library.exists():
        partial = library.with_name(f"{library.name}.{os.getpid()}")
        compiler = (sysconfig.get_config_var("CC") or "cc").split()
        try:
            subprocess.run([*compiler, "-O2", "-shared", "-fPIC", "-o", str(partial),
                            str(SOURCE)], check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as error:
            print(f"{SOURCE.name} did not build ({getattr(error, 'stderr', None) or error}): "
                  f"the peers run on every instruction this processor has")
            return None
        partial.replace(library)
    return library


def masked_environment(variant: str, own: str) -> dict[str, str]:
    """The variables that start a process on the instructions of ``variant``'s level: none
    for the machine's own variant ``own``, or off Linux on x86-64."""
    level = LEVELS.get(variant)
    if variant == own or level is None or os.uname()[::4] != ("Linux", "x86_64"):
        return {}
    library = preloaded_library()
    if library is None:
        return {}
    preload = " ".join(filter(None, (os.environ.get("LD_PRELOAD"), str(library))))
    return {"LD_PRELOAD": preload, CLEAR_VARIABLE: clear_masks(level), LEVEL_VARIABLE: level}


def warn_unmasked() -> None:
    """When a mask was asked for and does not hold (no CPUID faulting here), say so, and drop
    the level from the environment the results record."""
    if CLEAR_VARIABLE in os.environ and os.environ.get(MASKED_VARIABLE) != "1":
        print(f"this processor or kernel has no CPUID faulting: the peers run on every "
              f"instruction it has, not those of {os.environ.pop(LEVEL_VARIABLE, None)}")
