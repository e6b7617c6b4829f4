"""An ONNX model read for execution: checked, typed, ordered, and matched to kernels.

Everything that can be decided before the first run is decided here, so a
model the library cannot run fails at construction with every unsupported
node named, never at its first ``run``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..aligned import aligned
from ..errors import UnsupportedModelError
from ..kernels import Kernel
from ..schema import element_type_name

MINIMUM_OPSET = 13

#: node attributes each operator accepts, with their ONNX defaults
ATTRIBUTES: Mapping[str, Mapping[str, Any]] = {
    "Gemm": {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0},
}

#: operators taking any number (>= 1) of inputs, folded pairwise
VARIADIC = frozenset({"Max", "Min"})


@dataclass(frozen=True)
class Node:
    """One node bound to its kernel: inputs, output, element type, attributes."""

    name: str
    op_type: str
    kernel: Kernel
    element_type: int
    inputs: tuple[str, ...]
    output: str
    attributes: Mapping[str, Any]


@dataclass(frozen=True)
class Signature:
    """A graph input or output as onnxruntime describes it."""

    name: str
    type: str
    shape: list[int | str | None]
    element_type: int


@dataclass(frozen=True)
class Model:
    nodes: tuple[Node, ...]
    inputs: tuple[Signature, ...]
    outputs: tuple[Signature, ...]
    constants: Mapping[str, np.ndarray]
    opset: int


def read_model(model: str | os.PathLike[str] | bytes | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    return onnx.load(os.fspath(model))


def prepare_model(proto: onnx.ModelProto, kernels: Mapping[str, Kernel]) -> Model:
    """Check ``proto`` and bind every node to a kernel, or name every node that cannot be."""
    onnx.checker.check_model(proto)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or opset < MINIMUM_OPSET:
        raise UnsupportedModelError(f"the model imports opset {opset} of the default domain; "
                                    f"kerneltune runs opset {MINIMUM_OPSET} and newer")
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    graph = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type
             for v in (*graph.input, *graph.output, *graph.value_info)}
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    types.update({t.name: t.data_type for t in graph.initializer})
    nodes, problems = [], []
    # onnx's checker has verified that the nodes are in topological order.
    for index, proto_node in enumerate(graph.node):
        name = proto_node.name or f"node {index} ({proto_node.op_type})"
        if proto_node.op_type == "Constant" and proto_node.domain in ("", "ai.onnx"):
            constants[proto_node.output[0]] = _constant(proto_node)
            types[proto_node.output[0]] = onnx.helper.np_dtype_to_tensor_dtype(
                constants[proto_node.output[0]].dtype)
            continue
        node, problem = _bind(proto_node, name, opset, types, kernels)
        if problem:
            problems.append(problem)
        else:
            nodes.extend(node)
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise UnsupportedModelError(f"{len(problems)} unsupported node(s):\n{listed}")
    return Model(tuple(nodes), tuple(_signature(v) for v in graph.input
                                     if v.name not in constants),
                 tuple(_signature(v) for v in graph.output),
                 # a weight is B of a MatMul, which reads it in place: see kerneltune.aligned
                 {name: aligned(value) for name, value in constants.items()}, opset)


def _bind(node, name, opset, types, kernels) -> tuple[list[Node], str | None]:
    present = tuple(i for i in node.input if i)  # an omitted optional input is ""
    input_types = [types.get(i) for i in present]
    described = (f"{name}: op {node.op_type}, domain {node.domain or 'ai.onnx'}, opset {opset}, "
                 f"input types {[_type_name(t) for t in input_types]}")
    kernel = kernels.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if kernel is None:
        return [], f"{described}: no kernel for this operator"
    try:
        onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return [], f"{described}: the operator does not exist in opset {opset}"
    if not input_types or not all(input_types) or len(set(input_types)) > 1:
        return [], f"{described}: input types unknown or mixed"
    element_type = input_types[0]
    if element_type not in kernel.element_types:
        return [], f"{described}: no {_type_name(element_type)} kernel"
    known = ATTRIBUTES.get(node.op_type, {})
    attributes = dict(known)
    for attribute in node.attribute:
        if attribute.name not in known:
            return [], f"{described}: attribute {attribute.name} is not supported"
        attributes[attribute.name] = onnx.helper.get_attribute_value(attribute)
    if node.op_type in VARIADIC:
        return _folded(node, name, kernel, element_type, present), None
    return [Node(name, node.op_type, kernel, element_type, present, node.output[0],
                 attributes)], None


def _folded(node, name, kernel, element_type, present) -> list[Node]:
    """Max(a, b, c) as Max(Max(a, b), c); one input is Max(a, a)."""
    inputs = list(present) if len(present) > 1 else [present[0], present[0]]
    nodes, left = [], inputs[0]
    for step, right in enumerate(inputs[1:]):
        last = step == len(inputs) - 2
        output = node.output[0] if last else f"{node.output[0]}/{node.op_type}:{step}"
        nodes.append(Node(name, node.op_type, kernel, element_type, (left, right), output, {}))
        left = output
    return nodes


def _constant(node: onnx.NodeProto) -> np.ndarray:
    attribute = node.attribute[0]
    value = onnx.helper.get_attribute_value(attribute)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    dtypes = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
              "value_ints": np.int64}
    if attribute.name not in dtypes:
        raise UnsupportedModelError(f"{node.name or 'Constant'}: attribute {attribute.name} is "
                                    f"not supported")
    return np.asarray(value, dtype=dtypes[attribute.name])


def _type_name(element_type: int | None) -> str:
    if not element_type:
        return "unknown"
    try:
        return element_type_name(element_type)
    except Exception:  # noqa: BLE001 - any ONNX type we do not compute on
        return onnx.TensorProto.DataType.Name(element_type)


def _signature(value: onnx.ValueInfoProto) -> Signature:
    tensor = value.type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
             for d in tensor.shape.dim] if tensor.HasField("shape") else None
    onnx_type = onnx.helper.tensor_dtype_to_string(tensor.elem_type).split(".")[-1].lower()
    return Signature(value.name, f"tensor({onnx_type})", shape, tensor.elem_type)
