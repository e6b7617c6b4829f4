"""Processor model: detection from fake sysroots, descriptor files, execution identity."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import archspec.cpu
import pytest
import yaml

from conftest import CPUS, FIXTURES, detect, expected_of
from kerneltune.errors import CpuDescriptorError
from kerneltune.machine.descriptor import CpuDescriptor, CpuExecutionDescriptor
from kerneltune.machine.descriptor_files import read_cpu_descriptor, write_cpu_descriptor
from kerneltune.machine.detect import current_execution, detect_cpu_descriptor, get_cpu_descriptor

MASKED_VM = "amd_epyc_vm_masked"


def cpuinfo_flags(name: str) -> set[str]:
    for line in (CPUS / name / "proc" / "cpuinfo").read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    raise AssertionError(f"{name}: cpuinfo lists no flags")


def identity_facts(expected: dict) -> dict:
    """What the detector must report for vendor, family, model and stepping."""
    if expected["architecture"] == "aarch64":
        return {
            "vendor": "arm" if expected["implementer"] == "0x41" else None,
            "family": expected["architecture_version"],
            "model": int(expected["part"], 16),
            "stepping": (int(expected["variant"], 16) << 4) | int(expected["revision"]),
        }
    return {key: expected[key] for key in ("vendor", "family", "model", "stepping")}


def test_every_fixture_is_found():
    assert len(FIXTURES) >= 10
    assert MASKED_VM in FIXTURES


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_detection(name):
    expected = expected_of(name)
    descriptor = detect(name)
    assert descriptor.architecture == expected["architecture"]
    for key, value in identity_facts(expected).items():
        assert getattr(descriptor, key) == value, key
    for key in (
        "cache_line_bytes",
        "l1_data_bytes",
        "l2_bytes",
        "l3_bytes",
        "physical_cores",
        "logical_cores",
    ):
        assert getattr(descriptor, key) == expected[key], key
    if name != MASKED_VM:
        assert descriptor.microarchitecture == expected["archspec_target"]


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_features_are_the_cpuinfo_flags(name):
    assert cpuinfo_flags(name) <= detect(name).features


def test_masked_vm_reports_its_generic_level():
    microarchitecture = detect(MASKED_VM).microarchitecture
    assert archspec.cpu.TARGETS[microarchitecture].vendor == "generic"
    assert microarchitecture == "x86_64_v4"


def test_masked_vm_differs_from_the_real_processor_only_in_flags_and_target():
    masked, real = detect(MASKED_VM), detect("amd_zen4_epyc_9654")
    assert (masked.vendor, masked.family, masked.model) == (real.vendor, real.family, real.model)
    assert masked.identity != real.identity


def test_missing_sources_leave_fields_unknown(tmp_path):
    assert detect_cpu_descriptor(root=tmp_path, machine="x86_64") == CpuDescriptor(
        architecture="x86_64"
    )


def test_partial_sources_leave_only_their_fields_unknown(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text("processor\t: 0\nvendor_id\t: GenuineIntel\n")
    descriptor = detect_cpu_descriptor(root=tmp_path, machine="amd64")
    assert (descriptor.architecture, descriptor.vendor) == ("x86_64", "intel")
    assert descriptor.family is None and descriptor.l2_bytes is None
    assert descriptor.logical_cores is None


def test_garbled_sources_leave_fields_unknown(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(
        "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: zzz\nCPU variant\t: 0x1\n"
    )
    cpu_dir = tmp_path / "sys" / "devices" / "system" / "cpu"
    index = cpu_dir / "cpu0" / "cache" / "index0"
    index.mkdir(parents=True)
    (cpu_dir / "online").write_text("zero-three\n")
    for name, value in {
        "level": "1",
        "type": "Data",
        "size": "32KK",
        "coherency_line_size": "x",
    }.items():
        (index / name).write_text(value + "\n")
    descriptor = detect_cpu_descriptor(root=tmp_path, machine="arm64")
    assert (descriptor.architecture, descriptor.vendor) == ("aarch64", "arm")
    assert descriptor.model is None and descriptor.stepping is None
    assert descriptor.l1_data_bytes is None and descriptor.cache_line_bytes is None
    assert descriptor.logical_cores is None and descriptor.physical_cores is None


def test_detect_on_the_host_does_not_raise():
    descriptor = detect_cpu_descriptor()
    assert isinstance(descriptor, CpuDescriptor)
    assert get_cpu_descriptor() is get_cpu_descriptor()


def test_identity_ignores_cache_sizes_and_core_counts():
    descriptor = detect("intel_icelake_sp_8370c")
    other = dataclasses.replace(descriptor, l2_bytes=1 << 21, l3_bytes=None, logical_cores=64)
    assert other != descriptor
    assert other.identity == descriptor.identity
    assert dataclasses.replace(descriptor, stepping=7).identity != descriptor.identity


@pytest.mark.parametrize("name", FIXTURES)
def test_descriptor_round_trips_through_a_file(name, tmp_path):
    descriptor = detect(name)
    path = tmp_path / "cpu.yaml"
    write_cpu_descriptor(descriptor, path)
    assert read_cpu_descriptor(path) == descriptor
    assert CpuDescriptor.from_dict(descriptor.to_dict()) == descriptor


def test_to_dict_is_plain_data_with_every_field():
    data = CpuDescriptor(architecture="aarch64", features=frozenset({"sve", "asimd"})).to_dict()
    assert data["features"] == ["asimd", "sve"]
    assert data["l3_bytes"] is None
    assert list(data) == [f.name for f in dataclasses.fields(CpuDescriptor)]
    assert yaml.safe_load(yaml.safe_dump(data)) == data


def test_a_plain_mapping_file_without_header_loads(tmp_path):
    path = tmp_path / "plain.yaml"
    path.write_text("architecture: amd64\nvendor: AuthenticAMD\nmicroarchitecture: Zen 4\n")
    descriptor = read_cpu_descriptor(path)
    assert (descriptor.architecture, descriptor.vendor) == ("x86_64", "amd")
    assert descriptor.microarchitecture == "zen4"


BAD_FILES = {
    # name: (content, text the message must contain besides the file; None = file missing)
    "missing": (None, None),
    "empty": ("", "empty"),
    "not_a_mapping": ("- x86_64\n- amd\n", "mapping"),
    "truncated": ("architecture: x86_64\nfeatures: [avx, sse\n", "line 2"),
    "unknown_field": ("architecture: x86_64\nfrequency_mhz: 3000\n", "frequency_mhz"),
    "wrong_type": ("family: six\n", "family"),
    "bool_for_int": ("model: true\n", "model"),
    "negative": ("l2_bytes: -1\n", "l2_bytes"),
    "unknown_vendor": ("vendor: NotAVendor\n", "vendor"),
    "features_not_strings": ("features: [1, 2]\n", "features"),
    "unknown_schema_version": (
        "format: kerneltune-cpu-descriptor\nschema_version: 2\narchitecture: x86_64\n",
        "schema_version",
    ),
    "unknown_format": ("format: something-else\nschema_version: 1\n", "format"),
    "python_object_tag": ("vendor: !!python/object/apply:os.getcwd []\n", "vendor"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_descriptor_files_are_rejected_with_file_and_field(case, tmp_path):
    content, field = BAD_FILES[case]
    path = tmp_path / f"{case}.yaml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(CpuDescriptorError) as caught:
        read_cpu_descriptor(path)
    assert str(path) in str(caught.value)
    if field is not None:
        assert field in str(caught.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(CpuDescriptorError) as caught:
        CpuDescriptor.from_dict(
            {"family": True, "stepping": -2, "colour": "blue", "features": "avx"}, source="x.yaml"
        )
    message = str(caught.value)
    assert message.startswith("x.yaml: 4 problems")
    for field in ("family", "stepping", "colour", "features"):
        assert field in message


def run_python(code: str, **environment: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that imports kerneltune the way this one does."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, sys.path)), **environment)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )


PRINT_DESCRIPTOR = (
    "import json; from kerneltune.machine.detect import get_cpu_descriptor; "
    "print(json.dumps(get_cpu_descriptor().to_dict()))"
)


def test_environment_variable_replaces_detection(tmp_path):
    descriptor = detect("arm_graviton3_neoverse_v1")
    path = tmp_path / "farm.yaml"
    write_cpu_descriptor(descriptor, path)
    result = run_python(PRINT_DESCRIPTOR, KERNELTUNE_CPU_DESCRIPTOR=str(path))
    assert result.returncode == 0, result.stderr
    assert CpuDescriptor.from_dict(json.loads(result.stdout)) == descriptor


def test_the_host_is_detected_once_and_the_variable_replaces_it_only_for_profiles(tmp_path):
    """The ISA variant is the host's processor's, whatever the variable simulates; without the
    variable, profiles resolve for that same detection."""
    code = ("import json; import kerneltune\n"
            "from kerneltune.machine.detect import get_cpu_descriptor, host_cpu_descriptor\n"
            "from kerneltune.kernels.variants import selected_variant\n"
            "print(json.dumps([get_cpu_descriptor() is host_cpu_descriptor(), "
            "get_cpu_descriptor().architecture, selected_variant()]))")
    host = run_python(code)
    assert host.returncode == 0, host.stderr
    same, architecture, variant = json.loads(host.stdout)
    assert same and architecture == detect_cpu_descriptor().architecture
    path = tmp_path / "farm.yaml"
    write_cpu_descriptor(detect("arm_graviton3_neoverse_v1"), path)
    simulated = run_python(code, KERNELTUNE_CPU_DESCRIPTOR=str(path))
    assert simulated.returncode == 0, simulated.stderr
    assert json.loads(simulated.stdout) == [False, "aarch64", variant]


def test_environment_variable_with_a_bad_file_fails_naming_it(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("family: [6]\n", encoding="utf-8")
    result = run_python(PRINT_DESCRIPTOR, KERNELTUNE_CPU_DESCRIPTOR=str(path))
    assert result.returncode != 0
    assert "CpuDescriptorError" in result.stderr
    assert str(path) in result.stderr and "family" in result.stderr


def test_current_execution_defaults_to_the_affinity():
    execution = current_execution()
    affinity = (
        os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count())
    )
    assert execution.effective_threads == len(affinity)
    assert execution.affinity == frozenset(affinity)
    assert execution.processor is get_cpu_descriptor()
    assert execution.numa_policy == "default"


def test_current_execution_keeps_explicit_threads():
    execution = current_execution(threads=3, numa_policy="interleave")
    assert (execution.effective_threads, execution.numa_policy) == (3, "interleave")


@pytest.mark.parametrize("threads", [0, -1, True, 2.0, "4"])
def test_current_execution_rejects_bad_threads(threads):
    with pytest.raises(ValueError, match="threads"):
        current_execution(threads=threads)


def test_execution_identity_is_the_affinity_shape_not_the_cpu_ids():
    processor = detect("amd_zen3_epyc_7763")

    def execution(cpus, cores):
        return CpuExecutionDescriptor(processor, 2, frozenset(cpus), cores)

    assert execution({0, 1}, 2).identity == execution({2, 3}, 2).identity
    assert execution({0, 1}, 2) != execution({2, 3}, 2)
    assert execution({0, 1}, 2).identity != execution({0, 1}, 1).identity
    assert execution({0, 1}, 2).identity != execution({0, 1, 2}, 2).identity


def test_execution_descriptor_round_trips_and_validates():
    execution = CpuExecutionDescriptor(detect("intel_haswell_e5_2680v3"), 4, frozenset({0, 2}), 2)
    data = execution.to_dict()
    assert data["affinity"] == [0, 2]
    assert CpuExecutionDescriptor.from_dict(yaml.safe_load(yaml.safe_dump(data))) == execution
    data["processor"]["family"] = "six"
    data["effective_threads"] = True
    with pytest.raises(CpuDescriptorError) as caught:
        CpuExecutionDescriptor.from_dict(data, source="run.yaml")
    message = str(caught.value)
    assert "run.yaml" in message
    assert "processor.family" in message and "effective_threads" in message


def test_execution_descriptor_rejects_non_positive_threads():
    with pytest.raises(ValueError, match="effective_threads"):
        CpuExecutionDescriptor(CpuDescriptor(), 0, frozenset({0}), 1)
