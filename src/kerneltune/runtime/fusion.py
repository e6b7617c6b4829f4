"""Fusions a session makes as it plans its steps, each giving the unfused steps' bits.

A Linear layer is written by converters as a MatMul of the input by a constant weight,
then an Add of a constant bias. A session runs the pair as one call of the MatMul kernel
with the bias as Gemm's C (``beta`` 1): one pass over the output and one step fewer. Every
compiled path computes ``alpha * sum + beta * c`` with both factors 1, which is
``sum + c`` rounded once, as the Add of the product is; the BLAS path adds the bias to
BLAS's product as the Add does. The pair keeps the MatMul key, so the same thresholds
choose the same path. Only FLOAT and DOUBLE are fused (a 16-bit product is rounded before
its Add, a fused one would not be), and only where the product feeds nothing else.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping

import onnx

from .model import Model, Node

#: element types whose MatMul and Add fuse
FUSED_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE})


def fuse(model: Model) -> Model:
    """``model`` with each MatMul and Add of a bias that can be one call made one."""
    uses = Counter(name for node in model.nodes for name in node.inputs)
    uses.update(s.name for s in model.outputs)
    consumer = {name: node for node in model.nodes for name in node.inputs}
    fused: dict[int, Node] = {}  # id of the Add replaced -> the fused node
    dropped: set[int] = set()  # ids of the MatMuls folded into it
    for node in model.nodes:
        add = consumer.get(node.output)
        bias = _bias(node, add, model.constants, model.ranks) if uses[node.output] == 1 else None
        if bias is not None:
            fused[id(add)] = dataclasses.replace(
                node, name=f"{node.name} + {add.name}", inputs=(*node.inputs, bias),
                output=add.output, attributes={"bias": 1})
            dropped.add(id(node))
    if not fused:
        return model
    nodes = tuple(fused.get(id(node), node) for node in model.nodes if id(node) not in dropped)
    return dataclasses.replace(model, nodes=nodes)


def _bias(matmul: Node, add: Node | None, constants: Mapping, ranks: Mapping[str, int]
          ) -> str | None:
    """The name of the bias ``add`` adds to ``matmul``'s product, if the two fuse."""
    if (matmul.op_type != "MatMul" or matmul.kernel is None or add is None
            or add.op_type != "Add" or add.kernel is None
            or matmul.element_type not in FUSED_TYPES or add.element_type != matmul.element_type
            or ranks.get(matmul.inputs[0]) != 2):
        return None
    weight = constants.get(matmul.inputs[1])
    (bias,) = [name for name in add.inputs if name != matmul.output] or [None]
    value = constants.get(bias)
    if weight is None or weight.ndim != 2 or value is None or value.ndim > 2:
        return None
    # C of Gemm: one value, or one per column, on one row
    if value.shape[-1:] not in ((), (1,), (weight.shape[1],)) or value.shape[:-1] not in ((), (1,)):
        return None
    return bias
