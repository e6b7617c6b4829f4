"""The calibration engine: inputs, options, batch semantics and the shared searches.

Batch semantics run toy calibration functions against toy schemas in a fresh
registry; the searches run on synthetic measurements, so what they decide is
checked exactly, without timing anything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time

import numpy as np
import pytest

from conftest import ToyConfig, toy_key
from kerneltune import (
    CalibrationError,
    KernelTuningKey,
    KernelTuningRegistry,
    Tier,
    TuningValidationError,
)
from kerneltune.aligned import ALIGNMENT
from kerneltune.calibration import (
    PARALLEL,
    CalibrationOptions,
    Case,
    Comparison,
    Crossover,
    Setting,
    calibrate_kernel_thresholds,
    calibrate_registered_kernels,
    calibration_function,
    compare_settings,
    decide_crossover,
    decide_shared_crossover,
    geometric_grid,
    is_calibratable,
    randn_tensor,
    register_kernel_calibration_function,
    register_machine_probe,
    search_threads,
    steadiness,
    verify_decisions,
)
from kerneltune.calibration.context import CalibrationContext
from kerneltune.calibration.measure import Deadline, Measurement, measure
from kerneltune.detect import current_execution

CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
needs_two_cpus = pytest.mark.skipif(CPUS < 2, reason="needs two CPUs")

#: sha256 prefixes of randn_tensor(type, (3, 5), 42): the same on every machine
GOLDEN = {
    "FLOAT": "dcce08d7b0ada3e1",
    "DOUBLE": "56296b7783048f48",
    "FLOAT16": "fdf6201d40842e6e",
    "INT8": "40dddf6f48bba0fc",
    "INT16": "a7f5af61d1435812",
    "INT32": "db57abb12803f272",
    "INT64": "b6721f9cecabc523",
    "UINT8": "40dddf6f48bba0fc",
    "UINT16": "a7f5af61d1435812",
    "UINT32": "db57abb12803f272",
    "UINT64": "b6721f9cecabc523",
    "BOOL": "4ee78f3e8316d81c",
}


# --- randn_tensor --------------------------------------------------------------------------------


@pytest.mark.parametrize("element_type", sorted(GOLDEN))
def test_randn_tensor_bytes_are_fixed(element_type):
    x = randn_tensor(element_type, (3, 5), 42)
    assert x.shape == (3, 5) and x.flags.c_contiguous
    assert hashlib.sha256(x.tobytes()).hexdigest()[:16] == GOLDEN[element_type]
    assert np.array_equal(x, randn_tensor(element_type, [3, 5], 42))


def test_randn_tensor_seeds_and_spellings():
    a = randn_tensor("FLOAT", 1000, 1)
    assert not np.array_equal(a, randn_tensor("FLOAT", 1000, 2))
    assert np.array_equal(a, randn_tensor(np.float32, (1000,), 1))
    assert np.array_equal(a, randn_tensor(1, 1000, 1))
    assert randn_tensor("DOUBLE", (), 0).shape == ()
    assert randn_tensor("INT8", (0, 4), 0).shape == (0, 4)


@pytest.mark.parametrize("element_type", sorted(GOLDEN))
def test_randn_tensor_starts_on_a_cache_line(element_type):
    # many shapes, so that malloc's placement could not pass by luck
    for n in range(1, 40):
        assert randn_tensor(element_type, (n, 3), n).ctypes.data % ALIGNMENT == 0


def test_randn_tensor_looks_normal_for_floats_and_covers_integer_ranges():
    x = randn_tensor("DOUBLE", 200_000, 7)
    assert abs(x.mean()) < 0.02 and abs(x.std() - 1.0) < 0.02
    assert np.all(np.abs(x) <= 2 * np.sqrt(3.0))
    u = randn_tensor("UINT8", 10_000, 7)
    assert u.min() == 0 and u.max() == 255
    b = randn_tensor("BOOL", 10_000, 7)
    assert 0.45 < b.mean() < 0.55


def test_randn_tensor_fills_the_allocators_array():
    given = []

    def allocator(shape, dtype):
        given.append(np.zeros(shape, dtype))
        return given[-1]

    x = randn_tensor("FLOAT", (4, 4), 3, allocator=allocator)
    assert x is given[0] and np.array_equal(x, randn_tensor("FLOAT", (4, 4), 3))


@pytest.mark.parametrize("arguments", [
    ("STRING", 4, 0), ("FLOAT", -1, 0), ("FLOAT", (2, 1.5), 0), ("FLOAT", 4, -1),
    ("FLOAT", 4, True),
])
def test_randn_tensor_rejects_bad_arguments(arguments):
    with pytest.raises(ValueError):
        randn_tensor(*arguments)


def test_randn_tensor_rejects_a_wrong_allocation():
    with pytest.raises(ValueError, match="allocator"):
        randn_tensor("FLOAT", 4, 0, allocator=lambda shape, dtype: np.empty(5, dtype))


# --- options -------------------------------------------------------------------------------------


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


# --- batch semantics with toy functions ----------------------------------------------------------


KERNELS, TYPES, IMPLEMENTATIONS = ("Abs", "Add"), ("FLOAT", "DOUBLE"), ("baseline", "v3")


#: how long a toy key takes to calibrate: a batch measures keys again for a time in
#: proportion to its first pass, which instant keys would leave to the probes' overhead
TOY_SECONDS = 0.01


@pytest.fixture
def toys():
    """A fresh registry with 8 toy keys, 7 of them calibratable by a recording function."""
    registry = KernelTuningRegistry()
    keys = [toy_key(kernel, element_type, implementation=implementation)
            for kernel in KERNELS for element_type in TYPES for implementation in IMPLEMENTATIONS]
    registry.register_schemas((key, ToyConfig) for key in keys)
    calls = []

    def calibrate(context):
        calls.append(context.key)
        time.sleep(TOY_SECONDS)
        return {"parallel.minimum_elements": 4096 + context.threads}

    uncalibratable = KernelTuningKey("toy_unsupported", "Add", "v3", "DOUBLE")
    registry.register_schema(uncalibratable, ToyConfig)
    for key in keys:
        register_kernel_calibration_function(key, calibrate, registry=registry)
    return registry, keys, calls, uncalibratable


def _run(registry, **selection):
    options = selection.pop("options", CalibrationOptions(threads=1, effort="quick"))
    return calibrate_registered_kernels(options=options, registry=registry, **selection)


def test_an_empty_selection_calibrates_every_calibratable_key(toys):
    registry, keys, calls, uncalibratable = toys
    before = registry.generation
    report = _run(registry, library="test_library")
    assert sorted(map(str, calls)) == sorted(map(str, keys))
    assert registry.generation == before + 1  # one publication for the whole batch
    assert len(report.successful_profiles) == len(keys)
    everything = _run(registry)
    assert [u.key for u in everything.unsupported] == [uncalibratable]
    assert "no calibration function" in everything.unsupported[0].reason
    assert not is_calibratable(uncalibratable)


@pytest.mark.parametrize(("selection", "expected"), [
    ({"kernels": ["Add"]}, lambda k: k.kernel == "Add"),
    ({"kernels": "Abs", "element_types": ["DOUBLE"]},
     lambda k: k.kernel == "Abs" and k.element_type == 11),
    ({"implementations": ["v3"], "element_types": ["float32", "DOUBLE"]},
     lambda k: k.implementation == "v3"),
    ({"kernels": ["Abs", "Add"], "implementations": ["baseline"], "element_types": [1]},
     lambda k: k.implementation == "baseline" and k.element_type == 1),
    ({"device": "gpu"}, lambda k: False),
])
def test_selection_fields_combine_with_and_values_with_or(toys, selection, expected):
    registry, keys, calls, _ = toys
    report = _run(registry, library="test_library", **selection)
    wanted = sorted(str(k) for k in keys if expected(k))
    assert sorted(map(str, calls)) == wanted
    assert sorted(str(r.key) for r in report.calibrated) == wanted


def test_a_bad_selection_names_every_field(toys):
    registry = toys[0]
    with pytest.raises(TuningValidationError) as error:
        _run(registry, library="", kernels=[3], element_types=["FLOAT", "QUATERNION"])
    assert {p.field for p in error.value.problems} == {"library", "kernels", "element_types"}


def test_calibrated_profiles_bind_to_the_execution_and_point_to_their_report(toys):
    registry, keys, _, _ = toys
    report = _run(registry, kernels=["Abs"], element_types=["FLOAT"], implementations="v3")
    (profile,) = report.successful_profiles
    (calibrated,) = report.calibrated
    assert profile.execution == report.execution and profile.origin == "calibration"
    assert profile.report_digest == calibrated.digest
    resolution = registry.resolve(profile.key, current_execution(1))
    assert resolution.source.tier is Tier.CALIBRATED
    assert resolution.values["parallel.minimum_elements"] == 4097
    assert json.loads(json.dumps(report.to_dict()))["calibrated"][0]["values"][
        "parallel.minimum_elements"] == 4097


@needs_two_cpus
def test_only_missing_is_scoped_to_the_thread_count(toys):
    registry, keys, calls, _ = toys
    one = CalibrationOptions(threads=1, effort="quick")
    two = CalibrationOptions(threads=2, effort="quick")
    _run(registry, kernels=["Abs"], options=one)
    calls.clear()
    again = _run(registry, kernels=["Abs"], only_missing=True, options=one)
    assert calls == [] and not again.calibrated and not again.successful_profiles
    assert all("2 threads" not in s.reason and "1 threads" in s.reason for s in again.skipped)
    other = _run(registry, kernels=["Abs"], only_missing=True, options=two)
    assert len(other.calibrated) == len(calls) == 4
    calls.clear()
    assert not _run(registry, kernels=["Abs"], only_missing=True, options=two).calibrated


def test_a_failing_function_publishes_nothing(toys):
    registry, keys, calls, _ = toys
    broken = keys[-1]

    def fails(context):
        raise RuntimeError("sensor on fire")

    register_kernel_calibration_function(broken, fails, registry=registry)
    before = registry.generation
    with pytest.raises(RuntimeError, match="sensor on fire"):
        _run(registry, library="test_library")
    assert registry.generation == before
    assert all(p.execution is None for k in keys for p in registry.snapshot().profiles(k))


def test_an_invalid_value_publishes_nothing(toys):
    registry, keys, _, _ = toys
    register_kernel_calibration_function(keys[0], lambda context: {"parallel.minimum_elements": 0},
                                         registry=registry)
    before = registry.generation
    with pytest.raises(TuningValidationError, match="parallel.minimum_elements"):
        _run(registry, library="test_library")
    assert registry.generation == before


def test_calibrating_an_unregistered_key_is_an_error(toys):
    with pytest.raises(TuningValidationError, match="no tuning schema"):
        calibrate_kernel_thresholds([toy_key("Nope")], registry=toys[0])


def test_more_threads_than_cpus_is_an_error(toys):
    with pytest.raises(CalibrationError, match="CPUs"):
        _run(toys[0], options=CalibrationOptions(threads=CPUS + 1))


def test_a_tiny_total_budget_skips_the_remaining_keys_and_says_so(toys):
    registry, keys, calls, _ = toys

    def slow(context):
        context.deadline.check()
        time.sleep(0.05)
        return {}

    for key in keys:
        register_kernel_calibration_function(key, slow, registry=registry)
    report = _run(registry, library="test_library",
                  options=CalibrationOptions(threads=1, time_budget=0.01))
    assert len(report.calibrated) <= 1
    assert any("total time budget" in s.reason for s in report.skipped)


def test_a_calibration_function_belongs_to_the_registry_it_was_registered_with(toys):
    registry, keys, calls, _ = toys
    other = KernelTuningRegistry()
    other.register_schemas((key, ToyConfig) for key in keys)
    assert all(is_calibratable(key, registry=registry) for key in keys)
    assert not any(is_calibratable(key, registry=other) or is_calibratable(key) for key in keys)
    assert calibration_function(keys[0], registry=other) is None
    report = _run(other, library="test_library")
    assert calls == [] and not report.calibrated and len(report.unsupported) == len(keys)


def _scripted_probe(speedups, asked=None):
    """A probe returning ``speedups`` in turn, then the last of them forever."""
    script = iter(speedups)
    last = [speedups[-1]]

    def probe(threads):
        if asked is not None:
            asked.append(threads)
        last[0] = next(script, last[0])
        return np.float32(last[0])  # any real number will do

    return probe


def _two_thread_batch(registry, keys, calibrate, speedups, effort):
    """Every toy key calibrated by ``calibrate`` on two threads, probed at ``speedups``."""
    for key in keys:
        register_kernel_calibration_function(key, calibrate, registry=registry)
    register_machine_probe("test_library", _scripted_probe(speedups), registry=registry)
    return _run(registry, library="test_library",
                options=CalibrationOptions(threads=2, effort=effort))


@needs_two_cpus
def test_a_batch_on_two_threads_probes_the_machine_around_each_key(toys):
    registry, keys, _, _ = toys
    asked = []
    speedups = [1.5, 1.6, 1.4, 1.9, 1.5, 1.62, 1.5, 1.45, 1.55]
    register_machine_probe("test_library", _scripted_probe(speedups, asked), registry=registry)
    register_machine_probe("another_library", lambda threads: 1 / 0,  # no key selected: unused
                           registry=registry)
    report = _run(registry, library="test_library",
                  options=CalibrationOptions(threads=2, effort="quick"))
    # before the first key and after each: a probe between two keys serves both
    assert asked == [2] * (len(keys) + 1)
    assert [dict(r.machine_probe) for r in report.calibrated] == [
        {PARALLEL: pytest.approx((a, b))}
        for a, b in zip(speedups[:-1], speedups[1:], strict=True)]
    (watched,) = report.steadiness
    assert (watched.library, watched.threads) == ("test_library", 2)
    (trace,) = watched.probes
    assert (trace.aspect, trace.error) == (PARALLEL, None)
    assert trace.rates == pytest.approx(speedups)
    times = [at for at, _ in trace.samples]
    assert times == sorted(times)
    assert trace.moved == pytest.approx(1.9 / 1.4 - 1)
    # the fastest three consecutive probes held: one lucky probe (1.9) does not set it
    assert trace.reference == pytest.approx(1.5)
    assert watched.steady and watched.remeasured == watched.unsettled == ()
    written = json.loads(json.dumps(report.to_dict()))
    assert written["steadiness"][0]["probes"][0]["reference"] == pytest.approx(1.5)
    assert written["calibrated"][0]["machine_probe"] == {PARALLEL: pytest.approx([1.5, 1.6])}


@needs_two_cpus
def test_keys_measured_while_the_machine_was_slow_are_measured_again(toys):
    registry, keys, calls, _ = toys
    # probe 3 follows the third key and precedes the fourth: both were measured around it
    register_machine_probe("test_library", _scripted_probe([1.0, 1.0, 1.0, 0.7, 1.0]),
                           registry=registry)
    before = registry.generation
    report = _run(registry, library="test_library",
                  options=CalibrationOptions(threads=2, effort="thorough"))
    order = [r.key for r in report.calibrated]
    assert sorted(map(str, order)) == sorted(map(str, keys))
    assert calls == order + order[2:4]
    (watched,) = report.steadiness
    assert watched.remeasured == tuple(map(str, order[2:4])) and watched.unsettled == ()
    assert watched.steady and watched.probes[0].lowest == pytest.approx(0.7)
    assert all(r.machine_probe[PARALLEL] == pytest.approx((1.0, 1.0))
               for r in report.calibrated)
    assert registry.generation == before + 1 and len(report.successful_profiles) == len(keys)


@needs_two_cpus
@pytest.mark.parametrize("effort", ["thorough", "quick"])
def test_keys_never_measured_in_the_reference_state_are_published_and_named(toys,
                                                                            effort):
    registry, keys, calls, _ = toys
    register_machine_probe("test_library", _scripted_probe([1.0, 1.0, 1.0, 1.0, 0.7]),
                           registry=registry)
    report = _run(registry, library="test_library",
                  options=CalibrationOptions(threads=2, effort=effort))
    slow = tuple(str(r.key) for r in report.calibrated[3:])
    (watched,) = report.steadiness
    assert watched.unsettled == slow and not watched.steady
    # the spell outlasts the time allowed to measure again (quick effort allows none): the
    # batch waits for the reference state and measures no key again in the spell
    assert watched.remeasured == () and len(calls) == len(keys)
    assert len(report.successful_profiles) == len(keys)
    assert json.loads(json.dumps(report.to_dict()))["steadiness"][0]["unsettled"] == list(slow)


@needs_two_cpus
def test_keys_never_measured_steadily_withhold_only_their_decisions_for_fewer_threads(
        toys):
    registry, keys, _, _ = toys

    def calibrate(context):
        context.decide("parallel.maximum_threads", 1, "one thread won", fewer_threads=True)
        context.decide("parallel.minimum_elements", 2048, "parallel won from 4096 on")
        context.decide("algorithm.tile_m", 32, "smaller tiles won")

    report = _two_thread_batch(registry, keys, calibrate, [1.0, 1.0, 1.0, 1.0, 0.7], "quick")
    (watched,) = report.steadiness
    slow = [r for r in report.calibrated if str(r.key) in watched.unsettled]
    steady = [r for r in report.calibrated if str(r.key) not in watched.unsettled]
    assert len(slow) == len(keys) - 3 and len(steady) == 3
    for r in steady:
        assert (r.values["parallel.maximum_threads"], r.values["parallel.minimum_elements"],
                r.values["algorithm.tile_m"]) == (1, 2048, 32)
    for r in slow:
        assert (r.values["parallel.maximum_threads"], r.values["parallel.minimum_elements"],
                r.values["algorithm.tile_m"]) == (64, 2048, 32)
        (cap,) = [d for d in r.decisions if d.parameter == "parallel.maximum_threads"]
        assert not cap.changed and not cap.fewer_threads
        assert cap.reason.startswith("withheld") and "1 would run" in cap.reason
        assert "one thread won" in cap.reason
    published = {p.key: p.values for p in report.successful_profiles}
    assert all(published[r.key] == r.values for r in report.calibrated)
    resolved = registry.snapshot().resolve(slow[0].key, slow[0].execution)
    assert resolved.values["parallel.maximum_threads"] == 64


@needs_two_cpus
def test_a_decision_for_fewer_threads_reverted_is_neither_measured_again_nor_withheld(
        toys):
    registry, keys, calls, _ = toys

    def calibrate(context):
        calls.append(context.key)
        time.sleep(TOY_SECONDS)
        context.decide("parallel.minimum_elements", 131072, "serial won", fewer_threads=True)
        context.decide("parallel.minimum_elements", 16384, "reverted: the previous won")

    # the last keys never settle, so the withholding looks at them: nothing is in effect
    report = _two_thread_batch(registry, keys, calibrate, [1.0, 1.0, 1.0, 1.0, 0.7],
                               "thorough")
    (watched,) = report.steadiness
    assert watched.remeasured == () and len(watched.unsettled) == len(keys) - 3
    assert all(r.values["parallel.minimum_elements"] == 16384 for r in report.calibrated)
    assert all(d.reason.startswith(("serial", "reverted"))
               for r in report.calibrated for d in r.decisions)


@needs_two_cpus
@pytest.mark.parametrize("again", [False, True])
def test_a_key_that_decided_fewer_threads_is_measured_again(toys, again):
    """A spell the probes missed makes one thread win once; the machine's state with more
    threads stands. A key that finds fewer threads faster again keeps them."""
    registry, keys, _, _ = toys
    measured = []

    def calibrate(context):
        measured.append(context.key)
        time.sleep(TOY_SECONDS)
        first = measured.count(context.key) == 1
        if first or again:
            context.decide("parallel.maximum_threads", 1, "one thread won", fewer_threads=True)
        context.decide("parallel.minimum_elements", 2048 if first else 4096, "parallel won")

    report = _two_thread_batch(registry, keys, calibrate, [1.0], "thorough")
    assert sorted(map(str, measured)) == sorted(map(str, keys * 2))  # once more, not again
    (watched,) = report.steadiness
    assert sorted(watched.remeasured) == sorted(map(str, keys)) and watched.unsettled == ()
    for r in report.calibrated:
        assert r.values["parallel.minimum_elements"] == 4096  # the latest among equals
        assert r.values["parallel.maximum_threads"] == (1 if again else 64)
    assert registry.generation > 0 and len(report.successful_profiles) == len(keys)


@needs_two_cpus
def test_a_second_measurement_cut_short_leaves_the_first_standing(toys):
    registry, keys, _, _ = toys
    measured = []

    def calibrate(context):
        measured.append(context.key)
        if measured.count(context.key) > 1:
            context.stop("per-key")
            return {"parallel.minimum_elements": 1}
        return {"parallel.minimum_elements": 5000}

    for key in keys:
        register_kernel_calibration_function(key, calibrate, registry=registry)
    register_machine_probe("test_library", _scripted_probe([1.0, 1.0, 1.0, 0.7, 1.0]),
                           registry=registry)
    report = _run(registry, library="test_library",
                  options=CalibrationOptions(threads=2, effort="thorough"))
    assert len(measured) > len(keys) and not report.skipped
    assert all(r.values["parallel.minimum_elements"] == 5000 and not r.stopped_early
               for r in report.calibrated)


def _register_timed(registry, keys, value=lambda context, count: 5000):
    """Register for ``keys`` in ``registry`` a calibration function that takes 20 ms (a
    first pass long enough for the time allowed to measure again) and returns
    ``value(context, count)`` as the grain, ``count`` being how often the key was
    measured; the keys measured."""
    measured = []

    def calibrate(context):
        measured.append(context.key)
        time.sleep(0.02)
        return {"parallel.minimum_elements": value(context, measured.count(context.key))}

    for key in keys:
        register_kernel_calibration_function(key, calibrate, registry=registry)
    return measured


@needs_two_cpus
def test_a_measurement_taken_deeper_in_a_slow_spell_does_not_replace_the_first(
        toys, monkeypatch):
    """The machine sinks deeper into the spell while keys are measured again: the first
    measurements stand."""
    registry, keys, _, _ = toys
    monkeypatch.setattr(steadiness, "POLL_SECONDS", 0.01)
    measured = _register_timed(registry, keys, lambda context, count: 5000 + count)
    # one probe before the first key and one after each; measured again, each key starts in
    # the reference state (1.0) and ends deeper in the spell (0.5)
    register_machine_probe("test_library",
                           _scripted_probe([1.0] * 4 + [0.7] * 5 + [1.0, 0.5] * 1000),
                           registry=registry)
    report = _run(registry, library="test_library",
                  options=CalibrationOptions(threads=2, effort="thorough"))
    (watched,) = report.steadiness
    slow = [r for r in report.calibrated if str(r.key) in watched.unsettled]
    assert len(slow) == len(keys) - 3 and watched.remeasured == watched.unsettled
    assert len(measured) > len(keys)
    assert all(r.values["parallel.minimum_elements"] == 5001 for r in report.calibrated)
    assert all(min(r.machine_probe[PARALLEL]) == pytest.approx(0.7) for r in slow)


@needs_two_cpus
def test_keys_are_measured_again_once_the_machine_is_back_in_its_reference_state(
        toys, monkeypatch):
    registry, keys, _, _ = toys
    monkeypatch.setattr(steadiness, "POLL_SECONDS", 0.01)
    calls = _register_timed(registry, keys)
    # the spell begins after the third key and lasts three probes into measuring again
    register_machine_probe("test_library", _scripted_probe([1.0] * 4 + [0.7] * 8 + [1.0]),
                           registry=registry)
    report = _run(registry, library="test_library",
                  options=CalibrationOptions(threads=2, effort="thorough"))
    (watched,) = report.steadiness
    slow = [str(r.key) for r in report.calibrated[3:]]
    assert watched.remeasured == tuple(slow) and watched.unsettled == ()
    assert len(calls) == len(keys) + len(slow)  # each once more, after the spell
    assert watched.probes[0].rates[len(keys):len(keys) + 5] == pytest.approx([0.7] * 4 + [1.0])
    assert all(r.machine_probe[PARALLEL] == pytest.approx((1.0, 1.0))
               for r in report.calibrated[3:])


@pytest.mark.parametrize("threads", [1, pytest.param(2, marks=needs_two_cpus)])
def test_a_key_whose_measurements_contradicted_each_other_is_measured_again(toys,
                                                                             threads):
    """Steady probes (or none, on one thread) cannot see a spell shorter than a key."""
    registry, keys, _, _ = toys
    register_machine_probe("test_library", lambda threads: 1.0, registry=registry)

    def value(context, count):
        if context.key == keys[2] and count == 1:
            context.contradict("parallel.minimum_elements: unary at 65536: serial won, then "
                               "parallel")
            return 1
        return 5000

    measured = _register_timed(registry, keys, value)
    report = _run(registry, library="test_library",
                  options=CalibrationOptions(threads=threads, effort="thorough"))
    assert sorted(map(str, measured[:len(keys)])) == sorted(map(str, keys))
    assert measured[len(keys):] == [keys[2]]
    assert all(r.values["parallel.minimum_elements"] == 5000 and not r.contradictions
               for r in report.calibrated)
    assert [list(w.remeasured) for w in report.steadiness] == [[str(keys[2])]] * (threads - 1)


@pytest.mark.parametrize("threads", [1, pytest.param(2, marks=needs_two_cpus)])
def test_an_aspect_probed_on_one_thread_too_sends_its_slow_keys_back(toys, threads):
    """A second aspect (the shared cache, say) watches one-thread batches as well; a key it
    saw slow is measured again though the parallel probe saw it steady."""
    registry, keys, calls, _ = toys
    register_machine_probe("test_library", lambda threads: 1.0, registry=registry)
    register_machine_probe("test_library", _scripted_probe([1.0, 1.0, 1.0, 0.7, 1.0]),
                           "shared cache", minimum_threads=1, registry=registry)
    report = _run(registry, library="test_library",
                  options=CalibrationOptions(threads=threads, effort="thorough"))
    order = [r.key for r in report.calibrated]
    assert calls == order + order[2:4]
    (watched,) = report.steadiness
    aspects = ["shared cache"] + [PARALLEL] * (threads > 1)
    assert sorted(trace.aspect for trace in watched.probes) == sorted(aspects)
    assert watched.remeasured == tuple(map(str, order[2:4])) and watched.steady
    assert all(sorted(r.machine_probe) == sorted(aspects) for r in report.calibrated)
    assert all(r.machine_probe["shared cache"] == pytest.approx((1.0, 1.0))
               for r in report.calibrated)


@needs_two_cpus
def test_a_failing_aspect_leaves_the_others_watching(toys):
    registry, keys, calls, _ = toys
    register_machine_probe("test_library", lambda threads: 1 / 0, registry=registry)
    register_machine_probe("test_library", _scripted_probe([1.0, 1.0, 1.0, 0.7, 1.0]),
                           "shared cache", minimum_threads=1, registry=registry)
    report = _run(registry, library="test_library",
                  options=CalibrationOptions(threads=2, effort="thorough"))
    order = [r.key for r in report.calibrated]
    assert calls == order + order[2:4]
    (watched,) = report.steadiness
    errors = {trace.aspect: trace.error for trace in watched.probes}
    assert "ZeroDivisionError" in errors[PARALLEL] and errors["shared cache"] is None
    assert not watched.steady and watched.unsettled == ()
    assert all(list(r.machine_probe) == ["shared cache"] for r in report.calibrated)


def test_a_probe_belongs_to_the_registry_it_was_registered_with(toys):
    """A batch runs the probes of the registry it calibrates, not another's."""
    registry, keys, _, _ = toys
    other, asked = KernelTuningRegistry(), []
    register_machine_probe("test_library", _scripted_probe([1.0], asked), "shared cache",
                           minimum_threads=1, registry=other)
    assert registry.machine_probes("test_library") == {}
    assert _run(registry, library="test_library").steadiness == () and asked == []
    register_machine_probe("test_library", _scripted_probe([1.0], asked), "shared cache",
                           minimum_threads=1, registry=registry)
    (watched,) = _run(registry, library="test_library").steadiness
    assert [trace.aspect for trace in watched.probes] == ["shared cache"]
    assert asked == [1] * (len(keys) + 1)


def test_a_later_probe_replaces_only_its_own_aspect():
    registry = KernelTuningRegistry()
    first, second, cache = (lambda threads: 1.0), (lambda threads: 2.0), (lambda threads: 3.0)
    register_machine_probe("lib", first, registry=registry)
    register_machine_probe("lib", cache, "shared cache", minimum_threads=1, registry=registry)
    register_machine_probe("lib", second, registry=registry)
    assert {aspect: r.probe for aspect, r in registry.machine_probes("lib").items()} == {
        PARALLEL: second, "shared cache": cache}


def test_the_reference_state_is_the_fastest_that_three_consecutive_probes_held():
    assert steadiness.reference_rate([]) is None
    assert steadiness.reference_rate([0.7]) == 0.7
    assert steadiness.reference_rate([1.0, 0.7]) == 0.7  # too few to tell
    assert steadiness.reference_rate([1.3, 1.0, 1.05, 0.7, 1.02, 0.71]) == 1.0
    # lucky probes, however many, are no state: each stands between slower ones
    assert steadiness.reference_rate([1.5, 1.0, 1.5, 1.02, 1.5, 0.98, 1.0, 1.5]) == 1.02
    # a fast state held for three probes is one, wherever it falls
    assert steadiness.reference_rate([1.0, 1.3, 1.31, 1.32, 1.0, 0.7]) == 1.3
    assert steadiness.reference_rate([1.0, 0.7, 1.0, 1.3, 1.31, 1.32]) == 1.3
    assert steadiness.in_reference_state([1.0, 0.85], 1.02)
    assert not steadiness.in_reference_state([1.0, 0.84], 1.02)
    assert steadiness.in_reference_state([0.5], None)


def test_one_thread_and_unprobed_libraries_are_not_probed(toys):
    registry = toys[0]
    if CPUS >= 2:
        assert _run(registry, library="test_library",
                    options=CalibrationOptions(threads=2, effort="quick")).steadiness == ()
    register_machine_probe("test_library", lambda threads: 1 / 0, registry=registry)
    assert _run(registry, library="test_library").steadiness == ()


@needs_two_cpus
@pytest.mark.parametrize(("probe", "error"), [
    (lambda threads: 0, "returned 0"),
    (lambda threads: -1.0, "returned -1.0"),
    (lambda threads: float("nan"), "returned nan"),
    (lambda threads: float("inf"), "returned inf"),
    (lambda threads: True, "returned True"),
    (lambda threads: "fast", "returned 'fast'"),
    (lambda threads: 1 / 0, "raised ZeroDivisionError"),
])
def test_a_failing_probe_is_reported_and_costs_nothing_else(toys, probe, error):
    registry, keys, _, _ = toys
    register_machine_probe("test_library", probe, registry=registry)
    before = registry.generation
    report = _run(registry, library="test_library",
                  options=CalibrationOptions(threads=2, effort="quick"))
    assert registry.generation == before + 1 and len(report.calibrated) == len(keys)
    (watched,) = report.steadiness
    (trace,) = watched.probes
    assert error in trace.error and not watched.steady and trace.samples == ()
    written = json.loads(json.dumps(report.to_dict()))
    assert written["steadiness"][0]["probes"][0]["error"] == trace.error


@pytest.mark.parametrize(("arguments", "error"), [
    (("", abs), TypeError), ((None, abs), TypeError), (("lib", 3), TypeError),
    (("lib", abs, ""), TypeError), (("lib", abs, None), TypeError),
    (("lib", abs, "cache", 0), ValueError), (("lib", abs, "cache", True), ValueError),
    (("lib", abs, "cache", 1.5), ValueError)])
def test_a_bad_probe_registration_is_refused(arguments, error):
    registry = KernelTuningRegistry()
    with pytest.raises(error):
        register_machine_probe(*arguments, registry=registry)
    assert registry.machine_probes(arguments[0]) == {}


@pytest.mark.parametrize(("timeout", "threads", "warns"), [
    (None, 2, True), ("28", 4, True), ("often", 2, True), ("0", 2, True), ("4", 2, False),
    ("12", 2, False), (None, 1, False)])
def test_blas_threads_that_spin_into_the_measurements_are_named(monkeypatch, timeout, threads,
                                                                 warns):
    from threadpoolctl import threadpool_info

    from kerneltune.calibration import spinning_blas_warning

    if not any(pool["internal_api"] == "openblas" and pool.get("threading_layer") == "pthreads"
               for pool in threadpool_info()):
        pytest.skip("numpy's BLAS here is not OpenBLAS on its own threads")
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    if timeout is not None:
        monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", timeout)
    warning = spinning_blas_warning(threads)
    assert (warning is not None) is warns
    if warns:
        assert "OPENBLAS_THREAD_TIMEOUT=4" in warning and f"on {threads} threads" in warning
        assert ("is not set" if timeout is None else f"is {timeout!r}") in warning


def test_explicit_comparison_needs_a_workload(toys):
    registry = toys[0]
    report = _run(registry, kernels=["Abs"], options=CalibrationOptions(
        threads=1, parameter="parallel.minimum_elements", values=[1024]))
    assert len(report.unsupported) == 4
    assert all("workload" in u.reason for u in report.unsupported)


# --- the searches, on synthetic measurements ----------------------------------------------------


def _measurement(seconds: float) -> Measurement:
    return Measurement(tuple(seconds * f for f in (0.99, 1.0, 1.0, 1.0, 1.01)), (), 1)


def _context(registry_key=None, **options) -> CalibrationContext:
    from kerneltune.schema import KernelTuningSchema

    key = registry_key or toy_key()
    schema = KernelTuningSchema.from_config(key, ToyConfig)
    return CalibrationContext(key, schema, current_execution(1),
                              CalibrationOptions(**options), schema.default_values(),
                              Deadline(float("inf"), "per-key"))


def _synthetic(context, timing):
    """Replace measuring by ``timing(name, size) -> seconds``; return the sizes measured."""
    measured = []

    def fake(runs):
        size = context._current_size
        measured.append(size)
        return {name: _measurement(timing(name, size)) for name in runs}

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
        return {name: _measurement(seconds[name]) for name in runs}

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
            return {"serial": _measurement(1.0), "parallel": noisy}
        return {name: _measurement(1.0 if name == "serial" or size < 16384 else 0.5)
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


@pytest.mark.parametrize(("previous", "stands"), [(0.5, False), (1.0, True), (2.0, True)])
def test_decided_values_are_verified_against_the_previous_ones(previous, stands):
    context = _context()
    context.decide("parallel.minimum_elements", 4096, "measured")
    context.decide("parallel.maximum_threads", 8, "measured")
    _synthetic(context, lambda name, n: previous if name == "previous" else 1.0)
    case = _crossover_problem(context, SIZES, 65536).case
    verified = verify_decisions(context, ["parallel.minimum_elements"], [(case, 8192)],
                                lambda config: np.copy)
    assert verified is stands
    assert context.values["parallel.minimum_elements"] == (4096 if stands else 32768)
    assert context.values["parallel.maximum_threads"] == 8  # not among the verified
    if not stands:
        assert "reverted" in context.decisions[-1].reason


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
        return {name: _measurement(timing[int(name.split()[0])]) for name in runs}

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
        return {name: _measurement(timing(int(name.split()[0]), context._current_size))
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


# --- measuring -----------------------------------------------------------------------------------


def test_geometric_grids_are_increasing_multiples():
    grid = geometric_grid(1024, 1 << 20, 2, 128)
    assert grid[0] == 1024 and grid[-1] == 1 << 20 and len(grid) == 21
    assert all(b > a for a, b in zip(grid, grid[1:], strict=False))
    assert all(size % 128 == 0 for size in grid)
    assert geometric_grid(1, 8, 1) == [1, 2, 4, 8]


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
    fast, slow = _measurement(1.0), _measurement(1.2)
    assert fast.beats(slow, 0.05) and not slow.beats(fast, 0.05)
    assert not fast.beats(_measurement(1.04), 0.05)
    wide = Measurement((0.5, 0.8, 1.0, 1.3, 1.5), (), 1)
    assert not wide.beats(_measurement(1.2), 0.05)
