"""Deployment profiles: export from calibrations, the file, transactional import, explain."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import (
    FIXTURES,
    ToyConfig,
    calibrate_toys,
    detect,
    execution,
    processor,
    toy_key,
)
from kerneltune.calibration import CalibrationOptions
from kerneltune.errors import ProfileError
from kerneltune.machine.detect import get_cpu_descriptor
from kerneltune.machine.selectors import CpuSelector, Tier
from kerneltune.profiles.export import export_deployment_profile
from kerneltune.profiles.files import read_deployment_profile, write_deployment_profile
from kerneltune.profiles.importer import import_deployment_profiles
from kerneltune.profiles.model import DeploymentProfile, ProfileEntry, profile_text
from kerneltune.tuning.explanation import explain
from kerneltune.tuning.registry import KernelTuningRegistry

GRAIN = "parallel.minimum_elements"
ZEN4 = CpuSelector(vendor="amd", family=25, models=[17])
ZEN3 = CpuSelector(vendor="amd", family=25, models=[1])


def _registry() -> KernelTuningRegistry:
    registry = KernelTuningRegistry()
    registry.register_schemas((toy_key(kernel, element_type), ToyConfig)
                              for kernel in ("Abs", "Add") for element_type in ("FLOAT", "DOUBLE"))
    return registry


def _profile(name="zen4-farm", selector=ZEN4, entries=None, priority=0) -> DeploymentProfile:
    if entries is None:
        entries = [ProfileEntry(toy_key(kernel, element_type), threads, {GRAIN: grain})
                   for kernel in ("Abs", "Add") for element_type in ("FLOAT", "DOUBLE")
                   for threads, grain in (((1, 1), 1000), ((2, 3), 2000), ((4, 4), 4000))]
    return DeploymentProfile(name, selector, tuple(entries), priority, "zen4",
                             {"kerneltune": "0.1.0"}, ({"blas": []},))


def _written(tmp_path, profile=None, name="profile.yaml"):
    return write_deployment_profile(profile or _profile(), tmp_path / name)


def _entries(tmp_path, path, edit):
    """Rewrite a written profile's document through ``edit`` (a function of the dict)."""
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))
    return path


# --- the file -------------------------------------------------------------------------------


def test_a_profile_round_trips_through_its_file_byte_for_byte(tmp_path):
    profile = _profile()
    path = _written(tmp_path, profile)
    again = read_deployment_profile(path)
    assert again == profile and again.path == str(path)
    second = _written(tmp_path, again, "again.yaml")
    assert second.read_bytes() == path.read_bytes() == profile_text(profile).encode()
    assert again.digest == profile.digest and again.thread_counts == (1, 2, 4)


def test_the_file_is_yaml_a_person_can_read(tmp_path):
    import yaml

    text = _written(tmp_path).read_text()
    assert yaml.safe_load(text)["format"] == "kerneltune-deployment-profile"
    entry_lines = [line for line in text.splitlines() if '"threads"' in line]
    assert len(entry_lines) == 12  # one entry a line


@pytest.mark.parametrize(("damage", "field"), [
    (lambda d: d["entries"][1]["values"].update({GRAIN: "!!python/object:os.system"}), None),
    (lambda d: d.update(name=7), "name"),
    (lambda d: d.pop("selector"), "selector"),
    (lambda d: d.update(format="other"), "format"),
    (lambda d: d["entries"][1].update(threads=[3, 2]), "threads"),
    (lambda d: d["entries"][1]["values"].update({GRAIN: math.nan}), f"values.{GRAIN}"),
    (lambda d: d["entries"][1]["values"].update({GRAIN: [1]}), f"values.{GRAIN}"),
    (lambda d: d["entries"][1].pop("key"), "key"),
    (lambda d: d["entries"][1].update(extra=1), "extra"),
    (lambda d: d["entries"][1]["key"].update(element_type="NOPE"), "key.element_type"),
    (lambda d: d["entries"].append(d["entries"][0]), "threads"),
    (lambda d: d["selector"].update(minimum_threads=2), "selector"),
    (lambda d: d["selector"].update(vendor="nobody"), "selector.vendor"),
])
def test_a_bad_file_is_one_error_naming_the_file_entry_and_field(tmp_path, damage, field):
    path = _entries(tmp_path, _written(tmp_path), damage)
    if field is None:  # a string that looks like a tag is only a string; the schema refuses it
        report = import_deployment_profiles(path, registry=_registry())
        assert report.files[0].status == "rejected" and GRAIN in report.problems[0]
        return
    with pytest.raises(ProfileError) as raised:
        read_deployment_profile(path)
    problems = raised.value.problems
    assert problems and all(p.file == str(path) for p in problems)
    assert any(p.field == field for p in problems), problems


@pytest.mark.parametrize(("text", "words"), [
    ("!!python/object/apply:os.system ['true']\n", "not plain YAML"),
    ("- just\n- a list\n", "expected a mapping"),
    ("format: kerneltune-deployment-profile\nschema_version: 2\n", "reads version 1 only"),
    ("a: &a [x, x]\n" + "".join(f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}]\n"
                                 for p, c in zip("abcdefghijklmn", "bcdefghijklmno",
                                                 strict=True)), "expand"),
])
def test_unsafe_or_foreign_documents_are_refused_and_register_nothing(tmp_path, text, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    registry = _registry()
    generation = registry.generation
    report = import_deployment_profiles(path, registry=registry)
    (file,) = report.files
    assert file.status in ("malformed", "unsupported_version") and words in file.problems[0]
    assert registry.generation == generation and report.generation is None


# --- import ---------------------------------------------------------------------------------


def test_an_imported_profile_resolves_in_its_selectors_tier_for_its_thread_range(tmp_path):
    registry = _registry()
    report = import_deployment_profiles([_written(tmp_path)], registry=registry)
    assert report.files[0].status == "imported" and report.files[0].imported == 12
    key = toy_key()
    for threads, grain in ((1, 1000), (2, 2000), (3, 2000), (4, 4000)):
        resolution = registry.resolve(key, execution(threads))
        assert resolution.values[GRAIN] == grain
        assert resolution.source.tier is Tier.EXACT_PROCESSOR
        assert resolution.source.profile_name == "zen4-farm"
        assert "entry" in resolution.source.origin
    # never for 5 threads or more, nor for another processor
    assert registry.resolve(key, execution(5)).source.tier is Tier.DEFAULTS
    assert registry.resolve(key, execution(2, model=1)).source.tier is Tier.DEFAULTS


def test_one_invalid_entry_among_many_registers_nothing_and_every_problem_is_listed(tmp_path):
    def damage(document):
        document["entries"][3]["values"][GRAIN] = -5
        document["entries"][7]["values"]["algorithm.tile_n"] = 100  # not a multiple of 64
        document["entries"][9]["values"]["no.such.parameter"] = 1

    path = _entries(tmp_path, _written(tmp_path), damage)
    registry = _registry()
    generation = registry.generation
    report = import_deployment_profiles(path, registry=registry)
    (file,) = report.files
    assert file.status == "rejected" and file.imported == 0
    assert [p.split(": ")[1].split(" (")[0] for p in file.problems] == [
        "entry 3", "entry 7", "entry 9"]
    assert "no.such.parameter" in file.problems[2]
    assert registry.generation == generation and report.generation is None
    with pytest.raises(ProfileError, match="3 problems"):
        import_deployment_profiles(path, registry=registry, strict=True)


def test_a_stale_abi_entry_is_reported_as_stale(tmp_path):
    entries = [ProfileEntry(toy_key(), (1, 1), {GRAIN: 1000}),
               ProfileEntry(toy_key(tuning_abi=2), (2, 2), {GRAIN: 2000})]
    report = import_deployment_profiles(_written(tmp_path, _profile(entries=entries)),
                                        registry=_registry())
    (file,) = report.files
    assert file.status == "rejected" and len(file.stale) == 1 and "entry 1" in file.stale[0]
    assert "stale: tuning ABI 2; the registered schema has tuning ABI 1" in file.problems[0]


def test_entries_for_another_variant_or_library_are_left_to_their_machines(tmp_path):
    entries = [ProfileEntry(toy_key(), (1, 1), {GRAIN: 1000}),
               ProfileEntry(toy_key(implementation="v4"), (1, 1), {GRAIN: 2000}),
               ProfileEntry(toy_key(library="elsewhere"), (1, 1), {GRAIN: 3000})]
    registry = _registry()
    report = import_deployment_profiles(_written(tmp_path, _profile(entries=entries)),
                                        registry=registry)
    (file,) = report.files
    assert (file.status, file.imported, file.not_applicable) == ("imported", 1, 2)


def test_unknown_kernels_and_element_types_are_problems(tmp_path):
    entries = [ProfileEntry(toy_key("Nope"), (1, 1), {GRAIN: 1000}),
               ProfileEntry(toy_key(element_type="INT8"), (1, 1), {GRAIN: 1000})]
    report = import_deployment_profiles(_written(tmp_path, _profile(entries=entries)),
                                        registry=_registry())
    assert "unknown kernel Nope" in report.problems[0]
    assert "takes no element type INT8" in report.problems[1]


def test_a_file_overlapping_a_registered_profile_is_rejected_and_the_others_import(tmp_path):
    registry = _registry()
    registry.register_profile(toy_key(), CpuSelector(vendor="amd", family=25, models=[17, 1]),
                              {GRAIN: 9}, name="already")
    registry.register_profile(toy_key(), CpuSelector(vendor="amd", family=25, models=[17]),
                              {GRAIN: 8}, name="exact")
    clash = _written(tmp_path, _profile(), "clash.yaml")
    other = _written(tmp_path, _profile("zen3-farm", ZEN3), "other.yaml")
    report = import_deployment_profiles([clash, other], registry=registry)
    assert [f.status for f in report.files] == ["rejected", "imported"]
    assert any("exact" in problem for problem in report.files[0].problems)
    assert registry.resolve(toy_key(), execution(2, model=1)).source.profile_name == "zen3-farm"
    assert registry.resolve(toy_key(), execution(2)).source.profile_name == "exact"


def test_two_good_files_are_published_in_one_generation(tmp_path):
    registry = _registry()
    generation = registry.generation
    report = import_deployment_profiles(
        [_written(tmp_path, _profile(), "a.yaml"),
         _written(tmp_path, _profile("zen3-farm", ZEN3), "b.yaml")], registry=registry)
    assert report.generation == registry.generation == generation + 1


def test_cached_exact_values_and_overrides_stay_above_an_imported_profile(tmp_path):
    from kerneltune.tuning.resolution import KernelTuningProfile

    registry = _registry()
    import_deployment_profiles(_written(tmp_path), registry=registry)
    run = execution(2)
    registry.register_profiles([KernelTuningProfile(toy_key(), {GRAIN: 7}, execution=run)])
    assert registry.resolve(toy_key(), run).values[GRAIN] == 7
    assert registry.resolve(toy_key(), run, {GRAIN: 5}).values[GRAIN] == 5


ELSEWHERE_BLAS = ({"blas": [{"name": "openblas", "version": "0.0.1", "architecture": "Elsewhere",
                              "threads": 1}]},)


def test_a_blas_threshold_from_another_blas_is_flagged_by_import_and_explain(tmp_path):
    from kerneltune.kernels import library, register_library

    registry = KernelTuningRegistry()
    register_library(registry)
    gemm = library()["Gemm"].tuning_key("FLOAT")
    entries = (ProfileEntry(gemm, (1, 64), {"algorithm.blas_minimum_fmas": 1 << 20}),)
    profile = DeploymentProfile("host-farm", _host_selector(), entries, 0, None, {},
                                ELSEWHERE_BLAS)
    report = import_deployment_profiles(_written(tmp_path, profile), registry=registry)
    (file,) = report.files
    assert file.status == "imported" and "decide BLAS thresholds" in file.warnings[0]
    assert "openblas 0.0.1 (Elsewhere)" in file.warnings[0]
    (row,) = explain(threads=1, keys=[gemm], registry=registry).keys
    assert row.changed == ("algorithm.blas_minimum_fmas",) and "BLAS" in row.warnings[0]


def test_values_that_involve_no_blas_are_not_flagged(tmp_path):
    entries = [ProfileEntry(toy_key(), (1, 1), {"algorithm.tile_m": 64})]
    profile = DeploymentProfile("zen4-farm", ZEN4, tuple(entries), 0, None, {}, ELSEWHERE_BLAS)
    report = import_deployment_profiles(_written(tmp_path, profile), registry=_registry())
    assert report.files[0].warnings == ()


# --- export ---------------------------------------------------------------------------------


def _host_selector() -> CpuSelector:
    host = get_cpu_descriptor()
    return CpuSelector(vendor=host.vendor, family=host.family, models=[host.model])


@pytest.fixture
def two_reports(toys):
    registry, _, _, _ = toys
    return [calibrate_toys(registry, kernels=["Abs"], implementations="v3",
                           options=CalibrationOptions(threads=threads, effort="quick"))
            for threads in (1, 2)]


def test_export_binds_each_thread_count_to_its_range_with_provenance(two_reports, tmp_path):
    profile = export_deployment_profile(two_reports, _host_selector(), "this-machine")
    assert {entry.threads for entry in profile.entries} == {(1, 1), (2, 2)}
    assert all(entry.values == {GRAIN: 4096 + entry.threads[0]} for entry in profile.entries)
    (machine,) = profile.provenance
    assert machine["thread_counts"] == [1, 2] and set(machine["report_digests"]) == {"1", "2"}
    assert machine["processor"] == get_cpu_descriptor().to_dict() and "blas" in machine
    # the JSON form of the reports exports the same profile
    again = export_deployment_profile([r.to_dict() for r in two_reports], _host_selector(),
                                      "this-machine")
    assert again.entries == profile.entries
    assert read_deployment_profile(write_deployment_profile(profile, tmp_path / "p.yaml")
                                   ) == profile


def test_export_refuses_a_selector_the_calibrating_machine_does_not_match(two_reports):
    host = get_cpu_descriptor()
    other = CpuSelector(vendor=host.vendor, family=host.family, models=[(host.model or 0) + 1])
    with pytest.raises(ProfileError, match="selector.models: the selector asks for"):
        export_deployment_profile(two_reports, other, "wrong")


def test_export_refuses_two_reports_of_one_thread_count(two_reports):
    with pytest.raises(ProfileError, match="both calibrated 1 threads"):
        export_deployment_profile([two_reports[0], two_reports[0]], _host_selector(), "twice")


def test_export_takes_a_thread_matrix_of_ranges():
    from kerneltune.profiles.export import _thread_ranges

    assert _thread_ranges([4, 1, 2]) == {1: (1, 1), 2: (2, 3), 4: (4, 4)}


# --- resolution never leaves a selector or a thread range ---------------------------------


VENDORS = {"amd": (23, 25, 26), "intel": (6,)}


@st.composite
def _processors(draw):
    vendor = draw(st.sampled_from(sorted(VENDORS)))
    features = draw(st.frozensets(st.sampled_from(["avx2", "fma", "avx512f", "sve"])))
    return processor(vendor=vendor, family=draw(st.sampled_from(VENDORS[vendor])),
                     model=draw(st.integers(0, 6)), features=features,
                     microarchitecture=None)


@st.composite
def _selectors(draw):
    kind = draw(st.sampled_from(["models", "family", "features"]))
    vendor = draw(st.sampled_from(sorted(VENDORS)))
    family = draw(st.sampled_from(VENDORS[vendor]))
    if kind == "models":
        models = draw(st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True))
        return CpuSelector(vendor=vendor, family=family, models=models)
    if kind == "family":
        return CpuSelector(vendor=vendor, family=family)
    return CpuSelector(required_features=draw(st.frozensets(
        st.sampled_from(["avx2", "fma", "avx512f", "sve"]), min_size=1)))


@settings(max_examples=150, deadline=None)
@given(selector=_selectors(), counts=st.lists(st.integers(1, 16), min_size=1, max_size=4,
                                              unique=True),
       machine=_processors(), threads=st.integers(1, 20))
def test_an_imported_entry_is_never_chosen_outside_its_selector_or_thread_range(
        tmp_path_factory, selector, counts, machine, threads):
    from kerneltune.profiles.export import _thread_ranges

    ranges = _thread_ranges(counts)
    entries = [ProfileEntry(toy_key(), ranges[count], {GRAIN: 1000 + count}) for count in counts]
    path = write_deployment_profile(_profile(selector=selector, entries=entries),
                                    tmp_path_factory.mktemp("p") / "profile.yaml")
    registry = _registry()
    assert import_deployment_profiles(path, registry=registry).files[0].status == "imported"
    run = execution(threads).__class__(machine, threads, frozenset(range(threads)), threads)
    resolution = registry.resolve(toy_key(), run)
    if resolution.source.profile_name is not None:
        low, high = ranges[resolution.values[GRAIN] - 1000]
        assert selector.matches(machine) and low <= threads <= high
    else:
        assert not selector.matches(machine) or threads > max(counts) or threads < min(counts)


# --- explain --------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", FIXTURES)
def test_explain_answers_for_every_fixture_processor_without_detecting(tmp_path, fixture):
    registry = _registry()
    import_deployment_profiles(_written(tmp_path), registry=registry)
    described = detect(fixture)
    descriptor_file = tmp_path / "cpu.yaml"
    from kerneltune.machine.descriptor_files import write_cpu_descriptor

    write_cpu_descriptor(described, descriptor_file)
    for threads in (1, 2, 8):
        explanation = explain(descriptor=descriptor_file, threads=threads, registry=registry)
        assert explanation.execution.processor == described
        assert len(explanation.keys) == 4
        matches = ZEN4.matches(described) and threads <= 4
        for row in explanation.keys:
            assert (row.resolution.source.profile_name == "zen4-farm") is matches
            reasons = {c.reason for c in row.resolution.rejected}
            assert reasons <= {"threads", "selector:models", "selector:family",
                               "selector:vendor", "element_type"}
        assert json.loads(json.dumps(explanation.to_dict()))["execution"]["effective_threads"] \
            == threads
        assert explanation.table().count("\n") >= 4


def test_explain_names_the_file_and_entry_and_the_changed_values(tmp_path):
    registry = _registry()
    path = _written(tmp_path)
    import_deployment_profiles(path, registry=registry)
    explanation = explain(execution(2), registry=registry, keys=[toy_key()])
    (row,) = explanation.keys
    assert row.changed == (GRAIN,) and f"{path}, entry 1" == row.resolution.source.origin
    assert f"zen4-farm ({path}, entry 1): {GRAIN}=2000" in explanation.table()
    assert "rejected zen4-farm" in explanation.table() and ": threads" in explanation.table()


# --- the environment variable ---------------------------------------------------------------


def test_the_environment_variable_imports_good_files_and_reports_the_others(tmp_path):
    from kerneltune.kernels import library

    host = get_cpu_descriptor()
    selector = CpuSelector(vendor=host.vendor, family=host.family, models=[host.model])
    key = library()["Abs"].tuning_key("FLOAT")
    good = write_deployment_profile(
        DeploymentProfile("host", selector, (ProfileEntry(key, (1, 64), {GRAIN: 12345}),)),
        tmp_path / "good.yaml")
    corrupt = tmp_path / "corrupt.yaml"
    corrupt.write_text("{format: [")
    missing = tmp_path / "missing.yaml"
    code = ("import json, kerneltune\n"
            "from kerneltune.kernels import library\n"
            "r = kerneltune.startup_report()\n"
            "key = library()['Abs'].tuning_key('FLOAT')\n"
            "res = kerneltune.resolve_kernel_tuning(key, kerneltune.current_execution(1))\n"
            "print(json.dumps([[f['status'] for f in r.profiles.to_dict()['files']],\n"
            "                  list(r.problems), res.values['parallel.minimum_elements']]))\n")
    env = {**os.environ, "KERNELTUNE_DEPLOYMENT_PROFILES":
           os.pathsep.join(map(str, (missing, corrupt, good))), "KERNELTUNE_CACHE": "off"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True)
    statuses, problems, grain = json.loads(done.stdout)
    assert statuses == ["not_found", "malformed", "imported"] and grain == 12345
    assert any(str(missing) in p for p in problems) and any(str(corrupt) in p for p in problems)


def test_a_folder_in_the_variable_imports_its_yaml_files_in_order(tmp_path):
    from kerneltune.profiles.importer import profile_paths

    for name in ("b.yaml", "a.yaml", "notes.txt"):
        (tmp_path / name).write_text("")
    assert [p.name for p in profile_paths(f"{tmp_path}{os.pathsep}{tmp_path / 'x.yaml'}")] == [
        "a.yaml", "b.yaml", "x.yaml"]


# --- implementations the library cannot have ------------------------------------------------


def test_an_entry_for_an_isa_variant_that_does_not_exist_is_refused_by_import_and_bake(tmp_path):
    import dataclasses

    from kerneltune.kernels import register_library
    from kerneltune.machine import processor_selector
    from kerneltune.pipeline import bake

    registry = KernelTuningRegistry()
    register_library(registry)
    keys = registry.snapshot().keys()
    abs_float = next(key for key in keys
                     if key.kernel == "Abs" and key.element_type_name == "FLOAT")
    selector = processor_selector(get_cpu_descriptor()).selector
    entries = [ProfileEntry(dataclasses.replace(abs_float, implementation=variant), (1, 1),
                            {"parallel.minimum_elements": 8192})
               for variant in ("baseline", "x86_64_v9")]
    path = write_deployment_profile(DeploymentProfile("farm", selector, tuple(entries)),
                                    tmp_path / "farm.yaml")
    (file,) = import_deployment_profiles(path, registry=registry).files
    assert file.status == "rejected" and file.imported == 0
    assert any("entry 1" in p and "unknown implementation x86_64_v9 of kerneltune_cpu" in p
               for p in file.problems)
    baked = bake([path], tmp_path / "deployment.yaml", registry=registry)
    assert not baked.written
    assert any("unknown implementation x86_64_v9" in p for p in baked.problems)
    # only for that variant: still read (and refused) on the host it is bound to
    alone = write_deployment_profile(DeploymentProfile("farm", selector, tuple(entries[1:])),
                                     tmp_path / "alone.yaml")
    (file,) = import_deployment_profiles(alone, registry=registry,
                                         processor=get_cpu_descriptor()).files
    assert file.status == "rejected" and not file.unread
