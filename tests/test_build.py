"""The build toolchain end to end: pythran -> C++ -> extension with OpenMP -> import -> call.

The probe is imported from the installed package, per ISA variant, exactly as the kernel loader
will import the real kernels. The configure-time scripts of tools/ run as meson runs them.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kerneltune._support.aligned import ALIGNMENT

VARIANTS_PACKAGE = "kerneltune.kernels._variants"
PROBE = f"{VARIANTS_PACKAGE}.baseline.openmp_probe"
ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"


def _omp_thread_limit() -> int | None:
    """A thread cap set in the environment, which `num_threads(n)` cannot exceed."""
    limit = os.environ.get("OMP_THREAD_LIMIT", "").strip()
    return int(limit) if limit.isdigit() else None


def _omp_dynamic() -> bool:
    """OMP_DYNAMIC=true lets the runtime give a parallel region fewer threads than asked."""
    return os.environ.get("OMP_DYNAMIC", "").strip().lower() in {"true", "1", "yes"}


def _requires_threads(count: int):
    limit = _omp_thread_limit()
    return pytest.mark.skipif(
        _omp_dynamic() or (limit is not None and limit < count),
        reason=f"OMP_THREAD_LIMIT / OMP_DYNAMIC in the environment prevent {count} threads",
    )


@pytest.fixture(scope="module")
def probe():
    return importlib.import_module(PROBE)


def test_probe_is_the_compiled_extension(probe) -> None:
    path = Path(probe.__file__)
    assert path.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), path
    assert path.parent.name == "baseline"
    # pythran stamps its modules with (pythran version, source digest).
    assert hasattr(probe, "__pythran__")


def test_variants_manifest_lists_built_modules() -> None:
    variants = importlib.import_module(VARIANTS_PACKAGE)
    assert "baseline" in variants.VARIANTS
    assert "openmp_probe" in variants.KERNELS
    root = Path(variants.__file__).parent
    for variant in variants.VARIANTS:
        # Not imported: a variant above this processor's ISA would fault at the first call.
        package = root / variant
        assert (package / "__init__.py").is_file(), package
        for kernel in variants.KERNELS:
            built = [
                package / f"{kernel}{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES
            ]
            assert any(candidate.is_file() for candidate in built), (variant, kernel)
    baseline = importlib.import_module(f"{VARIANTS_PACKAGE}.baseline")
    assert baseline.VARIANT == "baseline"
    assert not any("native" in flag for flag in baseline.COMPILE_ARGS)


def test_compiled_with_openmp(probe) -> None:
    assert probe.openmp_enabled() is True


@_requires_threads(3)
def test_three_threads_requested_three_threads_ran(probe) -> None:
    # Holds on a 2-core machine too: num_threads(3) oversubscribes, it is not capped by cores.
    assert probe.parallel_thread_count(3) == 3
    ids = probe.thread_ids(3, 12)
    # schedule(static, 1) deals the iterations round-robin over the team.
    assert ids.tolist() == [0, 1, 2] * 4


@_requires_threads(2)
def test_two_threads(probe) -> None:
    assert probe.parallel_thread_count(2) == 2
    assert sorted(set(probe.thread_ids(2, 10).tolist())) == [0, 1]


def test_one_thread_runs_serially(probe) -> None:
    assert probe.parallel_thread_count(1) == 1
    ids = probe.thread_ids(1, 16)
    assert ids.dtype == np.int64
    assert ids.tolist() == [0] * 16


def test_compiled_modules_zero_their_larger_arrays_on_a_cache_line(probe) -> None:
    # np.zeros in a kernel is calloc, which the build wraps as it wraps malloc: where the
    # heap put the panel path's accumulators made it up to twice as slow (docs/kernels.md,
    # aligned_malloc). 128 int64 ids are 1 KiB, the smallest block aligned.
    for iterations in range(128, 160):
        ids = probe.thread_ids(1, iterations)
        assert ids.ctypes.data % ALIGNMENT == 0, iterations
        assert ids.tolist() == [0] * iterations


def test_more_threads_than_iterations(probe) -> None:
    ids = probe.thread_ids(4, 2)
    assert ids.tolist() == [0, 1]


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
@pytest.mark.parametrize("size", [0, 1, 7, 1000, 100_003])
def test_parallel_sum_equals_numpy_exactly_on_integers(probe, threads: int, size: int) -> None:
    # Integer-valued doubles below 2**53: every order of summation gives the same bits.
    x = np.random.default_rng(size).integers(-1000, 1000, size=size).astype(np.float64)
    assert probe.parallel_sum(x, threads) == x.sum()
    assert probe.serial_sum(x) == x.sum()


@pytest.mark.parametrize("threads", [1, 3])
def test_parallel_sum_close_to_numpy_on_reals(probe, threads: int) -> None:
    x = np.random.default_rng(7).standard_normal(50_000)
    exact = math.fsum(x.tolist())
    assert probe.parallel_sum(x, threads) == pytest.approx(exact, rel=1e-9, abs=1e-9)
    assert probe.parallel_sum(x, threads) == pytest.approx(float(x.sum()), rel=1e-9, abs=1e-9)


def test_parallel_sum_propagates_nan_and_inf(probe) -> None:
    x = np.ones(1000)
    x[500] = np.inf
    assert probe.parallel_sum(x, 3) == np.inf
    x[100] = np.nan
    assert math.isnan(probe.parallel_sum(x, 3))


@settings(max_examples=50, deadline=None)
@given(
    values=st.lists(st.integers(-(2**30), 2**30), max_size=200),
    threads=st.integers(1, 5),
)
def test_parallel_sum_property(values: list[int], threads: int) -> None:
    probe = importlib.import_module(PROBE)
    x = np.asarray(values, dtype=np.float64)
    assert probe.parallel_sum(x, threads) == float(sum(values))


def run_tool(name: str, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python tools/NAME.py ARGS` in a fresh interpreter, as meson runs it."""
    command = [sys.executable, str(TOOLS / f"{name}.py"), *map(str, args)]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)


def test_meson_build_runs_every_tool_and_embeds_no_script() -> None:
    build = (ROOT / "meson.build").read_text(encoding="utf-8")
    assert "'''" not in build, "a script embedded in meson.build belongs in tools/"
    tools = sorted(TOOLS.glob("*.py"))
    assert tools
    for tool in tools:
        assert f"files('tools/{tool.name}')" in build, tool.name


def test_get_include_is_absolute_outside_the_source_dir(tmp_path: Path) -> None:
    done = run_tool("get_include", "numpy", tmp_path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == os.path.realpath(np.get_include()) + "\n"


def test_get_include_is_relative_inside_the_source_dir(tmp_path: Path) -> None:
    # A virtualenv inside the source tree: meson refuses its absolute include path.
    include = os.path.realpath(np.get_include())
    source_dir = Path(include).parents[2]
    done = run_tool("get_include", "numpy", source_dir, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == os.path.relpath(include, source_dir) + "\n"
    assert not os.path.isabs(done.stdout.strip())


def test_get_include_is_not_shadowed_by_the_working_directory(tmp_path: Path) -> None:
    # meson runs the script from the source tree, whose files must not stand in for numpy.
    (tmp_path / "numpy.py").write_text("raise ImportError('shadowed')\n", encoding="utf-8")
    done = run_tool("get_include", "numpy", tmp_path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == os.path.realpath(np.get_include()) + "\n"


def test_scan_sources_lists_kernels_and_leftovers(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    kernels = package / "kernels"
    files = [
        "__init__.py", "module.pyo", "__pycache__/module.cpython-311.pyc",
        "kernels/__init__.py", "kernels/b_pythran.py", "kernels/a_pythran.py",
        "kernels/helper.py", "kernels/stale.so", "kernels/gemm.o", "kernels/dir_pythran.py/x.py",
        "kernels/deep/__pycache__/x.pyc", "kernels/deep/lib.dylib",
    ]
    for name in files:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("", encoding="utf-8")
    done = run_tool("scan_sources", package, kernels, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "kernel:a",
        "kernel:b",
        "excluded-dir:__pycache__",
        "excluded-file:module.pyo",
        "excluded-file:kernels/gemm.o",
        "excluded-file:kernels/stale.so",
        "excluded-dir:kernels/deep/__pycache__",
        "excluded-file:kernels/deep/lib.dylib",
    ]


def test_scan_sources_finds_the_installed_kernels(tmp_path: Path) -> None:
    package = ROOT / "src" / "kerneltune"
    done = run_tool("scan_sources", package, package / "kernels", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = [line.removeprefix("kernel:") for line in done.stdout.splitlines()
             if line.startswith("kernel:")]
    built = importlib.import_module(VARIANTS_PACKAGE).KERNELS
    # every source, and the serial builds of some (meson.build's serial_kernels)
    assert sorted(name for name in built if not name.endswith("_serial")) == found
    assert {name.removesuffix("_serial") for name in built} == set(found)
    assert "gemm_serial" in built


def test_isa_flags_per_variant(tmp_path: Path) -> None:
    done = run_tool("isa_flags", "gcc", "12.2.0", "x86_64", "baseline", "x86_64_v3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    baseline, v3 = done.stdout.splitlines()
    assert baseline.startswith("baseline\t-march=x86-64 ")
    assert v3.startswith("x86_64_v3\t-march=x86-64-v3")


@pytest.mark.parametrize(
    ("compiler", "version", "family"),
    [("nocc", "1.0", "x86_64"), ("gcc", "12.2.0", "nofamily"), ("gcc", "1.0", "x86_64")],
)
def test_isa_flags_baseline_builds_everywhere(
    tmp_path: Path, compiler: str, version: str, family: str
) -> None:
    done = run_tool("isa_flags", compiler, version, family, "baseline", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("baseline\t")


@pytest.mark.parametrize(
    ("compiler", "version", "variant", "message"),
    [
        ("nocc", "1.0", "x86_64_v3", "archspec has no nocc 1.0 flags for ISA variant x86_64_v3"),
        ("gcc", "4.1.0", "x86_64_v3", "no gcc 4.1.0 flags for ISA variant x86_64_v3: "),
        ("gcc", "12.2.0", "v9", "archspec has no gcc 12.2.0 flags for ISA variant v9"),
    ],
)
def test_isa_flags_refuse_a_named_variant_without_flags(
    tmp_path: Path, compiler: str, version: str, variant: str, message: str
) -> None:
    # Baseline code under a name the loader ranks higher would be a silent downgrade.
    done = run_tool("isa_flags", compiler, version, "x86_64", "baseline", variant, cwd=tmp_path)
    assert done.returncode == 1
    assert message in done.stderr
    assert variant not in done.stdout


def _import_written(tmp_path: Path, *args: str):
    """Run the init writer and import what it wrote, as the loader imports the package."""
    done = run_tool("write_init", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "generated" / "__init__.py"
    path.parent.mkdir()
    path.write_text(done.stdout, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("generated", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_write_init_variant_package(tmp_path: Path) -> None:
    module = _import_written(
        tmp_path, "Kernels of one variant.",
        "VARIANT:", "x86_64_v3", "COMPILE_ARGS=", "-march=x86-64-v3", "-mtune=generic",
    )
    assert module.__doc__ == "Kernels of one variant."
    assert module.VARIANT == "x86_64_v3"
    assert module.COMPILE_ARGS == ("-march=x86-64-v3", "-mtune=generic")


def test_write_init_variants_manifest(tmp_path: Path) -> None:
    module = _import_written(
        tmp_path, "The variants.",
        "VARIANTS=", "baseline", "x86_64_v3", "KERNELS=", "binary", "unary", "EMPTY=",
    )
    assert module.VARIANTS == ("baseline", "x86_64_v3")
    assert module.KERNELS == ("binary", "unary")
    assert module.EMPTY == ()
