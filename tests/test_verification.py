"""First-use verification: shipped values measured against the defaults once, the slower demoted.

The kernels here are toys whose runs sleep as long as the test says for their
grain, with ratios large enough that no neighbour on the machine can turn a
result around; nothing asserts how long anything took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ToyConfig, run_kerneltune, toy_key
from kerneltune.cache.kernel_tuning_cache import (
    inspect_kernel_tuning_cache,
    update_kernel_tuning_cache,
)
from kerneltune.calibration import (
    Case,
    ProcessInterference,
    Workload,
    points_between,
    register_kernel_calibration_function,
)
from kerneltune.errors import CalibrationError
from kerneltune.machine.detect import current_execution, get_cpu_descriptor
from kerneltune.machine.selectors import CpuSelector
from kerneltune.profiles.deployment import write_deployment_file
from kerneltune.profiles.model import DeploymentProfile, ProfileEntry
from kerneltune.profiles.verification import (
    DEFAULTS,
    DEMOTED,
    KEPT,
    UNVERIFIED,
    verify_deployment_profiles,
)
from kerneltune.tuning.registry import KernelTuningProfile, KernelTuningRegistry

GRAIN = "parallel.minimum_elements"
DEFAULT_GRAIN = 32768
#: shipped grains: one slower here than the default, one faster
SLOW, FAST = 8192, 65536
#: seconds per call of each grain's run: the slow one takes eight times the default's
SECONDS = {DEFAULT_GRAIN: 0.0005, SLOW: 0.004, FAST: 0.0001}
SLOW_KEY, FAST_KEY, SAME_KEY = toy_key("Abs"), toy_key("Add"), toy_key("Neg")
TESTS = Path(__file__).parent


class SleepingCalibration:
    """A calibration function whose workload's runs sleep for their grain's ``seconds``.

    Runs of a grain in ``wrong`` compute another result; ``calls`` counts every run.
    """

    def __init__(self, seconds=SECONDS, wrong=()):
        self.seconds, self.wrong, self.calls = dict(seconds), set(wrong), 0

    def __call__(self, context):
        return None

    def workload(self, context) -> Workload:
        case = Case("toy", lambda n: (np.zeros(n),), lambda n: 8 * n)
        return Workload([(case, 1024), (case, 4096)], self.run_of)

    def run_of(self, config):
        seconds = self.seconds[config.minimum_elements]
        offset = 1.0 if config.minimum_elements in self.wrong else 0.0

        def run(x):
            self.calls += 1
            time.sleep(seconds)
            return x + offset
        return run


def _registry(calibration: SleepingCalibration) -> KernelTuningRegistry:
    registry = KernelTuningRegistry()
    registry.register_schemas((key, ToyConfig) for key in (SLOW_KEY, FAST_KEY, SAME_KEY))
    for key in (SLOW_KEY, FAST_KEY, SAME_KEY):
        register_kernel_calibration_function(key, calibration, registry=registry)
    return registry


def _deployment(path: Path, slow: int = SLOW, name: str = "toy-farm") -> Path:
    """A deployment file for this processor: a slow grain, a fast one, and the defaults."""
    host = get_cpu_descriptor()
    selector = CpuSelector(vendor=host.vendor, family=host.family, models=[host.model])
    entries = (ProfileEntry(SLOW_KEY, (1, 64), {GRAIN: slow}),
               ProfileEntry(FAST_KEY, (1, 64), {GRAIN: FAST}),
               ProfileEntry(SAME_KEY, (1, 64), {GRAIN: DEFAULT_GRAIN}))
    write_deployment_file([DeploymentProfile(name, selector, entries)], {}, path)
    return path


@pytest.fixture
def shipped(tmp_path):
    """A deployment file, a cache path, a sleeping calibration and its registry."""
    calibration = SleepingCalibration()
    return (_deployment(tmp_path / "deployment.yaml"), tmp_path / "cache" / "kernel_tuning.yaml",
            calibration, _registry(calibration))


#: an interference source that reads nothing: sleeping runs wake late beside busy processes,
#: which is no interference the tests are about
BLIND = ProcessInterference(proc="/nonexistent")


def _verify(shipped, **options):
    deployment, cache, _, registry = shipped
    return verify_deployment_profiles(deployment, threads=1, path=cache, registry=registry,
                                      interference=BLIND, **options)


def _outcomes(report) -> dict:
    return {row.key: row.outcome for row in report.keys}


def _child(code: str, **variables: str) -> object:
    """Run ``code`` in a new interpreter (the tests' folder importable); its JSON output."""
    environment = {**os.environ, **variables}
    done = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(TESTS)!r})"
                                               f"\n{code}"],
                          env=environment, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


#: what ``import kerneltune`` does, for a process whose kernel library is the toy schema
NEXT_PROCESS = """
import json
from conftest import ToyConfig, toy_key
from kerneltune.tuning.explanation import explain
from kerneltune.tuning.registry import KernelTuningRegistry
from kerneltune.startup import initialise
keys = [toy_key("Abs"), toy_key("Add"), toy_key("Neg")]
registry = KernelTuningRegistry()
registry.register_schemas((key, ToyConfig) for key in keys)
report = initialise(registry)
rows = explain(threads=1, keys=keys[:2], registry=registry).to_dict()["keys"]
print(json.dumps([[row["values"]["parallel.minimum_elements"], row["source"]] for row in rows]))
"""


def test_a_slower_shipped_value_is_demoted_and_the_next_process_resolves_the_defaults(shipped):
    deployment, cache, calibration, registry = shipped
    before = deployment.read_bytes(), deployment.stat().st_mode
    report = _verify(shipped)
    assert _outcomes(report) == {SLOW_KEY: DEMOTED, FAST_KEY: KEPT, SAME_KEY: DEFAULTS}
    assert calibration.calls and report.measured == 2
    slow = report.demoted[0]
    assert slow.shipped == {GRAIN: SLOW} and slow.defaults == {GRAIN: DEFAULT_GRAIN}
    assert slow.reason.startswith("the defaults ran") and "interval" in slow.reason
    assert slow.reason.endswith("confirmed (margin 5%)")
    digest = report.files[0].digest
    [entry] = inspect_kernel_tuning_cache(cache).entries
    assert (entry.key, entry.source, entry.report_digest) == (SLOW_KEY, "verification", digest)
    assert dict(entry.values) == {GRAIN: DEFAULT_GRAIN}
    assert entry.execution.identity == current_execution(1).identity
    # this process uses the defaults at once
    here = registry.resolve(SLOW_KEY, current_execution(1))
    assert here.values[GRAIN] == DEFAULT_GRAIN and here.source.profile_name == "verification"
    # and so does the next one, through its start-up
    (slow_row, fast_row) = _child(NEXT_PROCESS, KERNELTUNE_DEPLOYMENT_PROFILES=str(deployment),
                                  KERNELTUNE_CACHE=str(cache))
    assert slow_row[0] == DEFAULT_GRAIN and slow_row[1]["tier"] == "calibrated"
    assert slow_row[1]["profile_name"] == "verification" and digest[:12] in slow_row[1]["origin"]
    assert fast_row[0] == FAST and fast_row[1]["profile_name"] == "toy-farm"
    assert (deployment.read_bytes(), deployment.stat().st_mode) == before


#: a second verification in another process, with a calibration function that must not run
SECOND_RUN = """
import json
from conftest import ToyConfig, toy_key
from kerneltune.calibration import register_kernel_calibration_function
from kerneltune.tuning.registry import KernelTuningRegistry
from kerneltune.profiles.verification import verify_deployment_profiles

class Untouchable:
    def __call__(self, context):
        raise AssertionError("calibrated")
    def workload(self, context):
        raise AssertionError("measured")

registry = KernelTuningRegistry()
for kernel in ("Abs", "Add", "Neg"):
    registry.register_schema(toy_key(kernel), ToyConfig)
    register_kernel_calibration_function(toy_key(kernel), Untouchable(), registry=registry)
report = verify_deployment_profiles(sys.argv[1], threads=1, path=sys.argv[2], registry=registry)
print(json.dumps([report.measured, sorted(row.outcome for row in report.keys)]))
"""


def test_a_shipped_value_the_defaults_do_not_beat_by_the_margin_is_kept(tmp_path):
    """A demotion needs calibration's confirmation the other way: a shipped value as fast
    as the defaults stays, with the comparison as its reason."""
    calibration = SleepingCalibration({**SECONDS, SLOW: SECONDS[DEFAULT_GRAIN]})
    shipped = (_deployment(tmp_path / "deployment.yaml"), tmp_path / "cache.yaml", calibration,
               _registry(calibration))
    report = _verify(shipped)
    assert _outcomes(report)[SLOW_KEY] == KEPT
    (slow,) = [row for row in report.keys if row.key == SLOW_KEY]
    assert slow.reason.startswith("the defaults do not beat them") and "interval" in slow.reason


def test_a_second_run_with_the_same_file_measures_nothing(shipped):
    deployment, cache, calibration, _ = shipped
    _verify(shipped)
    calibration.calls = 0
    again = _verify(shipped)
    assert calibration.calls == 0 and again.measured == 0
    assert _outcomes(again) == {SLOW_KEY: DEMOTED, FAST_KEY: KEPT, SAME_KEY: DEFAULTS}
    assert all("earlier verification" in row.reason for row in again.demoted + again.kept)
    code = SECOND_RUN.replace("sys.argv[1]", repr(str(deployment))).replace(
        "sys.argv[2]", repr(str(cache)))
    assert _child(code) == [0, [DEFAULTS, DEMOTED, KEPT]]


def test_force_measures_again_and_a_new_file_digest_verifies_again(shipped, tmp_path):
    deployment, cache, calibration, registry = shipped
    _verify(shipped)
    calibration.calls = 0
    forced = _verify(shipped, force=True)
    assert calibration.calls and forced.measured == 2
    assert _outcomes(forced)[SLOW_KEY] == DEMOTED
    # the farm ships a new file whose grain holds here: the demotion is lifted
    calibration.seconds[16384] = SECONDS[FAST]
    renewed = _deployment(tmp_path / "renewed.yaml", slow=16384)
    report = verify_deployment_profiles(renewed, threads=1, path=cache, registry=registry,
                                        interference=BLIND)
    assert report.measured == 2 and _outcomes(report)[SLOW_KEY] == KEPT
    assert [entry.key for entry in report.cache.pruned] == [SLOW_KEY]
    assert inspect_kernel_tuning_cache(cache).entries == ()


def test_a_tiny_budget_stops_early_and_demotes_nothing_unconfirmed(shipped):
    deployment, cache, calibration, _ = shipped
    calibration.seconds[SLOW] = calibration.seconds[FAST] = 0.05
    report = _verify(shipped, time_budget=0.01)
    assert _outcomes(report) == {SLOW_KEY: UNVERIFIED, FAST_KEY: UNVERIFIED, SAME_KEY: DEFAULTS}
    assert all("time budget" in row.reason for row in report.unverified)
    assert report.cache is None and not cache.exists()
    assert not any(cache.parent.glob("*.verified.yaml"))


def test_an_output_mismatch_raises_and_demotes_nothing(shipped):
    deployment, cache, calibration, registry = shipped
    calibration.wrong.add(SLOW)
    before = deployment.read_bytes()
    with pytest.raises(CalibrationError, match="differs"):
        _verify(shipped)
    assert not cache.parent.exists() or not any(cache.parent.iterdir())
    assert not registry.snapshot().profiles(SLOW_KEY)  # nothing published in this process
    assert deployment.read_bytes() == before


def test_a_damaged_record_costs_a_verification_and_nothing_else(shipped):
    deployment, cache, calibration, _ = shipped
    _verify(shipped)
    record = cache.with_name("kernel_tuning.verified.yaml")
    assert record.is_file()
    record.write_text("{format: [")
    calibration.calls = 0
    again = _verify(shipped)
    assert _outcomes(again)[FAST_KEY] == KEPT and again.measured == 1 and not again.problems
    assert again.record_status == "malformed"
    (warning,) = [w for w in again.warnings if str(record) in w]
    assert "not plain YAML" in warning and warning.endswith("measured again, and it is replaced")
    assert json.loads(record.read_text())["verified"][0]["keys"] == [FAST_KEY.to_dict()]
    third = _verify(shipped)
    assert third.record_status == "ok" and third.measured == 0
    assert not [w for w in third.warnings if str(record) in w]


def test_a_fifo_at_the_record_path_is_reported_and_replaced_never_read(shipped):
    deployment, cache, calibration, _ = shipped
    record = cache.with_name("kernel_tuning.verified.yaml")
    record.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(record)
    report = _verify(shipped)
    assert report.record_status == "unreadable" and report.measured == 2  # every key
    assert any("a FIFO, not a regular file" in w for w in report.warnings)
    assert record.is_file() and json.loads(record.read_text())["verified"]


def test_a_cached_value_for_this_execution_wins_and_is_not_measured(shipped):
    deployment, cache, calibration, registry = shipped
    update_kernel_tuning_cache([KernelTuningProfile(SLOW_KEY, {GRAIN: 4096},
                                                    execution=current_execution(1))],
                               cache, registry=registry)
    report = _verify(shipped)
    assert _outcomes(report)[SLOW_KEY] == "cached" and report.measured == 1


def test_without_files_or_the_variable_there_is_nothing_to_verify(monkeypatch):
    monkeypatch.delenv("KERNELTUNE_DEPLOYMENT_PROFILES", raising=False)
    with pytest.raises(ValueError, match="KERNELTUNE_DEPLOYMENT_PROFILES"):
        verify_deployment_profiles(registry=KernelTuningRegistry())


# --- where it measures ----------------------------------------------------------------------


def _case(name: str) -> Case:
    return Case(name, lambda n: (), lambda n: n)


def test_a_threshold_in_a_cases_units_is_measured_around_it():
    unary = _case("unary")
    cases = [(unary, size) for size in (4096, 16384, 65536, 262144)]
    points = points_between(cases, {GRAIN: 16384}, {GRAIN: 32768})
    assert [size for _, size in points] == [16384, 24576, 32768, 45056, 65536]
    assert all(case is unary for case, _ in points)


def test_a_case_no_threshold_falls_on_measures_its_workload_sizes():
    square, skinny = _case("square"), _case("skinny")
    cases = [(square, 256), (square, 64), (skinny, 4)]
    points = points_between(cases, {"algorithm.blas_minimum_fmas": 1 << 24,
                                         "algorithm.layout": "column"},
                                 {"algorithm.blas_minimum_fmas": 1 << 21,
                                  "algorithm.layout": "row"})
    assert points == cases


# --- the command ----------------------------------------------------------------------------


def test_the_command_verifies_the_files_it_is_given_and_fails_on_one_it_cannot_use(tmp_path):
    deployment = _deployment(tmp_path / "deployment.yaml")
    done = run_kerneltune("profiles", "verify", deployment, "--threads", "1", "--json",
                          cache=tmp_path / "cache.yaml")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["files"][0]["status"] == "imported" and report["measured"] == 0
    # the toy keys are another library's: this kerneltune leaves them to their machines
    assert report["files"][0]["not_applicable"] == 3
    missing = run_kerneltune("profiles", "verify", tmp_path / "missing.yaml", "--threads", "1")
    assert missing.returncode == 1 and "not_found" in missing.stderr
    nothing = run_kerneltune("profiles", "verify")
    assert nothing.returncode == 1 and "KERNELTUNE_DEPLOYMENT_PROFILES" in nothing.stderr
    assert "examples:" in run_kerneltune("profiles", "verify", "--help").stdout
