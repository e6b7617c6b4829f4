"""The ISA variant loader: selection from processor descriptors, forcing, and the built modules.

Selection is tested on the fake sysroots of tests/data/cpus, whatever the test host is; the
compiled modules only for the variants this host can run, since any other would die with
SIGILL instead of failing a test.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import os
import platform
import subprocess
import sys
from pathlib import Path

import archspec.cpu
import numpy as np
import pytest

from conftest import FIXTURES, detect, host_can_run
from kerneltune.errors import KernelTuningError, UnknownKernelError
from kerneltune.kernels.variants import (
    BASELINE,
    installed_variants,
    load_module,
    requested_variant,
    required_features,
    select_variant,
    selected_variant,
    variant_architecture,
)
from kerneltune.machine.descriptor import CpuDescriptor
from kerneltune.machine.detect import detect_cpu_descriptor, get_cpu_descriptor

X86_64_VARIANTS = ("baseline", "x86_64_v3", "x86_64_v4")
#: Set by `nox -s tests -- --variants=LIST` when the build compiled only LIST.
EXPECTED_VARIANTS_VARIABLE = "KERNELTUNE_TEST_EXPECTED_VARIANTS"

#: The best of baseline, x86_64_v3 and x86_64_v4 for each fixture.
BEST_VARIANT = {
    "amd_epyc_vm_masked": "x86_64_v4",  # flags hidden by the hypervisor are not AVX-512's
    "amd_zen2_epyc_7742": "x86_64_v3",
    "amd_zen3_epyc_7763": "x86_64_v3",
    "amd_zen4_epyc_9654": "x86_64_v4",
    "arm_graviton2_neoverse_n1": "baseline",
    "arm_graviton3_neoverse_v1": "baseline",
    "intel_haswell_e5_2680v3": "x86_64_v3",
    "intel_icelake_sp_8370c": "x86_64_v4",
    "intel_sapphire_rapids_8480": "x86_64_v4",
    "intel_skylake_sp_gold_6148": "x86_64_v4",
}


# --- selection from descriptors ---------------------------------------------------------------


def test_every_fixture_has_an_expectation() -> None:
    assert sorted(BEST_VARIANT) == FIXTURES


@pytest.mark.parametrize("name", FIXTURES)
def test_best_variant_of_each_fixture(name: str) -> None:
    processor = detect(name)
    assert select_variant(processor, available=X86_64_VARIANTS) == BEST_VARIANT[name]
    # The order of the available variants does not matter.
    assert select_variant(processor, available=X86_64_VARIANTS[::-1]) == BEST_VARIANT[name]


@pytest.mark.parametrize("name", FIXTURES)
def test_selection_agrees_with_archspec_microarchitecture(name: str) -> None:
    """The selected variant's target is the detected microarchitecture or one of its ancestors."""
    processor = detect(name)
    selected = select_variant(processor, available=X86_64_VARIANTS)
    if selected != BASELINE:
        microarchitecture = archspec.cpu.TARGETS[processor.microarchitecture]
        assert microarchitecture >= archspec.cpu.TARGETS[selected]


@pytest.mark.parametrize("name", FIXTURES)
def test_only_baseline_available(name: str) -> None:
    assert select_variant(detect(name), available=[BASELINE]) == BASELINE


@pytest.mark.parametrize("name", ["amd_zen4_epyc_9654", "intel_skylake_sp_gold_6148"])
def test_an_avx512_machine_without_x86_64_v4_gets_x86_64_v3(name: str) -> None:
    assert select_variant(detect(name), available=["baseline", "x86_64_v3"]) == "x86_64_v3"


def test_sse3_printed_as_pni_still_counts() -> None:
    # Linux's /proc/cpuinfo says `pni`, never `sse3`, which x86_64_v2 and up require;
    # the fixtures list both, a real host only `pni`.
    haswell = detect("intel_haswell_e5_2680v3")
    real = dataclasses.replace(haswell, features=haswell.features - {"sse3"})
    assert "sse3" in required_features("x86_64_v3")
    assert select_variant(real, available=X86_64_VARIANTS) == "x86_64_v3"


def test_unknown_processor_gets_baseline() -> None:
    assert select_variant(CpuDescriptor(), available=X86_64_VARIANTS) == BASELINE
    bare = CpuDescriptor(architecture="x86_64", features=frozenset({"sse", "sse2"}))
    assert select_variant(bare, available=X86_64_VARIANTS) == BASELINE


def test_no_runnable_variant_is_an_error() -> None:
    with pytest.raises(KernelTuningError, match="no installed ISA variant.*x86_64_v3"):
        select_variant(detect("arm_graviton3_neoverse_v1"), available=["x86_64_v3"])


def test_an_unknown_installed_variant_is_never_picked() -> None:
    # A name a newer archspec built: its requirements cannot be checked here.
    zen4 = detect("amd_zen4_epyc_9654")
    assert select_variant(zen4, available=["baseline", "x86_64_v9"]) == BASELINE


# --- required features and ranking come from archspec ----------------------------------------


def test_required_features() -> None:
    assert required_features(BASELINE) == frozenset()
    v3, v4 = required_features("x86_64_v3"), required_features("x86_64_v4")
    assert {"avx", "avx2", "fma", "bmi2", "movbe"} <= v3
    assert "avx512f" not in v3
    assert v3 < v4
    assert {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"} <= v4
    assert v4 == archspec.cpu.TARGETS["x86_64_v4"].features


def test_variant_architecture() -> None:
    assert variant_architecture(BASELINE) is None
    assert variant_architecture("x86_64_v3") == "x86_64"
    assert variant_architecture("x86_64_v4") == "x86_64"
    with pytest.raises(KernelTuningError, match="unknown ISA variant 'avx9'"):
        variant_architecture("avx9")
    with pytest.raises(KernelTuningError, match="unknown ISA variant 'avx9'"):
        required_features("avx9")


# --- forcing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("forced", X86_64_VARIANTS)
def test_force_a_runnable_variant(forced: str) -> None:
    zen4 = detect("amd_zen4_epyc_9654")
    assert select_variant(zen4, available=X86_64_VARIANTS, forced=forced) == forced


def test_force_a_variant_the_processor_cannot_run() -> None:
    haswell = detect("intel_haswell_e5_2680v3")
    with pytest.raises(KernelTuningError) as raised:
        select_variant(haswell, available=X86_64_VARIANTS, forced="x86_64_v4")
    message = str(raised.value)
    assert "'x86_64_v4'" in message
    for feature in ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"):
        assert feature in message
    assert "avx2" not in message  # haswell has it
    assert "installed variants: baseline, x86_64_v3, x86_64_v4" in message


def test_force_a_variant_of_another_architecture() -> None:
    graviton = detect("arm_graviton2_neoverse_n1")
    with pytest.raises(KernelTuningError, match="compiled for x86_64.*aarch64"):
        select_variant(graviton, available=X86_64_VARIANTS, forced="x86_64_v3")


def test_force_an_unknown_name_lists_the_valid_ones() -> None:
    zen4 = detect("amd_zen4_epyc_9654")
    with pytest.raises(KernelTuningError) as raised:
        select_variant(zen4, available=X86_64_VARIANTS, forced="x86-64-v3")
    assert "unknown ISA variant 'x86-64-v3'" in str(raised.value)
    assert "baseline, x86_64_v3, x86_64_v4" in str(raised.value)


def test_force_a_variant_that_is_not_installed() -> None:
    zen4 = detect("amd_zen4_epyc_9654")
    with pytest.raises(KernelTuningError, match="'x86_64_v4' is not installed.*: baseline$"):
        select_variant(zen4, available=[BASELINE], forced="x86_64_v4")


def test_requested_variant_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNELTUNE_ISA", raising=False)
    assert requested_variant() is None
    monkeypatch.setenv("KERNELTUNE_ISA", "")
    assert requested_variant() is None
    monkeypatch.setenv("KERNELTUNE_ISA", " Baseline ")
    assert requested_variant() == BASELINE


def _selected_in_subprocess(isa: str | None) -> subprocess.CompletedProcess[str]:
    """`selected_variant()` of a fresh interpreter, with KERNELTUNE_ISA=isa (None: unset)."""
    env = dict(os.environ)
    for name in ("KERNELTUNE_ISA", "KERNELTUNE_CPU_DESCRIPTOR"):
        env.pop(name, None)
    if isa is not None:
        env["KERNELTUNE_ISA"] = isa
    code = "from kerneltune.kernels.variants import selected_variant; print(selected_variant())"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


def test_kerneltune_isa_forces_baseline_in_a_new_process() -> None:
    result = _selected_in_subprocess("baseline")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == BASELINE


def test_kerneltune_isa_unknown_fails_naming_the_variable() -> None:
    result = _selected_in_subprocess("x86_64_v9")
    assert result.returncode != 0
    assert "KernelTuningError: KERNELTUNE_ISA=x86_64_v9: unknown ISA variant" in result.stderr


def test_without_kerneltune_isa_a_new_process_takes_the_best() -> None:
    result = _selected_in_subprocess(None)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == select_variant(detect_cpu_descriptor())


# --- the compiled variants ---------------------------------------------------------------------


def test_selected_variant_is_cached_and_consistent() -> None:
    expected = select_variant(get_cpu_descriptor(), forced=requested_variant())
    assert selected_variant() == expected
    assert selected_variant() is selected_variant()


def test_load_module_returns_the_compiled_probe_of_the_selected_variant() -> None:
    probe = load_module("openmp_probe")
    assert probe is load_module("openmp_probe")
    assert probe.__name__ == f"kerneltune.kernels._variants.{selected_variant()}.openmp_probe"
    assert Path(probe.__file__).name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    assert Path(probe.__file__).parent.name == selected_variant()
    assert probe.openmp_enabled() is True
    x = np.arange(1000, dtype=np.float64)
    assert probe.parallel_sum(x, 2) == x.sum()


def test_load_module_rejects_unknown_kernels_and_variants() -> None:
    with pytest.raises(UnknownKernelError, match="'no_such_kernel'.*openmp_probe"):
        load_module("no_such_kernel")
    with pytest.raises(KernelTuningError, match="unknown ISA variant 'x86_64_v9'"):
        load_module("openmp_probe", "x86_64_v9")


@pytest.mark.parametrize("variant", installed_variants())
def test_every_runnable_variant_imports_and_runs(variant: str) -> None:
    if not host_can_run(variant):
        pytest.skip(f"this host cannot run {variant} (it would die with SIGILL)")
    package = importlib.import_module(f"kerneltune.kernels._variants.{variant}")
    assert variant == package.VARIANT
    assert not any("native" in flag for flag in package.COMPILE_ARGS)
    probe = load_module("openmp_probe", variant)
    assert probe.__name__ == f"kerneltune.kernels._variants.{variant}.openmp_probe"
    for size in (0, 1, 7, 1000, 100_003):
        # Integer-valued doubles: every summation order gives numpy's bits.
        x = np.random.default_rng(size).integers(-1000, 1000, size=size).astype(np.float64)
        for threads in (1, 2, 3):
            assert probe.parallel_sum(x, threads) == x.sum()
        assert probe.serial_sum(x) == x.sum()


def test_the_build_compiled_every_variant_of_this_host() -> None:
    """The default build ships every variant of the host family; --variants=LIST fewer."""
    restricted = os.environ.get(EXPECTED_VARIANTS_VARIABLE)
    if restricted:
        expected = tuple(restricted.split(","))
    elif platform.machine().lower() in ("x86_64", "amd64"):
        expected = X86_64_VARIANTS
    else:
        expected = (BASELINE,)
    assert installed_variants() == expected


@pytest.mark.parametrize("module", ["binary", "unary", "rows", "gemm"])
def test_compiled_functions_try_float_signatures_first(module):
    """A compiled function tries its signatures in the order its docstring lists them, each
    that does not match costing a call about 70 ns: FLOAT operands, the common case, match
    the first."""
    compiled = load_module(module)
    checked = 0
    for name in dir(compiled):
        doc = getattr(getattr(compiled, name), "__doc__", None) or ""
        prototypes = [line.strip()[2:] for line in doc.splitlines()
                      if line.strip().startswith(f"- {name}(")]
        if len(prototypes) > 1 and any("float32" in p for p in prototypes):
            assert prototypes[0].startswith(f"{name}(float32"), prototypes
            checked += 1
    assert checked
