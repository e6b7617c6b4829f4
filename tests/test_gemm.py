"""Gemm and MatMul against numpy: shapes, attributes, bias forms, element types, the paths
the thresholds choose, bit-identical serial and parallel runs, and clear errors."""

from __future__ import annotations

import itertools
import math
import sys

import numpy as np
import pytest

from kerneltune._support.aligned import ALIGNMENT
from kerneltune.errors import TuningValidationError
from kerneltune.kernels import library, outputs
from kerneltune.kernels.gemm import (
    COMPILED_POOL_VARIANTS,
    WORKER_TASKS_PER_THREAD,
    Gemm,
)
from kerneltune.kernels.gemm_pythran import KU, MR, NR, STRIP_ROWS, SW
from kerneltune.kernels.gemm_run import fast_run
from kerneltune.kernels.matmul import MatMul
from kerneltune.kernels.panels import REMEMBERED_GRIDS
from kerneltune.kernels.strips import STRIPS_MINIMUM_ROW_BYTES
from kerneltune.kernels.variants import load_module, selected_variant

GEMM = Gemm(selected_variant())
MATMUL = MatMul(selected_variant())

#: small tiles and no BLAS: many tasks, several k-tiles and partial tiles on small products
SMALL_TILES = {"algorithm.tile_m": 8, "algorithm.tile_n": 64, "algorithm.tile_k": 16,
               "algorithm.skinny_m_limit": 8, "algorithm.blas_minimum_fmas": 10**15,
               "algorithm.packed_blas_minimum_fmas": 10**15,
               "algorithm.column_blas_minimum_fmas": 10**15,
               "algorithm.panel_blas_minimum_fmas": 10**15}
#: ... and a thread for every task (the row path off: it runs one thread, one or two rows)
PARALLEL = {**SMALL_TILES, "parallel.fmas_per_work_unit": 1, "parallel.minimum_tasks": 2,
            "algorithm.row_m_limit": 0}
#: the compiled paths, forced whatever the shape
BLOCKED = {**PARALLEL, "algorithm.skinny_m_limit": 0, "algorithm.column_n_limit": 0,
           "algorithm.panel_n_limit": 0, "algorithm.pack_b_minimum_elements": 10**12}
PACKED = {**PARALLEL, "algorithm.skinny_m_limit": 0, "algorithm.column_n_limit": 0,
          "algorithm.panel_n_limit": 0, "algorithm.pack_b_minimum_elements": 0}
SKINNY = {**PARALLEL, "algorithm.tile_m": 4096, "algorithm.skinny_m_limit": 4096,
          "algorithm.skinny_minimum_b_elements": 0, "parallel.skinny_fmas_per_work_unit": 1}
COLUMN = {**PARALLEL, "algorithm.skinny_m_limit": 0, "algorithm.column_n_limit": 10**6}
#: the panel path where op(B) is one panel (at most NR columns, tile_k rows), else blocked
PANEL = {**PARALLEL, "algorithm.skinny_m_limit": 0, "algorithm.column_n_limit": 0,
         "algorithm.panel_n_limit": 64, "algorithm.tile_k": 256}
PATHS = {"blocked": BLOCKED, "blocked_packed": PACKED, "skinny": SKINNY, "column": COLUMN,
         "panel": PANEL}


#: the element types, the transpositions and the forms of C (with alpha) a path is checked on
FLOAT_TYPES = pytest.mark.parametrize("element_type,dtype", [("FLOAT", np.float32),
                                                             ("DOUBLE", np.float64)])
TRANSPOSITIONS = pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
FORMS_OF_C = pytest.mark.parametrize(
    "alpha,bias", [(1.0, None), (1.5, "column"), (1.0, "scalar"), (1.0, "row"), (0.5, "full")],
    ids=["plain", "general", "scalar", "row", "full"])


def matrix(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def operands(m, k, n, trans_a=0, trans_b=0, bias=None, dtype=np.float32, seed=0):
    a = matrix((k, m) if trans_a else (m, k), dtype, seed)
    b = matrix((n, k) if trans_b else (k, n), dtype, seed + 1)
    c = {None: None, "scalar": matrix((), dtype, seed + 2), "row": matrix((n,), dtype, seed + 2),
         "row2d": matrix((1, n), dtype, seed + 2), "column": matrix((m, 1), dtype, seed + 2),
         "full": matrix((m, n), dtype, seed + 2)}[bias]
    return a, b, c


def reference(a, b, c=None, alpha=1.0, beta=1.0, trans_a=0, trans_b=0):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    out = alpha * ((a64.T if trans_a else a64) @ (b64.T if trans_b else b64))
    return out + beta * c.astype(np.float64) if c is not None and beta != 0 else out


def assert_close(out, expected, k, dtype=np.float32):
    """Within a few roundings of a length-k sum of the element type, relative to the result."""
    assert out.dtype == dtype
    eps = np.finfo(dtype).eps
    scale = max(1.0, float(np.abs(expected).max(initial=0)))
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=0,
                               atol=16 * eps * max(k, 1) ** 0.5 * scale)


def prepare(values=None, element_type="FLOAT", threads=4, kernel=GEMM, **attributes):
    config = kernel.configure(element_type, values or {})
    return kernel.prepare(element_type, config, threads=threads, **attributes)


# -- correctness ---------------------------------------------------------------------------

SHAPES = {
    "square": (64, 64, 64),
    "one row": (1, 70, 130),
    "three rows": (3, 33, 65),
    "eight rows": (8, 40, 200),
    "nine rows": (9, 17, 64),
    "wide N": (12, 9, 700),
    "large K": (10, 1500, 12),
    "odd sizes": (70, 131, 201),
    "one column": (33, 20, 1),
}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@TRANSPOSITIONS
def test_gemm_matches_numpy_on_every_path(shape, trans_a, trans_b):
    m, k, n = shape
    a, b, c = operands(m, k, n, trans_a, trans_b, "full")
    expected = reference(a, b, c, 0.5, -2.0, trans_a, trans_b)
    results = {}
    for name, values in {"default": {}, **PATHS}.items():
        prepared = prepare(values, alpha=0.5, beta=-2.0, transA=trans_a, transB=trans_b)
        results[name] = prepared.run(a, b, c)
        assert_close(results[name], expected, k)
    # Every compiled path sums each element in the same order: identical bits.
    compiled = [results[name] for name in PATHS] + [prepared.run_serial(a, b, c)]
    assert all(r.tobytes() == compiled[0].tobytes() for r in compiled)


@pytest.mark.parametrize("bias", [None, "scalar", "row", "row2d", "column", "full"])
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.25, 3.0), (-1.5, 0.0)])
@pytest.mark.parametrize("values", [{}, BLOCKED, PACKED, SKINNY],
                         ids=["default", "blocked", "packed", "skinny"])
def test_alpha_beta_and_every_form_of_c(bias, alpha, beta, values):
    m, k, n = 6, 19, 70
    a, b, c = operands(m, k, n, bias=bias)
    prepared = prepare(values, alpha=alpha, beta=beta)
    args = (a, b) if c is None else (a, b, c)
    out = prepared.run(*args)
    assert out.shape == (m, n)
    assert_close(out, reference(a, b, c, alpha, beta), k)


def test_beta_zero_ignores_c_as_onnx_does():
    a, b, _ = operands(4, 5, 6)
    c = np.full((4, 6), np.inf, np.float32)
    for values in ({}, BLOCKED, {"algorithm.blas_minimum_fmas": 0}):
        out = prepare(values, beta=0.0).run(a, b, c)
        assert np.isfinite(out).all()


@pytest.mark.parametrize("m,k,n", [(0, 4, 5), (4, 0, 5), (4, 5, 0), (0, 0, 0), (1, 0, 1)])
@pytest.mark.parametrize("values", [{}, BLOCKED, {"algorithm.blas_minimum_fmas": 0}],
                         ids=["default", "compiled", "blas"])
@pytest.mark.parametrize("relu", [False, True])
def test_empty_dimensions(m, k, n, values, relu):
    """Empty sums: beta * C alone, and its Relu when one is fused."""
    a, b, _ = operands(m, k, n)
    c = matrix((n,), seed=5)
    prepared = prepare(values, alpha=2.0, beta=3.0, activation="Relu" if relu else None)
    expected = np.broadcast_to(np.maximum(3 * c, 0) if relu else 3 * c, (m, n))
    for out in (prepared.run(a, b, c), prepared.run_serial(a, b, c)):
        assert out.shape == (m, n) and out.dtype == np.float32
        np.testing.assert_allclose(out, expected)
    assert prepared.run(a, b).tolist() == np.zeros((m, n)).tolist()


@pytest.mark.parametrize("element_type,dtype", [("DOUBLE", np.float64), ("FLOAT16", np.float16)])
@pytest.mark.parametrize("values", [{}, BLOCKED, PACKED, SKINNY],
                         ids=["default", "blocked", "packed", "skinny"])
def test_other_element_types(element_type, dtype, values):
    m, k, n = 9, 150, 70
    a, b, c = operands(m, k, n, 1, 0, "row", dtype)
    prepared = prepare(values, element_type, alpha=0.5, beta=2.0, transA=1)
    out = prepared.run(a, b, c)
    expected = reference(a, b, c, 0.5, 2.0, 1, 0)
    if dtype == np.float16:
        # Computed in float32 and rounded once: within half an ulp of half, plus the sum's error.
        assert out.dtype == np.float16
        np.testing.assert_allclose(out.astype(np.float64), expected,
                                   rtol=2**-10, atol=1e-4 * np.abs(expected).max())
    else:
        assert_close(out, expected, k, dtype)
    if values:
        assert out.tobytes() == prepared.run_serial(a, b, c).tobytes()


def test_float16_conversions_follow_their_own_threshold():
    schema = GEMM.schema("FLOAT16")
    assert "conversion.parallel_minimum_elements" in schema.parameters
    assert "conversion.parallel_minimum_elements" not in GEMM.schema("FLOAT").parameters
    assert "conversion.parallel_minimum_elements" not in GEMM.schema("DOUBLE").parameters
    a, b, c = operands(20, 30, 40, bias="full", dtype=np.float16)
    results = [prepare({**BLOCKED, "conversion.parallel_minimum_elements": minimum}, "FLOAT16",
                       threads=3).run(a, b, c) for minimum in (1, 10**9)]
    assert results[0].tobytes() == results[1].tobytes()


@pytest.mark.parametrize("values", [BLOCKED, PACKED, SKINNY])
def test_compiled_products_allocate_on_a_cache_line(values):
    # their packed panels and accumulators too, which the output stands for here: the
    # compiled modules' malloc is aligned_alloc from 1 KiB on (FLOAT's accumulators), so
    # the heap's state sets no product's speed (smaller blocks stay with malloc, faster)
    prepared = prepare(values)
    for n in range(64, 104):  # outputs of 4 x 64 float32 (1 KiB) and wider
        a, b, _ = operands(4, 5, n)
        assert prepared.plan(a, b).path != "blas"
        assert prepared.run(a, b).ctypes.data % ALIGNMENT == 0


def test_float16_operands_are_widened_onto_a_cache_line():
    # the float32 product reads B in place, at a speed that depends on its placement
    prepared = prepare(BLOCKED, "FLOAT16")
    for n in range(1, 30):
        a, b, _ = operands(n, n + 1, 3, dtype=np.float16)
        for half, widened in zip((a, b), prepared._inputs((a, b), serial=False), strict=True):
            assert widened.ctypes.data % ALIGNMENT == 0
            assert widened.tobytes() == half.astype(np.float32).tobytes()


class Subclass(np.ndarray):
    pass


@pytest.mark.parametrize("bias", ["full", None])
def test_inputs_are_normalised_and_results_fresh(bias):
    """What the compiled entry would refuse or mis-read takes the checked run, same bits."""
    a, b, c = operands(10, 12, 14, bias=bias)
    prepared = prepare(BLOCKED)
    expected = prepared.run(a, b, c)
    strided = np.zeros((10, 24), np.float32)
    strided[:, ::2] = a
    fortran = np.asfortranarray(b)
    swapped = a.astype(a.dtype.newbyteorder())
    cases = [(strided[:, ::2], b, c), (a, fortran, c), (swapped, b, c), (a.view(Subclass), b, c)]
    if c is not None:
        cases += [(a, b.T.copy().T, np.asfortranarray(c)),
                  (a, b, c.astype(c.dtype.newbyteorder()))]
    for args in cases:
        out = prepared.run(*args)
        assert type(out) is np.ndarray and out.tobytes() == expected.tobytes()
    out = prepared.run(a, b, c)
    assert out.flags.writeable and not np.shares_memory(out, a)
    assert c is None or not np.shares_memory(out, c)


# -- serial and parallel runs ---------------------------------------------------------------

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("m,k,n", [(1, 3, 5), (8, 16, 64), (9, 17, 65), (33, 48, 200),
                                   (64, 100, 300)])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("alpha,bias", [(1.5, "column"), (1.0, None)], ids=["general", "plain"])
def test_serial_and_parallel_runs_give_identical_bits(path, m, k, n, trans_b, alpha, bias):
    """Below, at and above the tile sizes (8 x 64 x 16), with one to many tasks.

    ``run_serial`` always takes the general compiled entry; ``run`` takes the plain one
    (fewer arguments, its own output) for A @ B, which must not change a bit.
    """
    a, b, c = operands(m, k, n, 0, trans_b, bias)
    outputs = []
    for threads in (1, 2, 3, 7):
        prepared = prepare(PATHS[path], threads=threads, alpha=alpha, transB=trans_b)
        plan = prepared.plan(a, b, c)
        if path == "panel" and n > 64:  # more columns than one panel: the blocked path's
            assert plan.path in ("blocked", "blocked_packed")
        else:
            assert plan.path == ("blocked_packed" if path == "blocked" and trans_b else path)
        outputs += [prepared.run(a, b, c), prepared.run_serial(a, b, c)]
    assert all(out.tobytes() == outputs[0].tobytes() for out in outputs)
    assert_close(outputs[0], reference(a, b, c, alpha, 1.0, 0, trans_b), k)


@pytest.mark.parametrize(("path", "m", "k", "n"), [
    ("blocked", 520, 70, 130), ("blocked_packed", 520, 70, 130), ("skinny", 3, 40, 11_000),
    ("column", 4100, 9, 8), ("panel", 4100, 8, 32), ("panel", 1030, 33, 64)])
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 1)])
@pytest.mark.parametrize("relu", [False, True])
def test_large_outputs_take_their_path_s_export_with_the_bits_of_the_checked_run(
        path, m, k, n, trans_a, trans_b, relu):
    """An output of 128 KiB or more comes from Python (the output pool) and its product from
    the path's own compiled export: the bits of the checked run, Relu and bias included."""
    a, b, c = operands(m, k, n, trans_a, trans_b, "row")
    assert m * n * 4 >= outputs.INTERMEDIATE_MINIMUM_BYTES
    for threads in (1, 2):
        prepared = prepare(PATHS[path], threads=threads, transA=trans_a, transB=trans_b,
                           activation="Relu" if relu else None)
        # with transB, the blocked path packs B always
        assert prepared.plan(a, b, c).path == (
            "blocked_packed" if path == "blocked" and trans_b else path)
        fast = prepared.run(a, b, c)
        checked = prepared.run_checked(a, b, c)
        assert fast.tobytes() == checked.tobytes()
        assert fast.tobytes() == prepared.run_serial(a, b, c).tobytes()
        assert (fast.min() >= 0) == relu


@pytest.mark.parametrize("path", PATHS)
@FLOAT_TYPES
@pytest.mark.parametrize("m,k,n", [(1, 20, 16), (9, 17, 33), (64, 32, 16), (300, 8, 32),
                                   (4100, 9, 8)])
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 1)])
def test_the_one_thread_build_gives_the_bits_of_the_openmp_build(path, element_type, dtype,
                                                                 m, k, n, trans_a, trans_b):
    """A kernel prepared for one thread runs the compiled entry and the panel path's export
    of the build without OpenMP (``gemm_serial``), whose loops gcc compiles apart from the
    OpenMP build's, and the other exports of the OpenMP build: no product may change a bit,
    bias and Relu included, through the small products' entry and the paths' exports."""
    a, b, c = operands(m, k, n, trans_a, trans_b, "row", dtype)
    for relu in (False, True):
        attributes = {"transA": trans_a, "transB": trans_b,
                      "activation": "Relu" if relu else None}
        one = prepare(PATHS[path], element_type, threads=1, **attributes)
        openmp = prepare(PATHS[path], element_type, threads=2, **attributes)
        assert one._gemm.__module__.endswith(".gemm_serial")
        assert one._panel.__module__.endswith(".gemm_serial")
        assert openmp._gemm.__module__.endswith(".gemm")
        assert openmp._panel.__module__.endswith(".gemm")
        assert one._blocked is openmp._blocked
        # products that decide takes to one thread go to the build without OpenMP
        assert openmp._gemm_one_thread.__module__.endswith(".gemm_serial")
        assert one.plan(a, b, c).path == openmp.plan(a, b, c).path
        expected = openmp.run_serial(a, b, c).tobytes()
        assert one.run(a, b, c).tobytes() == expected
        assert one.run_checked(a, b, c).tobytes() == expected
        assert openmp.run(a, b, c).tobytes() == expected


@pytest.mark.parametrize("path", ["blocked", "blocked_packed"])
@FLOAT_TYPES
@TRANSPOSITIONS
@pytest.mark.parametrize("bias", [None, "row", "column", "full"])
@pytest.mark.parametrize("threads", [2, 3])
def test_large_blocked_products_run_on_the_workers_with_the_serial_bits(
        path, element_type, dtype, trans_a, trans_b, bias, threads, monkeypatch):
    """A blocked product of WORKER_TASKS_PER_THREAD tasks a thread or more runs its panels
    and tasks on the calling thread and the workers: the bits of the serial run and of the
    one-thread kernel, alpha, beta, C and Relu included. Fewer tasks stay in OpenMP
    regions."""
    m, k, n = 8 * WORKER_TASKS_PER_THREAD * threads + 5, 40, 2 * NR + 3  # partial tiles
    a, b, c = operands(m, k, n, trans_a, trans_b, bias, dtype)
    inputs = (a, b) if c is None else (a, b, c)
    values = {**PATHS[path], "algorithm.tile_n": 2 * NR}
    calls = []
    monkeypatch.setattr(GEMM._workers, "run",
                        lambda count, function, parties, run=GEMM._workers.run:
                        calls.append(parties) or run(count, function, parties))
    for relu in (False, True):
        attributes = {"alpha": 0.5, "beta": -2.0, "transA": trans_a, "transB": trans_b,
                      "activation": "Relu" if relu else None}
        calls.clear()
        prepared = prepare(values, element_type, threads=threads, **attributes)
        assert prepared.plan(*inputs).path == ("blocked_packed" if trans_b else path)
        result = prepared.run(*inputs)
        assert set(calls) == {threads}
        expected = prepared.run_serial(*inputs).tobytes()
        assert result.tobytes() == expected
        one = prepare(values, element_type, threads=1, **attributes)
        assert one.run(*inputs).tobytes() == expected
        calls.clear()
        few = inputs[0][:8] if not trans_a else inputs[0][:, :8]
        prepared.run(few, *inputs[1:2])
        assert not calls
    assert_close(prepare(values, element_type, threads=threads, alpha=0.5, beta=-2.0,
                         transA=trans_a, transB=trans_b).run(*inputs),
                 reference(a, b, c, 0.5, -2.0, trans_a, trans_b), k, dtype)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_packed_panels_of_several_blocks_give_the_bits_of_b_in_place(trans_b):
    """Panels three micro-kernel blocks wide, over several k-tiles and n-tiles, the last
    n-tile ending inside a block: each block is packed on its own, and sums keep their order."""
    tiles = {**PARALLEL, "algorithm.tile_n": 3 * NR, "algorithm.skinny_m_limit": 0}
    m, k, n = 20, 50, 2 * 3 * NR + 37
    a, b, _ = operands(m, k, n, 0, trans_b)
    outputs = []
    for pack in (0, 10**12):  # packed, and (B not transposed) read in place
        for threads in (1, 3):
            prepared = prepare({**tiles, "algorithm.pack_b_minimum_elements": pack},
                               threads=threads, transB=trans_b)
            assert prepared.plan(a, b).path == ("blocked" if pack and not trans_b
                                               else "blocked_packed")
            outputs.append(prepared.run(a, b))
    assert all(out.tobytes() == outputs[0].tobytes() for out in outputs)
    assert_close(outputs[0], reference(a, b, trans_b=trans_b), k)


@FLOAT_TYPES
@pytest.mark.parametrize("m", [2, 3, 8, 13])
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 1)])
def test_skinny_strips_of_wide_tasks_give_the_bits_of_the_blocked_path(element_type, dtype, m,
                                                                      trans_a, trans_b):
    """Tasks of 512 columns, read in strips of SW columns (one or two rows), of a 4 KiB
    block of sums (groups of MR rows: 256 float32 or 128 float64 columns) or of NR
    transposed columns, the last strip and group partial."""
    wide = {**SKINNY, "algorithm.tile_n": 8 * NR}
    k, n = 70, 12 * NR + 13  # a task of 512 columns and one of 269
    a, b, c = operands(m, k, n, trans_a, trans_b, "full", dtype)
    outputs = []
    for threads in (1, 2):
        prepared = prepare(wide, element_type, threads=threads, alpha=0.5, beta=-1.0,
                           transA=trans_a, transB=trans_b)
        assert prepared.plan(a, b, c).path == "skinny"
        outputs.append(prepared.run(a, b, c))
    outputs.append(prepared.run_serial(a, b, c))  # the blocked path
    assert all(out.tobytes() == outputs[0].tobytes() for out in outputs)
    assert_close(outputs[0], reference(a, b, c, 0.5, -1.0, trans_a, trans_b), k, dtype)


@pytest.mark.parametrize("values", [SKINNY, BLOCKED], ids=["skinny", "blocked"])
def test_plain_products_return_arrays_the_caller_owns(values):
    """The plain entries make their output in compiled code: it must outlive everything else."""
    a, b, _ = operands(6, 5, 70)
    prepared = prepare(values)
    first, second = prepared.run(a, b), prepared.run(a, b)
    expected = reference(a, b)
    assert not np.shares_memory(first, second)
    assert first.flags.c_contiguous and first.flags.writeable
    del prepared, a, b
    first += 1
    assert_close(first - 1, expected, 5)
    assert_close(second, expected, 5)


def test_parallel_runs_use_the_task_grid():
    a, b, _ = operands(64, 16, 256)  # 8 x 4 tasks of 8 x 64
    assert prepare(BLOCKED, threads=4).plan(a, b).threads == 4
    # more threads than tasks: rows halved to MR, 16 x 4 tasks, one thread each at most
    assert prepare(BLOCKED, threads=48).plan(a, b).threads == 48
    assert prepare(BLOCKED, threads=100).plan(a, b).threads == 64
    assert prepare(SKINNY, threads=64).plan(a, b).threads == 4  # skinny: column strips only


@pytest.mark.parametrize("trans_b", [0, 1])
def test_products_of_fewer_tiles_than_threads_get_a_task_per_thread(trans_b):
    """The default 64 x 256 tiles make one task of a 64 x 1024 x 256 product: the grid's
    tiles are halved until each thread has one, and the bits stay the serial run's."""
    a, b, _ = operands(64, 1024, 256, 0, trans_b)
    prepared = prepare({"algorithm.blas_minimum_fmas": 10**15}, threads=2, transB=trans_b)
    plan = prepared.plan(a, b)
    assert plan.path == "blocked_packed" and plan.threads == 2
    assert prepared.run(a, b).tobytes() == prepared.run_serial(a, b).tobytes()
    # one tile of the smallest size cannot be cut: one thread
    a, b, _ = operands(MR, 4096, NR, 0, trans_b)
    assert prepared.plan(a, b).threads == 1


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("m", [1, 2, 5])
def test_skinny_products_of_fewer_strips_than_threads_get_a_strip_per_thread(m, trans_b):
    """A one-row product of a Linear layer's 1024 x 256 weight is one strip of the default
    256 columns: the strips are halved until each thread has one, and the bits stay the
    serial run's."""
    a, b, c = operands(m, 1024, 256, 0, trans_b, "row")
    prepared = prepare({"algorithm.vector_blas_minimum_fmas": 10**15,
                        "algorithm.skinny_blas_minimum_fmas": 10**15}, threads=2,
                       transB=trans_b)
    plan = prepared.plan(a, b, c)
    assert plan.path == "skinny" and plan.threads == 2
    assert prepared.run(a, b, c).tobytes() == prepared.run_serial(a, b, c).tobytes()
    # a strip of the smallest width cannot be cut: one thread
    a, b, c = operands(m, 4096, NR, 0, trans_b, "row")
    assert prepared.plan(a, b, c).threads == 1


@pytest.mark.parametrize("columns", [1, 16])
@pytest.mark.parametrize("bias", [None, "scalar", "row", "column", "full"])
def test_blas_products_take_c_and_relu_as_an_add_and_a_relu_after_them(columns, bias):
    """On the BLAS path, C and a fused Relu (compiled, in one call) give the bits of BLAS's
    product followed by an Add and a Relu, a session's unfused nodes: one column or many."""
    a, b, c = operands(300, 32, columns, 0, 0, bias)
    prepared = prepare({"algorithm.blas_minimum_fmas": 0, "algorithm.column_blas_minimum_fmas": 0,
                        "algorithm.panel_blas_minimum_fmas": 0}, threads=1, activation="Relu")
    inputs = (a, b) if c is None else (a, b, c)
    assert prepared.plan(*inputs).path == "blas"
    product = np.matmul(a, b) if c is None else np.matmul(a, b) + c
    expected = np.where(product > 0, product, np.float32(0))
    assert prepared.run(*inputs).tobytes() == expected.tobytes()


@FLOAT_TYPES
@pytest.mark.parametrize("export,m,n", [("blocked", 37, 70), ("panel", 37, 20),
                                        ("skinny", 3, 70), ("column", 37, 3), ("row", 2, 20)])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("bias", [False, True])
def test_each_path_s_export_applies_relu_to_the_sums_it_stores(element_type, dtype, export, m,
                                                                n, threads, bias):
    """``relu``: each compiled path's export applies Relu to each block of sums it has just
    stored with alpha and C: the bits of the export without it followed by the Relu kernel,
    NaN kept, -0.0 (a zero sum times a negative alpha) and -inf made 0. With a bias row
    (a hidden layer's), blocks of ``RELU_STORED_COLUMNS`` columns or more apply it as they
    store, narrower ones after: the same bits either way."""
    k = 9
    a, b, _ = operands(m, k, n, 0, 0, None, dtype)
    a[0] = 0  # zero sums: -0.0 once scaled by alpha
    a[1, 0] = np.inf  # +-inf, and NaN where B's element is 0
    b[0, 1] = 0
    c, alpha = np.zeros((0, 0), dtype), dtype(-1)
    if bias:
        c = np.linspace(-2, 2, n, dtype=dtype).reshape(1, n)
        c[0, :3] = -0.0  # the zero sums stay -0.0 there
    module = load_module("gemm" if threads > 1 else "gemm_serial", selected_variant())
    layout = {"blocked": (8, 64, 16, False, threads), "panel": (threads,),
              "skinny": (64, threads), "column": (threads,), "row": ()}[export]
    outs = []
    for relu in (False, True):
        out = np.full((m, n), 7, dtype)
        getattr(module, export)(a, b, c, out, alpha, dtype(1), relu, False, False, *layout)
        outs.append(out)
    plain, fused = outs
    assert np.isnan(plain).any() and np.isinf(plain).any() and (plain < 0).any()
    assert (np.signbit(plain) & (plain == 0)).any()
    kernel = library()["Relu"]
    config = kernel.configure(element_type, {})
    expected = kernel.prepare(element_type, config, threads=1).run(plain)
    assert fused.tobytes() == expected.tobytes()


def test_products_on_the_openmp_pool_keep_off_blas_s_threads():
    """``pool="openmp"``: BLAS computes on the calling thread alone, and on the variants
    whose compiled products beat that, a product of several rows far above every BLAS
    threshold takes a compiled path (the bits of the serial run); one row keeps its own
    threshold."""
    values = {"algorithm.blas_minimum_fmas": 1, "algorithm.skinny_blas_minimum_fmas": 1,
              "algorithm.vector_blas_minimum_fmas": 1}
    compiled = selected_variant() in COMPILED_POOL_VARIANTS
    for kernel, attributes in ((GEMM, {"transB": 1}), (MATMUL, {}), (MATMUL, {"bias": 1})):
        anywhere = prepare(values, threads=2, kernel=kernel, **attributes)
        pooled = prepare(values, threads=2, kernel=kernel, pool="openmp", **attributes)
        for m, path in ((64, "blocked_packed"), (3, "skinny"), (1, "blas")):
            a, b, c = operands(m, 300, 200, 0, attributes.get("transB", 0), "row")
            inputs = (a, b) if kernel is MATMUL and not attributes else (a, b, c)
            assert anywhere.plan(*inputs).path == "blas"
            plan = pooled.plan(*inputs)
            assert plan.path == (path if compiled else "blas"), (kernel, attributes, m)
            if plan.path == "blas":  # several rows on the calling thread; one row on 2
                assert plan.threads == min(2 if m == 1 else 1, anywhere.plan(*inputs).threads)
            expected = anywhere.run(*inputs) if plan.path == "blas" else pooled.run_serial(
                *inputs)
            assert pooled.run(*inputs).tobytes() == expected.tobytes()


# -- thresholds -----------------------------------------------------------------------------

def check_plan(values, shape, path, threads=None, **attributes):
    m, k, n = shape
    a, b, c = operands(m, k, n, attributes.get("transA", 0), attributes.get("transB", 0), "row")
    prepared = prepare(values, threads=2, **attributes)
    plan = prepared.plan(a, b, c)
    assert plan.path == path
    assert plan.elements == m * n
    if threads is not None:
        assert plan.threads == threads
    assert_close(prepared.run(a, b, c), reference(a, b, c, 1.0, 1.0, attributes.get("transA", 0),
                                                  attributes.get("transB", 0)), k)
    return plan


def test_defaults_take_the_compiled_paths_for_small_products_and_blas_above():
    defaults = GEMM.configure("FLOAT", {})
    check_plan({}, (64, 32, 16), "panel", threads=1)
    check_plan({}, (40, 40, 40), "blocked", threads=1)
    # few rows: a B that stays in cache goes through the blocked path, a larger B streams
    check_plan({}, (3, 64, 64), "blocked", threads=1)
    check_plan({}, (1, 64, 64), "row", threads=1)
    check_plan({}, (1, 128, 128), "skinny", threads=1)
    big = round(defaults.blas_minimum_fmas ** (1 / 3)) + 1
    plan = check_plan({}, (big, big, big), "blas")
    assert plan.threads >= 1


def test_blas_minimum_fmas_switches_between_blocked_and_blas():
    shape = (20, 30, 40)
    fmas = 20 * 30 * 40
    check_plan({"algorithm.blas_minimum_fmas": fmas}, shape, "blas")
    check_plan({"algorithm.blas_minimum_fmas": fmas + 1}, shape, "blocked")
    check_plan({"algorithm.blas_minimum_fmas": fmas}, shape, "blas", transA=1, transB=1)


def test_skinny_products_have_their_own_blas_threshold():
    shape = (4, 300, 400)
    fmas = 4 * 300 * 400
    check_plan({"algorithm.blas_minimum_fmas": 0}, shape, "skinny")
    check_plan({"algorithm.skinny_blas_minimum_fmas": fmas}, shape, "blas")
    check_plan({"algorithm.skinny_blas_minimum_fmas": fmas + 1}, shape, "skinny")
    check_plan({"algorithm.skinny_blas_minimum_fmas": 0, "algorithm.skinny_m_limit": 3,
                "algorithm.blas_minimum_fmas": fmas + 1}, shape,
               "blocked_packed")  # not skinny: the blocked path, packed for this B


def test_baseline_keeps_one_row_products_of_512_squared_on_blas():
    """baseline's kernels lose one-row products to BLAS (which uses every instruction set)
    earlier than the other variants': its default threshold is its own."""
    shape = (1, 1024, 256)  # 512**2 multiply-adds
    assert Gemm("baseline").schema("FLOAT").defaults.vector_blas_minimum_fmas == 512 ** 2
    for variant in ("x86_64_v3", "x86_64_v4"):
        assert Gemm(variant).schema("FLOAT").defaults.vector_blas_minimum_fmas == 2 * 512 ** 2
    expected = "blas" if selected_variant() == "baseline" else "skinny"
    check_plan({}, shape, expected)
    assert MATMUL.schema("FLOAT16").defaults == MATMUL.configure("FLOAT16")


def test_one_row_products_have_their_own_blas_threshold():
    shape = (1, 300, 400)
    fmas = 300 * 400
    check_plan({"algorithm.vector_blas_minimum_fmas": fmas}, shape, "blas")
    check_plan({"algorithm.vector_blas_minimum_fmas": fmas + 1}, shape, "skinny")
    check_plan({"algorithm.vector_blas_minimum_fmas": fmas + 1, "algorithm.blas_minimum_fmas": 0,
                "algorithm.skinny_blas_minimum_fmas": 0}, shape, "skinny")
    check_plan({"algorithm.vector_blas_minimum_fmas": fmas + 1, "algorithm.skinny_m_limit": 0},
               shape, "blocked_packed")
    check_plan({"algorithm.vector_blas_minimum_fmas": fmas, "algorithm.skinny_m_limit": 0},
               shape, "blas")
    check_plan({"algorithm.vector_blas_minimum_fmas": 0}, (2, 300, 400), "skinny")


@pytest.mark.parametrize(("path", "shape", "elsewhere", "other"), [
    ("column", (64, 32, 3), {"algorithm.column_n_limit": 2}, "panel"),
    ("panel", (64, 32, 16), {"algorithm.panel_n_limit": 8}, "blocked")])
def test_column_and_panel_path_products_have_their_own_blas_thresholds(path, shape, elsewhere,
                                                                     other):
    """The column and panel paths' narrow op(B) meets the path's own BLAS threshold, whatever
    the square one; a product the path does not take meets the threshold of the path that
    takes it."""
    parameter = f"algorithm.{path}_blas_minimum_fmas"
    fmas = math.prod(shape)
    check_plan({parameter: fmas}, shape, "blas")
    check_plan({parameter: fmas + 1}, shape, path)
    check_plan({parameter: fmas + 1, "algorithm.blas_minimum_fmas": 0}, shape, path)
    check_plan({parameter: fmas, "algorithm.blas_minimum_fmas": 0}, shape, "blas", transA=1,
               transB=1)
    check_plan({parameter: 0, **elsewhere}, shape, other)  # that path's threshold, not reached


def test_each_variant_meets_blas_where_it_was_measured_to():
    """Where BLAS overtakes the compiled paths depends on the instruction set: the
    baseline's SSE2 paths early on every shape (against AVX kernels), x86_64_v3's later,
    x86_64_v4's blocked path at 128**3 and its panel path not within the sizes measured."""
    expected = {"baseline": (2 ** 16, 2 ** 16), "x86_64_v3": (2 ** 17, 68 ** 3),
                "x86_64_v4": (2 ** 26, 2 ** 21)}
    for variant, (panel, square) in expected.items():
        for kernel in (Gemm(variant), MatMul(variant)):
            defaults = kernel.schema("FLOAT").defaults
            assert (defaults.panel_blas_minimum_fmas, defaults.blas_minimum_fmas) == (panel,
                                                                                   square)
    check_plan({}, (1024, 32, 16), "panel" if selected_variant() == "x86_64_v4" else "blas")
    check_plan({}, (48, 48, 48), "blas" if selected_variant() == "baseline" else "blocked")
    check_plan({}, (64, 64, 64), "blas" if selected_variant() == "baseline" else "blocked")
    check_plan({}, (72, 72, 72), "blocked" if selected_variant() == "x86_64_v4" else "blas")


def test_column_path_products_on_the_openmp_pool_take_blas_on_the_calling_thread():
    """The column path runs one thread where BLAS on one is faster: on the OpenMP pool its
    products keep their BLAS threshold, every variant, with BLAS held to the calling thread."""
    values = {"algorithm.blas_minimum_fmas": 1, "algorithm.column_blas_minimum_fmas": 1}
    for kernel in (GEMM, MATMUL):
        anywhere = prepare(values, threads=2, kernel=kernel)
        pooled = prepare(values, threads=2, kernel=kernel, pool="openmp")
        a, b, c = operands(512, 32, 2, 0, 0, "row")
        inputs = (a, b) if kernel is MATMUL else (a, b, c)
        plan = pooled.plan(*inputs)
        assert plan.path == "blas" and plan.threads == 1
        assert pooled.run(*inputs).tobytes() == anywhere.run(*inputs).tobytes()


@pytest.mark.parametrize(("threshold", "calls"), [(300 * 400, 1), (300 * 400 + 1, 0)])
def test_a_run_takes_the_path_its_plan_names(threshold, calls):
    prepared = prepare({"algorithm.vector_blas_minimum_fmas": threshold}, threads=2)
    a, b, _ = operands(1, 300, 400, 0, 0, "row")
    taken = []
    blas = prepared._blas
    prepared._blas = lambda *args: taken.append(args) or blas(*args)
    prepared.run(a, b)
    assert len(taken) == calls
    assert (prepared.plan(a, b).path == "blas") == bool(calls)


@pytest.mark.parametrize(("trans_a", "trans_b", "bias"),
                         [(0, 0, None), (1, 0, "full"), (0, 1, "row2d"), (1, 1, "column")])
def test_blas_products_of_checked_operands_go_straight_to_blas(trans_a, trans_b, bias):
    """The compiled call has checked them: the checked run's Python would cost as much as
    BLAS itself on a 64 x 64 x 64 product."""
    prepared = prepare({"algorithm.blas_minimum_fmas": 0}, threads=2, alpha=0.5, beta=2.0,
                       transA=trans_a, transB=trans_b)
    a, b, c = operands(20, 30, 40, trans_a, trans_b, bias)
    checked = []
    run = fast_run(prepared, lambda *operands: checked.append(operands))
    out = run(a, b, c)
    assert checked == [] and type(out) is np.ndarray and prepared.plan(a, b, c).path == "blas"
    assert_close(out, reference(a, b, c, 0.5, 2.0, trans_a, trans_b), 30)


def test_matmul_blas_products_go_straight_to_blas():
    prepared = prepare({"algorithm.blas_minimum_fmas": 0}, kernel=MATMUL, threads=2)
    a, b, _ = operands(20, 30, 40)
    prepared._call = lambda *args, **kwargs: pytest.fail("the checked run")
    assert_close(prepared.run(a, b), reference(a, b), 30)


def test_blas_products_the_compiled_call_cannot_vouch_for_take_the_checked_run():
    prepared = prepare({"algorithm.blas_minimum_fmas": 0}, threads=2)
    a, b, _ = operands(20, 30, 40)
    checked = []
    run = fast_run(prepared, lambda *operands: checked.append(operands) or "checked")
    # numpy.matmul would return a matrix; the checked run returns an ndarray
    assert run(np.asmatrix(a), np.asmatrix(b)) == "checked"
    assert run(a, b[:29]) == "checked"  # K differs: the checked run names the operands
    assert run(a[:0], b) == "checked"  # no rows
    with pytest.raises(ValueError, match="K differs"):
        prepared.run(a, b[:29])
    assert type(prepared.run(np.asmatrix(a), np.asmatrix(b))) is np.ndarray
    assert len(checked) == 3


@pytest.mark.parametrize("bias", ["scalar", "row"])
@pytest.mark.parametrize("blas", [False, True])
def test_a_bias_of_fewer_dimensions_than_two_takes_the_compiled_call(bias, blas):
    """A model's bias is mostly [N]: through the checked run, a one-row product cost four
    times what the compiled call does."""
    values = {"algorithm.blas_minimum_fmas": 0, "algorithm.vector_blas_minimum_fmas": 0}
    prepared = prepare(values if blas else {}, threads=2, beta=2.0)
    a, b, c = operands(5, 30, 40, bias=bias)
    assert c.ndim < 2
    run = fast_run(prepared, lambda *operands: pytest.fail("the checked run"))
    assert prepared.plan(a, b, c).path == ("blas" if blas else "blocked")
    out = run(a, b, c)
    assert_close(out, reference(a, b, c, 1.0, 2.0), 30)
    if not blas:
        assert out.tobytes() == prepared.run_serial(a, b, c).tobytes()


def test_skinny_m_limit_switches_the_skinny_path():
    any_b = {"algorithm.skinny_minimum_b_elements": 0, "algorithm.row_m_limit": 0}
    check_plan({**any_b, "algorithm.skinny_m_limit": 8}, (8, 30, 40), "skinny")
    check_plan({**any_b, "algorithm.skinny_m_limit": 7}, (8, 30, 40), "blocked")
    check_plan({**any_b, "algorithm.skinny_m_limit": 8}, (9, 30, 40), "blocked")
    check_plan({**any_b, "algorithm.skinny_m_limit": 0}, (1, 30, 40), "blocked")


def test_skinny_minimum_b_elements_keeps_small_b_on_the_blocked_path():
    few = {"algorithm.skinny_m_limit": 8, "algorithm.row_m_limit": 0}
    check_plan({**few, "algorithm.skinny_minimum_b_elements": 30 * 40}, (8, 30, 40), "skinny")
    check_plan({**few, "algorithm.skinny_minimum_b_elements": 30 * 40 + 1}, (8, 30, 40),
               "blocked")
    # a skinny product left to the blocked path meets the blocked path's BLAS threshold
    blas = {**few, "algorithm.skinny_blas_minimum_fmas": 1, "algorithm.blas_minimum_fmas": 10**9}
    check_plan({**blas, "algorithm.skinny_minimum_b_elements": 0}, (8, 30, 40), "blas")
    check_plan({**blas, "algorithm.skinny_minimum_b_elements": 10**6}, (8, 30, 40), "blocked")


def test_pack_b_minimum_elements_switches_packing():
    panel = 16 * 64  # min(K, tile_k) x min(N, tile_n) with the small tiles
    shape = (20, 40, 100)
    check_plan({**SMALL_TILES, "algorithm.pack_b_minimum_elements": panel}, shape,
               "blocked_packed")
    check_plan({**SMALL_TILES, "algorithm.pack_b_minimum_elements": panel + 1}, shape, "blocked")
    check_plan({**SMALL_TILES, "algorithm.pack_b_minimum_elements": panel + 1}, shape,
               "blocked_packed", transB=1)


def test_parallel_thresholds_switch_threads():
    shape = (16, 32, 128)  # 2 x 2 tasks of 8 x 64, 65536 FMAs
    base = {**SMALL_TILES, "parallel.fmas_per_work_unit": 1}
    check_plan({**base, "parallel.minimum_tasks": 4}, shape, "blocked", threads=2)
    check_plan({**base, "parallel.minimum_tasks": 5}, shape, "blocked", threads=1)
    check_plan({**SMALL_TILES, "parallel.fmas_per_work_unit": 32768}, shape, "blocked",
               threads=2)
    check_plan({**SMALL_TILES, "parallel.fmas_per_work_unit": 32769}, shape, "blocked",
               threads=1)
    # the skinny path has its own unit: 1 x 64 x 256 is 4 strips and 16384 multiply-adds
    skinny = {**SMALL_TILES, "algorithm.skinny_minimum_b_elements": 0,
              "parallel.fmas_per_work_unit": 1}
    check_plan({**skinny, "parallel.skinny_fmas_per_work_unit": 8192}, (1, 64, 256), "skinny",
               threads=2)
    check_plan({**skinny, "parallel.skinny_fmas_per_work_unit": 8193}, (1, 64, 256), "skinny",
               threads=1)
    prepared = prepare(base, threads=2)
    a, b, _ = operands(*shape)
    assert prepared.plan_product(*shape, serial=True).threads == 1
    assert prepared.plan_product(*map(np.int64, shape)) == prepared.plan_product(*shape)
    assert prepared.run(a, b).tobytes() == prepared.run_serial(a, b).tobytes()


def test_plan_reports_the_form():
    a, b, _ = operands(5, 6, 7, 1, 1)
    assert prepare(transA=1, transB=1).plan(a, b).form == "TT"
    assert prepare(transB=1).plan(a.T, b).form == "NT"
    half = prepare({}, "FLOAT16").plan(a.T.astype(np.float16), b.T.astype(np.float16))
    assert half.form == "float16 NN, converted on 1/1/1 threads" and half.elements == 35
    # the conversions' threads are part of the plan: a calibration compares plans
    wide = prepare({"conversion.parallel_minimum_elements": 1}, "FLOAT16", threads=2)
    assert wide.plan(a.T.astype(np.float16), b.T.astype(np.float16)).form.endswith(
        "converted on 2/2/2 threads")


# -- MatMul ---------------------------------------------------------------------------------

MATMUL_SHAPES = [((4,), (4,)), ((4,), (4, 3)), ((2, 4), (4,)), ((6, 7), (7, 8)),
                 ((3, 2, 4), (4, 5)), ((4,), (2, 4, 5)), ((2, 3, 4), (4,)),
                 ((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 4), (2, 1, 4, 6)), ((2, 9, 70), (2, 70, 33)),
                 ((0, 3), (3, 4)), ((2, 0, 3), (3, 4)), ((3, 0), (0, 2))]


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES)
@pytest.mark.parametrize("values", [{}, BLOCKED, SKINNY, {"algorithm.blas_minimum_fmas": 0}],
                         ids=["default", "blocked", "skinny", "blas"])
def test_matmul_matches_numpy(a_shape, b_shape, values):
    a, b = matrix(a_shape, seed=1), matrix(b_shape, seed=2)
    prepared = prepare(values, kernel=MATMUL, threads=3)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    out = prepared.run(a, b)
    assert out.shape == expected.shape and out.dtype == np.float32
    assert_close(np.asarray(out), np.asarray(expected), a_shape[-1])
    plan = prepared.plan(a, b)
    assert plan.elements == np.asarray(expected).size
    if plan.path != "blas":  # every compiled path gives the bits of the serial blocked one
        assert np.asarray(prepared.run_serial(a, b)).tobytes() == np.asarray(out).tobytes()


def test_matmul_batch_against_one_matrix_is_one_product():
    a, b = matrix((6, 8, 40), seed=1), matrix((40, 70), seed=2)
    prepared = prepare(BLOCKED, kernel=MATMUL, threads=4)
    plan = prepared.plan(a, b)
    assert (plan.path, plan.threads, plan.elements, plan.form) == ("blocked", 4, 6 * 8 * 70,
                                                                   "batch 6 as rows")
    out = prepared.run(a, b)
    gemm = prepare(BLOCKED, threads=1)
    assert out.tobytes() == np.stack([gemm.run(a[i], b) for i in range(6)]).tobytes()
    assert prepare(BLOCKED, kernel=MATMUL).plan(a, b[None]).form == "batch 6"
    # the same through the checked route (run_serial), and for a strided A (copied)
    assert out.tobytes() == prepared.run_serial(a, b).tobytes()
    strided = np.ascontiguousarray(np.swapaxes(a, 0, 1)).swapaxes(0, 1)
    assert prepared.run(strided, b).tobytes() == out.tobytes()
    assert prepared.run(a[None], b).shape == (1, 6, 8, 70)


@pytest.mark.parametrize("element_type,dtype", [("DOUBLE", np.float64), ("FLOAT16", np.float16)])
def test_matmul_other_element_types(element_type, dtype):
    a, b = matrix((3, 5, 20), dtype, 1), matrix((20, 9), dtype, 2)
    out = prepare(BLOCKED, element_type, kernel=MATMUL).run(a, b)
    assert out.dtype == dtype and out.shape == (3, 5, 9)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=2**-10,
                               atol=1e-3 if dtype == np.float16 else 1e-12)


# -- errors ---------------------------------------------------------------------------------

def test_bad_shapes_are_clear_errors():
    prepared = prepare()
    with pytest.raises(ValueError, match=r"A of shape \(2, 3\) .* B of shape \(4, 5\).*K differs"):
        prepared.run(matrix((2, 3)), matrix((4, 5)))
    with pytest.raises(ValueError, match=r"transA=1"):
        prepare(transA=1).run(matrix((2, 3)), matrix((3, 5)))
    with pytest.raises(ValueError, match=r"must be 2-D.*\(2, 3, 4\)"):
        prepared.run(matrix((2, 3, 4)), matrix((4, 5)))
    with pytest.raises(ValueError, match=r"must be 2-D.*B of shape \(3,\)"):
        prepared.run(matrix((2, 3)), matrix((3,)))
    with pytest.raises(ValueError, match=r"must be 2-D"):
        prepared.plan(matrix((3,)), matrix((3, 5)))
    for c_shape in ((3,), (2, 4), (5, 2, 5), (3, 1)):
        with pytest.raises(ValueError, match=r"C of shape .* not unidirectionally broadcastable "
                                             r"to \(M, N\) = \(2, 5\)"):
            prepared.run(matrix((2, 3)), matrix((3, 5)), matrix(c_shape))
    with pytest.raises(TypeError, match="expected element type float32, got float64"):
        prepared.run(matrix((2, 3), np.float64), matrix((3, 5)))
    with pytest.raises(ValueError, match=r"MatMul: A of shape \(2, 3\) and B of shape \(4, 5\)"):
        prepare(kernel=MATMUL).run(matrix((2, 3)), matrix((4, 5)))
    with pytest.raises(ValueError, match=r"batch dimensions"):
        prepare(kernel=MATMUL).run(matrix((2, 3, 4)), matrix((3, 4, 5)))
    with pytest.raises(ValueError, match=r"at least 1 dimension"):
        prepare(kernel=MATMUL).run(matrix(()), matrix((3,)))


def test_bad_attributes_are_clear_errors():
    with pytest.raises(TypeError, match="unknown attributes"):
        GEMM.prepare("FLOAT", gamma=1.0)
    with pytest.raises(ValueError, match="transA must be 0 or 1"):
        GEMM.prepare("FLOAT", transA=2)
    with pytest.raises(TypeError, match="alpha must be a number"):
        GEMM.prepare("FLOAT", alpha="1")
    with pytest.raises(TypeError, match="MatMul takes no attributes"):
        MATMUL.prepare("FLOAT", alpha=1.0)
    for kernel in (GEMM, MATMUL):
        with pytest.raises(ValueError, match="pool: 'openmp' or none, got 'blas'"):
            kernel.prepare("FLOAT", pool="blas")


@pytest.mark.parametrize("values,fields", [
    ({"algorithm.tile_m": 0}, {"algorithm.tile_m"}),
    ({"algorithm.tile_n": -64}, {"algorithm.tile_n"}),
    ({"algorithm.tile_k": 0, "parallel.minimum_tasks": 0},
     {"algorithm.tile_k", "parallel.minimum_tasks"}),
    ({"algorithm.tile_m": 10}, {"algorithm.tile_m"}),
    ({"algorithm.tile_n": 100, "algorithm.tile_k": 30}, {"algorithm.tile_n", "algorithm.tile_k"}),
    ({"algorithm.skinny_m_limit": 65}, {"algorithm.skinny_m_limit"}),
    ({"algorithm.tile_m": 4, "algorithm.skinny_m_limit": 8}, {"algorithm.skinny_m_limit"}),
    ({"parallel.fmas_per_work_unit": 0}, {"parallel.fmas_per_work_unit"}),
    ({"algorithm.blas_minimum_fmas": 1.5}, {"algorithm.blas_minimum_fmas"}),
    ({"algorithm.tile_m": True}, {"algorithm.tile_m"}),
    ({"conversion.parallel_minimum_elements": 1}, {"conversion.parallel_minimum_elements"}),
])
def test_invalid_configs_raise_tuning_validation_errors(values, fields):
    with pytest.raises(TuningValidationError) as error:
        Gemm(selected_variant()).configure("FLOAT", values)
    assert {problem.field for problem in error.value.problems} == fields


def test_consistent_configs_are_accepted():
    for element_type in ("FLOAT", "DOUBLE", "FLOAT16"):
        config = GEMM.configure(element_type, {"algorithm.tile_m": 4 * MR, "algorithm.tile_n": NR,
                                               "algorithm.tile_k": KU})
        assert (config.tile_m, config.tile_n, config.tile_k) == (4 * MR, NR, KU)
    assert GEMM.configure("FLOAT16", {"conversion.parallel_minimum_elements": 1})


def test_element_types_and_keys():
    assert GEMM.element_types == MATMUL.element_types == (1, 11, 10, 16)
    assert GEMM.tuning_key("FLOAT").kernel == "Gemm"
    assert MATMUL.tuning_key(np.float16).kernel == "MatMul"
    assert GEMM.config_type(11) is MATMUL.config_type(1)


@pytest.mark.parametrize("m,k,n", list(itertools.product((1, 5), (1, 7), (1, 66))))
def test_tiny_products(m, k, n):
    a, b, c = operands(m, k, n, bias="scalar")
    for values in ({}, BLOCKED, PACKED, SKINNY):
        assert_close(prepare(values).run(a, b, c), reference(a, b, c), k)


# -- the column path --------------------------------------------------------------------------

@FLOAT_TYPES
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 40, 3), (5, 3, 1), (63, 8, 16), (64, 16, 2),
                                   (65, 17, 1), (300, 100, 5), (4097, 8, 3)])
@TRANSPOSITIONS
@FORMS_OF_C
def test_few_columns_take_the_column_path_with_the_bits_of_the_blocked_path(
        element_type, dtype, m, k, n, trans_a, trans_b, alpha, bias):
    """Blocks of 64 rows, a last one of fewer, on one to several threads: every run gives
    ``run_serial``'s bits (the blocked path on one thread)."""
    a, b, c = operands(m, k, n, trans_a, trans_b, bias, dtype)
    outputs = []
    for threads in (1, 2, 3):
        prepared = prepare({**PARALLEL, "algorithm.skinny_m_limit": 0,
                            "algorithm.column_n_limit": 16}, element_type, threads,
                           alpha=alpha, transA=trans_a, transB=trans_b)
        plan = prepared.plan(a, b, c)
        assert plan.path == "column"
        assert plan.threads == min(threads, -(-m // 64))
        outputs += [prepared.run(a, b, c), prepared.run_serial(a, b, c)]
    assert all(out.tobytes() == outputs[0].tobytes() for out in outputs)
    assert_close(outputs[0], reference(a, b, c, alpha, 1.0, trans_a, trans_b), k, dtype)


# -- the panel path ---------------------------------------------------------------------------

@FLOAT_TYPES
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (5, 3, 9), (63, 8, 16), (64, 16, 17), (65, 17, 32),
                                   (300, 100, 33), (4097, 8, 64), (7, 256, 48)])
@TRANSPOSITIONS
@FORMS_OF_C
def test_one_panel_of_b_takes_the_panel_path_with_the_bits_of_the_blocked_path(
        element_type, dtype, m, k, n, trans_a, trans_b, alpha, bias):
    """Widths of 16, 32 and 64 columns, each filled or not, groups of four rows and a last
    one of fewer, on one to several threads: every run gives ``run_serial``'s bits."""
    a, b, c = operands(m, k, n, trans_a, trans_b, bias, dtype)
    outputs = []
    for threads in (1, 2, 3):
        prepared = prepare(PANEL, element_type, threads, alpha=alpha, transA=trans_a,
                           transB=trans_b)
        plan = prepared.plan(a, b, c)
        assert plan.path == "panel"
        outputs += [prepared.run(a, b, c), prepared.run_serial(a, b, c)]
    assert all(out.tobytes() == outputs[0].tobytes() for out in outputs)
    assert_close(outputs[0], reference(a, b, c, alpha, 1.0, trans_a, trans_b), k, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", [(1, 5, 16), (7, 8, 16), (8, 32, 16), (9, 3, 32), (63, 17, 33),
                                   (4097, 8, 64), (24, 1, 9)])
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1)])
def test_panel_groups_of_four_and_eight_rows_give_the_bits_of_the_blocked_path(
        dtype, m, k, n, trans_a, trans_b):
    """The compiled panel path in either group height (eight rows at 16 columns, four
    wider), rows read in place or packed, a last group of fewer: the blocked path's bits on
    this process's variant."""
    module = load_module("gemm", selected_variant())
    a, b, c = operands(m, k, n, trans_a, trans_b, "row", dtype)
    c = c.reshape(1, n)
    one = dtype(1)
    expected = np.empty((m, n), dtype)
    module.blocked(a, b, c, expected, one, one, False, bool(trans_a), bool(trans_b), 8, 64, 16,
                   False, 1)
    for threads in (1, 2, 3):
        out = np.full((m, n), np.nan, dtype)
        module.panel(a, b, c, out, one, one, False, bool(trans_a), bool(trans_b), threads)
        assert out.tobytes() == expected.tobytes(), threads


@pytest.mark.parametrize(("limit", "columns", "depth", "path"), [
    (64, 64, 256, "panel"), (64, 65, 16, "blocked"), (64, 16, 257, "blocked"),
    (16, 16, 16, "panel"), (16, 17, 16, "blocked"), (0, 1, 16, "blocked")])
def test_the_panel_limit_and_tile_k_say_which_products_take_the_panel_path(
        limit, columns, depth, path):
    """An MLP's hidden layer: the panel path up to algorithm.panel_n_limit columns of op(B)
    and algorithm.tile_k (256) rows of it."""
    values = {"algorithm.blas_minimum_fmas": 10**15, "algorithm.panel_blas_minimum_fmas": 10**15,
              "algorithm.column_n_limit": 0, "algorithm.panel_n_limit": limit}
    assert prepare(values, kernel=MATMUL).plan(
        matrix((4096, depth)), matrix((depth, columns))).path == path
    assert GEMM.configure("FLOAT", {}).panel_n_limit == 32
    with pytest.raises(ValueError, match="panel_n_limit"):
        GEMM.configure("FLOAT", {"algorithm.panel_n_limit": 65})


@pytest.mark.parametrize(("limit", "columns", "path"), [
    (16, 1, "column"), (16, 16, "column"), (16, 17, "blocked"), (0, 1, "blocked"),
    (40, 40, "column")])
def test_the_column_limit_says_which_products_take_the_column_path(limit, columns, path):
    """A regressor's last layer (one column), a classifier's scores (a few): the column path
    up to algorithm.column_n_limit columns."""
    values = {"algorithm.blas_minimum_fmas": 10**15, "algorithm.column_n_limit": limit,
              "algorithm.column_blas_minimum_fmas": 10**15, "algorithm.panel_n_limit": 0}
    assert prepare(values, kernel=MATMUL).plan(
        matrix((4096, 16)), matrix((16, columns))).path == path
    assert GEMM.configure("FLOAT", {}).column_n_limit == 8


# -- the row path -----------------------------------------------------------------------------

#: the row path for one or two rows of any B
ROW = {**PARALLEL, "algorithm.row_m_limit": STRIP_ROWS,
       "algorithm.skinny_minimum_b_elements": 10**12}


@FLOAT_TYPES
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 8, 32), (2, 32, 16), (1, 16, 1), (2, 100, 100),
                                   (1, 7, 300), (2, 130, 65)])
@TRANSPOSITIONS
@FORMS_OF_C
def test_one_or_two_rows_take_the_row_path_with_the_bits_of_the_blocked_path(
        element_type, dtype, m, k, n, trans_a, trans_b, alpha, bias):
    """On the builds with and without OpenMP, through the small products' entry and the
    checked run, Relu included: ``run_serial``'s bits."""
    a, b, c = operands(m, k, n, trans_a, trans_b, bias, dtype)
    for relu in (False, True):
        outputs = []
        for threads in (1, 2):
            prepared = prepare(ROW, element_type, threads, alpha=alpha, transA=trans_a,
                               transB=trans_b, activation="Relu" if relu else None)
            plan = prepared.plan(a, b, c)
            assert (plan.path, plan.threads) == ("row", 1)
            outputs += [prepared.run(a, b, c), prepared.run_checked(a, b, c),
                        prepared.run_serial(a, b, c)]
        assert all(out.tobytes() == outputs[0].tobytes() for out in outputs)
        expected = reference(a, b, c, alpha, 1.0, trans_a, trans_b)
        assert_close(outputs[0], np.maximum(expected, 0) if relu else expected, k, dtype)


def test_the_row_export_refuses_more_rows_than_it_computes():
    """Its A of one or two rows is transposed; a third row would be read out of place."""
    module = load_module("gemm", selected_variant())
    a, b, c = operands(STRIP_ROWS + 1, 4, 5, bias="row2d")
    out = np.empty((STRIP_ROWS + 1, 5), np.float32)
    with pytest.raises(ValueError, match="one or two rows"):
        module.row(a, b, c, out, np.float32(1), np.float32(1), False, False, False)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_large_outputs_of_the_row_path_take_its_export(trans_b):
    """An output of 128 KiB or more comes from the output pool and goes to ``row`` itself
    (the blocked path would give the same bits: the calls are counted)."""
    a, b, c = operands(2, 3, 20_000, 0, trans_b, "row")
    assert outputs.INTERMEDIATE_MINIMUM_BYTES <= 2 * 20_000 * 4
    prepared = prepare(ROW, threads=1, transB=trans_b)
    assert prepared.plan(a, b, c).path == "row"
    calls, row = [], prepared._row
    prepared._row = lambda *arguments: calls.append(arguments) or row(*arguments)
    assert prepared.run(a, b, c).tobytes() == prepared.run_serial(a, b, c).tobytes()
    assert len(calls) == 1


@pytest.mark.parametrize(("values", "shape", "path"), [
    ({}, (1, 8, 32), "row"), ({}, (2, 32, 16), "row"), ({}, (1, 16, 1), "row"),
    ({}, (3, 8, 32), "panel"), ({}, (1, 128, 127), "row"), ({}, (1, 128, 128), "skinny"),
    ({"algorithm.row_m_limit": 1}, (2, 8, 32), "panel"),
    ({"algorithm.row_m_limit": 1}, (1, 8, 32), "row"),
    ({"algorithm.row_m_limit": 0}, (1, 8, 32), "panel"),
    ({"algorithm.skinny_minimum_b_elements": 8 * 32}, (1, 8, 32), "skinny"),
    ({"algorithm.skinny_minimum_b_elements": 0}, (1, 8, 32), "skinny")])
def test_the_row_limit_and_skinny_minimum_b_say_which_products_take_the_row_path(
        values, shape, path):
    """A batch of one through an MLP: one or two rows whose B the skinny path leaves (fewer
    than algorithm.skinny_minimum_b_elements elements), whatever the threads."""
    plan = check_plan(values, shape, path)  # prepared for two threads
    assert plan.threads == 1 or path != "row"
    assert GEMM.configure("FLOAT", {}).row_m_limit == STRIP_ROWS
    with pytest.raises(ValueError, match="row_m_limit"):
        GEMM.configure("FLOAT", {"algorithm.row_m_limit": STRIP_ROWS + 1})


# -- a constant B ---------------------------------------------------------------------------

#: the skinny path of real strips: SW-wide runs over tasks narrower and wider than a strip
STRIPS = {**SKINNY, "algorithm.tile_n": 64}


def bound_to_a_constant(values, element_type, dtype, threads, shape, trans_a, trans_b, bias,
                        pack, monkeypatch):
    """Gemm (alpha, beta, Relu) and MatMul (untransposed, with a row bias at most), each
    prepared with ``values`` and bound to the constant B of the operands of ``shape``: the
    prepared kernel, its bound run, the inputs, and the arguments of each call of its
    ``pack`` (``pack_strips`` or ``pack_blocks``)."""
    a, b, c = operands(*shape, trans_a, trans_b, bias, dtype)
    inputs = (a, b) if c is None else (a, b, c)
    for kernel, attributes in ((GEMM, {"alpha": 0.5, "beta": -2.0, "transA": trans_a,
                                       "transB": trans_b, "activation": "Relu"}),
                               (MATMUL, {"bias": 1} if bias == "row" else {})):
        if kernel is MATMUL and (trans_a or trans_b or bias not in (None, "row")):
            continue
        prepared = prepare(values, element_type, threads, kernel, **attributes)
        gemm = getattr(prepared, "gemm", prepared)
        packs, original = [], getattr(gemm, pack)
        monkeypatch.setattr(gemm, pack, lambda *args, record=packs, original=original:
                            record.append(args) or original(*args))
        yield prepared, prepared.for_constant(1, b), inputs, packs


@pytest.mark.parametrize("rows", [1, 2, 3, 8])
@FLOAT_TYPES
@TRANSPOSITIONS
@pytest.mark.parametrize("bias", [None, "row", "column", "full"])
@pytest.mark.parametrize("tile_n", [64, 320])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_constant_b_is_packed_into_strips_once_with_the_skinny_bits(
        rows, element_type, dtype, trans_a, trans_b, bias, tile_n, threads, monkeypatch):
    """for_constant binds a B the skinny path takes: its products of one or two rows read
    B's strips, packed at the first one and never again, with the bits of the unbound run
    (and of the serial one); another B, or more rows, take the unbound run."""
    m, k, n = rows, 37, 4 * SW + 75  # five strips, the last partial; tiles cross strips
    for prepared, bound, inputs, packs in bound_to_a_constant(
            {**STRIPS, "algorithm.tile_n": tile_n}, element_type, dtype, threads, (m, k, n),
            trans_a, trans_b, bias, "pack_strips", monkeypatch):
        a, b = inputs[:2]
        assert prepared.plan(*inputs).path == "skinny"
        expected = prepared.run(*inputs).tobytes()
        assert not packs
        for _ in range(3):
            assert bound(*inputs).tobytes() == expected
        assert len(packs) == (rows <= STRIP_ROWS)
        assert prepared.run_serial(*inputs).tobytes() == expected
        other = b.copy()
        assert bound(inputs[0], other, *inputs[2:]).tobytes() == expected
        taller = np.concatenate([a] * 5, axis=1 if trans_a else 0)
        assert (bound(taller, *inputs[1:2]).tobytes()
                == prepared.run(taller, *inputs[1:2]).tobytes())
        assert len(packs) == (rows <= STRIP_ROWS)


def test_strips_are_made_only_of_a_b_worth_them():
    """None for A, for a B of another type, shape or layout, for one smaller than
    algorithm.skinny_minimum_b_elements, where the skinny path is off, and for rows of B
    shorter than STRIPS_MINIMUM_ROW_BYTES read as stored (transposed, any length)."""
    b = matrix((64, STRIPS_MINIMUM_ROW_BYTES // 4 + 10))
    prepared = prepare()
    assert prepared.strips_of(1, b) is not None
    assert prepared.strips_of(0, b) is None
    assert prepared.strips_of(1, b.astype(np.float64)) is None
    assert prepare(element_type="DOUBLE").strips_of(1, b) is None
    assert prepare(element_type="DOUBLE").strips_of(1, b.astype(np.float64)) is not None
    assert prepared.strips_of(1, b.ravel()) is None
    assert prepared.strips_of(1, np.asfortranarray(b)) is None
    assert prepared.strips_of(1, b[:, :300]) is None
    short = np.ascontiguousarray(b[:, :300])
    assert prepared.strips_of(1, short) is None
    assert prepare(transB=1).strips_of(1, short) is not None
    assert prepare({"algorithm.skinny_minimum_b_elements": b.size + 1}).strips_of(1, b) is None
    assert prepare({"algorithm.skinny_m_limit": 0}).strips_of(1, b) is None


@pytest.mark.parametrize("values,pack,rows,threads", [
    (STRIPS, "pack_strips", 2, 1),
    (PACKED, "pack_blocks", 40, 1),
    (PACKED, "pack_blocks", 8 * WORKER_TASKS_PER_THREAD * 2 + 5, 2)])  # the workers' panels
def test_b_is_packed_onto_a_cache_line(values, pack, rows, threads, monkeypatch):
    # the paths read B's packed copy most, and a load across two cache lines costs two;
    # malloc's blocks start 16 bytes apart, so eight sizes of B make a chance alignment of
    # every copy unlikely
    for n in range(4 * SW + 75, 4 * SW + 75 + 8 * 16, 16):  # widths that take strips
        for prepared, bound, inputs, packs in bound_to_a_constant(
                values, "FLOAT", np.float32, threads, (rows, 37, n), 0, 0, None, pack,
                monkeypatch):
            bound(*inputs)
            prepared.run(*inputs)
            assert packs
            assert all(args[1].ctypes.data % ALIGNMENT == 0 for args in packs)


def test_panels_are_made_only_of_a_b_worth_them():
    """None for A, for a B of another type, shape or layout, and for one of fewer elements
    than algorithm.pack_b_minimum_elements (which the packed path packs at most with
    transB); for_constant binds a B worth strips or panels, and nothing else."""
    b = matrix((64, 256))
    prepared = prepare()
    assert prepared.panels_of(1, b) is not None and prepared.panels_of(0, b) is None
    assert prepared.panels_of(1, b.astype(np.float64)) is None
    assert prepare(element_type="DOUBLE").panels_of(1, b.astype(np.float64)) is not None
    assert prepared.panels_of(1, b.ravel()) is None
    assert prepared.panels_of(1, np.asfortranarray(b)) is None
    assert prepared.panels_of(1, b[:, :200]) is None
    small = {"algorithm.pack_b_minimum_elements": b.size + 1}
    assert prepare(small).panels_of(1, b) is None
    assert prepare({"algorithm.pack_b_minimum_elements": 0}).panels_of(1, b[:1, :1].copy())
    for kernel in (GEMM, MATMUL):
        assert prepare(kernel=kernel).for_constant(1, b) is not None
        assert prepare(small, kernel=kernel).for_constant(1, b) is None  # no strips either
        assert prepare(kernel=kernel).for_constant(0, b) is None


@pytest.mark.parametrize("rows", [20, 40])
@FLOAT_TYPES
@TRANSPOSITIONS
@pytest.mark.parametrize("bias", [None, "row", "full"])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_constant_b_is_packed_into_panels_once_with_the_packed_bits(
        rows, element_type, dtype, trans_a, trans_b, bias, threads, monkeypatch):
    """for_constant binds a B the packed path takes: its products run on B's panels, packed
    at the first product of a grid and never again, with the bits of the unbound run (and
    of the serial one), in one call or, with 40 rows on two threads, on the workers where
    the variant has them; another B takes the unbound run."""
    m, k, n = rows, 70, 3 * NR + 13  # several k-tiles and n-tiles, the last ones partial
    for prepared, bound, inputs, packs in bound_to_a_constant(
            PACKED, element_type, dtype, threads, (m, k, n), trans_a, trans_b, bias,
            "pack_blocks", monkeypatch):
        b = inputs[1]
        assert prepared.plan(*inputs).path == "blocked_packed"
        expected = prepared.run(*inputs).tobytes()
        packs.clear()  # the workers pack an unbound B at every product
        for _ in range(3):
            assert bound(*inputs).tobytes() == expected
        assert len(packs) == 1
        assert prepared.run_serial(*inputs).tobytes() == expected
        assert bound(inputs[0], b.copy(), *inputs[2:]).tobytes() == expected
        assert sum(args[0] is b for args in packs) == 1


@pytest.mark.parametrize("kernel", [GEMM, MATMUL])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_constant_b_meets_blas_at_its_own_threshold(kernel, threads):
    """A bound B's products of more rows than the skinny path takes go to BLAS from
    algorithm.packed_blas_minimum_fmas, any other B's from algorithm.blas_minimum_fmas: the
    plan of the bound B says which, and the bound run takes that path (its bits are those
    of the unbound run prepared to take it)."""
    m, k, n = 24, 64, 2 * NR
    fmas = m * k * n
    a, b, _ = operands(m, k, n)
    batched = a.reshape(2, m // 2, k)  # MatMul's batch of A: one product of all its rows
    for packed_blas, blas, bound_path in ((fmas, fmas + 1, "blas"),
                                          (fmas + 1, fmas, "blocked_packed")):
        values = {**PACKED, "algorithm.packed_blas_minimum_fmas": packed_blas,
                  "algorithm.blas_minimum_fmas": blas}
        prepared = prepare(values, threads=threads, kernel=kernel)
        unbound_path = "blocked_packed" if bound_path == "blas" else "blas"
        assert prepared.plan(a, b).path == unbound_path
        bound = prepared.for_constant(1, b)
        assert prepared.plan(a, b).path == bound_path
        assert prepared.plan(a, b.copy()).path == unbound_path
        like_bound = prepare({**values, "algorithm.blas_minimum_fmas": packed_blas},
                             threads=threads, kernel=kernel)
        assert like_bound.plan(a, b).path == bound_path
        assert bound(a, b).tobytes() == like_bound.run(a, b).tobytes()
        if kernel is MATMUL:
            assert prepared.plan(batched, b).path == bound_path
            assert bound(batched, b).tobytes() == like_bound.run(batched, b).tobytes()


def test_the_avx_variants_keep_a_constant_b_off_blas_up_to_2_to_the_26():
    """The packed path of x86_64_v3 and x86_64_v4 on a constant B's panels beats BLAS to
    larger products than the baseline's (docs/kernels.md): their default threshold is
    their own, far above any other B's."""
    for kernel in (GEMM, MATMUL):
        for variant in ("x86_64_v3", "x86_64_v4"):
            defaults = type(kernel)(variant).schema("FLOAT").defaults
            assert defaults.packed_blas_minimum_fmas == 2 ** 26
            assert defaults.blas_minimum_fmas <= 2 ** 21
        assert type(kernel)("baseline").schema("FLOAT").defaults.packed_blas_minimum_fmas \
            == 2 ** 16


def test_panels_are_packed_per_tile_of_columns_and_only_for_the_packed_path(monkeypatch):
    """A product whose grid halves the tile of columns (fewer tasks than threads) packs
    panels of its own; products of the skinny and the BLAS paths pack none."""
    a, b, _ = operands(16, 64, 4 * NR)
    prepared = prepare({**PACKED, "algorithm.tile_m": 64, "algorithm.tile_n": 4 * NR},
                       threads=2)
    packs = []
    monkeypatch.setattr(prepared, "pack_blocks", lambda *args, pack=prepared.pack_blocks:
                        packs.append(args[5]) or pack(*args))
    bound = prepared.for_constant(1, b)
    assert bound(a, b).tobytes() == prepared.run(a, b).tobytes()  # one task, halved to two
    assert bound(a[:4], b).tobytes() == prepared.run(a[:4], b).tobytes()
    assert packs == [2 * NR]
    tall = np.concatenate([a] * 8)
    assert bound(tall, b).tobytes() == prepared.run(tall, b).tobytes()
    assert packs == [2 * NR, 4 * NR]
    for rows in range(1, 2 * REMEMBERED_GRIDS + 2):  # grids forgotten, panels kept
        assert bound(tall[:rows], b).tobytes() == prepared.run(tall[:rows], b).tobytes()
    assert packs == [2 * NR, 4 * NR]
    for values in (SKINNY, {**PACKED, "algorithm.blas_minimum_fmas": 0,
                            "algorithm.packed_blas_minimum_fmas": 0}):
        other = prepare(values, threads=2)
        monkeypatch.setattr(other, "pack_blocks", lambda *args: packs.append(args))
        assert other.for_constant(1, b)(a, b).tobytes() == other.run(a, b).tobytes()
    assert len(packs) == 2
    assert prepare(kernel=MATMUL).for_constant(1, b[None]) is None


def _region_calls(gemm, dtype):
    """Every parallel export of the OpenMP build on operands its threads share: (name, the
    operands, a call on ``threads``)."""
    one = dtype.type(1)
    none = np.empty((0, 0), dtype)

    def product(m, k, n, trans_b=False, bias=True):
        a = matrix((m, k), dtype)
        b = matrix((n, k) if trans_b else (k, n), dtype, 1)
        c = matrix((1, n), dtype, 2) if bias else none
        return a, b, c, np.empty((m, n), dtype)

    calls = []
    for trans_b in (False, True):
        for pack in (False, True):
            a, b, c, out = product(64, 256, 256, trans_b)
            calls.append((f"blocked, pack {pack}, transB {trans_b}", (a, b, c, out),
                          lambda t, a=a, b=b, c=c, out=out, p=pack, tb=trans_b: gemm.blocked(
                              a, b, c, out, one, one, False, False, tb, 8, 64, 64, p, t)))
        for m in (2, 8):
            a, b, c, out = product(m, 256, 1024, trans_b)
            calls.append((f"skinny, {m} rows, transB {trans_b}", (a, b, c, out),
                          lambda t, a=a, b=b, c=c, out=out, tb=trans_b: gemm.skinny(
                              a, b, c, out, one, one, False, False, tb, 64, t)))
        a, b, c, out = product(4096, 64, 4, trans_b)
        calls.append((f"column, transB {trans_b}", (a, b, c, out),
                      lambda t, a=a, b=b, c=c, out=out, tb=trans_b: gemm.column(
                          a, b, c, out, one, one, False, False, tb, t)))
        for columns in (16, 24):  # groups of eight rows and of four
            a, b, c, out = product(4096, 32, columns, trans_b)
            calls.append((f"panel, {columns} columns, transB {trans_b}", (a, b, c, out),
                          lambda t, a=a, b=b, c=c, out=out, tb=trans_b: gemm.panel(
                              a, b, c, out, one, one, False, False, tb, t)))
    a, b, c, out = product(64, 256, 256)
    tile_m, tile_n, blocks, _, rows, width = gemm.blocked_layout(64, 256, 256, 8, 64, 64,
                                                                  True, 2)
    packed = np.empty((rows, width), dtype)
    gemm.pack_blocks(b, packed, False, 256, 256, tile_n, 64, 0, blocks)
    calls.append(("blocked_panels", (a, packed, c, out),
                  lambda t: gemm.blocked_panels(a, packed, c, out, one, one, False, False,
                                                tile_m, tile_n, 64, t)))
    a, b, c, out = product(1, 256, 1024)
    strips = np.empty((-(-1024 // SW) * 256, SW), dtype)
    gemm.pack_strips(b, strips, False, 256, 1024)
    calls.append(("skinny_strips", (a, strips, c, out),
                  lambda t: gemm.skinny_strips(a, strips, c, out, one, one, False, False, 64, t)))
    return calls


@FLOAT_TYPES
def test_parallel_regions_leave_shared_reference_counts_alone(element_type, dtype):
    """The OpenMP build counts references without atomics (gemm_pythran.py's rules): a
    region that made a view of an array its threads share would race on that array's
    count, and a count that lost an update either never returns to zero (the operand's
    reference count grows) or reaches it early. Many two-thread calls of every parallel
    export leave each operand's count as it was and give the one-thread bits."""
    gemm = load_module("gemm")
    for name, operands_, call in _region_calls(gemm, np.dtype(dtype)):
        out = operands_[-1]
        call(1)
        expected = out.tobytes()
        counts = [sys.getrefcount(x) for x in operands_]
        for _ in range(300):
            assert call(2) == 2, name
        assert [sys.getrefcount(x) for x in operands_] == counts, name
        assert out.tobytes() == expected, name
