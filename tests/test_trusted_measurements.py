"""Measurements a shared machine cannot fool: interference, withholding, confirmation.

Timings here are synthetic (drawn from seeded distributions the test sets) and
interference comes from a scripted source, so nothing depends on the machine's
speed or on its neighbours: the suite passes beside busy processes.
"""

from __future__ import annotations

import io
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import pytest

from conftest import Scripted, ToyConfig, toy_key
from kerneltune import KernelTuningRegistry
from kerneltune.calibration import (
    MAXIMUM_SHARE,
    CalibrationContext,
    CalibrationOptions,
    Case,
    Confirmation,
    Interference,
    KeyInterference,
    Workload,
    calibrate_registered_kernels,
    compare_values,
    confirm,
    register_kernel_calibration_function,
)
from kerneltune.calibration import context as context_module
from kerneltune.calibration.confirmation import ROUNDS, confirm_decisions
from kerneltune.calibration.interference import ProcessInterference
from kerneltune.calibration.measure import Deadline, Measurement
from kerneltune.cli import main
from kerneltune.machine.detect import current_execution
from kerneltune.tuning.schema import KernelTuningSchema

GRAIN = "parallel.minimum_elements"


#: the cost of the toy run called last: how the synthetic timer learns what a wrapped run costs
CALLED: list[float] = []


@dataclass(frozen=True)
class Toy:
    """A run whose cost the test sets: its samples are drawn around ``cost``."""

    cost: float

    def __call__(self, *inputs):
        CALLED.append(self.cost)
        return np.zeros(4)


def synthetic_timings(monkeypatch, noise: float = 0.05, seed: int = 0) -> None:
    """Every measurement draws lognormal samples around each run's cost: no kernel runs."""
    generator = np.random.default_rng(seed)

    def measure(runs, samples, minimum_sample_seconds, deadline):
        deadline.check()
        costs = []
        for run in runs:
            run()
            costs.append(CALLED[-1])
        return tuple(Measurement(tuple(cost * generator.lognormal(0.0, noise, samples)), (), 1)
                     for cost in costs)

    monkeypatch.setattr(context_module, "measure", measure)


def toy_workload(cost_of) -> Workload:
    """Sizes a grain may fall between; a config runs at ``cost_of(config)``."""
    case = Case("unary", lambda size: (np.zeros(4),), lambda size: 32 * size)
    return Workload([(case, size) for size in (4096, 16384, 65536, 262144)],
                    lambda config: Toy(cost_of(config)))


def toy_context(interference=None, budget: float = math.inf, **options) -> CalibrationContext:
    key = toy_key()
    schema = KernelTuningSchema.from_config(key, ToyConfig)
    return CalibrationContext(key, schema, current_execution(1),
                              CalibrationOptions(threads=1, maximum_interference=MAXIMUM_SHARE,
                                                 **options), schema.default_values(),
                              Deadline(time.perf_counter() + budget, "per-key"),
                              interference=interference)


# --- interference ----------------------------------------------------------------------------


def test_measurements_under_interference_are_discarded_and_taken_again(monkeypatch):
    synthetic_timings(monkeypatch)
    monkeypatch.setattr(context_module, "FIRST_PAUSE", 0.0)
    context = toy_context(Scripted(0.5, 0.4, 0.0))
    measured = context.measure({"a": Toy(1.0)})
    assert set(measured) == {"a"}
    assert [seen.share for seen in context.discarded] == pytest.approx([0.5, 0.4])
    assert len(context.kept) == 1 and context.kept[0].clean()


def test_a_machine_that_stays_busy_exhausts_the_budget():
    from kerneltune.calibration.measure import BudgetExhausted

    context = toy_context(Scripted(0.5), budget=0.3)
    with pytest.raises(BudgetExhausted):
        context.measure({"a": lambda: None})
    assert context.discarded and not context.kept


def test_waits_behind_the_process_own_threads_are_not_interference():
    # three threads on two CPUs: they waited a third of their runnable time, while the
    # process ran every CPU's whole time
    own = Interference(1.0, 2, 1.0, None, 2, 0.5, ran=2.0)
    assert own.wait_share == pytest.approx(1 / 3) and own.share == 0.0 and own.clean()
    others = Interference(1.0, 2, 1.0, None, 2, 0.5, ran=1.0)
    assert others.share == pytest.approx(0.5) and not others.clean()
    assert "other processes took 50%" in others.describe()


def test_one_thread_beside_busy_processes_is_judged_by_its_own_time():
    """A serial measurement on a 2-thread key: the idle second thread does not halve it."""
    serial = Interference(1.0, 2, waited=0.5, cpus=2, ran=0.5)
    assert serial.share == pytest.approx(0.5) and not serial.clean()


def test_a_tick_of_steal_per_cpu_is_the_counter_grain_not_a_stolen_key():
    """A counter read twice can gain a tick for a sliver of steal: over a key of 5 ms on
    two CPUs, one tick on each is no steal; a tick more than that is."""
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    grain = Interference(0.005, 2, 0.0, 2 * tick, 2, ran=0.01)
    assert grain.steal_share == 0.0 and grain.clean()
    stolen = Interference(0.005, 2, 0.0, 3 * tick, 2, ran=0.01)
    assert stolen.steal_share > MAXIMUM_SHARE and not stolen.clean()
    assert "of its CPUs' time was stolen" in stolen.describe()
    # over a key of seconds the grain is negligible
    assert Interference(2.0, 2, 0.0, 2.0, 2, ran=4.0).steal_share == pytest.approx(
        (2.0 - 2 * tick) / 4.0)


@pytest.mark.parametrize("record", [
    {"seconds": 1.0, "threads": 0, "waited": 0.1, "stolen": None, "cpus": 2, "load": None,
     "ran": 0.5},
    {"seconds": 1.0, "threads": 2, "waited": 10 ** 400, "stolen": None, "cpus": 2,
     "load": None, "ran": 0.5},
    {"seconds": -1.0, "threads": 2, "waited": 0.1, "stolen": None, "cpus": 2, "load": None,
     "ran": 0.5},
])
def test_a_damaged_interference_record_is_a_value_error(record):
    with pytest.raises(ValueError):
        Interference.from_dict(record)
    with pytest.raises(ValueError):
        KeyInterference.from_dict({"kept": 1, "discarded": [10 ** 400], "worst_kept": None,
                                   "whole": None})


def test_the_process_reads_its_own_counters_and_a_missing_proc_reads_nothing(tmp_path):
    source = ProcessInterference()
    before = source.reading(steal=True)
    sum(range(200_000))
    seen = source.since(before, 1)
    assert seen.seconds > 0 and seen.waited is not None and seen.ran is not None
    blind = ProcessInterference(proc=tmp_path)
    unread = blind.since(blind.reading(steal=True), 1)
    assert unread.share is None and unread.clean() and "took" not in unread.describe()


# --- withholding, in a batch -----------------------------------------------------------------


def toy_registry(measured: bool = True):
    """A registry with one toy key whose function measures once and moves the grain."""
    registry, key = KernelTuningRegistry(), toy_key()
    registry.register_schema(key, ToyConfig)

    def calibrate(context):
        if measured:
            context.measure({"serial": Toy(1.0), "parallel": Toy(0.5)})
        context.decide(GRAIN, 4096, "measured")

    register_kernel_calibration_function(key, calibrate, registry=registry)
    return registry, key


def test_a_key_that_stays_under_interference_is_withheld_with_its_figures(monkeypatch):
    synthetic_timings(monkeypatch)
    registry, key = toy_registry()
    batch = calibrate_registered_kernels(
        options=CalibrationOptions(threads=1, effort="quick", time_budget_per_key=0.3,
                                   maximum_interference=MAXIMUM_SHARE),
        registry=registry, interference=Scripted(0.6))
    assert not batch.calibrated and not batch.successful_profiles
    assert registry.snapshot().resolve(key, batch.execution).values[GRAIN] == 32768
    (withheld,) = batch.withheld
    assert withheld.key == key and withheld.reason.startswith("withheld:")
    assert "other processes took 60%" in withheld.reason
    recorded = batch.to_dict()["withheld"][0]["report"]["interference"]
    assert recorded["kept"] == 0 and recorded["discarded"][0] == pytest.approx(0.6)


def test_a_key_whose_cpus_were_stolen_is_withheld(monkeypatch):
    synthetic_timings(monkeypatch)
    registry, _ = toy_registry()
    batch = calibrate_registered_kernels(
        options=CalibrationOptions(threads=1, effort="quick",
                                   maximum_interference=MAXIMUM_SHARE),
        registry=registry, interference=Scripted(0.0, stolen=True))
    assert not batch.calibrated and "stolen" in batch.withheld[0].reason


def test_a_clean_key_is_published_with_its_interference(monkeypatch):
    synthetic_timings(monkeypatch)
    registry, key = toy_registry()
    batch = calibrate_registered_kernels(
        options=CalibrationOptions(threads=1, effort="quick"), registry=registry,
        interference=Scripted(0.0))
    (report,) = batch.calibrated
    assert not batch.withheld and report.values[GRAIN] == 4096
    assert report.interference == KeyInterference(1, (), 0.0, report.interference.whole)


@pytest.mark.parametrize(("shares", "status"), [((0.0,), 0), ((0.5, 0.0), 3), ((0.6,), 1)])
def test_require_steady_fails_on_interference_and_a_run_of_withheld_keys_fails(
        monkeypatch, capsys, shares, status):
    """Clean: exit 0; samples discarded and taken again: --require-steady exits 3 (done in
    part); every key withheld: one line, exit 1, whatever the flag."""
    import kerneltune.calibration as calibration

    synthetic_timings(monkeypatch)
    monkeypatch.setattr(context_module, "FIRST_PAUSE", 0.0)
    registry, _ = toy_registry()
    real = calibration.calibrate_registered_kernels

    def calibrate(**arguments):
        options = arguments.pop("options")
        return real(options=CalibrationOptions(threads=options.threads, effort="quick",
                                               time_budget_per_key=0.3,
                                               maximum_interference=MAXIMUM_SHARE),
                    registry=registry, interference=Scripted(*shares))

    monkeypatch.setattr(calibration, "calibrate_registered_kernels", calibrate)
    assert main(["calibrate", "--threads", "1", "--require-steady"]) == status
    out = capsys.readouterr().out
    if status == 1:
        last = out.splitlines()[-1]
        assert last.startswith("nothing calibrated: every key measured was withheld")
    if status == 3:
        assert "measurements discarded under interference" in out


# --- confirmation ----------------------------------------------------------------------------


def test_a_win_by_noise_alone_is_never_confirmed_in_200_trials():
    generator = np.random.default_rng(7)
    confirmed = 0
    for _ in range(200):
        points = [generator.lognormal(0.0, 0.1, (2, ROUNDS["normal"])) for _ in range(3)]
        verdict = confirm([p[0] for p in points], [p[1] for p in points], 0.05)
        confirmed += verdict.confirmed
    assert confirmed == 0


def test_a_real_win_of_20_percent_is_confirmed():
    generator = np.random.default_rng(8)
    in_use = [generator.lognormal(0.0, 0.05, ROUNDS["normal"]) * 1.2 for _ in range(2)]
    candidate = [generator.lognormal(0.0, 0.05, ROUNDS["normal"]) for _ in range(2)]
    verdict = confirm(in_use, candidate, 0.05)
    assert verdict.confirmed and verdict.low > 1.05 and verdict.points == 2
    assert verdict.low <= verdict.ratio <= verdict.high
    assert Confirmation.from_dict(verdict.to_dict()) == verdict


def test_the_same_samples_always_get_the_same_verdict():
    samples = [[1.0, 1.1, 0.9, 1.05, 1.2]], [[0.8, 0.85, 0.9, 0.7, 0.95]]
    assert confirm(*samples, 0.05) == confirm(*samples, 0.05)


def test_nothing_to_compare_confirms_nothing():
    verdict = confirm([], [], 0.05)
    assert not verdict.confirmed and "not compared" in verdict.describe()


@pytest.mark.parametrize(("faster", "published"), [(1.25, True), (1.0, False), (0.8, False)])
def test_a_change_is_published_only_when_confirmed(monkeypatch, faster, published):
    """The searches moved the grain; the comparison with the value in use decides."""
    synthetic_timings(monkeypatch, seed=3)
    context = toy_context()
    context.decide(GRAIN, 4096, "measured")
    workload = toy_workload(lambda config: 1.0 if config.minimum_elements == 32768
                            else 1.0 / faster)
    confirm_decisions(context, workload)
    decision = context.decisions[-1]
    assert context.values[GRAIN] == (4096 if published else 32768)
    assert decision.confirmation is not None and decision.confirmation.confirmed is published
    if not published:
        assert decision.reason.startswith("kept: 4096 was not confirmed")


def test_changes_are_confirmed_on_the_values_published(monkeypatch):
    """The grain wins only with the thread cap changed too; the cap, compared on its own
    against the values in use, loses: neither is published, though the grain was compared
    with the cap's change in place by its search."""
    synthetic_timings(monkeypatch, seed=4)
    context = toy_context()
    context.decide("parallel.maximum_threads", 8, "measured")
    context.decide(GRAIN, 4096, "measured")
    workload = toy_workload(lambda config: 0.5 if (config.minimum_elements, config.maximum_threads)
                            == (4096, 8) else 1.0)
    confirm_decisions(context, workload)
    assert context.values["parallel.maximum_threads"] == 64 and context.values[GRAIN] == 32768


def test_a_budget_that_runs_out_keeps_what_was_confirmed_and_reverts_the_rest(monkeypatch):
    from kerneltune.calibration.measure import BudgetExhausted

    synthetic_timings(monkeypatch)
    context = toy_context()
    context.decide(GRAIN, 4096, "measured")
    context.decide("parallel.maximum_threads", 8, "measured")
    real, calls = context.measure, []

    def measure(runs, samples=None):
        calls.append(1)
        if len(calls) > 4:  # the grain's comparison measures four sizes, then none is left
            raise BudgetExhausted("per-key")
        return real(runs, samples)

    context.measure = measure
    confirm_decisions(context, toy_workload(lambda config: 1.0 if config.minimum_elements
                                            == 32768 else 0.5))
    assert context.values[GRAIN] == 4096 and context.values["parallel.maximum_threads"] == 64
    assert "per-key time budget ran out first" in context.decisions[-1].reason
    assert context.stopped_early is None


def test_a_change_no_size_of_the_workload_tells_apart_goes_back(monkeypatch):
    synthetic_timings(monkeypatch)
    context = toy_context()
    context.decide(GRAIN, 4096, "measured")
    workload = toy_workload(lambda config: 1.0)
    workload = Workload(workload.cases, workload.make_run,
                        differs=lambda a, b, case, size: False)
    confirm_decisions(context, workload)
    assert context.values[GRAIN] == 32768
    assert "no size of the workload runs them differently" in context.decisions[-1].reason


def test_the_comparison_measures_where_the_configs_differ(monkeypatch):
    synthetic_timings(monkeypatch)
    context = toy_context()
    seen = []
    workload = toy_workload(lambda config: 1.0)

    def differs(a, b, case, size):
        seen.append(size)
        return size == 16384

    workload = Workload(workload.cases, workload.make_run, differs=differs)
    verdict = compare_values(context, workload, context.values, {GRAIN: 8192})
    assert verdict.points == 1 and 16384 in seen



def test_the_limit_comes_from_the_environment_and_a_bad_one_names_the_variable(monkeypatch):
    from kerneltune import TuningValidationError

    monkeypatch.setenv("KERNELTUNE_MAXIMUM_INTERFERENCE", "0.4")
    assert CalibrationOptions().interference_limit == 0.4
    assert CalibrationOptions(maximum_interference=0.3).interference_limit == 0.3
    monkeypatch.delenv("KERNELTUNE_MAXIMUM_INTERFERENCE")
    assert CalibrationOptions().interference_limit == MAXIMUM_SHARE
    monkeypatch.setenv("KERNELTUNE_MAXIMUM_INTERFERENCE", "half")
    options = CalibrationOptions()  # made, as a parser's defaults are: read when it runs
    with pytest.raises(TuningValidationError, match="KERNELTUNE_MAXIMUM_INTERFERENCE"):
        assert options.interference_limit
    registry, _ = toy_registry()
    with pytest.raises(TuningValidationError, match="KERNELTUNE_MAXIMUM_INTERFERENCE"):
        calibrate_registered_kernels(options=options, registry=registry)
    assert main(["cache", "path"]) == 0  # every other command still runs


def test_a_parallel_probe_below_the_floor_withholds_the_key(monkeypatch):
    """A machine that runs a parallel call a thousand times slower than a serial one cannot
    give this process its threads now, however steady it looks against itself."""
    from kerneltune.calibration import register_machine_probe

    synthetic_timings(monkeypatch)
    registry, key = toy_registry()
    register_machine_probe(key.library, lambda threads: 0.0009, minimum_threads=1,
                           registry=registry)
    options = CalibrationOptions(threads=1, effort="normal", maximum_interference=MAXIMUM_SHARE)
    batch = calibrate_registered_kernels(options=options, registry=registry,
                                         interference=Scripted(0.0))
    assert not batch.calibrated
    assert "parallel probe 0.0009, below 0.5" in batch.withheld[0].reason
    # keeping every measurement keeps this one too
    kept = calibrate_registered_kernels(
        options=CalibrationOptions(threads=1, effort="normal", maximum_interference=1.0),
        registry=registry, interference=Scripted(0.0))
    assert kept.calibrated and not kept.withheld


# --- the farm's job --------------------------------------------------------------------------


def _farm(tmp_path, monkeypatch, shares, **arguments):
    from kerneltune.machine.detect import get_cpu_descriptor
    from kerneltune.machine.selector_files import processor_selector
    from kerneltune.pipeline import calibrate_machine

    synthetic_timings(monkeypatch)
    monkeypatch.setattr(context_module, "FIRST_PAUSE", 0.0)
    registry, _ = toy_registry()
    output = tmp_path / "profiles" / "host.yaml"
    options = CalibrationOptions(effort="quick", time_budget_per_key=0.3,
                                 maximum_interference=MAXIMUM_SHARE)
    return output, lambda: calibrate_machine(
        processor_selector(get_cpu_descriptor()), output=output, threads=[1], options=options,
        registry=registry, interference=Scripted(*shares), progress=io.StringIO(),
        **arguments)


def test_a_farm_job_that_withheld_every_key_writes_no_profile(tmp_path, monkeypatch):
    from kerneltune import CalibrationError

    output, run = _farm(tmp_path, monkeypatch, (0.6,))
    with pytest.raises(CalibrationError, match="every key was withheld"):
        run()
    assert not output.exists()


def test_a_farm_job_that_must_be_steady_keeps_the_profile_it_had(tmp_path, monkeypatch):
    output, run = _farm(tmp_path, monkeypatch, (0.6, 0.0), require_steady=True)
    output.parent.mkdir()
    output.write_text("the profile shipped before\n", encoding="utf-8")
    result = run()
    assert not result.written and result.summaries[0].calibrated == 1
    assert output.read_text(encoding="utf-8") == "the profile shipped before\n"
    assert result.reports_path.is_file()


def one_key_busy(monkeypatch):
    """A registry of two toy keys: Abs measures (and stays under interference), Add decides
    without measuring."""
    synthetic_timings(monkeypatch)
    monkeypatch.setattr(context_module, "FIRST_PAUSE", 0.0)
    registry, key = toy_registry()
    quiet = toy_key("Add")
    registry.register_schema(quiet, ToyConfig)

    def unmeasured(context):
        context.decide(GRAIN, 8192, "measured")

    register_kernel_calibration_function(quiet, unmeasured, registry=registry)
    return registry, key


def test_kernel_tune_with_a_key_withheld_is_done_in_part(monkeypatch):
    import kerneltune.calibration as calibration

    registry, _ = one_key_busy(monkeypatch)
    real = calibration.calibrate_kernel_thresholds

    def calibrate(keys, options, on_report=None):
        return real(registry.snapshot().keys(),
                    CalibrationOptions(threads=1, effort="quick", time_budget_per_key=0.3,
                                       maximum_interference=MAXIMUM_SHARE),
                    registry=registry, interference=Scripted(0.6))

    monkeypatch.setattr(calibration, "calibrate_kernel_thresholds", calibrate)
    # toy keys have no place in a cache of the real library's keys
    import kerneltune.cache.kernel_tuning_cache as cache_module

    update = cache_module.update_kernel_tuning_cache
    monkeypatch.setattr(cache_module, "update_kernel_tuning_cache",
                        lambda profiles, path=None: update((), path))
    monkeypatch.setenv("KERNELTUNE_CACHE", "off")
    assert main(["kernel", "--kernel", "Abs", "--tune", "--threads", "1"]) == 3


def test_a_run_with_a_key_withheld_is_done_in_part_and_names_it(monkeypatch, capsys):
    """One key measured cleanly, one not: exit 3 without any flag, the withheld key printed
    with its reason, the other published."""
    import kerneltune.calibration as calibration

    registry, key = one_key_busy(monkeypatch)
    real = calibration.calibrate_registered_kernels

    def calibrate(**arguments):
        return real(options=CalibrationOptions(threads=1, effort="quick",
                                               time_budget_per_key=0.3,
                                               maximum_interference=MAXIMUM_SHARE),
                    registry=registry, interference=Scripted(0.6))

    monkeypatch.setattr(calibration, "calibrate_registered_kernels", calibrate)
    assert main(["calibrate", "--threads", "1"]) == 3
    out = capsys.readouterr().out
    assert "1 keys calibrated" in out and "1 withheld" in out
    assert f"  {key}: withheld: not measured cleanly" in out


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_calibrate_shows_each_key_on_a_terminal(monkeypatch, capsys):
    import sys

    import kerneltune.calibration as calibration

    synthetic_timings(monkeypatch)
    registry, key = toy_registry()
    real = calibration.calibrate_registered_kernels

    def calibrate(**arguments):
        return real(options=CalibrationOptions(threads=1, effort="quick",
                                               maximum_interference=MAXIMUM_SHARE),
                    registry=registry, interference=Scripted(0.0),
                    on_report=arguments["on_report"])

    monkeypatch.setattr(calibration, "calibrate_registered_kernels", calibrate)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["calibrate", "--threads", "1", "--kernel", "Abs"]) == 0
    shown = terminal.getvalue()
    assert "\rthreads 1: key 1 of " in shown and str(key) in shown
    assert shown.endswith("\r\033[K")  # the line is taken off before the summary
    assert capsys.readouterr().out.startswith("threads 1: 1 keys calibrated")


def test_a_farm_job_with_a_key_withheld_ships_the_others_and_measures_it_next_time(
        tmp_path, monkeypatch):
    from kerneltune.machine.detect import get_cpu_descriptor
    from kerneltune.machine.selector_files import processor_selector
    from kerneltune.pipeline import calibrate_machine

    registry, key = one_key_busy(monkeypatch)
    output = tmp_path / "profiles" / "host.yaml"
    options = CalibrationOptions(effort="quick", time_budget_per_key=0.3,
                                 maximum_interference=MAXIMUM_SHARE)

    def run(*shares):
        return calibrate_machine(processor_selector(get_cpu_descriptor()), output=output,
                                 threads=[1], options=options, registry=registry,
                                 interference=Scripted(*shares), progress=io.StringIO())

    first = run(0.6)
    assert first.written and len(first.profile.entries) == 1
    (unfinished,) = first.unfinished
    assert unfinished.startswith(f"threads 1: {key}: withheld: not measured cleanly")
    assert output.with_suffix(".checkpoint.jsonl").is_file()  # kept for the next run
    second = run(0.0)
    assert second.summaries[0].resumed == 1 and second.unfinished == ()
    assert len(second.profile.entries) == 2
    assert not output.with_suffix(".checkpoint.jsonl").exists()
