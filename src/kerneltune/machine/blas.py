"""The BLAS libraries a process has loaded, as a profile's provenance records them.

BLAS thresholds (when a product goes to BLAS, how skinny a product may be) are
measured against one BLAS build: another library, version or kernel family
moves them. A profile records the calibrating process's libraries; import and
:func:`kerneltune.explain` compare them with this process's through
:func:`blas_difference`, the one rule for when a value may be wrong here. The
portable defaults assume a BLAS with kernels for the processor:
:func:`narrower_than` says when one runs kernels for fewer instructions than
they assume.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import archspec.cpu


def blas_of(thread_pools: Iterable[Mapping]) -> list[dict[str, object]]:
    """The BLAS libraries among threadpoolctl's pools: name, version, architecture, threads."""
    return [{"name": pool.get("internal_api"), "version": pool.get("version"),
             "architecture": pool.get("architecture"), "threads": pool.get("num_threads")}
            for pool in thread_pools if pool.get("user_api") == "blas"]


def current_blas() -> list[dict[str, object]]:
    """This process's BLAS libraries, as a profile's provenance records the calibrating one's."""
    from threadpoolctl import threadpool_info

    return blas_of(threadpool_info())


def blas_label(blas: Mapping[str, object]) -> str:
    """``openblas 0.3.27 (Zen)``: what identifies a BLAS build, threads aside."""
    return f"{blas.get('name')} {blas.get('version')} ({blas.get('architecture')})"


def blas_difference(machines: Iterable[Mapping[str, object]]) -> str | None:
    """Why values calibrated on ``machines`` (provenance records) may not hold here.

    None when the records name no BLAS or the same builds as this process has.
    """
    theirs = {blas_label(blas) for machine in machines for blas in machine.get("blas", ())}
    ours = {blas_label(blas) for blas in current_blas()}
    if not theirs or theirs == ours:
        return None
    return (f"calibrated with {', '.join(sorted(theirs))}; this process has "
            f"{', '.join(sorted(ours)) or 'no BLAS loaded'}")


#: OpenBLAS's kernel families (threadpoolctl's ``architecture``, lower case) as the archspec
#: targets whose instructions their kernels use; OPENBLAS_CORETYPE picks one, or OpenBLAS
#: picks the newest it knows of for the processor
OPENBLAS_TARGETS = {
    "prescott": "nocona", "core2": "core2", "penryn": "core2", "dunnington": "core2",
    "nehalem": "nehalem", "sandybridge": "sandybridge", "haswell": "haswell",
    "skylakex": "skylake_avx512", "cooperlake": "cascadelake",
    "sapphirerapids": "sapphirerapids", "barcelona": "k10", "bulldozer": "bulldozer",
    "piledriver": "piledriver", "steamroller": "steamroller", "excavator": "excavator",
    "zen": "zen",
}


#: what the portable defaults of a variant that is no archspec target assume of BLAS's
#: kernels: the baseline's meet BLAS where kernels of 256-bit vectors overtake its SSE2 paths,
#: which the Core and AMD processors since 2011 run (not every Pentium, Celeron or Atom;
#: docs/kernels.md, "A BLAS behind the processor")
ASSUMED_FEATURES = {"baseline": frozenset({"avx"})}


def narrower_than(blas: Mapping[str, object], variant: str) -> bool:
    """Whether ``blas`` (a :func:`blas_of` record) runs kernels for fewer instructions than
    ISA variant ``variant``'s portable defaults assume: an OpenBLAS whose kernel family (its
    own choice or OPENBLAS_CORETYPE's) lacks a feature of ``variant``'s archspec target, or
    of :data:`ASSUMED_FEATURES` for a variant that is none. False for what this cannot
    tell: another library, an unknown family, a variant neither names.
    """
    architecture = blas.get("architecture")
    target = (OPENBLAS_TARGETS.get(architecture.lower())
              if blas.get("name") == "openblas" and isinstance(architecture, str) else None)
    assumed = ASSUMED_FEATURES.get(variant) or (
        archspec.cpu.TARGETS[variant].features if variant in archspec.cpu.TARGETS else None)
    if target is None or assumed is None:
        return False
    return not assumed <= archspec.cpu.TARGETS[target].features
