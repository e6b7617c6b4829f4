"""A Gemm of a constant weight stored transposed (transB=1, as PyTorch's exporter writes a
Linear layer) runs on the weight transposed once: the compiled paths' bits, fewer copies."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kerneltune.kernels import panels, strips
from kerneltune.runtime import RuntimeSession

#: the products these tests compare on the compiled paths on every variant (the baseline's
#: defaults meet BLAS from 2**16 multiply-adds)
COMPILED = {"Gemm": dict.fromkeys(("algorithm.blas_minimum_fmas",
                                   "algorithm.packed_blas_minimum_fmas"), 1 << 62)}


def _linear(k: int, n: int, constant_weight: bool = True, readers: int = 1,
            matmul_reader: bool = False, features: int | str | None = None) -> onnx.ModelProto:
    """``readers`` Gemms of X by W.T plus b (W stored as (n, k)), their outputs returned;
    ``matmul_reader`` adds a MatMul of X by W.T's transpose read as stored."""
    rng = np.random.default_rng(k * n)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["X", "W", "B"], [f"Y{i}"], name=f"fc{i}", transB=1)
             for i in range(readers)]
    outputs = [helper.make_tensor_value_info(f"Y{i}", TensorProto.FLOAT, ["N", n])
               for i in range(readers)]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", features or k])]
    if matmul_reader:
        nodes.append(helper.make_node("MatMul", ["W", "V"], ["Z"], name="reads_w"))
        inputs.append(helper.make_tensor_value_info("V", TensorProto.FLOAT, [k, 2]))
        outputs.append(helper.make_tensor_value_info("Z", TensorProto.FLOAT, [n, 2]))
    if not constant_weight:
        inputs.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [n, k]))
    initializers = [numpy_helper.from_array(b, "B")]
    if constant_weight:
        initializers.append(numpy_helper.from_array(w, "W"))
    graph = helper.make_graph(nodes, "linear", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _gemms(session: RuntimeSession) -> list:
    return [node for node in session._model.nodes if node.op_type == "Gemm"]


@pytest.mark.parametrize(("rows", "k", "n"), [(1, 8, 3), (4, 16, 8), (64, 32, 16),
                                              (64, 256, 96)])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_gemm_of_a_transposed_constant_weight_runs_on_it_transposed_with_the_same_bits(
        rows, k, n, threads):
    laid_out = RuntimeSession(_linear(k, n), threads=threads, contention=None,
                              overrides=COMPILED)
    (node,) = _gemms(laid_out)
    weight = laid_out._model.constants[node.inputs[1]]
    assert node.attributes["transB"] == 0
    assert weight.shape == (k, n) and weight.flags.c_contiguous
    # the same Gemm reading a weight it is given at each run: transposed as stored
    as_stored = RuntimeSession(_linear(k, n, constant_weight=False), threads=threads,
                               contention=None, overrides=COMPILED)
    assert _gemms(as_stored)[0].attributes["transB"] == 1
    x = np.random.default_rng(rows).standard_normal((rows, k)).astype(np.float32)
    w = np.ascontiguousarray(weight.T)
    (a,) = laid_out.run(None, {"X": x})
    (b,) = as_stored.run(None, {"X": x, "W": w})
    path = laid_out._prepared[0].plan(x, weight, laid_out._model.constants["B"]).path
    assert path != "blas"  # the compiled paths sum in the same order either way
    assert a.tobytes() == b.tobytes()
    expected = x.astype(np.float64) @ w.T.astype(np.float64) + laid_out._model.constants["B"]
    np.testing.assert_allclose(a, expected, rtol=1e-5, atol=1e-5)


def test_a_weight_several_gemms_read_is_transposed_once():
    session = RuntimeSession(_linear(16, 8, readers=2))
    names = {node.inputs[1] for node in _gemms(session)}
    assert names == {"W"} and session._model.constants["W"].shape == (16, 8)


def test_a_weight_another_node_reads_as_stored_keeps_its_layout_for_it():
    session = RuntimeSession(_linear(16, 8, matmul_reader=True))
    (gemm,) = _gemms(session)
    assert gemm.inputs[1] == "W transposed" and gemm.attributes["transB"] == 0
    assert session._model.constants["W"].shape == (8, 16)
    assert session._model.constants["W transposed"].shape == (16, 8)
    x = np.ones((3, 16), np.float32)
    v = np.ones((16, 2), np.float32)
    y, z = session.run(None, {"X": x, "V": v})
    w = session._model.constants["W"]
    np.testing.assert_allclose(y, x @ w.T + session._model.constants["B"], rtol=1e-5)
    np.testing.assert_allclose(z, w @ v, rtol=1e-5)


def test_a_weight_given_at_each_run_is_read_as_stored():
    session = RuntimeSession(_linear(16, 8, constant_weight=False))
    assert _gemms(session)[0].attributes["transB"] == 1


def test_a_weight_that_does_not_fit_is_named_as_the_model_stores_it():
    session = RuntimeSession(_linear(16, 8, features="K"))
    with pytest.raises(ValueError, match=r"node 'fc0' \(Gemm\): .*K differs.*transB=1, of "
                                         r"shape \(8, 16\)"):
        session.run(None, {"X": np.ones((2, 12), np.float32)})


@pytest.mark.parametrize("threads", [1, 2])
def test_a_constant_weight_of_few_row_products_is_packed_into_strips_once(threads,
                                                                          monkeypatch):
    """The skinny products of one or two rows of a constant weight read its strips, packed
    at the first of them: the bits of a session given the weight at each run."""
    packs = []

    def run(self, *arguments, run=strips.Strips.run):
        before = self._strips.size
        out = run(self, *arguments)
        packs.append(not before and self._strips.size > 0)
        return out

    monkeypatch.setattr(strips.Strips, "run", run)
    laid_out = RuntimeSession(_linear(128, 1100), threads=threads, contention=None)
    as_stored = RuntimeSession(_linear(128, 1100, constant_weight=False), threads=threads,
                               contention=None)
    w = np.ascontiguousarray(laid_out._model.constants["W"].T)
    for rows in (1, 2, 1, 64):
        x = np.random.default_rng(rows).standard_normal((rows, 128)).astype(np.float32)
        (a,) = laid_out.run(None, {"X": x})
        (b,) = as_stored.run(None, {"X": x, "W": w})
        assert a.tobytes() == b.tobytes()
    assert packs == [True, False, False]  # 64 rows: not the skinny path
    assert laid_out._prepared[0].plan(x[:1], laid_out._model.constants["W"]).path == "skinny"


@pytest.mark.parametrize("threads", [1, 2])
def test_a_constant_weight_of_packed_products_is_packed_into_panels_once(threads,
                                                                         monkeypatch):
    """Products of more rows than the skinny path takes on the packed path read the constant
    weight's panels, packed at the first product of each grid (two threads give 32 rows a
    grid of their own): the bits of a session given the weight at each run."""
    packed = []

    def grid(self, *arguments, grid=panels.Panels.grid):
        before = len(self._packed)
        found = grid(self, *arguments)
        packed.append(len(self._packed) > before)
        return found

    monkeypatch.setattr(panels.Panels, "grid", grid)
    laid_out = RuntimeSession(_linear(128, 256), threads=threads, contention=None,
                              overrides=COMPILED)
    as_stored = RuntimeSession(_linear(128, 256, constant_weight=False), threads=threads,
                               contention=None, overrides=COMPILED)
    weight = laid_out._model.constants["W"]
    for rows in (16, 16, 32, 32):
        x = np.random.default_rng(rows).standard_normal((rows, 128)).astype(np.float32)
        (a,) = laid_out.run(None, {"X": x})
        (b,) = as_stored.run(None, {"X": x, "W": np.ascontiguousarray(weight.T)})
        assert a.tobytes() == b.tobytes()
        assert laid_out._prepared[0].plan(x, weight).path == "blocked_packed"
    assert packed == [True, False, threads > 1, False]
