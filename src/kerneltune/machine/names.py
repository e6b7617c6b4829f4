"""Canonical spellings of processor names: vendors, architectures, microarchitectures, features.

Descriptors, selectors and files all meet on these spellings, so ``AuthenticAMD``
in /proc/cpuinfo, ``AMD`` in a hand-written selector and ``amd`` in a profile
are one vendor. The tables come from archspec where it has them (aarch64
implementer codes, microarchitecture names, feature names) so that kerneltune
knows exactly the processors archspec knows.
"""

from __future__ import annotations

import functools
import re

import archspec.cpu
from archspec.cpu.schema import TARGETS_JSON

#: x86 CPUID vendor strings; aarch64 implementer codes come from archspec.
X86_VENDOR_IDS = {
    "GenuineIntel": "intel",
    "AuthenticAMD": "amd",
    "HygonGenuine": "hygon",
    "CentaurHauls": "centaur",
    "  Shanghai  ": "zhaoxin",
    "VIA VIA VIA ": "via",
}

ARCHITECTURE_ALIASES = {
    "amd64": "x86_64",
    "x64": "x86_64",
    "x86-64": "x86_64",
    "intel64": "x86_64",
    "arm64": "aarch64",
    "armv8": "aarch64",
}


def _squash(name: str) -> str:
    """Lowercase without spaces, dashes, underscores and dots: ``Zen 4`` == ``zen4``."""
    return re.sub(r"[\s_.\-]", "", name.lower())


@functools.cache
def _vendor_table() -> dict[str, str]:
    table = {_squash(vid): name for vid, name in X86_VENDOR_IDS.items()}
    for code, name in TARGETS_JSON["conversions"]["arm_vendors"].items():
        table[code.lower()] = _squash(name)
        table[_squash(name)] = _squash(name)
    for name in X86_VENDOR_IDS.values():
        table[name] = name
    return table


def canonical_vendor(name: str) -> str | None:
    """``AuthenticAMD``/``AMD``/``amd`` -> ``amd``; ``0x41``/``ARM`` -> ``arm``; unknown -> None."""
    return _vendor_table().get(_squash(name)) or _vendor_table().get(name.strip().lower())


@functools.cache
def known_architectures() -> frozenset[str]:
    """Architecture families archspec knows (x86_64, aarch64, ppc64le, ...)."""
    return frozenset(str(target.family) for target in archspec.cpu.TARGETS.values())


def canonical_architecture(name: str) -> str | None:
    key = name.strip().lower()
    key = ARCHITECTURE_ALIASES.get(key, key)
    return key if key in known_architectures() else None


@functools.cache
def _microarchitecture_table() -> dict[str, str]:
    return {_squash(name): name for name in archspec.cpu.TARGETS}


def canonical_microarchitecture(name: str) -> str | None:
    """``Zen 4`` -> ``zen4``, ``Sapphire Rapids`` -> ``sapphirerapids``; unknown -> None."""
    return _microarchitecture_table().get(_squash(name))


@functools.cache
def known_features() -> frozenset[str]:
    """Every feature some archspec microarchitecture requires."""
    features: set[str] = set()
    for target in archspec.cpu.TARGETS.values():
        features.update(target.features)
    return frozenset(features)


def canonical_feature(name: str) -> str | None:
    """Lowercase feature name if archspec knows it (``sse4.1`` is spelt ``sse4_1``)."""
    key = name.strip().lower().replace(".", "_")
    return key if key in known_features() else None
