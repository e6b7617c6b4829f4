"""The checkpoint of a machine calibration: every finished key, so a killed run resumes.

A farm runner may be preempted (SIGTERM, SIGKILL) at any point. The checkpoint
is a journal: a header line naming what is being calibrated (the arguments,
the processor, the kerneltune version), then one line per finished key, each
appended and fsynced before the next key starts. A line cut by a crash is the
only thing lost. A journal of other arguments, another processor or another
kerneltune is reported and ignored whole; a record that is not what this
calibration would have written (damaged, of a key or thread count it does not
calibrate, a report of another shape or with values the schema refuses) is
reported, dropped from the journal and measured again, never resumed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .._support.documents import read_bounded, strict_json
from .._support.files import write_atomically
from .._support.version import __version__

FORMAT = "kerneltune-calibration-checkpoint"
SCHEMA_VERSION = 1

#: why a record (threads, key label, report) cannot be resumed, or None when it can
RecordCheck = Callable[[int, str, dict], "str | None"]


@dataclass
class Checkpoint:
    """The journal of one calibration: finished reports by thread count and key."""

    path: Path
    identity: Mapping[str, object]
    reports: dict[int, dict[str, dict]] = field(default_factory=dict)
    _stream: IO[str] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, path: Path, identity: Mapping[str, object], restart: bool = False,
             check: RecordCheck | None = None) -> tuple[Checkpoint, tuple[str, ...]]:
        """Resume the journal at ``path`` if it is this calibration's, else start one.

        ``check`` judges each record; one it refuses is dropped. Returns the
        checkpoint and what was set aside, and why.
        """
        notes: list[str] = []
        reports: dict[int, dict[str, dict]] = {}
        complete, dropped = 0, False
        if restart and path.exists():
            notes.append(f"{path}: discarded (--restart)")
        elif path.exists():
            reports, notes, complete, dropped = _read(path, identity, check)
        checkpoint = cls(path, dict(identity), reports)
        if dropped and reports:
            checkpoint._rewrite()
        elif reports:
            # a record cut by a crash is dropped before the next one is appended
            os.truncate(path, complete)
        checkpoint._start(fresh=not reports)
        return checkpoint, tuple(notes)

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

    def _header(self) -> dict[str, object]:
        return {"format": FORMAT, "schema_version": SCHEMA_VERSION, "identity": self.identity}

    def _rewrite(self) -> None:
        """The journal again with the records kept alone, replacing the one read."""
        lines = [self._header()] + [{"threads": threads, "key": key, "report": report}
                                    for threads, keys in self.reports.items()
                                    for key, report in keys.items()]
        write_atomically(self.path, "".join(_line(record) for record in lines))

    def _start(self, fresh: bool) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fresh:
            self._stream = self.path.open("w", encoding="utf-8")
            self._append(self._header())
        else:
            self._stream = self.path.open("a", encoding="utf-8")

    def _append(self, record: Mapping[str, object]) -> None:
        assert self._stream is not None
        self._stream.write(_line(record))
        self._stream.flush()
        os.fsync(self._stream.fileno())


def _line(record: Mapping[str, object]) -> str:
    return json.dumps(record, sort_keys=True, default=str) + "\n"


def _read(path: Path, identity: Mapping[str, object], check: RecordCheck | None
          ) -> tuple[dict[int, dict[str, dict]], list[str], int, bool]:
    """The finished reports of a journal that is this calibration's, what was set aside and
    why, the length in bytes of its complete lines, and whether records were dropped."""
    contents = read_bounded(path, "calibration checkpoint")
    if contents.data is None:
        return {}, [f"{'; '.join(map(str, contents.problems))}; ignored"], 0, False
    data = contents.data
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as error:
        return {}, [f"{path}: unreadable ({error}); ignored"], 0, False
    # the last piece has no newline after it: empty, or the write a crash cut short
    complete = lines[:-1]
    length = data.rfind(b"\n") + 1
    try:
        header = json.loads(complete[0]) if complete else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        return {}, [f"{path}: not a calibration checkpoint; ignored"], 0, False
    if header.get("schema_version") != SCHEMA_VERSION:
        return {}, [f"{path}: checkpoint version {header.get('schema_version')!r}; ignored"], \
            0, False
    theirs = json.loads(json.dumps(header.get("identity"), sort_keys=True))
    ours = json.loads(json.dumps(identity, sort_keys=True, default=str))
    if theirs != ours:
        differing = sorted(name for name in {*ours, *(theirs or {})}
                           if (theirs or {}).get(name) != ours.get(name))
        return {}, [f"{path}: from another calibration (different {', '.join(differing)}); "
                    f"ignored"], 0, False
    reports: dict[int, dict[str, dict]] = {}
    notes = []
    for number, line in enumerate(complete[1:], start=2):
        record, why = _record(line, check)
        if why is not None:
            notes.append(f"{path}: line {number}: {why}; measured again")
            continue
        reports.setdefault(record["threads"], {})[record["key"]] = record["report"]
    return reports, notes, length, bool(notes)


def _record(line: str, check: RecordCheck | None) -> tuple[dict, str | None]:
    """A journal line's record, and why it cannot be resumed (None when it can)."""
    try:
        record = strict_json(line)
    except ValueError:
        return {}, "not a record (damaged)"
    if not isinstance(record, dict) or set(record) != {"threads", "key", "report"}:
        return {}, "not a record: expected the fields threads, key and report"
    threads, key, report = record["threads"], record["key"], record["report"]
    if type(threads) is not int or not isinstance(key, str) or not isinstance(report, dict):
        return {}, "not a record: expected an integer thread count, a key and a report"
    return record, check(threads, key, report) if check is not None else None


def identity_of(arguments: Mapping[str, object], processor: Mapping[str, object]
                ) -> dict[str, object]:
    """What a checkpoint must match to be resumed: arguments, processor, kerneltune."""
    return {"arguments": dict(arguments), "processor": dict(processor), "kerneltune": __version__}
