"""The deployment image's bake step: the farm's profiles merged into one checked file.

Every entry of every profile is checked against the kernel library's schemas
(an entry for an ISA variant this process did not load is checked against the
same kernel's schema of the variant it did: the typed configs are the same);
two profiles whose selectors can match one processor at the same tier and
priority, for one key and thread count, are refused, naming both files and an
example processor; the coverage table says, per profile, which keys and thread
ranges it covers and where the gaps are. Any problem fails the bake and writes
nothing; otherwise one deterministic, read-only deployment file is written.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..machine.selector_files import NamedSelector, read_selector
from ..machine.selectors import CpuSelector
from ..profiles.deployment import read_profiles, write_deployment_file
from ..profiles.importer import check_entries
from ..profiles.model import DeploymentProfile
from ..tuning.registry import KernelTuningRegistry, TuningSnapshot, default_registry
from ..tuning.schema import KernelTuningKey, KernelTuningSchema, element_type_name


@dataclass(frozen=True)
class BakeReport:
    """What a bake checked and wrote: the coverage, its gaps and every problem.

    ``digest`` is the SHA-256 of the file written (None when nothing was).
    """

    output: str
    profiles: tuple[str, ...]
    coverage: dict[str, object]
    gaps: tuple[str, ...]
    problems: tuple[str, ...]
    digest: str | None = None

    @property
    def written(self) -> bool:
        return self.digest is not None

    def to_dict(self) -> dict[str, object]:
        return {"output": self.output, "profiles": list(self.profiles),
                "coverage": self.coverage, "gaps": list(self.gaps),
                "problems": list(self.problems), "digest": self.digest}

    def table(self) -> str:
        """The coverage table: per profile and key, the thread ranges covered and the gaps."""
        lines = []
        for name, keys in self.coverage.items():
            lines.append(f"{name}:")
            lines += [f"  {key:<52} {' '.join(row['covered']) or '-':<20} "
                      f"{'gaps: ' + ', '.join(row['gaps']) if row['gaps'] else ''}".rstrip()
                      for key, row in keys.items()]
        return "\n".join(lines)


def bake(
    profiles: Iterable[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    require_complete: bool = False,
    expected_selectors: Iterable[str | NamedSelector] = (),
    registry: KernelTuningRegistry | None = None,
) -> BakeReport:
    """Merge ``profiles`` into the deployment file ``output``, or write nothing and say why.

    ``require_complete`` fails on any coverage gap and on an expected selector
    (a file or a shipped name) that no profile is bound to.
    """
    registry = registry if registry is not None else default_registry
    paths = [Path(path) for path in profiles]
    problems: list[str] = []
    found: list[DeploymentProfile] = []
    for path in paths:
        status, read, read_problems, _ = read_profiles(path)
        problems += [str(p) for p in read_problems] or ([] if status == "ok" else
                                                        [f"{path}: {status}"])
        found += read
    if not paths:
        problems.append("no profile to bake")
    snapshot = registry.snapshot()
    schemas = _Schemas(snapshot)
    for profile in found:
        problems += check_entries(profile, schemas.classify, schemas.schema).problems
    problems += _ambiguities(found) + _same_names(found)
    coverage, gaps = _coverage(found, snapshot)
    # A whole machine without a profile first: it is the gap a person must not miss.
    gaps = _missing_selectors(found, [_named(s) for s in expected_selectors]) + gaps
    if require_complete:
        problems += [f"incomplete: {gap}" for gap in gaps]
    report = BakeReport(str(output), tuple(map(str, paths)), coverage, tuple(gaps),
                        tuple(problems))
    if problems:
        return report
    digest = write_deployment_file(found, coverage, output)
    return BakeReport(report.output, report.profiles, coverage, tuple(gaps), (), digest)


def _named(selector: str | NamedSelector) -> NamedSelector:
    return selector if isinstance(selector, NamedSelector) else read_selector(selector)


class _Schemas:
    """The registered schemas, with an entry of another ISA variant checked by its sibling's."""

    def __init__(self, snapshot: TuningSnapshot):
        self.snapshot = snapshot
        self.keys = set(snapshot.keys())
        self.siblings = {_variantless(key): key for key in self.keys}
        self.abis: dict[tuple, list[int]] = {}
        for key in self.keys:
            self.abis.setdefault(_variantless(key)[:-1], []).append(key.tuning_abi)

    def classify(self, key: KernelTuningKey) -> tuple[str, str | None]:
        if key in self.keys or _variantless(key) in self.siblings:
            return "ok", None
        abis = self.abis.get(_variantless(key)[:-1])
        if abis:
            return "stale", (f"stale: tuning ABI {key.tuning_abi}; the registered schema has "
                             f"tuning ABI {', '.join(map(str, sorted(abis)))}")
        return "bad", f"no tuning schema is registered for {key} in any variant"

    def schema(self, key: KernelTuningKey) -> KernelTuningSchema:
        return self.snapshot.schema(key if key in self.keys else self.siblings[_variantless(key)])


def _variantless(key: KernelTuningKey) -> tuple:
    return (key.library, key.kernel, key.element_type, key.device, key.tuning_abi)


def _ambiguities(profiles: Sequence[DeploymentProfile]) -> list[str]:
    """Pairs of profiles that could both give one processor, key and thread count a value."""
    problems = []
    for i, first in enumerate(profiles):
        for second in profiles[i + 1:]:
            a, b = first.selector, second.selector
            if (first.priority != second.priority or a.tier != b.tier
                    or not a.can_overlap(b) or not _shared_threads(first, second)):
                continue
            problems.append(
                f"{first.place} ({first.name}) and {second.place} ({second.name}): selectors "
                f"that can match the same processor (for example {_example(a, b)}) at the "
                f"same tier ({a.tier.label}) and priority ({first.priority}); give one a "
                f"different priority or narrow a selector")
    return problems


def _same_names(profiles: Sequence[DeploymentProfile]) -> list[str]:
    """Profiles are told apart by name (coverage, order, ``profile_name=`` in sessions)."""
    first: dict[str, DeploymentProfile] = {}
    problems = []
    for profile in profiles:
        other = first.setdefault(profile.name, profile)
        if other is not profile:
            problems.append(f"{other.place} and {profile.place} are both named "
                            f"{profile.name!r}; give one another --name")
    return problems


def _shared_threads(first: DeploymentProfile, second: DeploymentProfile) -> bool:
    """Whether some key has entries in both whose thread ranges meet."""
    ranges: dict[KernelTuningKey, list[tuple[int, int]]] = {}
    for entry in first.entries:
        ranges.setdefault(entry.key, []).append(entry.threads)
    return any(low <= high2 and low2 <= high for entry in second.entries
               for low, high in ranges.get(entry.key, ()) for low2, high2 in [entry.threads])


def _example(a: CpuSelector, b: CpuSelector) -> str:
    """A processor both selectors could match, described by the fields they name."""
    models = sorted(set(a.models) & set(b.models)) or sorted(a.models or b.models)
    parts = [("vendor", a.vendor or b.vendor), ("family", a.family if a.family is not None
                                                 else b.family),
             ("model", models[0] if models else None),
             ("microarchitecture", a.microarchitecture or b.microarchitecture)]
    text = " ".join(f"{name} {value}" for name, value in parts if value is not None)
    features = sorted(a.required_features | b.required_features)
    if features:
        text += (" " if text else "") + "with " + ", ".join(features)
    return text or "any processor"


def _coverage(profiles: Sequence[DeploymentProfile], snapshot: TuningSnapshot
              ) -> tuple[dict[str, object], list[str]]:
    """Per profile, per key of its variants: the thread ranges covered and the gaps."""
    keys = snapshot.keys()
    registered = sorted({(k.library, k.kernel, k.element_type, k.device) for k in keys})
    coverage: dict[str, object] = {}
    gaps: list[str] = []
    for profile in sorted(profiles, key=lambda p: p.name):
        ranges: dict[tuple, list[tuple[int, int]]] = {}
        for entry in profile.entries:
            key = entry.key
            ranges.setdefault((key.library, key.kernel, key.element_type, key.device,
                               key.implementation), []).append(entry.threads)
        implementations = sorted({entry.key.implementation for entry in profile.entries})
        top = max((entry.threads[1] for entry in profile.entries), default=0)
        table = {}
        for library, kernel, element_type, device in registered:
            for implementation in implementations:
                covered = sorted(ranges.get((library, kernel, element_type, device,
                                             implementation), []))
                holes = _holes(covered, top)
                label = f"{library}/{kernel}/{implementation}/{element_type_name(element_type)}"
                table[label] = {"covered": [f"{low}-{high}" if low != high else str(low)
                                            for low, high in covered], "gaps": holes}
                gaps += [f"{profile.name}: {label}: {hole}" for hole in holes]
        coverage[profile.name] = table
    return coverage, gaps


def _holes(covered: Sequence[tuple[int, int]], top: int) -> list[str]:
    """The thread counts from 1 to ``top`` that no range covers, as ranges."""
    if not covered:
        return ["no entry"]
    holes, expected = [], 1
    for low, high in covered:
        if low > expected:
            holes.append(f"threads {expected}-{low - 1}" if low - 1 > expected
                         else f"threads {expected}")
        expected = max(expected, high + 1)
    if expected <= top:
        holes.append(f"threads {expected}-{top}")
    return holes


def _missing_selectors(profiles: Sequence[DeploymentProfile],
                       expected: Sequence[NamedSelector]) -> list[str]:
    bound = {profile.selector for profile in profiles}
    names = {profile.selector_name for profile in profiles}
    return [f"no profile for the expected selector {named.name}" for named in expected
            if named.selector not in bound and named.name not in names]

