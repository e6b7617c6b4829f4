"""CalibrationOptions: validation and the effort levels' defaults."""

from __future__ import annotations

import json

import pytest

from kerneltune import TuningValidationError
from kerneltune.calibration import CalibrationOptions


def test_options_report_every_problem_at_once():
    with pytest.raises(TuningValidationError) as error:
        CalibrationOptions(threads=0, effort="fast", time_budget=-1, memory_budget=0,
                           minimum_margin=2, repetitions=3, seed=-1, values=[1])
    fields = {p.field for p in error.value.problems}
    assert fields == {"threads", "effort", "time_budget", "memory_budget", "minimum_margin",
                      "repetitions", "seed", "values"}


def test_options_take_effort_defaults_unless_given():
    quick = CalibrationOptions(effort="quick")
    assert quick.samples == 5 and quick.seconds_per_key == quick.level.seconds_per_key
    given = CalibrationOptions(effort="quick", repetitions=9, time_budget_per_key=0.5)
    assert given.samples == 9 and given.seconds_per_key == 0.5
    assert json.dumps(given.to_dict())
