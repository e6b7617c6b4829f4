"""The build toolchain end to end: pythran -> C++ -> extension with OpenMP -> import -> call.

The probe is imported from the installed package, per ISA variant, exactly as the kernel loader
will import the real kernels.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import math
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

VARIANTS_PACKAGE = "kerneltune.kernels._variants"
PROBE = f"{VARIANTS_PACKAGE}.baseline.openmp_probe"


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
