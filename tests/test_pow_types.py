"""Pow over every base and exponent type ONNX allows, against onnxruntime bit for bit.

numpy has no answer for ONNX's mixed pairs (it would widen the result), so onnxruntime is
the reference: every pair its CPU provider takes runs through a one-node model on the same
inputs. The exponent types it lacks are compared with its result for the same values as
float64 (integers) or float32 (BFLOAT16), which C++ promotes to the same double; a BFLOAT16
base with its result for the base widened to float32, rounded by ml_dtypes. NaNs compare
as NaNs (onnxruntime's float16 narrowing does not keep their payloads).
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from onnx import helper

from kerneltune.kernels import catalog, library

ort = pytest.importorskip("onnxruntime")

POW = library()["Pow"]
BASES = ("FLOAT", "DOUBLE", "INT32", "INT64", "FLOAT16", "BFLOAT16")
#: the types onnxruntime's CPU Pow takes for both operands
ORT_TYPES = frozenset({"FLOAT", "DOUBLE", "INT32", "INT64", "FLOAT16"})
DTYPES = {"FLOAT": np.float32, "DOUBLE": np.float64, "FLOAT16": np.float16,
          "BFLOAT16": ml_dtypes.bfloat16, "BOOL": np.bool_}
RNG = np.random.default_rng(20250302)


def dtype(name: str) -> np.dtype:
    return np.dtype(DTYPES.get(name) or name.lower())


def bases(name: str) -> np.ndarray:
    """Every kind of base: signed zeros, infinities, NaN, negatives (fractional powers of
    which are NaN), and integers whose squares overflow."""
    if name in ("INT32", "INT64"):
        edges = [46341, -46341, 2**31 - 1] if name == "INT32" else [3037000500, -3037000500,
                                                                    2**40]
        return np.concatenate([np.arange(-9, 10), edges, RNG.integers(-50, 50, 60)]).astype(
            dtype(name))
    special = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, np.inf, -np.inf, np.nan, 1e-3, 300.0]
    with np.errstate(over="ignore"):
        return np.concatenate([special, RNG.standard_normal(70) * 3]).astype(dtype(name))


def exponents(name: str, size: int) -> np.ndarray:
    """Small powers of each sign, fractions and specials for floats, the extremes of the
    unsigned types (whose powers overflow)."""
    kind = dtype(name).kind
    if kind in "iu":
        low = 0 if kind == "u" else -4
        values = RNG.integers(low, 9, size).astype(dtype(name))
        values[:2] = [np.iinfo(dtype(name)).max, 2]
        return values
    special = [0.0, -0.0, 1.0, 2.0, 3.0, -1.0, 0.5, -2.5, np.inf, -np.inf, np.nan]
    body = np.round(RNG.standard_normal(size) * 3, 1)
    return np.concatenate([special, body])[:size].astype(dtype(name))


def ort_pow(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """onnxruntime's Pow, on operands of types its CPU provider takes."""
    graph = helper.make_graph(
        [helper.make_node("Pow", ["x", "y"], ["z"])], "pow",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(base.dtype),
                                       base.shape),
         helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(exponent.dtype),
                                       exponent.shape)],
        [helper.make_tensor_value_info("z", helper.np_dtype_to_tensor_dtype(base.dtype),
                                       None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": base, "y": exponent})[0]


def reference(base_type: str, exponent_type: str, base: np.ndarray,
              exponent: np.ndarray) -> np.ndarray:
    if exponent_type not in ORT_TYPES:  # the same value, as C++ promotes it
        exponent = exponent.astype(np.float32 if exponent_type == "BFLOAT16" else np.float64)
    if base_type == "BFLOAT16":
        return ort_pow(base.astype(np.float32), exponent).astype(base.dtype)
    return ort_pow(base, exponent)


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if actual.dtype.kind == "f" or actual.dtype == dtype("BFLOAT16"):
        nan = np.isnan(expected.astype(np.float64))
        assert np.array_equal(np.isnan(actual.astype(np.float64)), nan)
        actual, expected = actual[~nan], expected[~nan]
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[actual.dtype.itemsize]
    bad = np.flatnonzero(actual.view(width) != expected.view(width))
    assert bad.size == 0, f"{bad.size} differ, first {actual[bad[:5]]} vs {expected[bad[:5]]}"


PAIRS = list(itertools.product(BASES, catalog.EXPONENTS))


@pytest.mark.parametrize(("base_type", "exponent_type"), PAIRS,
                         ids=[f"{b}-{e}" for b, e in PAIRS])
def test_every_pair_computes_as_onnxruntime(base_type, exponent_type):
    x = bases(base_type)
    if base_type == exponent_type and dtype(base_type).kind == "i":
        # same-type integers wrap as numpy's powers do, where onnxruntime's go through
        # float64: they agree where the power fits
        x = x[np.abs(x) < 10]
    forms = [(x, exponents(exponent_type, x.size)),                      # equal shapes
             (x.reshape(-1, 1)[:12], exponents(exponent_type, 7))]        # broadcast
    forms += [(x, np.array(value).astype(dtype(exponent_type)))         # one element
              for value in (2, 3, 0.5 if dtype(exponent_type).kind not in "iu" else 4)]
    forms.append((x, np.array([3]).astype(dtype(exponent_type))))
    if base_type == exponent_type and dtype(base_type).kind == "i":
        forms = [(b, np.asarray(np.abs(e) % 7)) for b, e in forms]
    for threads in (1, 2):
        for base, exponent in forms:
            prepared = POW.prepare(base_type, threads=threads, exponent_type=exponent_type)
            with np.errstate(all="ignore"):
                expected = reference(base_type, exponent_type, base, exponent)
            assert_same(prepared.run(base, exponent), expected)
            assert_same(prepared.run_serial(base, exponent), expected)


def test_a_mixed_pair_runs_on_the_bases_key_and_grains():
    prepared = POW.prepare("FLOAT16", exponent_type="INT64")
    assert prepared.key == POW.tuning_key("FLOAT16")
    assert prepared.config == POW.configure("FLOAT16")
    exponent = np.full(10_000, 2, np.int64)
    assert prepared.plan(np.ones(10_000, np.float16), exponent).threads >= 1
    out = POW.run([np.array([3.0, -2.0], np.float16), np.array([2, 3], np.int64)])
    assert out.dtype == np.float16 and out.tolist() == [9.0, -8.0]
    with pytest.raises(TypeError, match="expected element type int64"):
        prepared.run(np.ones(3, np.float16), np.ones(3, np.int32))


def test_one_element_exponents_of_two_and_three_are_products_for_every_type():
    """onnxruntime's rule, same types included: x * x and x * x * x in the base's type
    (in float32 for the 16-bit floats), not pow; an array of twos is pow."""
    for name in BASES:
        x = bases(name)
        compute = np.float32 if name in ("FLOAT16", "BFLOAT16") else x.dtype
        wide = x.astype(compute)
        with np.errstate(all="ignore"):
            square, cube = (wide * wide).astype(x.dtype), (wide * wide * wide).astype(x.dtype)
        for shape in ((), (1,), (1, 1)):
            for value, expected in ((2, square), (3, cube)):
                exponent = np.full(shape, value, x.dtype)
                assert_same(POW.run([x, exponent], threads=2),
                            np.broadcast_to(expected, np.broadcast_shapes(x.shape, shape)))
    x = bases("FLOAT")
    with np.errstate(all="ignore"):
        assert_same(POW.run([x, np.full(x.shape, 3, np.float32)]),
                    reference("FLOAT", "FLOAT", x, np.full(x.shape, 3, np.float32)))
