"""How hard and how long calibration may measure, in the spirit of FFTW's planner flags.

An effort level sets the measurement defaults (samples, grid density, the time
one sample must last, budgets, the largest size tried); every field given
explicitly in :class:`CalibrationOptions` overrides its level's value.
"""

from __future__ import annotations

import math
import os
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .._support.checks import is_int, is_positive_number
from ..errors import Problem, TuningValidationError
from ..tuning.schema import TuningValue
from .interference import MAXIMUM_SHARE


@dataclass(frozen=True)
class Effort:
    name: str
    repetitions: int
    #: geometric grid density: sizes grow by 2 ** (1 / steps_per_octave); normal effort
    #: searches whole octaves, what two calibrations resolve (see search.RESOLUTION_OCTAVES)
    steps_per_octave: int
    #: each sample repeats the call until it lasts at least this long
    minimum_sample_seconds: float
    seconds_per_key: float
    #: largest elementwise case tried, in elements
    largest_elements: int
    #: a win counts when it holds in this many independent measurements
    rounds: int
    #: a batch measures keys again whose machine probe says the machine was slower than
    #: its reference state (see :mod:`.steadiness`) for at most this many times the time
    #: its first pass over the keys took
    remeasure_factor: float

    def __post_init__(self):
        if self.rounds < 1 or self.repetitions < 1 or self.steps_per_octave < 1:
            raise ValueError(f"effort {self.name!r}: rounds, repetitions and steps_per_octave "
                             f"must be at least 1")
        if not self.remeasure_factor >= 0:
            raise ValueError(f"effort {self.name!r}: remeasure_factor must be at least 0")


EFFORTS: Mapping[str, Effort] = types.MappingProxyType({
    effort.name: effort for effort in (
        Effort("quick", 5, 1, 0.0002, 5.0, 1 << 22, 1, 0.0),
        Effort("normal", 7, 1, 0.0004, 15.0, 1 << 23, 2, 0.5),
        Effort("thorough", 11, 4, 0.001, 60.0, 1 << 24, 2, 2.0),
    )
})


@dataclass(frozen=True)
class CalibrationOptions:
    """Budgets and measurement settings of one calibration run.

    - ``threads``: the effective thread count calibrated for (default: the
      CPUs this process may use); it may be fewer than the machine has, never more.
    - ``time_budget_per_key`` and ``time_budget`` (seconds): when one runs out,
      the search stops, keeps the values it has not decided, and says so.
    - ``memory_budget`` (bytes): no case whose inputs and output exceed it is run.
    - ``minimum_margin``: a candidate must beat the value in use by this
      fraction, twice in a row, to replace it.
    - ``parameter`` and ``values``: instead of searching, time the kernel's
      workload with each value of one parameter (the active value first) and
      select the fastest.
    - ``maximum_interference``: a measurement where other processes took more
      than this share of the threads' time is discarded and taken again
      (None: ``KERNELTUNE_MAXIMUM_INTERFERENCE`` when the calibration starts, else
      :data:`~.interference.MAXIMUM_SHARE`; 1 keeps every measurement).
    """

    threads: int | None = None
    effort: str = "normal"
    time_budget_per_key: float | None = None
    time_budget: float | None = None
    memory_budget: int = 1 << 30
    minimum_margin: float = 0.05
    repetitions: int | None = None
    seed: int = 0
    parameter: str | None = None
    values: Sequence[TuningValue] = field(default=())
    maximum_interference: float | None = None

    def __post_init__(self) -> None:
        problems = []
        limit = self.maximum_interference
        if limit is not None and (not is_positive_number(limit) or limit > 1):
            problems.append(Problem("maximum_interference", f"expected a share in (0, 1], got "
                                                            f"{limit!r}"))
        if self.threads is not None and (not is_int(self.threads) or self.threads < 1):
            problems.append(Problem("threads", f"expected an int >= 1, got {self.threads!r}"))
        if self.effort not in EFFORTS:
            problems.append(Problem("effort", f"expected one of {', '.join(EFFORTS)}, got "
                                              f"{self.effort!r}"))
        for name in ("time_budget_per_key", "time_budget"):
            value = getattr(self, name)
            if value is not None and not is_positive_number(value):
                problems.append(Problem(name, f"expected seconds > 0, got {value!r}"))
        if not is_int(self.memory_budget) or self.memory_budget < 1:
            problems.append(Problem("memory_budget",
                                    f"expected bytes >= 1, got {self.memory_budget!r}"))
        if not is_positive_number(self.minimum_margin) or self.minimum_margin >= 1:
            problems.append(Problem("minimum_margin", f"expected a fraction in (0, 1), got "
                                                      f"{self.minimum_margin!r}"))
        if self.repetitions is not None and (not is_int(self.repetitions)
                                             or self.repetitions < 5):
            problems.append(Problem("repetitions", f"expected an int >= 5 (a median needs "
                                                   f"them), got {self.repetitions!r}"))
        if not is_int(self.seed) or self.seed < 0:
            problems.append(Problem("seed", f"expected an int >= 0, got {self.seed!r}"))
        if self.parameter is not None and (not isinstance(self.parameter, str)
                                           or not self.parameter):
            problems.append(Problem("parameter", f"expected a parameter name, got "
                                                 f"{self.parameter!r}"))
        if isinstance(self.values, str | bytes) or not isinstance(self.values, Sequence):
            problems.append(Problem("values", f"expected a list of values, got {self.values!r}"))
        elif bool(self.values) != (self.parameter is not None):
            problems.append(Problem("values", "give parameter and values together"))
        if problems:
            raise TuningValidationError(problems, context="calibration options")
        object.__setattr__(self, "values", tuple(self.values))

    @property
    def level(self) -> Effort:
        return EFFORTS[self.effort]

    @property
    def samples(self) -> int:
        return self.repetitions if self.repetitions is not None else self.level.repetitions

    @property
    def interference_limit(self) -> float:
        """``maximum_interference``, else ``KERNELTUNE_MAXIMUM_INTERFERENCE``, else the
        default; a variable that holds no share raises, naming it. Read when a calibration
        starts (a batch records the limit it used), never when options are made."""
        if self.maximum_interference is not None:
            return float(self.maximum_interference)
        return _maximum_interference()

    @property
    def seconds_per_key(self) -> float:
        if self.time_budget_per_key is not None:
            return float(self.time_budget_per_key)
        return self.level.seconds_per_key

    def to_dict(self) -> dict[str, object]:
        return {
            "threads": self.threads, "effort": self.effort,
            "time_budget_per_key": self.seconds_per_key, "time_budget": self.time_budget,
            "memory_budget": self.memory_budget, "minimum_margin": self.minimum_margin,
            "repetitions": self.samples, "seed": self.seed, "parameter": self.parameter,
            "values": list(self.values), "maximum_interference": self.maximum_interference,
        }


#: the environment variable that sets the interference a measurement may see
INTERFERENCE_VARIABLE = "KERNELTUNE_MAXIMUM_INTERFERENCE"


def _maximum_interference() -> float:
    """``KERNELTUNE_MAXIMUM_INTERFERENCE`` as a share, else the default; a value that is no
    share names the variable."""
    text = os.environ.get(INTERFERENCE_VARIABLE, "").strip()
    if not text:
        return MAXIMUM_SHARE
    try:
        share = float(text)
    except ValueError:
        share = math.nan
    if not 0 < share <= 1:
        raise TuningValidationError([Problem(INTERFERENCE_VARIABLE, f"expected a share in "
                                                                    f"(0, 1], got {text!r}")],
                                    context="calibration options")
    return share


def thread_counts(threads: int) -> list[int]:
    """1, 2, 4, ... below ``threads``, and ``threads`` itself.

    The thread counts a farm machine calibrates for, and those a thread cap
    is chosen among: doubling covers the range in few steps.
    """
    return [*(1 << i for i in range(threads.bit_length()) if 1 << i < threads), threads]
