"""Listing, setting, proposing and applying kernel tuning on one machine, with a real cache file."""

from __future__ import annotations

import json

import pytest

from conftest import ToyConfig, execution
from kerneltune.cache.kernel_tuning_cache import (
    inspect_kernel_tuning_cache,
    update_kernel_tuning_cache,
)
from kerneltune.calibration import CalibrationOptions, register_kernel_calibration_function
from kerneltune.calibration.parameters import (
    apply_kernel_tuning_updates,
    kernel_tuning_parameters,
    propose_kernel_tuning_updates,
    set_kernel_tuning_parameters,
)
from kerneltune.errors import TuningValidationError, UnknownKernelError
from kerneltune.machine.detect import current_execution
from kerneltune.machine.selectors import Tier
from kerneltune.tuning.registry import KernelTuningProfile, KernelTuningRegistry
from kerneltune.tuning.schema import KernelTuningKey

LIBRARY = "parameters_test"


def key(kernel: str, implementation: str = "baseline", element_type: str = "FLOAT",
        tuning_abi: int = 1) -> KernelTuningKey:
    return KernelTuningKey(LIBRARY, kernel, implementation, element_type, tuning_abi=tuning_abi)


#: calibratable: a function that only returns values (registered for this key only)
CALIBRATED = key("Calibrated")
MANUAL = key("Manual")


@pytest.fixture
def registry() -> KernelTuningRegistry:
    registry = KernelTuningRegistry()
    registry.register_schemas((k, ToyConfig) for k in (CALIBRATED, MANUAL))
    register_kernel_calibration_function(
        CALIBRATED, lambda context: {"parallel.minimum_elements": 4096 * context.threads},
        registry=registry)
    return registry


@pytest.fixture
def path(tmp_path):
    return tmp_path / "kernel_tuning.yaml"


def test_parameters_list_defaults_cached_and_active(registry, path):
    here = execution(2)
    (row,) = kernel_tuning_parameters("Manual", path=path, execution=here,
                                      registry=registry).parameters
    assert row.key == MANUAL and row.cached is None and not row.calibratable
    assert row.active == row.defaults and row.active_source.tier is Tier.DEFAULTS
    assert row.defaults["parallel.minimum_elements"] == 32768

    update_kernel_tuning_cache([KernelTuningProfile(MANUAL, {"parallel.minimum_elements": 64},
                                                    execution=here, origin="calibration")],
                               path, registry=registry)
    report = kernel_tuning_parameters(library=LIBRARY, path=path, execution=here,
                                      registry=registry)
    rows = {row.key: row for row in report.parameters}
    assert rows[MANUAL].cached == {"parallel.minimum_elements": 64}
    assert rows[MANUAL].cached_source == "calibration"
    assert rows[MANUAL].active_source.tier is Tier.DEFAULTS  # listed, not loaded
    assert rows[CALIBRATED].calibratable and rows[CALIBRATED].cached is None
    assert report.cache.status == "ok"
    assert json.loads(json.dumps(report.to_dict()))["parameters"][0]["key"]["library"] == LIBRARY
    other = kernel_tuning_parameters("Manual", path=path, execution=execution(4),
                                     registry=registry)
    assert other.parameters[0].cached is None


def test_set_merges_a_partial_update_and_publishes_it(registry, path):
    here = execution(2)
    first = set_kernel_tuning_parameters("Manual", "float32", {"parallel.minimum_elements": 128},
                                         path=path, execution=here, registry=registry)
    assert first.status == "updated" and first.added[0].source == "manual"
    second = set_kernel_tuning_parameters("Manual", "FLOAT", {"algorithm.layout": "column"},
                                          path=path, execution=here, registry=registry)
    assert second.status == "updated" and len(second.replaced) == 1
    (entry,) = inspect_kernel_tuning_cache(path).entries
    assert entry.values == {"parallel.minimum_elements": 128, "algorithm.layout": "column"}
    assert entry.source == "manual" and entry.report_digest is None
    resolution = registry.resolve(MANUAL, here)
    assert resolution.source.tier is Tier.CALIBRATED and resolution.source.origin == str(path)
    assert resolution.values["algorithm.layout"] == "column"
    row = kernel_tuning_parameters("Manual", path=path, execution=here,
                                   registry=registry).parameters[0]
    assert row.cached_source == "manual" and row.active["parallel.minimum_elements"] == 128


def test_set_without_load_only_persists(registry, path):
    set_kernel_tuning_parameters("Manual", "FLOAT", {"parallel.minimum_elements": 128},
                                 path=path, load=False, execution=execution(2),
                                 registry=registry)
    assert registry.resolve(MANUAL, execution(2)).source.tier is Tier.DEFAULTS
    assert len(inspect_kernel_tuning_cache(path).entries) == 1


def test_set_validates_the_merged_entry(registry, path):
    here = execution(2)
    set_kernel_tuning_parameters("Manual", "FLOAT", {"algorithm.tile_m": 32}, path=path,
                                 execution=here, registry=registry)
    before = path.read_bytes()
    with pytest.raises(TuningValidationError, match="parallel.minimum_elements"):
        set_kernel_tuning_parameters("Manual", "FLOAT", {"parallel.minimum_elements": 0},
                                     path=path, execution=here, registry=registry)
    # 100 alone is valid, but not with the cached tile_m of 32 and the default tile_n of 256
    set_kernel_tuning_parameters("Manual", "FLOAT", {"algorithm.tile_n": 96}, path=path,
                                 execution=here, registry=registry)
    with pytest.raises(TuningValidationError, match="algorithm.tile_n"):
        set_kernel_tuning_parameters("Manual", "FLOAT", {"algorithm.tile_m": 64}, path=path,
                                     execution=here, registry=registry)
    assert inspect_kernel_tuning_cache(path).entries[0].values == {
        "algorithm.tile_m": 32, "algorithm.tile_n": 96}
    assert path.read_bytes() != before


def test_set_asks_for_the_missing_field(registry, path):
    registry.register_schemas([(key("Manual", "x86_64_v3"), ToyConfig),
                               (key("Manual", tuning_abi=2), ToyConfig)])
    with pytest.raises(TuningValidationError) as raised:
        set_kernel_tuning_parameters("Manual", "FLOAT", {"parallel.minimum_elements": 8},
                                     path=path, execution=execution(2), registry=registry)
    fields = {problem.field for problem in raised.value.problems}
    assert fields == {"implementation", "tuning_abi"}
    assert "baseline, x86_64_v3" in str(raised.value)
    report = set_kernel_tuning_parameters("Manual", "FLOAT", {"parallel.minimum_elements": 8},
                                          implementation="x86_64_v3", path=path,
                                          execution=execution(2), registry=registry)
    assert report.added[0].key == key("Manual", "x86_64_v3")
    with pytest.raises(UnknownKernelError, match="'Absent'"):
        set_kernel_tuning_parameters("Absent", "FLOAT", {}, path=path, registry=registry)


def test_set_with_persistence_off_validates_and_publishes_nothing(registry, monkeypatch):
    monkeypatch.setenv("KERNELTUNE_CACHE", "off")
    with pytest.raises(TuningValidationError, match="unknown parameter"):
        set_kernel_tuning_parameters("Manual", "FLOAT", {"parallel.grain": 1},
                                     execution=execution(2), registry=registry)
    report = set_kernel_tuning_parameters("Manual", "FLOAT", {"parallel.minimum_elements": 8},
                                          execution=execution(2), registry=registry)
    assert report.status == "disabled"
    assert registry.resolve(MANUAL, execution(2)).source.tier is Tier.DEFAULTS


def test_propose_then_apply(registry, path):
    options = CalibrationOptions(threads=1, effort="quick")
    here = current_execution(1)
    proposal = propose_kernel_tuning_updates(library=LIBRARY, path=path, execution=here,
                                             registry=registry)
    assert proposal.covered == () and proposal.missing_calibratable == (CALIBRATED,)
    assert proposal.missing_manual == (MANUAL,) and proposal.cache.status == "not_found"
    assert not path.exists()  # proposing is read-only

    applied = apply_kernel_tuning_updates(library=LIBRARY, path=path, options=options,
                                          registry=registry)
    assert [r.key for r in applied.calibration.calibrated] == [CALIBRATED]
    assert applied.cache.status == "updated" and applied.cache.added[0].key == CALIBRATED
    (entry,) = inspect_kernel_tuning_cache(path).entries
    assert entry.values["parallel.minimum_elements"] == 4096 and entry.report_digest
    assert registry.resolve(CALIBRATED, here).values["parallel.minimum_elements"] == 4096

    again = apply_kernel_tuning_updates(library=LIBRARY, path=path, options=options,
                                        registry=registry)
    assert again.proposal.covered == (CALIBRATED,) and again.calibration is None
    assert again.cache is None
    assert json.loads(json.dumps(again.to_dict()))["proposal"]["missing_manual"][0][
        "kernel"] == "Manual"
    other_threads = propose_kernel_tuning_updates(library=LIBRARY, path=path,
                                                  execution=execution(3), registry=registry)
    assert other_threads.covered == ()
