"""The command line takes its defaults from the API, never a second copy."""

from __future__ import annotations

import dataclasses

from kerneltune.calibration import EFFORTS, CalibrationOptions
from kerneltune.cli import build_parser as _parser


def test_calibrate_defaults_are_the_calibration_options_defaults():
    args = _parser().parse_args(["calibrate"])
    defaults = CalibrationOptions()
    assert (args.effort, args.memory_budget, args.margin, args.seed) == (
        defaults.effort, defaults.memory_budget, defaults.minimum_margin, defaults.seed)


def test_calibrate_offers_every_effort_of_the_api():
    action = next(a for a in _parser()._subparsers._group_actions[0].choices["calibrate"]._actions
                  if a.dest == "effort")
    assert tuple(action.choices) == tuple(EFFORTS)


def test_a_changed_api_default_reaches_the_command_line(monkeypatch):
    import kerneltune.calibration as calibration

    changed = dataclasses.replace(CalibrationOptions(), minimum_margin=0.125, seed=7)
    monkeypatch.setattr(calibration, "CalibrationOptions", lambda: changed)
    args = _parser().parse_args(["calibrate"])
    assert (args.margin, args.seed) == (0.125, 7)


def test_kernel_tuning_options_are_the_api_defaults_unless_given():
    from kerneltune.cli import kernel

    parser = _parser()
    given = kernel._options(parser.parse_args(["kernel", "--kernel", "Abs", "--tune"]), None, ())
    assert given == CalibrationOptions()
    chosen = kernel._options(parser.parse_args(
        ["kernel", "--kernel", "Abs", "--tune", "--time-budget", "3", "--memory-budget", "4096",
         "--margin", "0.5", "--effort", "quick", "--threads", "1"]), None, ())
    assert (chosen.time_budget, chosen.memory_budget, chosen.minimum_margin, chosen.effort,
            chosen.threads) == (3.0, 4096, 0.5, "quick", 1)
