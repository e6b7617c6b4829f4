"""Gemm and MatMul against numpy: shapes, attributes, bias forms, paths and thresholds."""

from __future__ import annotations

import numpy as np
import pytest

from kerneltune.errors import TuningValidationError
from kerneltune.kernels import library

GEMM = library()["Gemm"]
MATMUL = library()["MatMul"]
RNG = np.random.default_rng(7)
#: force the compiled paths (never BLAS) and parallel task grids on small products
COMPILED = {"algorithm.blas_minimum_fmas": 10**15, "parallel.fmas_per_work_unit": 1,
            "algorithm.tile_m": 8, "algorithm.tile_n": 64, "algorithm.tile_k": 16,
            "algorithm.pack_b_minimum_elements": 10**9}


def matrix(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def reference(a, b, c, alpha, beta, trans_a, trans_b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    out = alpha * ((a64.T if trans_a else a64) @ (b64.T if trans_b else b64))
    return out + beta * c.astype(np.float64) if c is not None else out


SHAPES = [(1, 5, 7), (3, 64, 65), (8, 33, 130), (9, 17, 64), (64, 64, 64), (70, 130, 200),
          (5, 300, 3)]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("bias", ["none", "scalar", "row", "column", "full"])
def test_gemm_against_numpy_on_every_path(m, k, n, trans_a, trans_b, bias):
    a = matrix((k, m) if trans_a else (m, k))
    b = matrix((n, k) if trans_b else (k, n))
    c = {"none": None, "scalar": matrix(()), "row": matrix((n,)), "column": matrix((m, 1)),
         "full": matrix((m, n))}[bias]
    expected = reference(a, b, c, 0.5, 2.0, trans_a, trans_b)
    for values in ({}, COMPILED, {**COMPILED, "algorithm.pack_b_minimum_elements": 0},
                   {**COMPILED, "algorithm.skinny_m_limit": 0}):
        prepared = GEMM.prepare("FLOAT", GEMM.configure("FLOAT", values), threads=3,
                                alpha=0.5, beta=2.0, transA=trans_a, transB=trans_b)
        args = (a, b) if c is None else (a, b, c)
        np.testing.assert_allclose(prepared.run(*args), expected, rtol=1e-4, atol=1e-4)
        if values:
            assert prepared.run(*args).tobytes() == prepared.run_serial(*args).tobytes()


def test_paths_follow_the_thresholds():
    a, b = matrix((64, 64)), matrix((64, 64))
    default = GEMM.prepare("FLOAT", threads=2)
    assert default.plan(a, b).path == "blas"
    compiled = GEMM.prepare("FLOAT", GEMM.configure("FLOAT", COMPILED), threads=2)
    assert compiled.plan(a, b).path == "blocked" and compiled.plan(a, b).threads == 2
    packed = GEMM.prepare("FLOAT", GEMM.configure(
        "FLOAT", {**COMPILED, "algorithm.pack_b_minimum_elements": 1}), threads=2)
    assert packed.plan(a, b).path == "blocked_packed"
    skinny = GEMM.prepare("FLOAT", GEMM.configure(
        "FLOAT", {**COMPILED, "algorithm.skinny_m_limit": 64}), threads=2)
    assert skinny.plan(a, b).path == "skinny"
    few_tasks = GEMM.prepare("FLOAT", GEMM.configure(
        "FLOAT", {**COMPILED, "parallel.minimum_tasks": 1000}), threads=2)
    assert few_tasks.plan(a, b).threads == 1
    for prepared in (default, compiled, packed, skinny, few_tasks):
        np.testing.assert_allclose(prepared.run(a, b), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("element_type,dtype,tolerance",
                         [("DOUBLE", np.float64, 1e-10), ("FLOAT16", np.float16, 2e-2)])
def test_other_element_types(element_type, dtype, tolerance):
    a, b, c = matrix((9, 20), dtype), matrix((20, 70), dtype), matrix((70,), dtype)
    prepared = GEMM.prepare(element_type, GEMM.configure(element_type, COMPILED), threads=2)
    out = prepared.run(a, b, c)
    assert out.dtype == dtype
    np.testing.assert_allclose(out.astype(np.float64), reference(a, b, c, 1, 1, 0, 0),
                               rtol=tolerance, atol=tolerance * 10)
    assert out.tobytes() == prepared.run_serial(a, b, c).tobytes()


@pytest.mark.parametrize("m,k,n", [(0, 4, 5), (4, 0, 5), (4, 5, 0)])
def test_empty_dimensions(m, k, n):
    c = matrix((n,))
    out = GEMM.prepare("FLOAT", beta=3.0).run(matrix((m, k)), matrix((k, n)), c)
    assert out.shape == (m, n)
    np.testing.assert_allclose(out, np.broadcast_to(3 * c if k == 0 else 0, (m, n)))


@pytest.mark.parametrize("a_shape,b_shape", [((4,), (4,)), ((4,), (4, 3)), ((2, 4), (4,)),
                                             ((3, 2, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                                             ((6, 7), (7, 8))])
def test_matmul_matches_numpy(a_shape, b_shape):
    a, b = matrix(a_shape), matrix(b_shape)
    for values in ({}, COMPILED):
        prepared = MATMUL.prepare("FLOAT", MATMUL.configure("FLOAT", values), threads=2)
        out = prepared.run(a, b)
        assert out.shape == np.matmul(a, b).shape
        np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_bad_shapes_and_configs_are_clear_errors():
    prepared = GEMM.prepare("FLOAT")
    with pytest.raises(ValueError, match="do not agree on K"):
        prepared.run(matrix((2, 3)), matrix((4, 5)))
    with pytest.raises(ValueError, match="must be 2-D"):
        prepared.run(matrix((2, 3, 4)), matrix((4, 5)))
    with pytest.raises(ValueError, match="does not broadcast"):
        prepared.run(matrix((2, 3)), matrix((3, 5)), matrix((3,)))
    with pytest.raises(ValueError, match="do not agree on K"):
        MATMUL.prepare("FLOAT").run(matrix((2, 3)), matrix((4, 5)))
    with pytest.raises(TuningValidationError) as error:
        GEMM.configure("FLOAT", {"algorithm.tile_n": 100, "algorithm.tile_k": 0})
    fields = {p.field for p in error.value.problems}
    assert fields == {"algorithm.tile_k"}  # field checks first; then consistency
    with pytest.raises(TuningValidationError, match="multiple of the micro-kernel"):
        GEMM.configure("FLOAT", {"algorithm.tile_n": 100})
    assert "conversion.parallel_minimum_elements" in GEMM.schema("FLOAT16").parameters
    assert "conversion.parallel_minimum_elements" not in GEMM.schema("FLOAT").parameters
