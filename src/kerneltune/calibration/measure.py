"""Robust timing: interleaved samples, Tukey's fences, medians with their spread.

Instances that are compared are sampled in turn (A, B, A, B, ...), so a
frequency change or a noisy neighbour during the run hits all of them alike.
Each sample starts with an untimed call: a serial instance's sample lets the
OpenMP workers fall asleep, and waking them (an inter-processor interrupt, slow
in a virtual machine) belongs to no steady stream of calls.
A sample times enough back-to-back calls to last the effort's minimum sample
time, so the timer's resolution and Python's call overhead do not dominate.
Samples outside Tukey's fences (1.5 interquartile ranges beyond the quartiles)
are rejected and recorded; the median of the rest is the result.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

MINIMUM_SAMPLES = 5


class BudgetExhausted(Exception):
    """Raised inside a search when its time budget runs out; the search keeps its defaults."""


@dataclass(frozen=True)
class Deadline:
    """The monotonic time a search must stop at, and which budget set it."""

    at: float
    budget: str

    def check(self) -> None:
        if time.perf_counter() >= self.at:
            raise BudgetExhausted(self.budget)

    @property
    def remaining(self) -> float:
        return self.at - time.perf_counter()


@dataclass(frozen=True)
class Measurement:
    """Seconds per call of one instance on one case."""

    samples: tuple[float, ...]
    rejected: tuple[float, ...]
    calls_per_sample: int

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def quartiles(self) -> tuple[float, float]:
        q1, q3 = np.percentile(self.samples, (25, 75))
        return float(q1), float(q3)

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        q1, q3 = self.quartiles
        return (q3 - q1) / self.median if self.median > 0 else 0.0

    def beats(self, other: Measurement, margin: float) -> bool:
        """Faster than ``other`` by ``margin`` at the median, with no overlap of quartiles."""
        return (self.median * (1.0 + margin) <= other.median
                and self.quartiles[1] < other.quartiles[0])

    def to_dict(self) -> dict[str, object]:
        q1, q3 = self.quartiles
        return {"median": self.median, "q1": q1, "q3": q3, "spread": self.spread,
                "samples": list(self.samples), "rejected": list(self.rejected),
                "calls_per_sample": self.calls_per_sample}


def _fenced(samples: Sequence[float]) -> tuple[list[float], list[float]]:
    q1, q3 = np.percentile(samples, (25, 75))
    low, high = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    kept = [s for s in samples if low <= s <= high]
    return kept, [s for s in samples if not low <= s <= high]


def measure(
    runs: Sequence[Callable[[], object]],
    samples: int,
    minimum_sample_seconds: float,
    deadline: Deadline,
) -> tuple[Measurement, ...]:
    """Time each of ``runs`` (interleaved) and return one measurement per run.

    Each run is called twice first: the first call pays for page faults of its
    output and for waking the OpenMP pool, which a steady caller never sees.
    When outliers leave fewer than :data:`MINIMUM_SAMPLES` samples, more are
    taken (at most ``samples`` more).
    """
    deadline.check()
    counts = []
    for run in runs:
        run()
        start = time.perf_counter()
        run()
        once = max(time.perf_counter() - start, 1e-9)
        counts.append(max(1, math.ceil(minimum_sample_seconds / once)))
    taken: list[list[float]] = [[] for _ in runs]
    target = max(samples, MINIMUM_SAMPLES)
    limit = 2 * target
    while True:
        while len(taken[0]) < target:
            deadline.check()
            for index, run in enumerate(runs):
                calls = counts[index]
                run()  # untimed: wakes the OpenMP pool the previous instance let sleep
                start = time.perf_counter()
                for _ in range(calls):
                    run()
                taken[index].append((time.perf_counter() - start) / calls)
        fenced = [_fenced(values) for values in taken]
        short = any(len(kept) < MINIMUM_SAMPLES for kept, _ in fenced)
        if not short or target >= limit:
            break
        target += 1
    return tuple(
        Measurement(tuple(kept), tuple(rejected), counts[index])
        for index, (kept, rejected) in enumerate(fenced)
    )
