"""Calibrating the real kernel library: every key is calibratable, searches run real kernels.

These run the compiled kernels at the quick effort and check what the reports
contain and what gets published, never which value wins (that depends on the
machine and its load).
"""

from __future__ import annotations

import json

import pytest

import kerneltune
from conftest import AVAILABLE_CPUS, needs_two_cpus
from kerneltune import KernelTuningRegistry, Tier, TuningValidationError
from kerneltune._support.aligned import ALIGNMENT
from kerneltune.calibration import (
    PARALLEL,
    CalibrationOptions,
    calibrate_registered_kernels,
    is_calibratable,
)
from kerneltune.calibration.context import CalibrationContext
from kerneltune.calibration.measure import Deadline, Measurement
from kerneltune.calibration.report import Decision
from kerneltune.cli import PARTIAL
from kerneltune.kernels import LIBRARY, library, register_library
from kerneltune.kernels.calibrate import ElementwiseCalibration
from kerneltune.kernels.calibrate_gemm import (
    WEIGHT_DEPTH,
    GemmCalibration,
    tile_candidates,
    whole_block_grid,
)
from kerneltune.kernels.gemm import KU, MR, NR
from kerneltune.kernels.probes import SHARED_CACHE, shared_cache_probe
from kerneltune.machine.detect import current_execution
from kerneltune.runtime import RuntimeSession

# The quick effort's budget of a few seconds per key is for a quiet machine; under a
# loaded test run a search would stop early and the key would be skipped, so these
# tests give every key time and check budgets where they say so.
QUICK = {"effort": "quick", "repetitions": 5, "time_budget_per_key": 600}


@pytest.fixture
def registry() -> KernelTuningRegistry:
    fresh = KernelTuningRegistry()
    register_library(fresh)
    return fresh


def _calibrate(registry, threads, **selection):
    options = CalibrationOptions(threads=threads, **{**QUICK, **selection.pop("options", {})})
    return calibrate_registered_kernels(library=LIBRARY, options=options, registry=registry,
                                        **selection)


def test_every_key_of_the_library_is_calibratable():
    keys = kerneltune.snapshot().keys()
    assert keys and all(is_calibratable(key) for key in keys if key.library == LIBRARY)


def test_the_library_registers_its_calibrations_with_the_registry_it_is_given(registry):
    keys = registry.snapshot().keys()
    assert keys and all(is_calibratable(key, registry=registry) for key in keys)
    assert set(registry.machine_probes(LIBRARY)) == {PARALLEL, SHARED_CACHE}
    other = KernelTuningRegistry()
    assert not any(is_calibratable(key, registry=other) for key in keys)
    assert other.machine_probes(LIBRARY) == {}


@needs_two_cpus
@pytest.mark.parametrize(("kernel", "element_type"), [
    ("Abs", "FLOAT"), ("Add", "INT32"), ("Greater", "DOUBLE"), ("Mul", "FLOAT16"),
    ("Not", "BOOL"), ("GreaterOrEqual", "INT16"), ("LessOrEqual", "BFLOAT16"),
    ("Log", "BFLOAT16"), ("BitwiseNot", "UINT8"), ("Softmax", "FLOAT"), ("ArgMax", "INT64"),
    ("ReduceSum", "DOUBLE"), ("Normalizer", "FLOAT"), ("Cast", "INT32"), ("Cast", "FLOAT"),
    ("LayerNormalization", "FLOAT"), ("Clip", "UINT8"), ("Clip", "FLOAT16"), ("Gelu", "FLOAT"),
    ("LeakyRelu", "DOUBLE"),
])
def test_elementwise_calibration_decides_every_parameter(registry, kernel, element_type):
    report = _calibrate(registry, 2, kernels=[kernel], element_types=[element_type])
    (calibrated,) = report.calibrated
    schema = registry.snapshot().schema(calibrated.key)
    assert {d.parameter for d in calibrated.decisions} == set(schema.parameters)
    assert set(calibrated.values) == set(schema.parameters)
    measured = [c for d in calibrated.decisions for c in d.candidates]
    assert measured, "the searches measured nothing"
    for candidate in measured:
        for measurement in candidate.measurements.values():
            assert len(measurement.samples) >= 5 and measurement.median > 0
    data = json.loads(json.dumps(report.to_dict()))
    entry = data["calibrated"][0]
    assert entry["execution"]["effective_threads"] == 2
    assert entry["versions"]["tuning_abi"] == calibrated.key.tuning_abi
    assert entry["versions"]["kerneltune"] == kerneltune.__version__
    assert entry["options"]["effort"] == "quick"
    assert all(d["reason"] for d in entry["decisions"])


def test_the_new_operators_and_bfloat16_are_calibrated_and_reported(registry):
    """Each key of GreaterOrEqual, LessOrEqual and BFLOAT16 is calibratable, and a batch over
    them reports every one (on one thread, which keeps every parallel parameter)."""
    keys = registry.snapshot().keys()
    new = {key for key in keys if key.kernel in ("GreaterOrEqual", "LessOrEqual")
           or key.element_type_name == "BFLOAT16"}
    assert {key.kernel for key in new if key.element_type_name == "BFLOAT16"} >= {
        "Add", "Pow", "Tanh", "GreaterOrEqual", "LessOrEqual", "Gemm", "MatMul"}
    assert len({key for key in new if key.kernel == "GreaterOrEqual"}) == 12
    report = _calibrate(registry, 1, kernels=["GreaterOrEqual", "LessOrEqual", "Add", "Gemm"],
                        element_types=["BFLOAT16", "INT8"])
    assert {c.key for c in report.calibrated} == {key for key in keys if key.kernel in (
        "GreaterOrEqual", "LessOrEqual", "Add", "Gemm") and key.element_type_name in (
        "BFLOAT16", "INT8")}
    entries = json.loads(json.dumps(report.to_dict()))["calibrated"]
    assert {(e["key"]["kernel"], e["key"]["element_type"]) for e in entries} >= {
        ("GreaterOrEqual", "BFLOAT16"), ("LessOrEqual", "INT8"), ("Gemm", "BFLOAT16")}
    for entry in entries:
        if entry["key"]["element_type"] == "BFLOAT16":
            assert any(d["parameter"] == "conversion.parallel_minimum_elements"
                       for d in entry["decisions"])


def test_one_thread_keeps_the_parallel_parameters(registry):
    report = _calibrate(registry, 1, kernels=["Sub"], element_types=["FLOAT16"])
    (calibrated,) = report.calibrated
    assert all(not d.changed and "one thread" in d.reason for d in calibrated.decisions)
    assert not any(d.candidates for d in calibrated.decisions)


def test_one_thread_measures_arg_max_s_crossover_from_numpy_to_the_compiled_kernel(registry):
    """ArgMax's numpy/compiled threshold is measured whatever the thread count: numpy's call
    against the compiled kernel's, on a classifier's rows of scores."""
    report = _calibrate(registry, 1, kernels=["ArgMax"], element_types=["FLOAT"])
    (calibrated,) = report.calibrated
    # the search's decision is the first: a change it found may be turned down by the
    # confirmation after it, a decision of its own without measurements
    crossover = next(d for d in calibrated.decisions
                     if d.parameter == "algorithm.compiled_minimum_elements")
    decisions = {d.parameter: d for d in calibrated.decisions
                 if d.parameter != crossover.parameter}
    assert crossover.candidates
    assert all(set(c.measurements) == {"numpy", "compiled"} for c in crossover.candidates)
    assert all(not d.changed and "one thread" in d.reason for d in decisions.values())


def test_a_one_byte_memory_budget_keeps_every_default(registry):
    report = _calibrate(registry, min(2, AVAILABLE_CPUS), kernels=["Exp", "MatMul"],
                        element_types=["FLOAT"], options={"memory_budget": 1})
    for calibrated in report.calibrated:
        defaults = registry.snapshot().schema(calibrated.key).default_values()
        assert dict(calibrated.values) == defaults
        assert not any(c for d in calibrated.decisions for c in d.candidates)


def test_a_tiny_time_budget_stops_early_and_publishes_nothing(registry):
    before = registry.generation
    report = _calibrate(registry, min(2, AVAILABLE_CPUS), kernels=["Gemm"], element_types=["FLOAT"],
                        options={"time_budget_per_key": 1e-6})
    assert not report.calibrated and not report.successful_profiles
    (skipped,) = report.skipped
    assert "time budget exhausted" in skipped.reason and skipped.report.stopped_early
    assert registry.generation == before


def test_gemm_calibration_decides_tiles_algorithms_and_grain(registry):
    report = _calibrate(registry, 1, kernels=["Gemm"], element_types=["DOUBLE"])
    (calibrated,) = report.calibrated
    decided = {}  # each parameter's search (a change turned down adds a decision after it)
    for decision in calibrated.decisions:
        decided.setdefault(decision.parameter, decision)
    assert set(decided) == set(registry.snapshot().schema(calibrated.key).parameters)
    assert decided["algorithm.tile_m"].candidates  # the shape families were measured
    assert decided["algorithm.blas_minimum_fmas"].candidates
    if calibrated.values["algorithm.skinny_m_limit"] >= 1:  # B's size measured for few rows
        assert decided["algorithm.skinny_minimum_b_elements"].candidates
    else:
        assert "no product is skinny" in decided["algorithm.skinny_minimum_b_elements"].reason
    # BLAS against the skinny path only where the skinny path runs: on a B of at least
    # skinny_minimum_b_elements (a smaller B meets the blocked path's threshold)
    smallest_b = calibrated.values["algorithm.skinny_minimum_b_elements"]
    skinny_blas = [c.point for c in decided["algorithm.skinny_blas_minimum_fmas"].candidates]
    assert all(n * n >= smallest_b for n in skinny_blas)
    # BLAS against the packed path on a constant B: from twice the skinny path's rows
    packed = decided["algorithm.packed_blas_minimum_fmas"]
    assert packed.candidates and all(c.point >= 16 for c in packed.candidates)
    assert [row["label"] for row in calibrated.comparison][0] == "tiles 64x256x256"
    assert calibrated.comparison[0]["speedup"] == 1.0
    registry.snapshot().schema(calibrated.key).configure(calibrated.values)  # consistent


@pytest.mark.parametrize("steps", [1, 2, 4])
def test_gemm_grids_are_whole_blocks_of_columns_from_one_block_on(steps):
    grid = whole_block_grid(16, 4096, steps)
    assert grid == sorted(set(grid)) and grid[0] == 16 and grid[-1] == 4096
    assert all(size % NR == 0 for size in grid if size >= NR)
    assert len([size for size in grid if size < NR]) == 2 * steps  # 16 to 64: a plain grid


def test_gemm_searches_sizes_of_whole_column_blocks(registry):
    """Thorough effort's plain grid would hold 90, 108, 152 and 181, where the compiled path
    runs a narrower block; the memory budget keeps the products small (and the test short)."""
    report = _calibrate(registry, 1, kernels=["MatMul"], element_types=["FLOAT"],
                        options={"effort": "thorough", "memory_budget": 500_000})
    (calibrated,) = report.calibrated
    searched = {}  # every decision's points: a change turned down is a decision of its own
    for decision in calibrated.decisions:
        searched.setdefault(decision.parameter, []).extend(c.point for c in decision.candidates)
    for parameter in ("algorithm.blas_minimum_fmas", "algorithm.vector_blas_minimum_fmas"):
        assert all(size % NR == 0 for size in searched[parameter] if size >= NR), parameter
    # (the baseline's squares meet BLAS below a column block: its search stays there)
    assert any(size > NR for size in searched["algorithm.vector_blas_minimum_fmas"])


def test_calibrated_values_reach_new_sessions(registry):
    report = _calibrate(registry, 1, kernels=["Relu"], element_types=["FLOAT"])
    (profile,) = report.successful_profiles
    resolution = registry.resolve(profile.key, current_execution(1))
    assert resolution.source.tier is Tier.CALIBRATED
    assert resolution.source.digest == profile.digest


def test_explicit_comparison_times_each_value_with_the_active_one_first(registry):
    options = {"parameter": "parallel.minimum_elements", "values": [1024, 32768, 1 << 20]}
    report = _calibrate(registry, min(2, AVAILABLE_CPUS), kernels=["Abs"], element_types=["FLOAT"],
                        options=options)
    (calibrated,) = report.calibrated
    labels = [row["label"] for row in calibrated.comparison]
    assert labels == ["parallel.minimum_elements=32768", "parallel.minimum_elements=1024",
                      "parallel.minimum_elements=1048576"]
    assert calibrated.comparison[0]["speedup"] == 1.0
    assert all(row["seconds"] > 0 for row in calibrated.comparison)
    (decision,) = calibrated.decisions
    assert decision.value in options["values"]


def test_explicit_comparison_validates_values_before_measuring(registry):
    before = registry.generation
    with pytest.raises(TuningValidationError, match="parallel.minimum_elements"):
        _calibrate(registry, 1, kernels=["Abs"], element_types=["FLOAT"],
                   options={"parameter": "parallel.minimum_elements", "values": [0]})
    assert registry.generation == before


def test_explicit_comparison_skips_keys_without_the_parameter(registry):
    report = _calibrate(registry, 1, kernels=["Abs", "Add"], element_types=["DOUBLE"],
                        options={"parameter": "parallel.broadcast_minimum_elements",
                                 "values": [4096]})
    assert [r.key.kernel for r in report.calibrated] == ["Add"]
    assert [s.key.kernel for s in report.skipped] == ["Abs"]


def test_session_runs_with_calibrated_profiles(registry):
    import numpy as np
    from onnx import TensorProto, helper

    _calibrate(registry, 1, kernels=["Abs"], element_types=["FLOAT"])
    graph = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["y"])], "abs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = RuntimeSession(model, threads=1, registry=registry)
    x = np.linspace(-3, 3, 100_001, dtype=np.float32)
    assert np.array_equal(session.run(None, {"x": x})[0], np.abs(x))
    (diagnostic,) = session.tuning_diagnostics
    assert diagnostic["source"]["tier"] == Tier.CALIBRATED.label


@pytest.mark.parametrize(("l1", "l2", "itemsize"), [
    (32768, 1 << 20, 4), (49152, 2 << 20, 8), (None, None, 4), (32768, 256 * 1024, 8),
])
def test_tile_candidates_fit_the_cache_and_the_micro_kernel(l1, l2, itemsize):
    candidates = tile_candidates(l1, l2, itemsize)
    assert 0 < len(candidates) <= 6 and len(set(candidates)) == len(candidates)
    for tile_m, tile_n, tile_k in candidates:
        assert tile_m % MR == 0 and tile_n % NR == 0 and tile_k % KU == 0
        assert tile_k * tile_n * itemsize <= (l2 or 512 * 1024) // 2


def test_every_kernel_has_a_workload_for_comparisons():
    from kerneltune.calibration import calibration_function

    for kernel in library().values():
        for element_type in kernel.element_types:
            assert callable(calibration_function(kernel.tuning_key(element_type)).workload)


def test_the_command_line_calibrates_and_writes_the_report(tmp_path):
    import os
    import subprocess
    import sys

    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "kerneltune", "calibrate", "--threads", "1", "--effort", "quick",
         "--kernel", "Relu", "--element-type", "FLOAT", "--report", str(report)],
        capture_output=True, text=True, check=False,
        env={**os.environ, "OMP_WAIT_POLICY": "active", "OPENBLAS_THREAD_TIMEOUT": "4",
             "KERNELTUNE_CACHE": "off"})
    assert done.returncode == 0, done.stderr
    assert "threads 1: 1 keys calibrated" in done.stdout
    # one thread runs nothing in parallel, but reads through the shared cache
    assert f"machine probe of {LIBRARY} (shared cache)" in done.stdout
    assert f"machine probe of {LIBRARY} (parallel)" not in done.stdout
    (batch,) = json.loads(report.read_text())
    assert [c["key"]["kernel"] for c in batch["calibrated"]] == ["Relu"]
    # what else shaped the timings: the OpenMP wait policy, the thread pools loaded
    environment = batch["calibrated"][0]["environment"]
    assert environment["variables"]["OMP_WAIT_POLICY"] == "active"
    assert environment["wait_policy"] == {"policy": "active", "spin_count": 30_000_000_000,
                                          "throttled_spin_count": 1000, "ignored": []}
    assert environment["variables"]["OPENBLAS_THREAD_TIMEOUT"] == "4"
    assert "openmp" in {pool["user_api"] for pool in environment["thread_pools"]}
    assert not list(tmp_path.glob("*.tmp"))
    umask = os.umask(0)
    os.umask(umask)
    assert report.stat().st_mode & 0o777 == 0o666 & ~umask  # a normal file, not a 0600 temporary


@needs_two_cpus
def test_the_library_probes_the_machine_during_a_two_thread_calibration(tmp_path):
    import os
    import subprocess
    import sys

    from threadpoolctl import threadpool_info

    report = tmp_path / "report.json"
    env = {name: value for name, value in os.environ.items() if name != "OPENBLAS_THREAD_TIMEOUT"}
    done = subprocess.run(
        [sys.executable, "-m", "kerneltune", "calibrate", "--threads", "2", "--effort", "quick",
         "--kernel", "Relu", "--element-type", "FLOAT", "--report", str(report),
         "--require-steady"],
        capture_output=True, text=True, check=False, env={**env, "KERNELTUNE_CACHE": "off"})
    assert done.stderr == ""
    assert f"machine probe of {LIBRARY} (parallel)" in done.stdout
    assert f"machine probe of {LIBRARY} (shared cache)" in done.stdout
    spinning = {(p["internal_api"], p.get("threading_layer")) for p in threadpool_info()}
    # OpenBLAS's threads spin into the compiled kernels measured after a BLAS call: named
    assert (("warning: OPENBLAS_THREAD_TIMEOUT is not set" in done.stdout)
            is (("openblas", "pthreads") in spinning))
    (batch,) = json.loads(report.read_text())
    (watched,) = batch["steadiness"]
    assert watched["library"] == LIBRARY and watched["threads"] == 2
    assert sorted(trace["aspect"] for trace in watched["probes"]) == ["parallel", "shared cache"]
    for trace in watched["probes"]:
        assert trace["error"] is None
        # one key, probed before and after: too few probes to tell a state from a lucky one,
        # so the slower of the two is the reference and the key counts as measured in it
        rates = [rate for _, rate in trace["samples"]]
        assert len(rates) == 2 and all(rate > 0 for rate in rates)
        assert trace["reference"] == min(rates)
    assert watched["steady"] and watched["unsettled"] == []
    assert "were measured only while" not in done.stdout and done.returncode == 0


def test_the_library_watches_its_parallel_speed_and_its_shared_cache(registry):
    import math

    watching = registry.machine_probes(LIBRARY)
    assert {aspect: r.minimum_threads for aspect, r in watching.items()} == {
        PARALLEL: 2, SHARED_CACHE: 1}
    # the real Add, on operands beyond a given L2 and beyond this processor's
    for probe in (shared_cache_probe(library()["Add"], l2_bytes=64 * 1024),
                  watching[SHARED_CACHE].probe):
        rates = [probe(threads) for threads in (1, 2)]
        assert all(isinstance(rate, float) and 0 < rate < math.inf for rate in rates)


SCRIPTED_PROBE = """
import sys
import kerneltune
from kerneltune._support.aligned import ALIGNMENT
from kerneltune import cli
from kerneltune.calibration import register_machine_probe

speedups = iter([1.0, 1.0, 1.0, 0.7])
register_machine_probe({library!r}, lambda threads: next(speedups, 0.7))
register_machine_probe({library!r}, lambda threads: 1.0, "shared cache", minimum_threads=1)
sys.exit(cli.main(sys.argv[1:]))
"""


@needs_two_cpus
def test_require_steady_saves_nothing_when_a_key_was_measured_in_a_slow_state(tmp_path):
    import os
    import subprocess
    import sys

    cache = tmp_path / "cache" / "kernel_tuning.yaml"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPTED_PROBE.format(library=LIBRARY), "calibrate",
         "--threads", "2", "--effort", "quick", "--kernel", "Relu", "--element-type", "FLOAT",
         "--element-type", "DOUBLE", "--element-type", "INT32", "--save", "--require-steady"],
        capture_output=True, text=True, check=False,
        env={**os.environ, "KERNELTUNE_CACHE": str(cache)})
    assert done.stderr == ""
    # the probe after the third key read the slow state: that key never measured in the fast one
    assert "warning: 1 keys were measured only while" in done.stdout
    assert "/Relu/" in done.stdout.split("warning: 1 keys")[1]
    assert "not saved to the cache" in done.stdout
    assert done.returncode == PARTIAL and not cache.exists()


def test_the_command_line_names_a_bad_option(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "kerneltune", "calibrate", "--threads", "1", "--kernel", "Relu",
         "--parameter", "parallel.minimum_elements", "--values", "0",
         "--report", str(tmp_path / "r.json")],
        capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "parallel.minimum_elements" in done.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(("cpus", "expected"), [
    (1, [1]), (2, [1, 2]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8])])
def test_the_thread_matrix_doubles_up_to_the_cpus(cpus, expected):
    from kerneltune.calibration import thread_counts

    assert thread_counts(cpus) == expected


def test_the_command_line_saves_to_the_cache_that_later_processes_load(tmp_path):
    import os
    import subprocess
    import sys

    cache = tmp_path / "kernel_tuning.yaml"
    env = {**os.environ, "KERNELTUNE_CACHE": str(cache)}
    done = subprocess.run(
        [sys.executable, "-m", "kerneltune", "calibrate", "--threads", "1", "--effort", "quick",
         "--kernel", "Neg", "--element-type", "DOUBLE", "--save"],
        capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert "updated, 1 added" in done.stdout
    probe = ("import kerneltune as k; r = k.startup_report().cache; "
             "print(r.status, [e.key.kernel for e in r.loaded])")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, env=env)
    assert loaded.stdout.split()[0] == "loaded" and "'Neg'" in loaded.stdout


GRAIN = "parallel.minimum_elements"


def _calibration_context(name: str, threads: int, values: dict | None = None,
                         element_type: str = "FLOAT", **options):
    """A context for calibrating one key of the library directly: (kernel, element type
    number, context), with ``values`` in use over the defaults."""
    kernel = library()[name]
    key = kernel.tuning_key(element_type)
    schema = kernel.schema(key.element_type)
    context = CalibrationContext(key, schema, current_execution(threads),
                                 CalibrationOptions(threads=threads, **options),
                                 {**schema.default_values(), **(values or {})},
                                 Deadline(float("inf"), "per-key"))
    return kernel, key.element_type, context


@pytest.mark.parametrize(("grain", "conversion"), [
    (Decision(GRAIN, 32768, 32768, "kept: within one grid step", measured=23168), 32768),
    (Decision(GRAIN, 23168, 32768, "moved", measured=11584), 23168),
    (Decision(GRAIN, 32768, 32768, "kept: no clear winner"), 65536),
])
def test_the_conversion_grain_follows_every_measured_computation_grain(grain, conversion):
    """A kept grain was measured with the conversions switching too: they follow it.

    The conversion grain in use (65536, from a profile say) differs from the
    computation's, so keeping it and following are told apart.
    """
    kernel, element_type, context = _calibration_context(
        "Add", 2, {"conversion.parallel_minimum_elements": 65536}, "FLOAT16")
    ElementwiseCalibration(kernel, element_type)._conversion(context, grain)
    assert context.values["conversion.parallel_minimum_elements"] == conversion


@pytest.mark.parametrize(("crossover", "grain"), [(16384, 32768), (8192, 16384)])
def test_elementwise_grains_keep_a_crossover_within_two_octaves(crossover, grain):
    """Serial/parallel crossovers repeat to an octave: the dead band is two around the
    value in use (which switches at 65536 elements), and a grain moves two octaves short."""
    kernel, element_type, context = _calibration_context("Abs", 2, **QUICK)
    _timed_by_point(context, lambda name, size: 1.0 if name == "serial" or size < crossover
                    else 0.5)
    calibration = ElementwiseCalibration(kernel, element_type)
    decision = calibration._grain(context, GRAIN, list(calibration.cases(context).values()),
                                  calibration.sizes(context), ({}, {}))
    assert decision.value == grain and decision.measured == crossover // 2
    assert ("within 2 octaves" if grain == 32768 else "2 octaves short") in decision.reason


def test_the_thread_cap_in_use_races_the_matrix_even_between_its_counts():
    """A cap of 3 (from a profile) on a 4-thread calibration is the reference, not an error;
    the real kernel runs every count, oversubscribed on a smaller machine."""
    kernel, element_type, context = _calibration_context(
        "Abs", 4, {"parallel.maximum_threads": 3}, **QUICK)
    _timed_by_point(context, lambda name, point: 1.0)
    calibration = ElementwiseCalibration(kernel, element_type)
    calibration._maximum_threads(context, calibration.cases(context)["unary"],
                                 calibration.sizes(context))
    decision = context.decisions[-1]
    assert decision.value == 3 and "beats 3" in decision.reason
    assert set(decision.candidates[0].measurements) == {
        "1 threads", "2 threads", "3 threads", "4 threads"}


def test_a_thread_cap_of_one_in_use_is_measured_again():
    """A cap of 1 (which a calibration on a busy machine may have chosen) is raced against
    the matrix like any other value; where two threads win, the grains are measured too."""
    kernel, element_type, context = _calibration_context(
        "Abs", 2, {"parallel.maximum_threads": 1}, **QUICK)
    _timed_by_point(context, lambda name, point: 0.5 if name == "2 threads" else 1.0)
    ElementwiseCalibration(kernel, element_type)(context)
    decisions = {d.parameter: d for d in context.decisions}
    cap = decisions["parallel.maximum_threads"]
    assert set(cap.candidates[0].measurements) == {"1 threads", "2 threads"}
    assert cap.value == 2 and cap.changed
    assert "maximum_threads is 1" not in decisions["parallel.minimum_elements"].reason


def _timed_by_point(context, timing):
    """Outputs of the real kernels are still compared; timings come from ``timing(name,
    point)``, the point (size, rows) being the one the search last checked."""
    checked, at = context.check, []

    def check(case, point, outputs, tolerance=None):
        at.append(point)
        return checked(case, point, outputs, tolerance)

    context.check = check
    context.measure = lambda runs: {name: Measurement((timing(name, at[-1]),) * 5, (), 1)
                                    for name in runs}


@pytest.mark.parametrize("kernel_name", ["Gemm", "MatMul"])
def test_tiles_are_judged_on_one_thread_whatever_the_batch_threads(kernel_name):
    """Tiles fit one core's caches; on two threads the winner was drawn per process."""
    kernel, element_type, context = _calibration_context(kernel_name, 2, **QUICK,
                                                         memory_budget=20_000_000)
    calibration = GemmCalibration(kernel, element_type)
    # the candidates follow this machine's caches: the last one that is not the default wins
    processor, default = context.execution.processor, (
        context.values["algorithm.tile_m"], context.values["algorithm.tile_n"],
        context.values["algorithm.tile_k"])
    winner = [t for t in tile_candidates(processor.l1_data_bytes, processor.l2_bytes,
                                         calibration._compute_itemsize()) if t != default][-1]
    _timed_by_point(context, lambda name, point:
                    0.5 if name == "tiles {}x{}x{}".format(*winner) else 1.0)
    runners, threads = calibration._runner_for, []

    def runner_for(config, count, weight):
        threads.append(count)
        return runners(config, count, weight)

    calibration._runner_for = runner_for
    calibration._tiles(context)
    decided = {d.parameter: d for d in context.decisions}
    assert threads and set(threads) == {1}
    assert [decided[p].value for p in ("algorithm.tile_m", "algorithm.tile_n",
                                       "algorithm.tile_k")] == list(winner)
    assert decided["algorithm.tile_m"].reason.endswith("; judged on one thread")


@pytest.mark.parametrize(("threads", "blocked_from", "limit", "measured"), [
    (1, 16, 8, 8),  # where the default (8) switches: kept
    (1, 64, 16, 32),  # two octaves above: an octave short, on the grid
    (1, 4096, 16, 32),  # skinny wins at every row count: taken at the largest, 64
    (1, 2, 2, 1),  # three octaves below
    # on two threads, the blocked path's speed is drawn per process: a band of two octaves
    (2, 16, 8, 8),
    (2, 64, 8, 32),
    (2, 4096, 8, 32),
    (2, 4, 8, 2),
    (2, 2, 4, 1),
])
def test_the_skinny_row_limit_stays_on_the_grid_of_row_counts(threads, blocked_from, limit,
                                                              measured):
    """Limits are grid row counts, the default's among them: runs a step apart differ by one."""
    kernel, element_type, context = _calibration_context("MatMul", threads, **QUICK)
    _timed_by_point(context, lambda name, rows: 1.0 if (name == "blocked") == (
        rows >= blocked_from) else 2.0)
    GemmCalibration(kernel, element_type)._skinny(context)
    decision = next(d for d in context.decisions if d.parameter == "algorithm.skinny_m_limit")
    assert (decision.value, decision.measured) == (limit, measured)


@pytest.mark.parametrize(("two_rows_faster", "limit"), [(True, 2), (False, 1)])
def test_the_row_limit_is_the_fastest_of_none_one_and_two_rows(two_rows_faster, limit):
    """The limit in use (2) stays while the row path wins on two rows; where a second row
    runs slower on it than on the path that takes it otherwise, one row is the limit."""
    kernel, element_type, context = _calibration_context("MatMul", 1, **QUICK)
    cases, checked = [], context.check

    def check(case, point, outputs, tolerance=None):
        cases.append(case)  # the case's name
        return checked(case, point, outputs, tolerance)

    def seconds(label):
        rows, row_limit = int(cases[-1].split()[0]), int(label.split()[4])
        if rows > row_limit:
            return 1.5  # the panel or blocked path
        return 1.0 if rows == 1 or two_rows_faster else 2.0

    context.check = check
    context.measure = lambda runs: {name: Measurement((seconds(name),) * 5, (), 1)
                                    for name in runs}
    GemmCalibration(kernel, element_type)._row(context)
    decision = next(d for d in context.decisions if d.parameter == "algorithm.row_m_limit")
    assert decision.value == limit and decision.changed == (limit != 2)
    assert {"1 x N x N", "2 x N x N"} <= set(cases)


def test_the_row_limit_is_kept_when_the_skinny_path_takes_every_b():
    kernel, element_type, context = _calibration_context(
        "Gemm", 1, {"algorithm.skinny_minimum_b_elements": 32 * 32})
    GemmCalibration(kernel, element_type)._row(context)
    (decision,) = context.decisions
    assert decision.parameter == "algorithm.row_m_limit" and not decision.changed
    assert "skinny_minimum_b_elements is 1024" in decision.reason and not decision.candidates


def test_the_skinny_blas_search_keeps_its_value_when_no_searched_b_is_skinny():
    """A B threshold above the searched sizes leaves the skinny path nothing to race BLAS on."""
    kernel, element_type, context = _calibration_context(
        "Gemm", 1, {"algorithm.skinny_minimum_b_elements": 10**12}, memory_budget=1)
    calibration = GemmCalibration(kernel, element_type)
    calibration._blas(context, calibration._square(context), [16, 32])
    decided = {d.parameter: d for d in context.decisions}
    skinny_blas = decided["algorithm.skinny_blas_minimum_fmas"]
    assert not skinny_blas.changed and not skinny_blas.candidates
    assert "skinny_minimum_b_elements is 1000000000000" in skinny_blas.reason


@pytest.mark.parametrize(("blas_from", "fmas"), [
    # within two octaves of N above where the default (N about 724, 512 on baseline)
    # switches: kept
    (2048, None),
    (64, 256 * 256),  # three octaves below: two octaves short of it
])
def test_the_one_row_blas_threshold_keeps_a_crossover_within_two_octaves_of_n(blas_from, fmas):
    """BLAS's one-row speed is drawn per process: its crossover repeats to an octave of N."""
    kernel, element_type, context = _calibration_context("MatMul", 1, **QUICK,
                                                         memory_budget=20_000_000)
    _timed_by_point(context, lambda name, n: 1.5 if name == "BLAS" else 1.0 if n < blas_from
                    else 2.0)
    calibration = GemmCalibration(kernel, element_type)
    calibration._blas(context, calibration._square(context), [16, 32])
    decision = next(d for d in context.decisions
                    if d.parameter == "algorithm.vector_blas_minimum_fmas")
    default = kernel.schema(element_type).defaults.vector_blas_minimum_fmas
    assert decision.value == (fmas or default) and decision.measured == blas_from ** 2
    assert decision.changed == (fmas is not None)
    assert decision.units == {"1 x N x N": "N (1 x N by N x N)"}  # what the plot's axis says


def test_the_column_blas_threshold_is_where_blas_beats_the_column_path_on_tall_products():
    """One threshold serves one column and the column limit's: it moves toward the lower of
    the two crossovers, in multiply-adds, when both lie above the value in use (an octave
    short of it, as every crossover)."""
    kernel, element_type, context = _calibration_context("MatMul", 1, **QUICK,
                                                         memory_budget=20_000_000)
    _timed_by_point(context, lambda name, rows: 1.0 if (name == "BLAS") == (rows >= 4096)
                    else 2.0)
    calibration = GemmCalibration(kernel, element_type)
    calibration._column_blas(context, ("compiled", calibration._runner(
        context, {"algorithm.column_blas_minimum_fmas": 1 << 62})),
        ("BLAS", calibration._runner(context, {"algorithm.column_blas_minimum_fmas": 0})))
    (decision,) = context.decisions
    assert decision.parameter == "algorithm.column_blas_minimum_fmas"
    assert decision.measured == 4096 * 32 and decision.value == 2048 * 32 and decision.changed
    assert set(decision.units) == {"M x 32 x 1", "M x 32 x 8"}


def test_the_panel_blas_threshold_is_where_blas_beats_the_panel_path_on_tall_products():
    """One threshold serves the panel path's narrowest op(B) (a column past the column
    limit) and its widest (the panel limit): with both crossovers below the value in use it
    moves toward the higher, in multiply-adds, and stops an octave short of it."""
    kernel, element_type, context = _calibration_context(
        "MatMul", 1, {"algorithm.column_n_limit": 8, "algorithm.panel_n_limit": 32,
                      "algorithm.panel_blas_minimum_fmas": 1 << 40}, **QUICK,
        memory_budget=20_000_000)
    _timed_by_point(context, lambda name, rows: 1.0 if (name == "BLAS") == (rows >= 1024)
                    else 2.0)
    calibration = GemmCalibration(kernel, element_type)
    compiled = {"algorithm.panel_blas_minimum_fmas": 1 << 62}
    calibration._panel_blas(context, ("compiled", calibration._runner(context, compiled)),
                            ("BLAS", calibration._runner(
                                context, {"algorithm.panel_blas_minimum_fmas": 0})))
    (decision,) = context.decisions
    assert decision.parameter == "algorithm.panel_blas_minimum_fmas"
    assert decision.measured == 1024 * 32 * 32 and decision.value == 2048 * 32 * 32
    assert set(decision.units) == {"M x 32 x 9", "M x 32 x 32"}
    config = context.configure(compiled)
    assert calibration.plan_of(config, 1, calibration._tall(context, 9), 4096).path == "panel"


def test_the_panel_blas_threshold_is_kept_when_no_product_takes_the_panel_path():
    kernel, element_type, context = _calibration_context(
        "MatMul", 1, {"algorithm.column_n_limit": 8, "algorithm.panel_n_limit": 8}, **QUICK)
    calibration = GemmCalibration(kernel, element_type)
    calibration._panel_blas(context, ("compiled", None), ("BLAS", None))
    (decision,) = context.decisions
    assert decision.parameter == "algorithm.panel_blas_minimum_fmas" and not decision.changed
    assert "no product of 32 rows of op(B) takes the panel path" in decision.reason


@pytest.mark.parametrize("kernel_name", ["Gemm", "MatMul"])
def test_the_packed_blas_threshold_is_where_blas_beats_the_packed_path_on_a_weight(
        kernel_name):
    """BLAS against the packed path on a constant B's panels: rows by the weight family's B,
    bound as a session binds a model's weight (the runs and the plans both), from twice the
    skinny path's limit; the threshold moves to an octave short of the crossover."""
    kernel, element_type, context = _calibration_context(kernel_name, 1, **QUICK,
                                                         memory_budget=50_000_000)
    _timed_by_point(context, lambda name, rows: 1.0 if (name == "BLAS") == (rows >= 1024)
                    else 2.0)
    calibration = GemmCalibration(kernel, element_type)
    compiled = {"algorithm.blas_minimum_fmas": 0, "algorithm.packed_blas_minimum_fmas": 1 << 62}
    calibration._packed_blas(context, ("compiled", calibration._runner(context, compiled)),
                             ("BLAS", calibration._runner(
                                 context, {"algorithm.packed_blas_minimum_fmas": 0})))
    (decision,) = context.decisions
    area = WEIGHT_DEPTH * WEIGHT_DEPTH
    assert decision.parameter == "algorithm.packed_blas_minimum_fmas"
    assert decision.measured == 1024 * area and decision.value == 512 * area
    assert min(c.point for c in decision.candidates) >= 16
    weight = calibration._weight(context)
    config = context.configure(compiled)
    assert calibration.plan_of(config, 1, weight, 64).path == "blocked_packed"
    plain = calibration._product("plain", context, int, lambda s: WEIGHT_DEPTH,
                                 lambda s: WEIGHT_DEPTH, "rows")
    assert calibration.plan_of(config, 1, plain, 64).path == "blas"


def test_the_column_blas_threshold_is_kept_when_no_product_takes_the_column_path():
    kernel, element_type, context = _calibration_context(
        "Gemm", 1, {"algorithm.column_n_limit": 0}, **QUICK)
    GemmCalibration(kernel, element_type)._column_blas(context, ("compiled", None),
                                                        ("BLAS", None))
    (decision,) = context.decisions
    assert not decision.changed and not decision.candidates
    assert "column_n_limit is 0" in decision.reason


def test_every_case_of_the_library_says_what_its_size_counts():
    kernel, element_type, context = _calibration_context("Add", 2)
    elementwise = ElementwiseCalibration(kernel, element_type).cases(context)
    assert {name: case.unit for name, case in elementwise.items()} == {
        "equal": "elements per call", "scalar": "elements per call",
        "broadcast": "elements per call (N/256 x 1 by 1 x 256)"}
    kernel, element_type, context = _calibration_context("Gemm", 2)
    gemm = GemmCalibration(kernel, element_type)
    cases = [case for case, _ in gemm.families(context)]
    cases += [gemm._skinny_m(context), gemm._rows(context, 4)]
    assert {case.name: case.unit for case in cases} == {
        "square": "N (N x N by N x N)", "wide N": "N (N/4 x N by N x 4N)",
        "large K": "N (N x 16N by 16N x N)",
        "transposed B": "N (N x N/2 by N/2 x N, B transposed)",
        "skinny M": "rows M (M x 512 by 512 x 512)", "4 x N x N": "N (4 x N by N x N)"}


@pytest.mark.parametrize(("name", "element_type"), [("Log", "FLOAT"), ("Pow", "INT32"),
                                                    ("Pow", "DOUBLE"), ("Add", "UINT8")])
def test_every_calibration_input_starts_on_a_cache_line(name, element_type):
    """Inputs made positive or small by numpy arithmetic too: placement moves crossovers."""
    kernel = library()[name]
    schema = kernel.schema(element_type)
    context = CalibrationContext(kernel.tuning_key(element_type), schema, current_execution(1),
                                 CalibrationOptions(threads=1), schema.default_values(),
                                 Deadline(float("inf"), "per-key"))
    calibration = ElementwiseCalibration(kernel, kernel.tuning_key(element_type).element_type)
    for case in calibration.cases(context).values():
        for size in (1000, 4096, 5000):
            for x in case.inputs(size):
                assert x.ctypes.data % ALIGNMENT == 0, (case.name, size)
