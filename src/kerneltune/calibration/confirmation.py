"""Confirmation: whether a change from the values in use wins by more than noise.

A search proposes values from measurements a shared machine may have disturbed, and a
search that looks at many sizes finds a winner somewhere by chance. So a value replaces
the one in use only when it is confirmed: both are run interleaved, :data:`ROUNDS`
samples each (per effort), at the points where they run differently, and the new value
must win by the margin at :data:`CONFIDENCE`. The same rule demotes a shipped value on a
host (the defaults must win) and lets the corpus search advise a parameter set (it must
beat the values in use): one rule, here.

The statistic is the ratio of medians at each point (the values in use's time over the
candidate's: above 1, the candidate is faster), combined over the points by their
geometric mean. Its interval comes from a bootstrap: each point's samples are
resampled :data:`RESAMPLES` times with a fixed seed, so the same samples always get the
same verdict. The change is confirmed when the interval's lower bound is at least
``1 + margin``; otherwise the values in use stay.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .._support.checks import fields_of, is_count
from ..errors import TuningValidationError
from ..tuning.schema import TuningValue
from .context import CalibrationContext
from .measure import BudgetExhausted
from .search import Case, Workload, geometric_grid

#: the one-sided confidence a change must win at: a win by noise alone (both sides drawn
#: from one distribution) passes about once in a thousand comparisons or less
CONFIDENCE = 0.99
#: bootstrap resamples per comparison: the interval's bounds move by about 1% between seeds
RESAMPLES = 2000
#: samples per point and side, per effort: enough for the interval to separate a 20% win
#: from the margin at a few percent of noise
ROUNDS = {"quick": 8, "normal": 12, "thorough": 16}
_SEED = 20261203


@dataclass(frozen=True)
class Confirmation:
    """A comparison of a candidate with the values in use, and its verdict.

    ``ratio`` is the values in use's time over the candidate's (the geometric mean over
    ``points`` of each point's ratio of medians), ``low`` and ``high`` its interval at
    ``confidence`` (two one-sided bounds), from ``rounds`` samples per point and side.
    ``samples`` keeps them, per point the values in use's and the candidate's seconds per
    call: a bake merging several machines' calibrations pools them (see
    :mod:`kerneltune.profiles.merge`).
    """

    ratio: float
    low: float
    high: float
    points: int
    rounds: int
    margin: float
    confidence: float = CONFIDENCE
    samples: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...] = ()

    @property
    def confirmed(self) -> bool:
        return self.low >= 1.0 + self.margin

    @property
    def verdict(self) -> str:
        return "confirmed" if self.confirmed else "not confirmed"

    def describe(self) -> str:
        if not self.points:
            return "not compared: no size of the workload runs them differently"
        return (f"{self.ratio:.3f}x the values in use ({self.confidence:.0%} interval "
                f"{self.low:.3f} to {self.high:.3f}) over {self.points} points, {self.rounds} "
                f"rounds: {self.verdict} (margin {self.margin:.0%})")

    def to_dict(self) -> dict[str, object]:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "points": self.points,
                "rounds": self.rounds, "margin": self.margin, "confidence": self.confidence,
                "confirmed": self.confirmed,
                "samples": [[list(in_use), list(candidate)] for in_use, candidate in self.samples]}

    @classmethod
    def from_dict(cls, data: object) -> Confirmation:
        """The comparison :meth:`to_dict` wrote; a ValueError names a field that is not.

        ``samples`` may be absent (a report written before they were kept): nothing to pool.
        """
        fields = fields_of(data, {"ratio": float, "low": float, "high": float,
                                  "points": int, "rounds": int, "margin": float,
                                  "confidence": float})
        samples = data.get("samples", [])
        if not (isinstance(samples, list) and all(_is_point(point) for point in samples)):
            raise ValueError("'samples' is not a list of points, each two lists of positive "
                             "seconds")
        return cls(**fields, samples=tuple((tuple(map(float, a)), tuple(map(float, b)))
                                           for a, b in samples))


def _is_point(point: object) -> bool:
    """Whether ``point`` is a comparison's point: the two sides' samples, in seconds."""
    return (isinstance(point, list) and len(point) == 2
            and all(isinstance(side, list) and side and all(
                isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s)
                and s > 0 for s in side) for side in point))


def confirm(in_use: Sequence[Sequence[float]], candidate: Sequence[Sequence[float]],
            margin: float, confidence: float = CONFIDENCE) -> Confirmation:
    """Whether ``candidate`` beats ``in_use`` by ``margin`` at ``confidence``.

    Each is a sequence of points, each point the samples (seconds per call) of one side
    there. Without a point, nothing is confirmed.
    """
    # a sample faster than the clock's resolution still took some time
    pairs = [(np.maximum(np.asarray(a, dtype=float), 1e-12),
              np.maximum(np.asarray(b, dtype=float), 1e-12))
             for a, b in zip(in_use, candidate, strict=True) if len(a) and len(b)]
    if not pairs:
        return Confirmation(1.0, 1.0, 1.0, 0, 0, margin, confidence)
    generator = np.random.default_rng(_SEED)
    resampled = np.zeros(RESAMPLES)
    observed = 0.0
    for a, b in pairs:
        medians_a = np.median(a[generator.integers(0, len(a), (RESAMPLES, len(a)))], axis=1)
        medians_b = np.median(b[generator.integers(0, len(b), (RESAMPLES, len(b)))], axis=1)
        resampled += np.log(medians_a / medians_b)
        observed += math.log(float(np.median(a)) / float(np.median(b)))
    resampled /= len(pairs)
    low, high = np.quantile(resampled, (1.0 - confidence, confidence))
    return Confirmation(math.exp(observed / len(pairs)), math.exp(float(low)),
                        math.exp(float(high)), len(pairs), min(len(a) for a, _ in pairs),
                        margin, confidence,
                        tuple((tuple(map(float, a)), tuple(map(float, b))) for a, b in pairs))


#: sizes per octave around a threshold a change moves: a threshold's band is one to a few
#: octaves wide
STEPS_PER_OCTAVE = 2
#: the points one comparison measures at most, spread over those where the configs differ
MAXIMUM_POINTS = 4


def points_between(cases: Sequence[tuple[Case, int]], values: Mapping[str, TuningValue],
                   other: Mapping[str, TuningValue]) -> list[tuple[Case, int]]:
    """The sizes of each workload case at which two sets of values may run differently.

    A case is measured around every integer threshold the two sets put apart: on a grid
    of two sizes per octave from the lower value to twice the higher one (a threshold
    may count work per thread, so that calls switch at twice it), rounded as its sizes
    are, within the range of its workload sizes. A case no threshold falls on (one
    counted in other units) is measured at its workload sizes.
    """
    bands = [tuple(sorted((int(values[name]), int(other[name])))) for name in values
             if values[name] != other.get(name)
             and is_count(values[name], 1) and is_count(other.get(name), 1)]
    groups: dict[str, list[tuple[Case, int]]] = {}
    for case, size in cases:
        groups.setdefault(case.name, []).append((case, size))
    points = []
    for group in groups.values():
        sizes = sorted({size for _, size in group})
        multiple = math.gcd(*sizes)
        near = sorted({size for low, high in bands
                       for size in geometric_grid(low, 2 * high, STEPS_PER_OCTAVE, multiple)
                       if low <= size <= 2 * high and sizes[0] <= size <= sizes[-1]})
        points += [(group[0][0], size) for size in near] if near else group
    return points


def compare_values(context: CalibrationContext, workload: Workload,
                   in_use: Mapping[str, TuningValue], candidate: Mapping[str, TuningValue]
                   ) -> Confirmation:
    """``candidate`` against ``in_use`` (each applied to the context's values) on
    ``workload``, at the points where they run differently, :data:`ROUNDS` samples each,
    outputs compared first (a difference is a :class:`~kerneltune.CalibrationError`).

    Raises :class:`~.measure.BudgetExhausted` when the key's budget runs out.
    """
    configs = {"in use": context.configure(in_use), "candidate": context.configure(candidate)}
    points = [(case, size) for case, size in points_between(workload.cases, candidate, in_use)
              if context.fits(case.nbytes(size))
              and (workload.differs is None
                   or workload.differs(configs["in use"], configs["candidate"], case, size))]
    rounds = ROUNDS.get(context.options.effort, ROUNDS["normal"])
    runs = {name: workload.make_run(config) for name, config in configs.items()}
    samples: dict[str, list[tuple[float, ...]]] = {"in use": [], "candidate": []}
    for case, size in _spread(points, MAXIMUM_POINTS):
        inputs = case.inputs(size)
        context.check(case.name, size, {name: run(*inputs) for name, run in runs.items()},
                      workload.tolerance)
        measured = context.measure({name: (lambda run=run, inputs=inputs: run(*inputs))
                                    for name, run in runs.items()}, rounds)
        for name in samples:
            samples[name].append(measured[name].samples)
    return confirm(samples["in use"], samples["candidate"], context.options.minimum_margin)


def _spread(points: Sequence[tuple[Case, int]], most: int) -> list[tuple[Case, int]]:
    """At most ``most`` of ``points``, evenly over them, the first and last included."""
    if len(points) <= most:
        return list(points)
    return [points[round(i * (len(points) - 1) / (most - 1))] for i in range(most)]


def confirm_decisions(context: CalibrationContext, workload: Workload | None) -> None:
    """Each change the searches decided, in their order, against the values in use.

    The values compared grow one confirmed change at a time: a change is
    compared with the values in use plus the changes confirmed before it, so
    the values published are exactly the ones the last comparison measured.
    A change not confirmed (or one the budget leaves uncompared) goes back to
    its value in use, a decision of its own with the comparison and why. A
    key whose function offers no workload cannot be compared: its changes
    stand on the searches' own evidence, as each says.
    """
    if workload is None:
        return
    changes = [d for d in {d.parameter: d for d in context.decisions}.values() if d.changed]
    accepted = dict(context.baseline)
    turned_down: dict[str, str] = {}
    comparisons: dict[str, Confirmation] = {}
    for index, decision in enumerate(changes):
        candidate = {**accepted, decision.parameter: decision.value}
        try:
            confirmation = compare_values(context, workload, accepted, candidate)
        except BudgetExhausted as exhausted:
            for late in changes[index:]:
                turned_down[late.parameter] = (f"kept: {late.value} was not confirmed: the "
                                               f"{exhausted} time budget ran out first")
            break
        except TuningValidationError as error:
            turned_down[decision.parameter] = (f"kept: {decision.value} was not confirmed: it "
                                               f"cannot run without changes not confirmed "
                                               f"({error})")
            continue
        if confirmation.confirmed:
            accepted = candidate
            context.confirmed(decision.parameter, confirmation)
        else:
            turned_down[decision.parameter] = (f"kept: {decision.value} was not confirmed, "
                                               f"{confirmation.describe()}")
            comparisons[decision.parameter] = confirmation
    context.revert(turned_down, comparisons)
