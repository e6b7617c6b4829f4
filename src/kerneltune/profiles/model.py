"""Deployment profiles: one machine's calibrations, bound to a processor selector.

A profile is what a build-farm machine leaves behind: the values calibration
decided for every key and calibrated thread count, a :class:`~kerneltune.CpuSelector`
naming the processors they are meant for, and the provenance a reviewer (and
the importer) needs to trust them: the calibrating machine, its thread counts,
effort, date, report digests, and the BLAS library and threading variables
that moved its crossovers. Thread ranges run from one calibrated count to the
next minus one; the last ends at the largest calibrated count, so a profile
calibrated for 1, 2 and 4 threads serves 1, 2-3 and 4, and never 16.

Its text is versioned YAML in its JSON form (as the calibration cache is):
the header one field a line, each entry one line, keys sorted, so the same
profile always gives the same bytes, a diff shows what changed, and the
SHA-256 of those bytes names it. :mod:`.export` makes a profile from
calibration reports, :mod:`.files` writes and reads it.
"""

from __future__ import annotations

import hashlib
import json
import types
from collections.abc import Mapping
from dataclasses import dataclass, field

from .._support.checks import fields_of
from .._support.documents import DocumentFormat
from ..machine.selectors import CpuSelector
from ..tuning.schema import KernelTuningKey, TuningValue

#: the profile file's format: its header and top-level fields
PROFILE_FORMAT = DocumentFormat(
    "kerneltune-deployment-profile", 1,
    {"format": str, "schema_version": int, "name": str, "priority": int, "selector_name": object,
     "selector": dict, "versions": dict, "provenance": list, "entries": list},
    what="deployment profile")


#: why a merged entry's value is the one published (see :mod:`.merge`)
AGREE, CONFIRMED, BEATEN, DISAGREE, COUNTED_OUT = (
    "machines agree", "confirmed on the pooled samples", "every machine beat the value in use",
    "machines disagree", "every machine counted out")
MERGE_REASONS = (AGREE, CONFIRMED, BEATEN, DISAGREE, COUNTED_OUT)


@dataclass(frozen=True)
class Evidence:
    """What decided one parameter of an entry merged from several machines' calibrations.

    ``machines`` are those counted in (by name), ``agreed`` those of them whose
    value was published, ``counted_out`` the others' names with the reason they
    were not counted. ``ratio`` with ``low`` and ``high`` (its interval) is the
    pooled comparison of ``compared`` with ``in_use``, the value in use on the
    farm (the values in use's time over ``compared``'s: above 1, ``compared`` is
    faster); None when no machine compared them.
    """

    reason: str
    in_use: TuningValue
    machines: tuple[str, ...]
    agreed: tuple[str, ...]
    counted_out: Mapping[str, str] = field(default_factory=dict)
    compared: TuningValue | None = None
    ratio: float | None = None
    low: float | None = None
    high: float | None = None

    def describe(self) -> str:
        """A line: the reason, who agreed, the pooled comparison, who was counted out."""
        text = (f"{self.reason}: {len(self.agreed)} of {len(self.machines)} machines "
                f"({', '.join(self.agreed) or 'none'})")
        if self.ratio is not None:
            text += (f"; {self.compared} {self.ratio:.3f}x the value in use {self.in_use} "
                     f"(interval {self.low:.3f} to {self.high:.3f})")
        text += "".join(f"; {name} counted out: {why}"
                        for name, why in sorted(self.counted_out.items()))
        return text

    def to_dict(self) -> dict[str, object]:
        return {"reason": self.reason, "in_use": self.in_use, "machines": list(self.machines),
                "agreed": list(self.agreed), "counted_out": dict(sorted(self.counted_out.items())),
                "compared": self.compared, "ratio": self.ratio, "low": self.low,
                "high": self.high}

    @classmethod
    def from_dict(cls, data: object) -> Evidence:
        """What :meth:`to_dict` wrote; a ValueError names a field that is not."""
        fields = fields_of(data, {"reason": str, "in_use": object, "machines": list,
                                  "agreed": list, "counted_out": dict, "compared": object,
                                  "ratio": float | None, "low": float | None,
                                  "high": float | None})
        if fields["reason"] not in MERGE_REASONS:
            raise ValueError(f"'reason' is none of {', '.join(MERGE_REASONS)}")
        names = [*fields["machines"], *fields["agreed"], *fields["counted_out"],
                 *fields["counted_out"].values()]
        if not all(isinstance(name, str) for name in names):
            raise ValueError("machine names and reasons are strings")
        return cls(**{**fields, "machines": tuple(fields["machines"]),
                      "agreed": tuple(fields["agreed"]),
                      "counted_out": types.MappingProxyType(fields["counted_out"])})


@dataclass(frozen=True)
class ProfileEntry:
    """The values of one key for the thread counts ``threads[0]`` to ``threads[1]``.

    ``evidence`` says, per parameter, what decided an entry merged from several
    machines (empty for one machine's); ``library_version`` is the version of the
    key's kernel library that calibrated it (None where the report did not say).
    """

    key: KernelTuningKey
    threads: tuple[int, int]
    values: Mapping[str, TuningValue]
    evidence: Mapping[str, Evidence] = field(default_factory=dict)
    library_version: str | None = None

    def to_dict(self) -> dict[str, object]:
        document = {"key": self.key.to_dict(), "threads": list(self.threads),
                    "values": dict(sorted(self.values.items()))}
        if self.library_version is not None:
            document["library_version"] = self.library_version
        if self.evidence:
            document["evidence"] = {name: evidence.to_dict()
                                    for name, evidence in sorted(self.evidence.items())}
        return document


@dataclass(frozen=True)
class DeploymentProfile:
    """A selector-bound profile: entries, priority, versions and provenance.

    ``selector_name`` is the selector file's name when the selector came from
    one; ``path`` is where the profile was read from (None for one built here),
    and ``within`` which profile of a deployment file it is.
    """

    name: str
    selector: CpuSelector
    entries: tuple[ProfileEntry, ...]
    priority: int = 0
    selector_name: str | None = None
    versions: Mapping[str, object] = field(default_factory=dict)
    provenance: tuple[Mapping[str, object], ...] = ()
    path: str | None = field(default=None, compare=False)
    within: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, object]:
        """The file's document, field by field in the file's order."""
        return {"format": PROFILE_FORMAT.name, "schema_version": PROFILE_FORMAT.schema_version,
                "name": self.name, "priority": self.priority,
                "selector_name": self.selector_name, "selector": self.selector.to_dict(),
                "versions": dict(self.versions), "provenance": [dict(p) for p in self.provenance],
                "entries": [entry.to_dict() for entry in self.entries]}

    @property
    def digest(self) -> str:
        """SHA-256 of the file's bytes: what a deployment names and verification keys on."""
        return hashlib.sha256(profile_text(self).encode()).hexdigest()

    @property
    def place(self) -> str:
        """Where the profile is, for messages and origins: its file and, in a deployment
        file, which profile."""
        return ", ".join(filter(None, (self.path, self.within))) or self.name

    @property
    def thread_counts(self) -> tuple[int, ...]:
        """The calibrated thread counts: each entry range's first."""
        return tuple(sorted({entry.threads[0] for entry in self.entries}))


def profile_text(profile: DeploymentProfile, indent: str = "") -> str:
    """The file's text: JSON-form YAML, a header field a line and an entry a line.

    ``indent`` shifts every line, for a profile inside a deployment file.
    """
    document = profile.to_dict()
    entries = document.pop("entries")
    header = ",\n".join(f"{indent} {json.dumps(name)}: {json.dumps(value, sort_keys=True)}"
                        for name, value in document.items())
    body = ",\n".join(f"{indent}  {json.dumps(entry, sort_keys=True)}" for entry in entries)
    return (f"{indent}{{\n{header},\n{indent} \"entries\": [\n{body}" + ("\n" if body else "")
            + f"{indent} ]\n{indent}}}\n")
