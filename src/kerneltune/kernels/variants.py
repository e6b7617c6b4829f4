"""Which compiled ISA variant of the kernels this process runs, and importing its modules.

The build compiles every pythran kernel once per ISA variant into
``kerneltune.kernels._variants.<variant>`` (``baseline`` everywhere; archspec's ``x86_64_v3``
and ``x86_64_v4`` on x86_64). The variant is chosen from the processor descriptor, never by
trying: code compiled for an instruction set the processor lacks raises no exception, it
kills the process with SIGILL at its first call (possibly already in a static initialiser at
import).

Every variant name but ``baseline`` is an archspec target, so what a variant requires and how
variants rank come from the same archspec data that gave the build its compiler flags; a new
variant needs no table here. ``baseline`` is the build family's root target (x86_64,
aarch64): it runs on any processor the package installs on.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Iterable
from types import ModuleType

import archspec.cpu

from kerneltune.errors import KernelTuningError, UnknownKernelError
from kerneltune.machine.descriptor import CpuDescriptor
from kerneltune.machine.detect import host_cpu_descriptor

__all__ = [
    "BASELINE",
    "ISA_ENVIRONMENT_VARIABLE",
    "installed_variants",
    "load_module",
    "possible_variants",
    "requested_variant",
    "required_features",
    "select_variant",
    "selected_variant",
    "variant_architecture",
]

BASELINE = "baseline"
#: Forces one installed variant (e.g. ``baseline`` to compare against, or to rule out a
#: miscompiled variant) instead of the best one the processor supports.
ISA_ENVIRONMENT_VARIABLE = "KERNELTUNE_ISA"
VARIANTS_PACKAGE = "kerneltune.kernels._variants"


def _manifest() -> ModuleType | None:
    """The build's generated ``_variants`` package (VARIANTS, KERNELS); None if not compiled."""
    try:
        return importlib.import_module(VARIANTS_PACKAGE)
    except ModuleNotFoundError as exc:
        if exc.name != VARIANTS_PACKAGE:
            raise
        return None


def installed_variants() -> tuple[str, ...]:
    """The ISA variants this installation was built with, in build order.

    Empty when the kernels were never compiled (a source checkout on ``sys.path``).
    """
    manifest = _manifest()
    return () if manifest is None else tuple(manifest.VARIANTS)


def _installed_kernels() -> tuple[str, ...]:
    manifest = _manifest()
    return () if manifest is None else tuple(manifest.KERNELS)


def _is_known(variant: str) -> bool:
    return variant == BASELINE or variant in archspec.cpu.TARGETS


def possible_variants() -> frozenset[str]:
    """Every name a variant of this library can have, built here or not: baseline and the
    archspec targets."""
    return frozenset({BASELINE, *archspec.cpu.TARGETS})


def _unknown(variant: str, valid: Iterable[str]) -> KernelTuningError:
    return KernelTuningError(
        f"unknown ISA variant {variant!r}: expected {BASELINE!r} or an archspec target; "
        f"installed variants: {_listed(valid)}"
    )


def _target(variant: str) -> archspec.cpu.Microarchitecture | None:
    """The archspec target of ``variant``: None for baseline; unknown names raise."""
    if not _is_known(variant):
        raise _unknown(variant, installed_variants())
    return None if variant == BASELINE else archspec.cpu.TARGETS[variant]


@functools.cache
def required_features(variant: str) -> frozenset[str]:
    """The processor features (kernel cpuinfo flag names) code of ``variant`` may execute.

    A target's own features and its ancestors': archspec lists each generic level in full
    today, the union keeps that true for a target that lists only what it adds.
    """
    target = _target(variant)
    if target is None:
        return frozenset()
    return frozenset(target.features).union(*(parent.features for parent in target.ancestors))


def variant_architecture(variant: str) -> str | None:
    """The architecture family ``variant`` is compiled for; None (any) for baseline.

    baseline has no fixed family: it is compiled for the build's own family, which is the
    only one the package installs on, so it is the fallback for every processor.
    """
    target = _target(variant)
    return None if target is None else target.family.name


def _specificity(variant: str) -> int:
    """Depth in archspec's target tree: a variant outranks every variant it descends from."""
    target = _target(variant)
    return -1 if target is None else len(target.ancestors)


def _missing_features(processor: CpuDescriptor, variant: str) -> list[str]:
    """Required features of ``variant`` the processor does not report, judged as archspec does.

    The descriptor's flags are wrapped in an archspec target so that archspec's own
    equivalences apply: Linux prints SSE3 as ``pni``, never ``sse3``, and archspec adds
    ``sse3`` for any processor with ``ssse3``; a plain subset test would demote every real
    x86_64 host to baseline.
    """
    required = required_features(variant)
    if not required:
        return []
    flags = archspec.cpu.Microarchitecture(
        name=processor.architecture or "unknown",
        parents=[],
        vendor="generic",
        features=set(processor.features),
        compilers={},
    )
    return sorted(feature for feature in required if feature not in flags)


def _why_not(processor: CpuDescriptor, variant: str) -> str | None:
    """Why ``processor`` cannot run ``variant``; None when it can."""
    architecture = variant_architecture(variant)
    if architecture is not None and architecture != processor.architecture:
        found = processor.architecture or "unknown"
        return f"it is compiled for {architecture}, the processor's architecture is {found}"
    missing = _missing_features(processor, variant)
    if missing:
        return f"the processor lacks the features {', '.join(missing)}"
    return None


def _listed(variants: Iterable[str]) -> str:
    return ", ".join(variants) or "none"


def select_variant(
    processor: CpuDescriptor,
    available: Iterable[str] | None = None,
    forced: str | None = None,
) -> str:
    """The variant to run on ``processor``: the most specific available one it supports.

    ``available`` defaults to :func:`installed_variants`. ``forced`` (the value of
    ``KERNELTUNE_ISA``) picks exactly that variant, but only if it is available and the
    processor can run it: anything else raises :class:`KernelTuningError` naming the
    variant, the reason (missing features, architecture) and the installed variants,
    because falling back silently would hide the one thing forcing is for.
    """
    available = installed_variants() if available is None else tuple(available)
    if forced:
        if not _is_known(forced):
            raise _unknown(forced, available)
        if forced not in available:
            raise KernelTuningError(
                f"ISA variant {forced!r} is not installed; installed variants: {_listed(available)}"
            )
        reason = _why_not(processor, forced)
        if reason is not None:
            raise KernelTuningError(
                f"ISA variant {forced!r} cannot run on this processor: {reason}; "
                f"installed variants: {_listed(available)}"
            )
        return forced
    runnable = [
        variant
        for variant in available
        # A name this archspec does not know (a newer one built it) has unknown needs.
        if _is_known(variant) and _why_not(processor, variant) is None
    ]
    if not runnable:
        raise KernelTuningError(
            f"no installed ISA variant runs on this processor "
            f"({processor.architecture or 'unknown architecture'}); "
            f"installed variants: {_listed(available)}"
        )
    return max(runnable, key=lambda variant: (_specificity(variant), variant))


def requested_variant() -> str | None:
    """The variant forced by ``KERNELTUNE_ISA``; None when unset or empty."""
    value = os.environ.get(ISA_ENVIRONMENT_VARIABLE, "").strip().lower()
    return value or None


@functools.cache
def selected_variant() -> str:
    """The variant of this process, chosen once: every kernel and tuning key must agree on it.

    It is the tuning key's ``implementation``, so profiles resolve per variant. It is chosen
    for the host's processor, never ``KERNELTUNE_CPU_DESCRIPTOR``'s: that one simulates another
    processor for profile resolution, and code compiled for a processor this one is not would
    die with SIGILL.
    """
    forced = requested_variant()
    try:
        return select_variant(host_cpu_descriptor(), forced=forced)
    except KernelTuningError as exc:
        if forced is None:
            raise
        raise KernelTuningError(f"{ISA_ENVIRONMENT_VARIABLE}={forced}: {exc}") from None


@functools.cache
def load_module(name: str, variant: str | None = None) -> ModuleType:
    """The compiled kernel module ``name`` of ``variant`` (default: :func:`selected_variant`).

    An explicit variant is checked like a forced one against this process's processor
    before it is imported, since importing it may already execute its instructions.
    """
    if variant is None:
        variant = selected_variant()
    else:
        select_variant(host_cpu_descriptor(), forced=variant)
    kernels = _installed_kernels()
    if name not in kernels:
        raise UnknownKernelError(
            f"no compiled kernel module {name!r}; installed: {_listed(kernels)}"
        )
    return importlib.import_module(f"{VARIANTS_PACKAGE}.{variant}.{name}")
