"""The one exception hierarchy of kerneltune.

Loading files reports problems instead of raising; registering, configuring or
calibrating invalid things raises one of these before anything is published.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, located as precisely as the caller knows.

    ``file`` and ``entry`` are filled in by whoever knows them (a profile
    loader knows the file, a batch registration knows the entry), so a message
    can always say where to look.
    """

    field: str
    message: str
    entry: str | None = None
    file: str | None = None

    def located(self, *, file: str | None = None, entry: str | None = None) -> Problem:
        return Problem(
            self.field,
            self.message,
            entry=self.entry if self.entry is not None else entry,
            file=self.file if self.file is not None else file,
        )

    def __str__(self) -> str:
        where = [part for part in (self.file, self.entry) if part]
        prefix = ": ".join(where)
        text = f"{self.field}: {self.message}" if self.field else self.message
        return f"{prefix}: {text}" if prefix else text


class KernelTuningError(Exception):
    """Base of every error kerneltune raises on purpose."""


class TuningValidationError(KernelTuningError, ValueError):
    """Invalid tuning input; lists every problem found, not only the first."""

    def __init__(self, problems: Iterable[Problem | str], *, context: str | None = None):
        self.problems: tuple[Problem, ...] = tuple(
            p if isinstance(p, Problem) else Problem("", p) for p in problems
        )
        self.context = context
        lines = [str(p) for p in self.problems] or ["invalid tuning input"]
        head = f"{context}: " if context else ""
        if len(lines) == 1:
            message = head + lines[0]
        else:
            listed = "\n".join(f"  - {line}" for line in lines)
            message = head + f"{len(lines)} problems:\n{listed}"
        super().__init__(message)

    def located(
        self, *, file: str | None = None, entry: str | None = None
    ) -> TuningValidationError:
        """The same problems, with the file and entry filled in where unknown, in the same class."""
        return type(self)(
            (p.located(file=file, entry=entry) for p in self.problems), context=self.context
        )


class ProfileError(TuningValidationError):
    """A selector, profile or deployment file that cannot be used.

    Its problems name the file, the entry and the field, all of them at once, so
    one round of fixing a hand-edited file is enough.
    """


class AmbiguousProfileError(KernelTuningError):
    """Two profiles for one key could both match with equal tier and priority."""


class UnknownKernelError(KernelTuningError, LookupError):
    """A tuning key, kernel or profile name that nothing registered."""


class CpuDescriptorError(KernelTuningError):
    """A processor descriptor file that cannot be read or does not describe a processor."""


class CalibrationError(KernelTuningError):
    """Calibration could not produce a trustworthy value."""


class UnsupportedModelError(KernelTuningError):
    """An ONNX model that uses operators or types the kernel library lacks."""


class KerneltuneStartupWarning(UserWarning):
    """What ``import kerneltune`` met and could not use (a bad ``KERNELTUNE_ISA``, an
    unreadable deployment file or cache): one warning naming each problem, never an error.

    It is issued from the ``kerneltune`` module itself, before the class can be named
    in a filter: ``python -W "ignore:::kerneltune"``, or
    ``warnings.filterwarnings("ignore", module="kerneltune")`` before the import, silences
    it; ``kerneltune.startup_report()`` keeps the problems either way.
    """
