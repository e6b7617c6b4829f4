"""Measuring: interleaved runs, rejected outliers, and when one measurement beats another."""

from __future__ import annotations

from conftest import measurement_of
from kerneltune.calibration.measure import Deadline, Measurement, measure


def test_measure_interleaves_runs_and_keeps_at_least_five_samples():
    order = []
    measurements = measure([lambda: order.append("a"), lambda: order.append("b")], 5, 0.0,
                           Deadline(float("inf"), "per-key"))
    assert all(len(m.samples) + len(m.rejected) >= 5 for m in measurements)
    assert all(len(m.samples) >= 5 for m in measurements)
    assert order[:4] == ["a", "a", "b", "b"]  # two warm-up calls each, then alternating
    assert order[4:8] == ["a", "a", "b", "b"]  # each sample: one untimed call, then timed ones


def test_outliers_are_rejected_and_recorded():
    from kerneltune.calibration.measure import _fenced

    kept, rejected = _fenced([1.0, 1.01, 0.99, 1.0, 1.02, 9.0])
    assert rejected == [9.0] and 9.0 not in kept
    m = Measurement(tuple(kept), tuple(rejected), 3)
    assert m.median == 1.0 and m.to_dict()["rejected"] == [9.0]


def test_beats_needs_the_margin_and_separate_quartiles():
    fast, slow = measurement_of(1.0), measurement_of(1.2)
    assert fast.beats(slow, 0.05) and not slow.beats(fast, 0.05)
    assert not fast.beats(measurement_of(1.04), 0.05)
    wide = Measurement((0.5, 0.8, 1.0, 1.3, 1.5), (), 1)
    assert not wide.beats(measurement_of(1.2), 0.05)
