"""Machine probes around each key, the reference state, and measuring keys again.

Scripted probes stand for the machine's states, so which keys are measured
again, and what is published, is checked exactly on toy keys.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from conftest import AVAILABLE_CPUS, TOY_SECONDS, calibrate_toys, needs_two_cpus
from kerneltune import KernelTuningRegistry
from kerneltune.calibration import (
    PARALLEL,
    CalibrationOptions,
    register_kernel_calibration_function,
    register_machine_probe,
    steadiness,
)


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
    return calibrate_toys(registry, library="test_library",
                options=CalibrationOptions(threads=2, effort=effort))


@needs_two_cpus
def test_a_batch_on_two_threads_probes_the_machine_around_each_key(toys):
    registry, keys, _, _ = toys
    asked = []
    speedups = [1.5, 1.6, 1.4, 1.9, 1.5, 1.62, 1.5, 1.45, 1.55]
    register_machine_probe("test_library", _scripted_probe(speedups, asked), registry=registry)
    register_machine_probe("another_library", lambda threads: 1 / 0,  # no key selected: unused
                           registry=registry)
    report = calibrate_toys(registry, library="test_library",
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
    report = calibrate_toys(registry, library="test_library",
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
    report = calibrate_toys(registry, library="test_library",
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
def test_a_second_measurement_cut_short_leaves_the_first_standing(toys, monkeypatch):
    registry, keys, _, _ = toys
    monkeypatch.setattr(steadiness, "POLL_SECONDS", 0.01)

    def value(context, count):
        if count > 1:
            context.stop("per-key")
            return 1
        return 5000

    # timed, as the other tests of measuring again are: an instant first pass leaves no time
    # to measure again on a busy machine
    measured = _register_timed(registry, keys, value)
    register_machine_probe("test_library", _scripted_probe([1.0, 1.0, 1.0, 0.7, 1.0]),
                           registry=registry)
    report = calibrate_toys(registry, library="test_library",
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
    report = calibrate_toys(registry, library="test_library",
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
    report = calibrate_toys(registry, library="test_library",
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
    report = calibrate_toys(registry, library="test_library",
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
    report = calibrate_toys(registry, library="test_library",
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
    report = calibrate_toys(registry, library="test_library",
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
    assert calibrate_toys(registry, library="test_library").steadiness == () and asked == []
    register_machine_probe("test_library", _scripted_probe([1.0], asked), "shared cache",
                           minimum_threads=1, registry=registry)
    (watched,) = calibrate_toys(registry, library="test_library").steadiness
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
    if AVAILABLE_CPUS >= 2:
        assert calibrate_toys(registry, library="test_library",
                    options=CalibrationOptions(threads=2, effort="quick")).steadiness == ()
    register_machine_probe("test_library", lambda threads: 1 / 0, registry=registry)
    assert calibrate_toys(registry, library="test_library").steadiness == ()


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
    report = calibrate_toys(registry, library="test_library",
                  options=CalibrationOptions(threads=2, effort="quick"))
    # every key measured; beside busy processes a key whose CPUs were stolen is withheld
    assert registry.generation == before + 1
    assert len(report.calibrated) + len(report.withheld) == len(keys)
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
