"""Write dense.onnx, the small model the README runs: Y = Relu(X @ W + B), X of shape (N, 64).

    python examples/make_dense_model.py [PATH]    (default: dense.onnx)

The weights are deterministic, so two runs write the same bytes.
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FEATURES = 64


def dense_model() -> onnx.ModelProto:
    generator = np.random.default_rng(0)
    weights = numpy_helper.from_array(
        generator.standard_normal((FEATURES, FEATURES)).astype(np.float32), "W")
    bias = numpy_helper.from_array(generator.standard_normal(FEATURES).astype(np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["X", "W", "B"], ["H"]),
         helper.make_node("Relu", ["H"], ["Y"])],
        "dense",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", FEATURES])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", FEATURES])],
        initializer=[weights, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else "dense.onnx"
    onnx.save(dense_model(), path)
    print(f"wrote {path}")
