"""The checkpoint of a machine calibration: every finished key, so a killed run resumes.

A farm runner may be preempted (SIGTERM, SIGKILL) at any point. The checkpoint
is a journal: a header line naming what is being calibrated (the arguments,
the processor, the kerneltune version), then one line per finished key, each
appended and fsynced before the next key starts. A line cut by a crash is the
only thing lost; a journal of other arguments, another processor or another
kerneltune, or one damaged anywhere but its last line, is reported and ignored
whole, never half-used.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .._support.documents import read_bounded
from .._support.version import __version__

FORMAT = "kerneltune-calibration-checkpoint"
SCHEMA_VERSION = 1


@dataclass
class Checkpoint:
    """The journal of one calibration: finished reports by thread count and key."""

    path: Path
    identity: Mapping[str, object]
    reports: dict[int, dict[str, dict]] = field(default_factory=dict)
    _stream: IO[str] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, path: Path, identity: Mapping[str, object], restart: bool = False
             ) -> tuple[Checkpoint, str | None]:
        """Resume the journal at ``path`` if it is this calibration's, else start one.

        Returns the checkpoint and, when an existing journal was set aside, why.
        """
        note = None
        reports: dict[int, dict[str, dict]] = {}
        if restart and path.exists():
            note = f"{path}: discarded (--restart)"
        elif path.exists():
            reports, note, complete = _read(path, identity)
            if reports:
                # a record cut by a crash is dropped before the next one is appended
                os.truncate(path, complete)
        checkpoint = cls(path, dict(identity), reports)
        checkpoint._start(fresh=not reports)
        return checkpoint, note

    @property
    def resumed(self) -> int:
        return sum(len(keys) for keys in self.reports.values())

    def finished(self, threads: int) -> dict[str, dict]:
        """The reports already finished for ``threads``, by key label."""
        return self.reports.get(threads, {})

    def record(self, threads: int, key: str, report: Mapping[str, object]) -> None:
        """Append one finished key and make it durable before going on."""
        self.reports.setdefault(threads, {})[key] = dict(report)
        self._append({"threads": threads, "key": key, "report": report})

    def close(self, remove: bool) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if remove:
            self.path.unlink(missing_ok=True)

    def _start(self, fresh: bool) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fresh:
            self._stream = self.path.open("w", encoding="utf-8")
            self._append({"format": FORMAT, "schema_version": SCHEMA_VERSION,
                          "identity": self.identity})
        else:
            self._stream = self.path.open("a", encoding="utf-8")

    def _append(self, record: Mapping[str, object]) -> None:
        assert self._stream is not None
        self._stream.write(json.dumps(record, sort_keys=True, default=str) + "\n")
        self._stream.flush()
        os.fsync(self._stream.fileno())


def _read(path: Path, identity: Mapping[str, object]
          ) -> tuple[dict[int, dict[str, dict]], str | None, int]:
    """The finished reports of a journal that is this calibration's, or why it is not,
    and the length in bytes of its complete lines."""
    contents = read_bounded(path, "calibration checkpoint")
    if contents.data is None:
        return {}, f"{'; '.join(map(str, contents.problems))}; ignored", 0
    data = contents.data
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as error:
        return {}, f"{path}: unreadable ({error}); ignored", 0
    # the last piece has no newline after it: empty, or the write a crash cut short
    complete = lines[:-1]
    length = data.rfind(b"\n") + 1
    try:
        header = json.loads(complete[0]) if complete else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        return {}, f"{path}: not a calibration checkpoint; ignored", 0
    if header.get("schema_version") != SCHEMA_VERSION:
        return {}, f"{path}: checkpoint version {header.get('schema_version')!r}; ignored", 0
    theirs = json.loads(json.dumps(header.get("identity"), sort_keys=True))
    ours = json.loads(json.dumps(identity, sort_keys=True, default=str))
    if theirs != ours:
        differing = sorted(name for name in {*ours, *(theirs or {})}
                           if (theirs or {}).get(name) != ours.get(name))
        return {}, (f"{path}: from another calibration (different {', '.join(differing)}); "
                    f"ignored"), 0
    reports: dict[int, dict[str, dict]] = {}
    for number, line in enumerate(complete[1:], start=2):
        try:
            record = json.loads(line)
            reports.setdefault(int(record["threads"]), {})[str(record["key"])] = dict(
                record["report"])
        except (ValueError, KeyError, TypeError):
            return {}, f"{path}: line {number} is damaged; the checkpoint is ignored", 0
    return reports, None, length


def identity_of(arguments: Mapping[str, object], processor: Mapping[str, object]
                ) -> dict[str, object]:
    """What a checkpoint must match to be resumed: arguments, processor, kerneltune."""
    return {"arguments": dict(arguments), "processor": dict(processor), "kerneltune": __version__}
