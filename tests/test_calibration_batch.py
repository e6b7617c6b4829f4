"""Batch semantics: selection, one publication, budgets, skips and errors.

Toy calibration functions run against toy schemas in a fresh registry (the
``toys`` fixture of conftest.py).
"""

from __future__ import annotations

import json
import time

import pytest

from conftest import AVAILABLE_CPUS, ToyConfig, calibrate_toys, needs_two_cpus, toy_key
from kerneltune import CalibrationError, KernelTuningRegistry, Tier, TuningValidationError
from kerneltune.calibration import (
    CalibrationOptions,
    calibrate_kernel_thresholds,
    calibration_function,
    is_calibratable,
    register_kernel_calibration_function,
)
from kerneltune.machine.detect import current_execution


def test_an_empty_selection_calibrates_every_calibratable_key(toys):
    registry, keys, calls, uncalibratable = toys
    before = registry.generation
    report = calibrate_toys(registry, library="test_library")
    assert sorted(map(str, calls)) == sorted(map(str, keys))
    assert registry.generation == before + 1  # one publication for the whole batch
    assert len(report.successful_profiles) == len(keys)
    everything = calibrate_toys(registry)
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
    report = calibrate_toys(registry, library="test_library", **selection)
    wanted = sorted(str(k) for k in keys if expected(k))
    assert sorted(map(str, calls)) == wanted
    assert sorted(str(r.key) for r in report.calibrated) == wanted


def test_a_bad_selection_names_every_field(toys):
    registry = toys[0]
    with pytest.raises(TuningValidationError) as error:
        calibrate_toys(registry, library="", kernels=[3], element_types=["FLOAT", "QUATERNION"])
    assert {p.field for p in error.value.problems} == {"library", "kernels", "element_types"}


def test_calibrated_profiles_bind_to_the_execution_and_point_to_their_report(toys):
    registry, keys, _, _ = toys
    report = calibrate_toys(registry, kernels=["Abs"], element_types=["FLOAT"],
                            implementations="v3")
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
    calibrate_toys(registry, kernels=["Abs"], options=one)
    calls.clear()
    again = calibrate_toys(registry, kernels=["Abs"], only_missing=True, options=one)
    assert calls == [] and not again.calibrated and not again.successful_profiles
    assert all("2 threads" not in s.reason and "1 threads" in s.reason for s in again.skipped)
    other = calibrate_toys(registry, kernels=["Abs"], only_missing=True, options=two)
    assert len(other.calibrated) == len(calls) == 4
    calls.clear()
    assert not calibrate_toys(registry, kernels=["Abs"], only_missing=True, options=two).calibrated


def test_a_failing_function_publishes_nothing(toys):
    registry, keys, calls, _ = toys
    broken = keys[-1]

    def fails(context):
        raise RuntimeError("sensor on fire")

    register_kernel_calibration_function(broken, fails, registry=registry)
    before = registry.generation
    with pytest.raises(RuntimeError, match="sensor on fire"):
        calibrate_toys(registry, library="test_library")
    assert registry.generation == before
    assert all(p.execution is None for k in keys for p in registry.snapshot().profiles(k))


def test_an_invalid_value_publishes_nothing(toys):
    registry, keys, _, _ = toys
    register_kernel_calibration_function(keys[0], lambda context: {"parallel.minimum_elements": 0},
                                         registry=registry)
    before = registry.generation
    with pytest.raises(TuningValidationError, match="parallel.minimum_elements"):
        calibrate_toys(registry, library="test_library")
    assert registry.generation == before


def test_calibrating_an_unregistered_key_is_an_error(toys):
    with pytest.raises(TuningValidationError, match="no tuning schema"):
        calibrate_kernel_thresholds([toy_key("Nope")], registry=toys[0])


def test_more_threads_than_cpus_is_an_error(toys):
    with pytest.raises(CalibrationError, match="CPUs"):
        calibrate_toys(toys[0], options=CalibrationOptions(threads=AVAILABLE_CPUS + 1))


def test_a_tiny_total_budget_skips_the_remaining_keys_and_says_so(toys):
    registry, keys, calls, _ = toys

    def slow(context):
        context.deadline.check()
        time.sleep(0.05)
        return {}

    for key in keys:
        register_kernel_calibration_function(key, slow, registry=registry)
    report = calibrate_toys(registry, library="test_library",
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
    report = calibrate_toys(other, library="test_library")
    assert calls == [] and not report.calibrated and len(report.unsupported) == len(keys)


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
    report = calibrate_toys(registry, kernels=["Abs"], options=CalibrationOptions(
        threads=1, parameter="parallel.minimum_elements", values=[1024]))
    assert len(report.unsupported) == 4
    assert all("workload" in u.reason for u in report.unsupported)
