"""ai.onnx.ml operators that run on the kernel library's kernels.

A LinearRegressor (what skl2onnx writes for LinearRegression and Ridge) is
``X @ coefficients.T + intercepts``: a Gemm with ``transB=1`` whose B and C are the
node's coefficients and intercepts as constants. It runs on the Gemm kernel, so its
product is the Gemm key's, tuned and calibrated as every Gemm is. The other classic
ML operators are refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

#: the ai.onnx.ml operators a session runs, each on the kernel named
KERNEL_OF: Mapping[str, str] = {"LinearRegressor": "Gemm"}


@dataclass(frozen=True)
class Lowered:
    """A node as the kernel computes it: its inputs (the node's, then the constants added),
    the constants by name and the kernel's attributes."""

    inputs: tuple[str, ...]
    constants: Mapping[str, np.ndarray]
    attributes: Mapping[str, Any]


def lower(node: onnx.NodeProto, element_type: int) -> tuple[Lowered | None, str | None]:
    """``node`` as its kernel computes it, or why it cannot be."""
    given = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return _linear_regressor(node, element_type, given)


def _linear_regressor(node: onnx.NodeProto, element_type: int, given: Mapping[str, Any]
                      ) -> tuple[Lowered | None, str | None]:
    if element_type != onnx.TensorProto.FLOAT:
        return None, "a LinearRegressor of another input type than FLOAT: no kernel for it yet"
    if given.get("post_transform", b"NONE") not in (b"NONE", "NONE"):
        return None, f"post_transform {given['post_transform']!r} is not supported (NONE is)"
    targets = int(given.get("targets", 1))
    coefficients = np.asarray(given.get("coefficients", ()), np.float32)
    if targets < 1 or not coefficients.size or coefficients.size % targets:
        return None, (f"{coefficients.size} coefficients do not make {targets} targets of "
                      f"equal length")
    intercepts = np.asarray(given.get("intercepts", np.zeros(targets)), np.float32)
    if intercepts.shape != (targets,):
        return None, f"{intercepts.size} intercepts for {targets} targets"
    name = node.output[0]
    constants = {f"{name}/coefficients": coefficients.reshape(targets, -1),
                 f"{name}/intercepts": intercepts}
    return Lowered((node.input[0], *constants), constants,
                   {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 1}), None
