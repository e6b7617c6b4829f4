"""A MatMul and the Add of its bias, run as one call: fewer steps, the same bits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kerneltune.runtime import RuntimeSession

CORPUS = Path(__file__).resolve().parent / "data" / "converted"
TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
         np.float16: TensorProto.FLOAT16}


def _linear(dtype, k: int, n: int, bias_shape=None, output_product=False, rank=2):
    """X @ W + b, as converters write a Linear layer (W and b constants)."""
    rng = np.random.default_rng(k + n)
    w = rng.standard_normal((k, n)).astype(dtype)
    b = rng.standard_normal(bias_shape or (n,)).astype(dtype)
    nodes = [helper.make_node("MatMul", ["X", "W"], ["P"], name="matmul"),
             helper.make_node("Add", ["P", "B"], ["Y"], name="add")]
    shape = ["N", k] if rank == 2 else [1, "N", k]
    outputs = [helper.make_tensor_value_info("Y", TYPES[dtype], None)]
    if output_product:
        outputs.append(helper.make_tensor_value_info("P", TYPES[dtype], None))
    graph = helper.make_graph(nodes, "linear",
                              [helper.make_tensor_value_info("X", TYPES[dtype], shape)],
                              outputs, [numpy_helper.from_array(w, "W"),
                                        numpy_helper.from_array(b, "B")])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph))


def _steps(session: RuntimeSession) -> list[str]:
    return [node.op_type for node in session._model.nodes]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("rows", "k", "n"), [(1, 8, 3), (64, 32, 16), (300, 256, 256)])
@pytest.mark.parametrize("bias_shape", [None, (1, "n"), (1,)])
def test_a_matmul_and_its_bias_run_as_one_call_with_the_same_bits(dtype, rows, k, n,
                                                                   bias_shape):
    shape = None if bias_shape is None else tuple(n if d == "n" else d for d in bias_shape)
    model = _linear(dtype, k, n, shape)
    fused, unfused = (RuntimeSession(model, threads=2, fusion=f, contention=None)
                      for f in (True, False))
    assert _steps(fused) == ["MatMul"] and _steps(unfused) == ["MatMul", "Add"]
    x = np.random.default_rng(rows).standard_normal((rows, k)).astype(dtype)
    (a,), (b,) = fused.run(None, {"X": x}), unfused.run(None, {"X": x})
    assert a.dtype == b.dtype and a.shape == b.shape == (rows, n)
    assert a.tobytes() == b.tobytes()
    # the same thresholds choose the same path (BLAS's for the largest product)
    w, bias = (fused._model.constants[name] for name in ("W", "B"))
    path = fused._prepared[0].plan(x, w, bias).path
    assert path == unfused._prepared[0].plan(x, w).path
    assert (path == "blas") == (rows * k * n >= 2_097_152)


@pytest.mark.parametrize("model", [
    _linear(np.float32, 8, 4, output_product=True),  # the product is an output too
    _linear(np.float16, 8, 4),  # a 16-bit product is rounded before its Add
    _linear(np.float32, 8, 4, rank=3),  # a batch of A: not two matrices
    _linear(np.float32, 8, 4, bias_shape=(3, 4)),  # C of more than one row
])
def test_what_does_not_fuse_runs_unfused(model):
    assert _steps(RuntimeSession(model)) == ["MatMul", "Add"]


@pytest.mark.parametrize("name", ["mlp_regressor_relu", "mlp_classifier_zipmap",
                                  "scaler_mlp_regressor"])
def test_a_converted_mlp_fuses_every_layer_with_the_same_bits(name):
    path = CORPUS / f"{name}.onnx"
    fused, unfused = (RuntimeSession(path, threads=2, fusion=f, contention=None)
                      for f in (True, False))
    assert _steps(fused).count("Add") == _steps(unfused).count("Add") - 3
    for rows in (1, 64, 3000):
        x = np.random.default_rng(rows).standard_normal((rows, 8)).astype(np.float32)
        a, b = fused.run(None, {"X": x}), unfused.run(None, {"X": x})
        for ours, theirs in zip(a, b, strict=True):
            if isinstance(ours, list):
                assert ours == theirs
            else:
                assert ours.tobytes() == theirs.tobytes()
