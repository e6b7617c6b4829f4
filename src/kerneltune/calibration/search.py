"""The searches every kernel shares: a crossover on a size grid, a thread count, a value set.

Each runs the kernel's real configured instances through a
:class:`~.context.CalibrationContext`, checks their outputs against each other
before a timing counts, and replaces the value in use only on a clear win: by
the minimum margin at the median, quartiles apart, and (for crossovers and
thread counts) at two consecutive sizes. Anything less keeps the value in use,
and the decision says why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..tuning.schema import TuningValue
from .context import CalibrationContext, Tolerance
from .measure import BudgetExhausted
from .report import MEASURED, PREVIOUS, SELECTED, Candidate, Decision, Mark

Run = Callable[..., np.ndarray]

#: outcomes of one crossover measurement
ABOVE, BELOW, OVERLAP = "above", "below", "overlap"

#: How far apart two calibrations of one key measure its crossover, in octaves of size, unless
#: a :class:`Crossover` says otherwise: values that are to repeat need a dead band that wide,
#: and a grid finer than the band measures no better (docs/calibration.md, The resolution
#: rule), so normal effort's grid has one size per octave.
RESOLUTION_OCTAVES = 1.0
#: grid sizes are rounded to the kernels' alignment, so octaves between them are not exact
_ROUNDING_OCTAVES = 0.1
#: Independent measurements a comparison's win must hold in, at every effort (more if the
#: effort's rounds say so): a crossover already needs two consecutive wins, and a win on
#: one measurement of each setting does not repeat (docs/calibration.md). Measuring again
#: costs two settings' time, and only when one seems to beat the value in use.
COMPARISON_ROUNDS = 2


def geometric_grid(low: int, high: int, steps_per_octave: int, multiple: int = 1) -> list[int]:
    """Sizes from ``low`` to ``high`` growing by ``2 ** (1 / steps_per_octave)``.

    Rounded to ``multiple`` (the kernels' chunk alignment, say), without repeats.
    """
    sizes: list[int] = []
    steps = int(math.floor(math.log2(high / low) * steps_per_octave + 1e-9)) if high >= low else -1
    for step in range(steps + 1):
        size = low * 2.0 ** (step / steps_per_octave)
        size = max(multiple, int(round(size / multiple)) * multiple)
        if not sizes or size > sizes[-1]:
            sizes.append(size)
    return sizes


@dataclass(frozen=True)
class Case:
    """One workload: a label, the inputs for a size (or shape), their bytes with the output.

    ``unit`` says what a size counts ("elements per call", "N (N x N by N x N)"): the
    kernel library knows, and a report's plot labels its axis with it.
    """

    name: str
    inputs: Callable[[int], Sequence[object]]
    nbytes: Callable[[int], int]
    unit: str = "size"


@dataclass(frozen=True)
class Workload:
    """What a key is compared on, outside its searches: cases at sizes, a run for a typed
    config, and how close two outputs must be.

    ``differs(a, b, case, size)`` says whether configs ``a`` and ``b`` run a case
    differently at a size (another path, another thread count): a comparison measures
    them there only. Without it, every point a comparison picks is measured.
    """

    cases: Sequence[tuple[Case, int]]
    make_run: Callable[[Any], Run]
    tolerance: Tolerance | None = None
    differs: Callable[[Any, Any, Case, int], bool] | None = None


@dataclass(frozen=True)
class Crossover:
    """Where ``above`` starts to beat ``below`` on growing sizes, and the value that says so.

    ``value_of(size)`` turns the smallest size of two consecutive wins into
    the parameter's value; ``baseline_size`` is where the value in use switches;
    ``resolution`` is how many octaves of size apart two calibrations measure
    this crossover (see :func:`record_crossover`). ``parallel_above``: ``below``
    is the serial path and ``above`` the parallel one, so a value moved up runs
    more calls on fewer threads.
    """

    parameter: str
    case: Case
    sizes: Sequence[int]
    below: tuple[str, Run]
    above: tuple[str, Run]
    value_of: Callable[[int], int]
    baseline_size: int
    tolerance: Tolerance | None = None
    resolution: float = RESOLUTION_OCTAVES
    parallel_above: bool = False

    def __post_init__(self):
        if not self.resolution > 0:
            raise ValueError(f"{self.parameter}: resolution must be a positive number of "
                             f"octaves, got {self.resolution!r}")


def _outcome(context: CalibrationContext, case: Case, point: TuningValue, inputs: Sequence,
             runs: Mapping[str, Run], tolerance: Tolerance | None) -> Candidate:
    """Check the outputs of ``runs`` on ``inputs``, then measure them all interleaved."""
    context.check(case.name, point, {name: run(*inputs) for name, run in runs.items()},
                  tolerance)
    measurements = context.measure({name: (lambda run=run: run(*inputs))
                                    for name, run in runs.items()})
    return Candidate(case.name, point, measurements, "measured", case.unit)


def _with_outcome(candidate: Candidate, outcome: str) -> Candidate:
    return dataclasses.replace(candidate, outcome=outcome)


def search_crossover(context: CalibrationContext, problem: Crossover) -> tuple[int | None, str,
                                                                               list[Candidate]]:
    """Where ``above`` starts to win, found from the value in use outwards; None keeps it.

    The search starts at the grid size nearest to where the value in use
    switches and moves only on evidence: down while ``above`` keeps winning
    there (the crossover is then the smallest size of two consecutive wins; a
    win at the start is confirmed by the next size up, or else by the next one
    down), up while ``below`` keeps winning (the crossover follows the last two
    consecutive wins of ``below``, and is the largest size when they reach it:
    as far as the measurements go). A walk, its first step included, steps over
    one size that does not confirm; the crossover still needs two consecutive
    wins, or a win of ``below`` at the start, a tie at the next size and a win
    of ``above`` at the one after (the crossover is then the tie). A tie whose
    medians lie a margin apart is measured once more, since its spread made it
    one; a tie at the start keeps the value in use. Each win is measured twice
    (independently) at normal and thorough effort, so one burst of noise cannot
    move a threshold. docs/calibration.md gives the reason for each rule.
    """
    if len(problem.sizes) < 2:
        return None, f"the search needs two sizes and its grid has {len(problem.sizes)}", []
    sizes = [s for s in problem.sizes if context.fits(problem.case.nbytes(s))]
    if len(sizes) < 2:
        return None, (f"memory budget of {context.options.memory_budget} bytes: the search "
                      f"needs two sizes and the smallest takes "
                      f"{problem.case.nbytes(problem.sizes[0])} bytes"), []
    (below_name, below), (above_name, above) = problem.below, problem.above
    candidates: list[Candidate] = []
    outcomes: dict[int, str] = {}
    margin = context.options.minimum_margin
    runs = {below_name: below, above_name: above}

    def measured(index: int) -> str:
        size = sizes[index]
        candidate = _outcome(context, problem.case, size, problem.case.inputs(size), runs,
                             problem.tolerance)
        m = candidate.measurements
        if m[above_name].beats(m[below_name], margin):
            outcome = ABOVE
        elif m[below_name].beats(m[above_name], margin):
            outcome = BELOW
        else:
            outcome = OVERLAP
        label = {ABOVE: f"{above_name} wins", BELOW: f"{below_name} wins"}.get(outcome, outcome)
        candidates.append(_with_outcome(candidate, label))
        return outcome

    def apart(candidate: Candidate) -> bool:
        low, high = sorted(m.median for m in candidate.measurements.values())
        return high >= low * (1.0 + margin)

    def judged(index: int) -> str:
        outcome = measured(index)
        if outcome == OVERLAP and apart(candidates[-1]):
            outcome = measured(index)
        return outcome

    def outcome(index: int) -> str:
        if index not in outcomes:
            first = judged(index)
            for _ in range(1, context.options.level.rounds):
                again = OVERLAP if first == OVERLAP else judged(index)
                if again != first:
                    if OVERLAP not in (first, again):
                        names = {ABOVE: above_name, BELOW: below_name}
                        context.contradict(f"{problem.parameter}: {problem.case.name} at "
                                           f"{sizes[index]}: {names[first]} won, then "
                                           f"{names[again]}")
                    first = OVERLAP
                    break
            outcomes[index] = first
        return outcomes[index]

    start = min(range(len(sizes)), key=lambda i: abs(math.log(sizes[i] / problem.baseline_size)))
    where = f"{problem.case.name} (margin {margin:.0%})"
    try:
        side = outcome(start)
        if side == ABOVE and (_step(outcome, ABOVE, start, 1, len(sizes)) > start
                              or _step(outcome, ABOVE, start, -1, len(sizes)) < start):
            lowest = _walk(outcome, ABOVE, start, -1, len(sizes))
            wins = [i for i in range(lowest, min(start + 1, len(sizes) - 1))
                    if outcome(i) == ABOVE and outcome(i + 1) == ABOVE]
            if wins:
                return sizes[wins[0]], (f"{above_name} beats {below_name} on {where} from size "
                                        f"{sizes[wins[0]]} on"), candidates
        if side == BELOW and (highest := _walk(outcome, BELOW, start, 1, len(sizes))) > start:
            wins = [i for i in range(start + 1, highest + 1)
                    if outcome(i) == BELOW and outcome(i - 1) == BELOW]
            if wins and wins[-1] + 1 == len(sizes):  # at least the largest size
                return sizes[-1], (f"{below_name} beats {above_name} on {where} up to the "
                                   f"largest size, {sizes[-1]}"), candidates
            if wins:
                return sizes[wins[-1] + 1], (f"{below_name} beats {above_name} on {where} below "
                                             f"size {sizes[wins[-1] + 1]}"), candidates
        if (side == BELOW and start + 2 < len(sizes) and outcome(start + 1) == OVERLAP
                and outcome(start + 2) == ABOVE):  # both measured by the walk's first step
            return sizes[start + 1], (f"{below_name} beats {above_name} on {where} at size "
                                      f"{sizes[start]}, loses at {sizes[start + 2]} and ties "
                                      f"between"), candidates
    except BudgetExhausted as exhausted:
        context.stop(str(exhausted))
        return None, f"{exhausted} time budget exhausted during the search", candidates
    return None, (f"no clear winner on {where} at two consecutive sizes from {sizes[start]}, "
                  f"where the value in use switches"), candidates


def _step(outcome: Callable[[int], str], side: str, index: int, step: int, count: int) -> int:
    """The index one step of a walk reaches from ``index``; ``index`` when ``side`` stops winning.

    One size that does not confirm the win is stepped over when the next one
    does: the advantage of one side grows steadily with size, so a lone gap
    is noise and should not end the walk.
    """
    for reach in (index + step, index + 2 * step):
        if 0 <= reach < count and outcome(reach) == side:
            return reach
    return index


def _walk(outcome: Callable[[int], str], side: str, index: int, step: int, count: int) -> int:
    """The farthest index reached from ``index`` by steps while ``side`` keeps winning."""
    reached, previous = index, None
    while reached != previous:
        reached, previous = _step(outcome, side, reached, step, count), reached
    return reached


def decide_crossover(context: CalibrationContext, problem: Crossover) -> Decision:
    """Run :func:`search_crossover` and record the decision for ``problem.parameter``."""
    size, reason, candidates = search_crossover(context, problem)
    return record_crossover(context, problem, size, reason, candidates)


def decide_shared_crossover(context: CalibrationContext, problems: Sequence[Crossover]
                            ) -> Decision:
    """One parameter that serves several cases moves only as far as every case gains.

    Each problem is searched on its own and its crossover taken as a
    parameter value (so cases on different size scales compare). When all of
    them lie above the value in use, the value moves toward the lowest; when
    all lie below, toward the highest. Moving further would run a case on
    the slower side between its crossover and the new value, where the
    default ran it on the faster one: calibrated values are never to be
    slower than the defaults. Crossovers on both sides of the value in use,
    or a case without one (no clear winner near the value in use, or no
    search), keep it.
    """
    found, reasons, candidates = [], [], []
    for problem in problems:
        size, reason, measured = search_crossover(context, problem)
        found.append((problem, size))
        reasons.append(f"{problem.case.name}: {reason}")
        candidates += measured
    reason = "; ".join(reasons)
    if any(size is None for _, size in found):
        return record_crossover(context, problems[0], None, reason, candidates, found)
    in_use = int(context.values[problems[0].parameter])
    values = [problem.value_of(size) for problem, size in found]
    if all(value >= in_use for value in values):
        problem, size = found[values.index(min(values))]
    elif all(value <= in_use for value in values):
        problem, size = found[values.index(max(values))]
    else:
        return record_crossover(context, problems[0], None,
                                f"the cases' crossovers lie on both sides of the value in use; "
                                f"{reason}", candidates, found)
    return record_crossover(context, problem, size, reason, candidates, found)


def record_crossover(context: CalibrationContext, problem: Crossover, size: int | None,
                     reason: str, candidates: Sequence[Candidate],
                     found: Sequence[tuple[Crossover, int | None]] = ()) -> Decision:
    """The decision for a crossover measured at ``size`` (None: none found, keep the value).

    A value in use that switches within the problem's ``resolution`` of the
    measured crossover (either side) is as good as the measurements can tell,
    and is kept; so is one below the sizes searched when ``above`` wins from the
    smallest on. A crossover farther away moves the value to the grid size as
    far short of it, toward the value in use. Stopping short keeps the
    decision continuous: crossovers measured one grid step apart give values
    at most one step apart, where keeping the whole band around the value in
    use and moving to the crossover beyond it would put the band between them.

    ``found`` holds each case's problem and crossover when several cases share
    the parameter (default: ``problem`` at ``size``); the decision's marks place
    them, and where the kept value switches on each case's axis. A moved value
    is marked on ``problem``'s case, the only axis it was set on.
    """
    found = found or [(problem, size)]
    crossovers = [Mark(p.case.name, s, MEASURED) for p, s in found if s is not None]
    in_use = [Mark(p.case.name, p.baseline_size, SELECTED) for p, _ in found]
    if size is None:
        return context.keep(problem.parameter, f"kept: {reason}", candidates,
                            marks=in_use + crossovers)
    measured = problem.value_of(size)
    octaves = math.log2(problem.baseline_size / size)
    band = problem.resolution
    unit = "octave" if band == 1 else "octaves"
    if size == problem.sizes[0] and problem.baseline_size < size:
        return context.keep(problem.parameter,
                            f"kept: the value in use switches below the sizes searched, so it "
                            f"runs each on the side that won there; {reason}", candidates,
                            measured, in_use + crossovers)
    if abs(octaves) <= band + _ROUNDING_OCTAVES:
        return context.keep(problem.parameter,
                            f"kept: the value in use switches within {band:g} {unit} of the "
                            f"measured crossover; {reason}", candidates, measured,
                            in_use + crossovers)
    target = math.log2(size) + math.copysign(band, octaves)
    short = min(problem.sizes, key=lambda s: abs(math.log2(s) - target))
    value = problem.value_of(short)
    previous = [dataclasses.replace(mark, role=PREVIOUS) for mark in in_use]
    return context.decide(problem.parameter, value,
                          f"{reason}; set {band:g} {unit} short of it ({short}), toward the "
                          f"value in use", candidates, measured,
                          problem.parallel_above and value > context.values[problem.parameter],
                          [Mark(problem.case.name, short, SELECTED), *previous, *crossovers])


@dataclass(frozen=True)
class Setting:
    """One candidate of a comparison: its label and the run configured with it."""

    label: str
    values: Mapping[str, TuningValue]
    run: Run


@dataclass(frozen=True)
class Comparison:
    """Settings timed on the same cases; the first is the baseline."""

    cases: Sequence[tuple[Case, int]]
    settings: Sequence[Setting]
    tolerance: Tolerance | None = None


@dataclass(frozen=True)
class ComparisonResult:
    """The setting chosen, why, seconds and speedup per setting, and what was measured."""

    chosen: Setting
    reason: str
    table: tuple[Mapping[str, object], ...] = ()
    candidates: tuple[Candidate, ...] = ()


def _timed(context: CalibrationContext, comparison: Comparison, settings: Sequence[Setting],
           measured: list[Candidate]) -> tuple[dict[str, float], list[Candidate]]:
    """The sum over the comparison's cases of each setting's median, and what was measured.

    Each case measured is also added to ``measured``, so a budget running out
    midway loses nothing of what the report shows.
    """
    runs = {s.label: s.run for s in settings}
    totals = dict.fromkeys(runs, 0.0)
    per_case: list[Candidate] = []
    for case, size in comparison.cases:
        if not context.fits(case.nbytes(size)):
            continue
        candidate = _outcome(context, case, size, case.inputs(size), runs, comparison.tolerance)
        per_case.append(candidate)
        measured.append(candidate)
        for label, measurement in candidate.measurements.items():
            totals[label] += measurement.median
    return totals, per_case


def _speedup(per_case: Sequence[Candidate], label: str, baseline: str) -> float:
    """The geometric mean over the cases of the baseline's median over ``label``'s.

    Every case counts alike: summed times let the longest case decide alone, and the
    cases' sizes are the callback's choice, not a workload's weights.
    """
    return math.exp(sum(math.log(c.measurements[baseline].median / c.measurements[label].median)
                        for c in per_case) / len(per_case))


def _loss(context: CalibrationContext, per_case: Sequence[Candidate], best: str,
          baseline: str) -> str | None:
    """Why ``best`` does not clearly beat ``baseline`` in these measurements (None: it does)."""
    margin = context.options.minimum_margin
    if _speedup(per_case, best, baseline) < 1 + margin:
        return f"it beats the value in use by less than {margin:.0%}"
    slower = [c.case + f" at {c.point}" for c in per_case
              if c.measurements[best].median > c.measurements[baseline].median * (1 + margin)]
    return f"it is slower than the value in use on {', '.join(slower)}" if slower else None


def compare_settings(context: CalibrationContext, comparison: Comparison) -> ComparisonResult:
    """Time every setting on every case; the fastest wins if it beats the baseline clearly.

    The fastest has the highest speedup over the baseline (:func:`_speedup`). It
    must beat the baseline by the minimum margin there and be no slower on any
    case by the margin; otherwise the baseline stays. The
    winner and the baseline are then measured again on every case
    (:data:`COMPARISON_ROUNDS`), and the win must hold there too: a baseline
    whose samples caught a stalled thread can look several times slower once.
    """
    settings = comparison.settings
    baseline = settings[0].label
    measured: list[Candidate] = []
    try:
        totals, per_case = _timed(context, comparison, settings, measured)
        if not per_case:
            return ComparisonResult(settings[0], f"kept: memory budget of "
                                                 f"{context.options.memory_budget} bytes leaves "
                                                 f"no case to compare")
        speedups = {s.label: _speedup(per_case, s.label, baseline) for s in settings}
        table = tuple({"label": s.label, "values": dict(s.values), "seconds": totals[s.label],
                       "speedup": speedups[s.label]} for s in settings)
        best = max(settings, key=lambda s: speedups[s.label])
        if best.label == baseline:
            return ComparisonResult(best, f"kept: the value in use was fastest over "
                                          f"{len(per_case)} cases", table, tuple(per_case))
        why = _loss(context, per_case, best.label, baseline)
        for _ in range(1, max(COMPARISON_ROUNDS, context.options.level.rounds)):
            if why is not None:
                break
            _, repeated = _timed(context, comparison, [settings[0], best], measured)
            why = _loss(context, repeated, best.label, baseline)
            if why is not None:
                why = f"its win did not hold when measured again: {why}"
    except BudgetExhausted as exhausted:
        context.stop(str(exhausted))
        return ComparisonResult(settings[0], f"kept: {exhausted} time budget exhausted during "
                                             f"the comparison", (), tuple(measured))
    if why is not None:
        return ComparisonResult(settings[0], f"kept: {best.label} was fastest but {why}", table,
                                tuple(measured))
    return ComparisonResult(best, f"{best.label} is {speedups[best.label]:.2f}x the value in use "
                                  f"over {len(per_case)} cases (geometric mean)", table,
                            tuple(measured))


def search_threads(context: CalibrationContext, parameter: str, case: Case,
                   sizes: Sequence[int], runs: Mapping[int, Run], baseline: int) -> Decision:
    """Fewer (or more) threads than the value in use, if they win at both of two large sizes.

    At normal and thorough effort both sizes are measured twice, and a count
    must win every time. A count that loses once is measured no more, and
    the search ends when none is left: where more threads help, after the
    first and smaller size, a third of the cost of measuring both (a sixth at
    normal effort). ``runs`` holds the value in use (``baseline``, or the
    largest count where that is above it).
    """
    effective = min(baseline, max(runs))
    if effective not in runs:
        raise ValueError(f"{parameter}: no run for the value in use, {effective} threads")
    reference = f"{effective} threads"
    contenders = [count for count in sorted(runs) if count != effective]
    sizes = [s for s in sizes if context.fits(case.nbytes(s))][-2:]
    if len(sizes) < 2:
        return context.keep(parameter, f"kept: memory budget of {context.options.memory_budget} "
                                       f"bytes leaves fewer than two large sizes")
    candidates: list[Candidate] = []
    margin = context.options.minimum_margin
    try:
        for size in sizes * context.options.level.rounds:
            if not contenders:
                break
            named = {f"{count} threads": runs[count] for count in (effective, *contenders)}
            candidates.append(_outcome(context, case, size, case.inputs(size), named, None))
            measured = candidates[-1].measurements
            contenders = [count for count in contenders
                          if measured[f"{count} threads"].beats(measured[reference], margin)]
    except BudgetExhausted as exhausted:
        context.stop(str(exhausted))
        return context.keep(parameter, f"kept: {exhausted} time budget exhausted", candidates)
    if not contenders:
        return context.keep(parameter, f"kept: no thread count beats {effective} by "
                                       f"{margin:.0%} at both of sizes {sizes}", candidates)
    best = min(contenders, key=lambda count: sum(c.measurements[f"{count} threads"].median
                                                 for c in candidates))
    return context.decide(parameter, best, f"{best} threads beat {effective} by {margin:.0%} "
                                           f"at sizes {sizes}", candidates,
                          fewer_threads=best < effective)
