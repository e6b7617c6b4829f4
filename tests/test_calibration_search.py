"""The shared searches: crossovers, shared grains, comparisons, thread caps, grids.

They run on synthetic measurements, so what they decide is checked exactly,
without timing anything.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import ToyConfig, measurement_of, toy_key
from kerneltune import CalibrationError
from kerneltune.calibration import CalibrationOptions, Case, Comparison, Crossover, Setting
from kerneltune.calibration.context import CalibrationContext
from kerneltune.calibration.measure import Deadline, Measurement
from kerneltune.calibration.report import MEASURED, PREVIOUS, SELECTED, Mark
from kerneltune.calibration.search import (
    compare_settings,
    decide_crossover,
    decide_shared_crossover,
    geometric_grid,
    search_threads,
)
from kerneltune.machine.detect import current_execution


def _context(registry_key=None, values=None, **options) -> CalibrationContext:
    from kerneltune.tuning.schema import KernelTuningSchema

    key = registry_key or toy_key()
    schema = KernelTuningSchema.from_config(key, ToyConfig)
    return CalibrationContext(key, schema, current_execution(1),
                              CalibrationOptions(**options),
                              {**schema.default_values(), **(values or {})},
                              Deadline(float("inf"), "per-key"))


def _synthetic(context, timing):
    """Replace measuring by ``timing(name, size) -> seconds``; return the sizes measured."""
    measured = []

    def fake(runs):
        size = context._current_size
        measured.append(size)
        return {name: measurement_of(timing(name, size)) for name in runs}

    context.measure = fake
    return measured


def _crossover_problem(context, sizes, baseline_size):
    def inputs(size):
        context._current_size = size
        return (np.zeros(1),)

    case = Case("unary", inputs, lambda size: size * 8)
    same = np.copy
    return Crossover("parallel.minimum_elements", case, sizes, ("serial", same),
                     ("parallel", same), lambda size: size // 2, baseline_size)


SIZES = [1024 * 2**i for i in range(10)]  # 1024 .. 524288


def test_the_crossover_is_the_first_of_two_consecutive_wins():
    """Parallel wins from 16384 on: the value stops one step short, at 32768 // 2."""
    context = _context()
    measured = _synthetic(context, lambda name, n: 1.0 if name == "serial" or n < 16384 else 0.5)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert decision.value == 16384 and decision.changed and decision.measured == 8192
    assert "from size 16384 on" in decision.reason and "short of it (32768)" in decision.reason
    assert decision.to_dict()["measured"] == 8192
    assert 65536 in measured and 2048 not in measured  # searched around, not everywhere
    assert max(measured) == 131072  # a win at the start is confirmed by the next size only
    assert context.values["parallel.minimum_elements"] == 16384
    assert all(len(c.measurements) == 2 for c in decision.candidates)


def test_a_walk_steps_over_one_size_that_does_not_confirm():
    context = _context()
    _synthetic(context, lambda name, n: 1.0 if name == "serial" or n < 8192 or n == 32768
               else 0.5)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert "from size 8192 on" in decision.reason and decision.value == 8192


def test_the_first_step_from_the_start_may_step_over_one_size():
    """Below wins at the start and beyond, except at the next size: the walk goes on."""
    context = _context()
    _synthetic(context, lambda name, n: 1.5 if name == "parallel" and n != 131072 else 1.0)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert "up to the largest size" in decision.reason and decision.changed
    assert decision.measured == SIZES[-1] // 2


def test_a_win_at_the_start_is_confirmed_below_when_the_next_sizes_up_tie():
    """``above``'s advantage shrinks with size (the skinny Gemm path in FLOAT16, blocked
    being above): it wins from 4096 to the start and ties beyond, and the walk goes down."""
    context = _context()
    _synthetic(context, lambda name, n: 0.5 if name == "parallel" and 4096 <= n <= 65536
               else 1.0)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert "from size 4096 on" in decision.reason and decision.measured == 2048
    assert decision.changed


def test_a_win_at_the_largest_size_is_confirmed_below():
    """The start is the grid's last size: nothing above it to confirm a win there."""
    context = _context()
    _synthetic(context, lambda name, n: 0.5 if name == "parallel" and n >= 131072 else 1.0)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, SIZES[-1]))
    assert "from size 131072 on" in decision.reason and decision.measured == 65536


def _settings_comparison(context, timings):
    """Two settings, "in use" and "other", on two cases; ``timings`` gives each round's seconds."""
    rounds = iter(timings)

    def fake(runs):
        seconds = next(rounds)
        return {name: measurement_of(seconds[name]) for name in runs}

    context.measure = fake
    case = Case("unary", lambda size: (np.zeros(1),), lambda size: 8)
    settings = [Setting(label, {"parallel.minimum_elements": value}, np.copy)
                for label, value in (("in use", 32768), ("other", 4096))]
    return compare_settings(context, Comparison([(case, 1), (case, 2)], settings))


@pytest.mark.parametrize("effort", ["quick", "normal"])
def test_a_comparison_win_must_hold_when_measured_again(effort):
    """A baseline caught by a stalled thread once looks slow once: its rival must win twice,
    at quick effort too (one measurement moved quick calibrations' tile sets)."""
    stalled, clean = {"in use": 3.0, "other": 1.0}, {"in use": 1.0, "other": 1.0}
    result = _settings_comparison(_context(effort=effort), [stalled, stalled, clean, clean])
    assert result.chosen.label == "in use" and "did not hold" in result.reason
    assert len(result.candidates) == 4


@pytest.mark.parametrize("effort", ["quick", "normal"])
def test_a_comparison_win_that_holds_is_chosen(effort):
    faster = {"in use": 1.0, "other": 0.5}
    result = _settings_comparison(_context(effort=effort), [faster] * 4)
    assert result.chosen.label == "other" and "2.00x" in result.reason
    assert len(result.candidates) == 4


def test_a_comparison_counts_every_case_alike_whatever_its_length():
    """7% faster on the long case and even on the short one: 6.8% of the summed time, 3.7%
    in the geometric mean of the speedups. The cases' sizes are the callback's choice."""
    long_case, short_case = {"in use": 1.0, "other": 0.93}, {"in use": 0.1, "other": 0.1}
    result = _settings_comparison(_context(), [long_case, short_case] * 2)
    assert result.chosen.label == "in use" and "less than 5%" in result.reason
    assert [row["speedup"] for row in result.table] == pytest.approx([1.0, (1 / 0.93) ** 0.5])


def test_a_comparison_win_on_every_case_is_chosen_whatever_their_lengths():
    faster = [{"in use": 1.0, "other": 0.9}, {"in use": 0.1, "other": 0.09}]
    result = _settings_comparison(_context(), faster * 2)
    assert result.chosen.label == "other" and "1.11x" in result.reason


@pytest.mark.parametrize("parallel", [0.5, 1.5])
def test_a_lone_win_is_noise(parallel):
    """Wins of either side at the start and a step over, never two consecutive: kept."""
    context = _context()
    _synthetic(context, lambda name, n: parallel if name == "parallel" and n in (65536, 262144)
               else 1.0)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert not decision.changed and "no clear winner" in decision.reason


def test_a_tie_between_wins_of_each_side_is_the_crossover():
    """Serial wins at the start, ties one size up and loses at the next: it crosses over there."""
    context = _context()
    measured = _synthetic(context, lambda name, n: 1.0 if name == "serial" else
                          1.5 if n < 131072 else 0.99 if n == 131072 else 0.5)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert decision.measured == 131072 // 2 and "ties between" in decision.reason
    assert not decision.changed  # an octave from the value in use
    assert set(measured) == {65536, 131072, 262144}  # what the walk's first step measures
    assert measured.count(131072) == 1  # medians within the margin: a tie, not noise


@pytest.mark.parametrize("noisy_at", [1, 2], ids=["first measurement", "confirmation"])
def test_an_overlap_of_medians_a_margin_apart_is_measured_again(noisy_at):
    """Quartiles that overlap around medians twice apart are noise: the measurement is
    taken once more, and the clean wins go on with the walk."""
    context = _context(effort="normal")
    noisy = Measurement((0.4, 0.5, 0.5, 1.1, 1.2), (), 1)
    measured = []

    def fake(runs):
        size = context._current_size
        measured.append(size)
        if size == 16384 and measured.count(size) == noisy_at:
            return {"serial": measurement_of(1.0), "parallel": noisy}
        return {name: measurement_of(1.0 if name == "serial" or size < 16384 else 0.5)
                for name in runs}

    context.measure = fake
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert "from size 16384 on" in decision.reason and decision.value == 16384
    assert measured.count(16384) == 3  # a win measured twice, and the noisy measurement
    outcomes = [c.outcome for c in decision.candidates if c.point == 16384]
    assert outcomes[noisy_at - 1] == "overlap"


def test_overlapping_measurements_keep_the_value_in_use():
    context = _context()
    _synthetic(context, lambda name, n: 1.0 if name == "serial" else 0.97)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert decision.value == 32768 and not decision.changed and decision.measured is None
    assert {c.outcome for c in decision.candidates} == {"overlap"}


def test_a_crossover_within_one_grid_step_keeps_the_value_in_use():
    context = _context()
    _synthetic(context, lambda name, n: 1.0 if name == "serial" or n < 65536 else 0.5)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 50000))
    assert not decision.changed and "within 1 octave" in decision.reason


def test_a_crossover_one_grid_step_below_keeps_the_value_in_use():
    context = _context()
    _synthetic(context, lambda name, n: 1.0 if name == "serial" or n < 32768 else 0.5)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert not decision.changed and "within 1 octave" in decision.reason
    assert decision.measured == 16384  # what a derived parameter follows


HALF_OCTAVES = geometric_grid(1024, 524288, 2)  # finer than the dead band, like thorough's grid


def test_on_a_finer_grid_a_crossover_an_octave_away_still_keeps_the_value_in_use():
    """Two runs measure crossovers a grid step apart: the dead band is an octave, not a step."""
    decisions = []
    for crossover in (32768, 46341, 131072):  # an octave or a step below, an octave above
        context = _context()
        _synthetic(context, lambda name, n, at=crossover: (
            1.0 if name == "serial" else 0.5 if n >= at * 0.99 else 1.5))
        decisions.append(decide_crossover(context, _crossover_problem(context, HALF_OCTAVES,
                                                                      65536)))
    assert [d.changed for d in decisions] == [False] * 3
    assert all("within 1 octave" in d.reason for d in decisions)
    context = _context()
    _synthetic(context, lambda name, n: 1.0 if name == "serial" else 0.5 if n >= 23000 else 1.5)
    moved = decide_crossover(context, _crossover_problem(context, HALF_OCTAVES, 65536))
    # 1.5 octaves below: the value moves one step, to the grid size an octave short
    assert moved.changed and moved.value == 46341 // 2 and "short of it (46341)" in moved.reason


@pytest.mark.parametrize(("sizes", "step"), [(SIZES, 2.0), (HALF_OCTAVES, 2 ** 0.5)])
@pytest.mark.parametrize("baseline_size", [65536, 50000])
def test_crossovers_one_step_apart_give_values_at_most_one_step_apart(sizes, step,
                                                                       baseline_size):
    """Two runs whose measurements differ by one grid size must not land two steps apart."""
    values = []
    for crossover in [*sizes[1:], 2 * sizes[-1]]:  # the last: serial wins everywhere
        context = _context()
        _synthetic(context, lambda name, n, at=crossover: (
            1.0 if name == "serial" else 0.5 if n >= at else 1.5))
        values.append(decide_crossover(context, _crossover_problem(context, sizes,
                                                                   baseline_size)).value)
    assert values == sorted(values)
    assert all(b <= step * a * 1.01 for a, b in zip(values, values[1:], strict=False))
    assert len(set(values)) > 5  # they do move


#: timings of one case of a shared grain, as ``timing(run, size) -> seconds``; the value in
#: use switches at 65536
CASE_TIMINGS = {
    "overlap everywhere": lambda run, n: 1.0 if run == "serial" else 0.97,
    "parallel from 4096": lambda run, n: 1.0 if run == "serial" or n < 4096 else 0.5,
    "parallel from 16384": lambda run, n: 1.0 if run == "serial" or n < 16384 else 0.5,
    "parallel from 65536": lambda run, n: 1.0 if run == "serial" or n < 65536 else 0.5,
    "serial below 262144": lambda run, n: 1.0 if run == "serial" else 1.5 if n < 262144 else 0.5,
    "serial everywhere": lambda run, n: 1.0 if run == "serial" else 1.5,
}


def _shared_crossover(context, few: str, many: str, many_bytes: int = 8):
    """One grain serving two cases, "few" and "many", timed by the named ``CASE_TIMINGS``."""
    timings = {"few": CASE_TIMINGS[few], "many": CASE_TIMINGS[many]}
    _synthetic(context, lambda run, point: timings[point[0]](run, point[1]))

    def problem(name, item):
        def inputs(size):
            context._current_size = (name, size)
            return (np.zeros(1),)

        return Crossover("parallel.minimum_elements", Case(name, inputs, lambda n: n * item),
                         SIZES, ("serial", np.copy), ("parallel", np.copy),
                         lambda size: size // 2, 65536)

    return decide_shared_crossover(context, [problem("few", 8), problem("many", many_bytes)])


@pytest.mark.parametrize(("few", "many", "crossover"), [
    ("serial below 262144", "serial everywhere", 262144),  # both above: the lowest
    ("parallel from 4096", "parallel from 16384", 16384),  # both below: the highest
])
def test_a_shared_grain_moves_only_as_far_as_every_case_gains(few, many, crossover):
    """Further, the grain would run a case serially where its parallel run wins, or back."""
    decision = _shared_crossover(_context(), few, many)
    assert decision.changed and decision.measured == crossover // 2
    # two octaves from the value in use: one octave short of the crossover
    short = crossover // 2 if crossover > 65536 else crossover * 2
    assert decision.value == short // 2


def test_a_case_crossing_over_at_the_value_in_use_keeps_a_shared_grain_as_measured():
    """Where the default switches is right for it: kept, with the crossover measured."""
    decision = _shared_crossover(_context(), "parallel from 65536", "serial everywhere")
    assert not decision.changed and decision.measured == 65536 // 2  # FLOAT16 follows it
    assert "within 1 octave" in decision.reason


def test_crossovers_on_both_sides_keep_a_shared_grain():
    decision = _shared_crossover(_context(), "parallel from 4096", "serial everywhere")
    assert not decision.changed and "both sides of the value in use" in decision.reason


@pytest.mark.parametrize("many", ["serial everywhere", "parallel from 4096"])
def test_a_case_without_a_clear_winner_keeps_a_shared_grain(many):
    """Its crossover lies near the value in use: moved either way, the grain would slow it."""
    decision = _shared_crossover(_context(), "overlap everywhere", many)
    assert not decision.changed and "few: no clear winner" in decision.reason


def test_a_case_that_could_not_be_searched_keeps_a_shared_grain():
    decision = _shared_crossover(_context(memory_budget=8 * SIZES[-1]), "serial everywhere",
                                 "serial everywhere", many_bytes=10**6)
    assert not decision.changed and "many: memory budget" in decision.reason


def test_a_moved_crossover_marks_the_selected_value_the_previous_one_and_the_crossover():
    """Parallel wins from 16384 on: set at 32768 on the case's axis (the grain 16384), where
    the value in use switched at 65536; written into the report, whatever the reason says."""
    context = _context()
    _synthetic(context, lambda name, n: 1.0 if name == "serial" or n < 16384 else 0.5)
    problem = _crossover_problem(context, SIZES, 65536)
    problem = dataclasses.replace(problem, case=dataclasses.replace(problem.case, unit="calls"))
    decision = decide_crossover(context, problem)
    assert decision.marks == (Mark("unary", 32768, SELECTED), Mark("unary", 65536, PREVIOUS),
                              Mark("unary", 16384, MEASURED))
    selected, _, crossover = decision.marks
    assert problem.value_of(selected.size) == decision.value
    assert problem.value_of(crossover.size) == decision.measured
    document = decision.to_dict()
    assert document["marks"][0] == {"case": "unary", "size": 32768, "role": "selected"}
    assert document["units"] == {"unary": "calls"}
    assert "unit" not in document["candidates"][0]  # once per case, not per point


def test_a_kept_crossover_marks_where_the_value_in_use_switches_and_the_crossover():
    context = _context()
    _synthetic(context, lambda name, n: 1.0 if name == "serial" or n < 32768 else 0.5)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert not decision.changed
    assert decision.marks == (Mark("unary", 65536, SELECTED), Mark("unary", 32768, MEASURED))
    assert decision.units == {"unary": "size"}  # a case that does not say what it counts


def test_a_crossover_without_a_winner_marks_only_the_value_in_use():
    context = _context()
    _synthetic(context, lambda name, n: 1.0 if name == "serial" else 0.97)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert decision.marks == (Mark("unary", 65536, SELECTED),)


@pytest.mark.parametrize(("few", "many", "marks"), [
    # both below: moved on "many", the case with the highest crossover
    ("parallel from 4096", "parallel from 16384",
     [("many", 32768, SELECTED), ("few", 65536, PREVIOUS), ("many", 65536, PREVIOUS),
      ("few", 4096, MEASURED), ("many", 16384, MEASURED)]),
    # on both sides of the value in use: kept, each crossover marked
    ("parallel from 4096", "serial everywhere",
     [("few", 65536, SELECTED), ("many", 65536, SELECTED), ("few", 4096, MEASURED),
      ("many", SIZES[-1], MEASURED)]),
    # no winner on one case: kept, the other's crossover marked
    ("overlap everywhere", "parallel from 4096",
     [("few", 65536, SELECTED), ("many", 65536, SELECTED), ("many", 4096, MEASURED)]),
])
def test_a_shared_grain_marks_each_case(few, many, marks):
    decision = _shared_crossover(_context(), few, many)
    assert [(m.case, m.size, m.role) for m in decision.marks] == marks


def test_thread_searches_and_comparisons_record_no_marks():
    result = _settings_comparison(_context(), [{"in use": 1.0, "other": 0.5}] * 4)
    context = _context()
    context.measure = lambda runs: {name: measurement_of(1.0) for name in runs}
    decision = search_threads(context, "parallel.maximum_threads",
                              Case("unary", lambda n: (np.zeros(1),), int, "elements"), SIZES,
                              dict.fromkeys((1, 2), np.copy), 2)
    assert decision.marks == () and decision.units == {"unary": "elements"}
    assert {c.unit for c in result.candidates} == {"size"}


def test_serial_wins_above_the_value_in_use_raise_it():
    context = _context()
    _synthetic(context, lambda name, n: 1.0 if name == "serial" else 1.5 if n < 262144 else 0.5)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert decision.value == 65536 and "serial beats parallel" in decision.reason


def test_serial_winning_everywhere_takes_the_crossover_at_the_largest_size():
    """No measurement reaches beyond it: the value stops an octave short of it, as for a
    crossover measured there."""
    context = _context()
    _synthetic(context, lambda name, n: 1.0 if name == "serial" else 1.5)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert decision.measured == SIZES[-1] // 2 and "up to the largest size" in decision.reason
    assert decision.value == SIZES[-2] // 2 and "short of it (262144)" in decision.reason


def test_a_value_in_use_below_the_sizes_searched_is_kept_where_above_wins_from_the_smallest():
    """Parallel wins at every size searched, and the value in use already runs them all in
    parallel: moving it to the smallest size would run the sizes below on the serial path,
    which no measurement favoured."""
    context = _context(values={"parallel.minimum_elements": SIZES[0] // 8})
    _synthetic(context, lambda name, n: 1.0 if name == "serial" else 0.5)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, SIZES[0] // 4))
    assert (decision.value, decision.changed) == (SIZES[0] // 8, False)
    assert decision.measured == SIZES[0] // 2
    assert decision.reason.startswith("kept: the value in use switches below the sizes "
                                      "searched")
    assert "parallel beats serial on unary (margin 5%) from size 1024 on" in decision.reason


@pytest.mark.parametrize(("crossover", "value"), [
    (16384, 32768), (262144, 32768),  # two octaves either side: kept
    (8192, 16384), (524288, 65536),  # three: moved two octaves short, toward the value in use
])
def test_a_wider_resolution_keeps_crossovers_within_it(crossover, value):
    """A crossover that two runs measure two octaves apart needs a band that wide."""
    context = _context()
    _synthetic(context, lambda name, n: 1.0 if name == "serial" else
               0.5 if n >= crossover else 1.5)
    problem = dataclasses.replace(_crossover_problem(context, SIZES, 65536), resolution=2.0)
    decision = decide_crossover(context, problem)
    assert decision.value == value
    assert ("within 2 octaves" if value == 32768 else "2 octaves short of it") in decision.reason


@pytest.mark.parametrize("resolution", [0, -1.0, float("nan")])
def test_a_crossover_resolution_must_be_positive(resolution):
    with pytest.raises(ValueError, match="resolution must be a positive number of octaves"):
        Crossover("parallel.minimum_elements", Case("unary", list, len), SIZES,
                  ("serial", np.copy), ("parallel", np.copy), int, 65536, resolution=resolution)


def test_parallel_merely_not_winning_keeps_the_value_in_use():
    context = _context()
    _synthetic(context, lambda name, n: 1.0 if name == "serial" or n < 262144 else 0.5)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert not decision.changed


@pytest.mark.parametrize(("effort", "moves"), [("normal", False), ("quick", True)])
def test_a_win_that_does_not_repeat_is_noise_at_normal_effort(effort, moves):
    context = _context(effort=effort)
    seen = set()

    def timing(name, n):
        if name == "serial":
            return 1.0
        lucky = n not in seen  # the first measurement at each size is a fluke
        seen.add(n)
        return 0.5 if lucky else 1.0

    _synthetic(context, timing)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert decision.changed is moves


@pytest.mark.parametrize(("second", "contradicted"), [(0.5, True), (0.98, False)])
def test_wins_of_opposite_sides_at_one_size_are_a_contradiction(second, contradicted):
    """Serial wins the first measurement at the start and parallel the second: the machine
    changed in between. A tie in the second is noise, not a contradiction."""
    context = _context(effort="normal")
    seen = []

    def timing(name, n):
        if name == "serial":
            return 1.0
        seen.append(n)
        return 1.5 if seen.count(n) == 1 else second

    _synthetic(context, timing)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert not decision.changed
    assert bool(context.contradictions) is contradicted
    if contradicted:
        assert context.contradictions == [
            "parallel.minimum_elements: unary at 65536: serial won, then parallel"]


def test_a_one_byte_memory_budget_keeps_the_default():
    context = _context(memory_budget=1)
    measured = _synthetic(context, lambda name, n: 1.0 if name == "serial" else 0.5)
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert measured == [] and not decision.changed and "memory budget" in decision.reason


@pytest.mark.parametrize("sizes", [[], SIZES[:1]])
def test_a_grid_of_fewer_than_two_sizes_keeps_the_value_and_says_so(sizes):
    context = _context()
    measured = _synthetic(context, lambda name, n: 1.0 if name == "serial" else 0.5)
    decision = decide_crossover(context, _crossover_problem(context, sizes, 65536))
    assert measured == [] and not decision.changed
    assert f"its grid has {len(sizes)}" in decision.reason


def test_an_exhausted_budget_stops_the_search_and_says_so():
    context = _context()
    context.deadline = Deadline(0.0, "per-key")
    decision = decide_crossover(context, _crossover_problem(context, SIZES, 65536))
    assert not decision.changed and "time budget" in decision.reason
    assert context.stopped_early == "per-key time budget exhausted"


def test_different_outputs_are_a_calibration_error():
    context = _context()
    _synthetic(context, lambda name, n: 1.0)
    problem = _crossover_problem(context, SIZES, 65536)
    wrong = Crossover(problem.parameter, problem.case, problem.sizes, problem.below,
                      ("parallel", lambda x: x + 1), problem.value_of, problem.baseline_size)
    with pytest.raises(CalibrationError, match="differs"):
        decide_crossover(context, wrong)


@pytest.mark.parametrize(("timing", "expected"), [
    ({1: 1.0, 2: 0.6, 4: 0.59}, 64),   # 4 threads help no more than 2, 64 (>= 4) stays
    ({1: 1.0, 2: 0.5, 4: 1.0}, 2),     # 4 threads hurt: cap at 2
    ({1: 1.0, 2: 1.0, 4: 1.0}, 64),    # no difference: keep
])
def test_the_thread_cap_moves_only_on_clear_wins(timing, expected):
    context = _context()

    def inputs(size):
        context._current_size = size
        return (np.zeros(1),)

    case = Case("unary", inputs, lambda size: size)

    def fake(runs):
        return {name: measurement_of(timing[int(name.split()[0])]) for name in runs}

    context.measure = fake
    decision = search_threads(context, "parallel.maximum_threads", case, SIZES,
                              dict.fromkeys(timing, np.copy), 64)
    assert decision.value == expected
    assert decision.fewer_threads == (expected < 64)
    assert decision.to_dict()["fewer_threads"] == (expected < 64)


@pytest.mark.parametrize("effort", ["quick", "normal"])
@pytest.mark.parametrize(("timing", "measured", "expected"), [
    # no count beats 4 at the first size: nothing more is measured
    (lambda count, size: 1.0, [{1, 2, 4}], 64),
    # 2 beats 4 at the first size only: 1 is dropped after it, and the second decides
    (lambda count, size: 0.5 if count == 2 and size == SIZES[-2] else 1.0,
     [{1, 2, 4}, {2, 4}], 64),
    # 2 beats 4 everywhere, 1 nowhere: 2 races 4 at every size and round
    (lambda count, size: 0.5 if count == 2 else 1.0, [{1, 2, 4}] + [{2, 4}] * 3, 2),
])
def test_the_thread_cap_race_drops_counts_that_lost_once(effort, timing, measured, expected):
    """A count must win at every size and round, so one that lost is measured no more."""
    context = _context(effort=effort)
    seen = []

    def inputs(size):
        context._current_size = size
        return (np.zeros(1),)

    def fake(runs):
        seen.append({int(name.split()[0]) for name in runs})
        return {name: measurement_of(timing(int(name.split()[0]), context._current_size))
                for name in runs}

    context.measure = fake
    decision = search_threads(context, "parallel.maximum_threads", Case("unary", inputs, int),
                              SIZES, dict.fromkeys((1, 2, 4), np.copy), 64)
    rounds = context.options.level.rounds
    assert decision.value == expected
    assert seen == (measured if expected == 64 else measured[:2 * rounds])
    assert len(decision.candidates) == len(seen)


def test_the_thread_cap_race_needs_a_run_for_the_value_in_use():
    with pytest.raises(ValueError, match="3 threads"):
        search_threads(_context(), "parallel.maximum_threads", Case("unary", np.zeros, int),
                       SIZES, dict.fromkeys((1, 2, 4), np.copy), 3)


@pytest.mark.parametrize(("crossover", "fewer"), [(262144, True), (4096, False)])
def test_a_grain_moved_up_is_marked_as_running_calls_on_fewer_threads(crossover, fewer):
    def timing(name, n):
        return 1.0 if name == "serial" else 0.5 if n >= crossover else 1.5

    context = _context()
    _synthetic(context, timing)
    problem = dataclasses.replace(_crossover_problem(context, SIZES, 65536), parallel_above=True)
    decision = decide_crossover(context, problem)
    assert decision.changed and decision.fewer_threads == fewer
    assert (decision.value > 32768) == fewer
    # the same search, not declared to be between a serial and a parallel path, marks nothing
    context = _context()
    _synthetic(context, timing)
    assert not decide_crossover(context, _crossover_problem(context, SIZES, 65536)).fewer_threads


def test_geometric_grids_are_increasing_multiples():
    grid = geometric_grid(1024, 1 << 20, 2, 128)
    assert grid[0] == 1024 and grid[-1] == 1 << 20 and len(grid) == 21
    assert all(b > a for a, b in zip(grid, grid[1:], strict=False))
    assert all(size % 128 == 0 for size in grid)
    assert geometric_grid(1, 8, 1) == [1, 2, 4, 8]
