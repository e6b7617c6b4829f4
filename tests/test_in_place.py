"""A step writes its result over an intermediate that nothing else reads: never over a
graph input, a constant, a value read twice or a value the run returns."""

from __future__ import annotations

import ctypes
import gc
import tracemalloc

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from kerneltune.kernels import outputs
from kerneltune.runtime import RuntimeSession

FLOAT = TensorProto.FLOAT


def _model(nodes, inputs, outputs_, constants=()):
    """A FLOAT graph; ``inputs`` and ``outputs_`` are (name, shape) pairs."""
    graph = helper.make_graph(
        nodes, "in_place", [helper.make_tensor_value_info(name, FLOAT, shape)
                            for name, shape in inputs],
        [helper.make_tensor_value_info(name, FLOAT, shape) for name, shape in outputs_],
        [numpy_helper.from_array(value, name) for name, value in constants])
    return helper.make_model(graph)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_run_leaves_its_inputs_and_constants_as_they_were(threads):
    x = np.linspace(-3, 3, 5000, dtype=np.float32).reshape(50, 100)
    c = np.full(100, 0.5, np.float32)
    model = _model([helper.make_node("Sigmoid", ["x"], ["s"]),
                    helper.make_node("Add", ["c", "x"], ["t"]),
                    helper.make_node("Mul", ["s", "t"], ["y"])],
                   [("x", ["N", 100])], [("y", ["N", 100])], [("c", c)])
    session = RuntimeSession(model, threads=threads)
    given = x.copy()
    for _ in range(2):
        (y,) = session.run(None, {"x": given})
        np.testing.assert_allclose(y, 1 / (1 + np.exp(-x)) * (x + 0.5), rtol=1e-6)
    assert given.tobytes() == x.tobytes()
    assert session._model.constants["c"].tobytes() == c.tobytes()


def test_a_value_read_twice_or_returned_is_not_written_over():
    x = np.linspace(-3, 3, 600, dtype=np.float32)
    model = _model([helper.make_node("Relu", ["x"], ["r"]),
                    helper.make_node("Neg", ["r"], ["n"]),
                    helper.make_node("Abs", ["r"], ["a"]),
                    helper.make_node("Exp", ["x"], ["e"]),
                    helper.make_node("Sigmoid", ["e"], ["s"])],
                   [("x", ["N"])], [(name, ["N"]) for name in "naes"])
    n, a, e, s = RuntimeSession(model, threads=1, fusion=False).run(None, {"x": x})
    relu = np.maximum(x, 0)
    np.testing.assert_array_equal(n, -relu)
    np.testing.assert_array_equal(a, relu)
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(s, 1 / (1 + np.exp(-np.exp(x))), rtol=1e-6)
    assert not np.shares_memory(e, s)


def test_each_run_returns_arrays_of_its_own():
    x = np.arange(-8, 8, dtype=np.float32).reshape(4, 4)
    w = np.eye(4, dtype=np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["p"]),
                    helper.make_node("Tanh", ["p"], ["y"])],
                   [("x", ["N", 4])], [("y", ["N", 4])], [("w", w)])
    session = RuntimeSession(model, threads=1)
    (first,) = session.run(None, {"x": x})
    (second,) = session.run(None, {"x": x + 1})
    assert not np.shares_memory(first, second)
    np.testing.assert_allclose(first, np.tanh(x), rtol=1e-6)
    np.testing.assert_allclose(second, np.tanh(x + 1), rtol=1e-6)


@pytest.mark.parametrize("activation", ["Sigmoid", "Tanh", "Relu"])
def test_an_activation_after_a_product_needs_no_memory_of_its_own(activation):
    """A hidden layer's activation writes over the product it alone reads: a run's peak
    memory is about one output, where a fresh result would make it two (the output pool
    off, so that every array a run makes is allocated and traced)."""
    rows, depth, columns = 2048, 8, 256  # a 2 MiB product
    w = np.random.default_rng(0).standard_normal((depth, columns)).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["p"]),
                    helper.make_node(activation, ["p"], ["y"])],
                   [("x", ["N", depth])], [("y", ["N", columns])], [("w", w)])
    session = RuntimeSession(model, threads=1, contention=None)
    x = np.random.default_rng(1).standard_normal((rows, depth)).astype(np.float32)
    session.run(None, {"x": x})
    limit = outputs.set_output_pool_limit(0)
    tracemalloc.start()
    try:
        (y,) = session.run(None, {"x": x})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        outputs.set_output_pool_limit(limit)
    assert y.nbytes <= peak < 1.5 * y.nbytes


def test_an_activation_s_product_stays_an_intermediate_and_a_returned_product_does_not():
    """Between two products, the first product and the activation written over it are one
    pooled intermediate; the second product, returned, is an array of its own (a product
    declines to write over its input, so nothing before it is returned through it)."""
    rows, depth, hidden = 1024, 8, 64  # 256 KiB products: pooled as intermediates
    rng = np.random.default_rng(2)
    w1, w2 = (rng.standard_normal(shape).astype(np.float32)
              for shape in ((depth, hidden), (hidden, hidden)))
    model = _model([helper.make_node("MatMul", ["x", "w1"], ["p"]),
                    helper.make_node("Sigmoid", ["p"], ["s"]),
                    helper.make_node("MatMul", ["s", "w2"], ["y"])],
                   [("x", ["N", depth])], [("y", ["N", hidden])], [("w1", w1), ("w2", w2)])
    compiled = dict.fromkeys(("algorithm.blas_minimum_fmas",
                              "algorithm.packed_blas_minimum_fmas"), 1 << 62)
    session = RuntimeSession(model, threads=1, contention=None,
                             overrides={"MatMul": compiled})  # the baseline's meet BLAS
    x = rng.standard_normal((rows, depth)).astype(np.float32)
    gc.collect()
    limit = outputs.set_output_pool_limit(0)
    outputs.set_output_pool_limit(limit)
    for _ in range(2):
        (y,) = session.run(None, {"x": x})
        assert outputs.output_pool_bytes() == outputs.block_bytes(rows * hidden * 4)
        assert not isinstance(y.base, ctypes.Array)  # not a pooled block's view
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-(x @ w1))) @ w2, rtol=1e-4, atol=1e-5)
