"""An ONNX model read for execution: checked, typed, ordered, and matched to kernels.

Everything that can be decided before the first run is decided here, so a
model the library cannot run fails at construction with every unsupported
node named, never at its first ``run``. Each node is checked against its
operator's schema in the opset the model imports: the element types that
version takes, its attributes, which inputs share a type. The operators have
computed the same since opset 7; what the older schemas add is in
``LEGACY_ATTRIBUTES``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .._support.aligned import aligned
from ..errors import UnsupportedModelError
from ..kernels import Kernel
from ..tuning.schema import element_type_name
from . import ml, views
from .views import View

#: node attributes each operator's kernel takes, with their ONNX defaults
ATTRIBUTES: Mapping[str, Mapping[str, Any]] = {
    "Gemm": {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0},
}


def _refuse_axis(attributes: Mapping[str, Any]) -> str | None:
    if attributes.get("broadcast", 0):
        return ("attribute axis (opset 1-6 broadcasting of B from a dimension of A other than "
                "its last ones) is not supported; broadcast=1 without axis is")
    return None


#: Attributes of the opset 1-6 schemas that no kernel takes: the refusal for a node's
#: attributes (None: it runs).
LEGACY_ATTRIBUTES: Mapping[str, Callable[[Mapping[str, Any]], str | None]] = {
    # opset 1's in-place hint to the runtimes of the time: results never depended on it
    "consumed_inputs": lambda attributes: None,
    # opsets 1-6: 0 requires equal shapes (Gemm: C of M x N), 1 broadcasts B (Gemm: C) to A
    # from the trailing dimensions; for a valid model both are numpy's broadcasting
    "broadcast": lambda attributes: None,
    # with broadcast=1, B's dimensions start at A's dimension ``axis``: refused
    "axis": _refuse_axis,
}

#: operators with an input whose type parameter is its own (ONNX's T1): the keyword that
#: names its element type to the kernel when it differs from the first input's
OWN_TYPE_KEYWORDS: Mapping[str, str] = {"Pow": "exponent_type"}


@dataclass(frozen=True)
class Node:
    """One node bound to its kernel (or, for a shape-only operator, to the view that
    computes it: no kernel, no tuning key): inputs, output, element type, attributes."""

    name: str
    op_type: str
    kernel: Kernel | None
    element_type: int
    inputs: tuple[str, ...]
    output: str
    attributes: Mapping[str, Any]
    view: View | None = None


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
    opsets = {o.domain or "ai.onnx": o.version for o in proto.opset_import}
    opset = opsets.get("ai.onnx")
    if opset is None:
        raise UnsupportedModelError("the model imports no opset of the default domain")
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
        if proto_node.domain == "ai.onnx.ml" and proto_node.op_type in ml.KERNEL_OF:
            node, problem = _lowered(proto_node, name, opsets, types, kernels, constants)
        else:
            node, problem = _bind(proto_node, name, opsets, types, kernels)
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
                 # a weight is B of a MatMul, which reads it in place (_support.aligned says why)
                 {name: aligned(value) for name, value in constants.items()}, opset)


def _described(node, name, opsets, input_types) -> str:
    """A node as a refusal names it; its opset is its domain's (ai.onnx.ml's for the classic
    ML operators)."""
    domain = node.domain or "ai.onnx"
    return (f"{name}: op {node.op_type}, domain {domain}, opset {opsets.get(domain)}, "
            f"input types {[_type_name(t) for t in input_types]}")


def _lowered(node, name, opsets, types, kernels, constants) -> tuple[list[Node], str | None]:
    """An ai.onnx.ml node bound to the kernel that computes it (see :mod:`.ml`), its
    constants added to the model's."""
    element_type = types.get(node.input[0])
    described = _described(node, name, opsets, [element_type])
    lowered, problem = ml.lower(node, element_type)
    if problem:
        return [], f"{described}: {problem}"
    constants.update(lowered.constants)
    kernel = kernels[ml.KERNEL_OF[node.op_type]]
    return [Node(name, node.op_type, kernel, element_type, lowered.inputs, node.output[0],
                 dict(lowered.attributes))], None


def _bind(node, name, opsets, types, kernels) -> tuple[list[Node], str | None]:
    present = tuple(i for i in node.input if i)  # an omitted optional input is ""
    input_types = [types.get(i) for i in present]
    opset = opsets.get(node.domain or "ai.onnx")
    described = _described(node, name, opsets, input_types)
    default_domain = node.domain in ("", "ai.onnx")
    kernel = kernels.get(node.op_type) if default_domain else None
    shape_only = default_domain and node.op_type in views.FUNCTIONS
    if kernel is None and not shape_only:
        return [], f"{described}: no kernel for this operator"
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return [], f"{described}: the operator does not exist in opset {opset}"
    if not input_types or not all(input_types):
        return [], f"{described}: input types unknown"
    by_parameter, problem = _typed_inputs(schema, input_types)
    if problem:
        return [], f"{described}: {problem}"
    element_type = input_types[0]
    if shape_only:
        return _view(node, name, described, element_type, by_parameter)
    if element_type not in kernel.element_types:
        return [], f"{described}: no {_type_name(element_type)} kernel"
    attributes = dict(ATTRIBUTES.get(node.op_type, {}))
    for parameter, element_types in by_parameter.items():
        if element_types != {element_type}:
            keyword = OWN_TYPE_KEYWORDS.get(node.op_type)
            if keyword is None:
                return [], f"{described}: input types mixed ({parameter})"
            (attributes[keyword],) = element_types
    given = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    for attribute in given:
        if attribute in attributes:
            attributes[attribute] = given[attribute]
        elif attribute in LEGACY_ATTRIBUTES:
            problem = LEGACY_ATTRIBUTES[attribute](given)
            if problem:
                return [], f"{described}: {problem}"
        else:
            return [], f"{described}: attribute {attribute} is not supported"
    if schema.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        return _folded(node, name, kernel, element_type, present), None
    return [Node(name, node.op_type, kernel, element_type, present, node.output[0],
                 attributes)], None


def _view(node, name, described, element_type, by_parameter) -> tuple[list[Node], str | None]:
    """A shape-only node bound to its view, or why it cannot be one."""
    given = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    known = views.ATTRIBUTES[node.op_type]
    unknown = sorted(set(given) - set(known))
    if unknown:
        return [], f"{described}: attribute {unknown[0]} is not supported"
    if node.op_type == "CastLike" and len({t for types in by_parameter.values()
                                           for t in types}) > 1:
        return [], f"{described}: a CastLike to another element type computes: no kernel yet"
    view, problem = views.view_of(node.op_type, element_type, {**known, **given})
    if problem:
        return [], f"{described}: {problem}"
    present = tuple(i for i in node.input if i)
    return [Node(name, node.op_type, None, element_type, present, node.output[0], given,
                 view)], None


def _typed_inputs(schema: onnx.defs.OpSchema, input_types: list[int]
                  ) -> tuple[dict[str, set[int]], str | None]:
    """The element types of each type parameter of ``schema`` (T, T1), or why they do not fit.

    Inputs of one parameter must share their type, which the parameter's constraint of this
    schema version must allow.
    """
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    by_parameter: dict[str, set[int]] = {}
    for index, element_type in enumerate(input_types):
        parameter = schema.inputs[min(index, len(schema.inputs) - 1)].type_str
        if _tensor_type(element_type) not in allowed.get(parameter, {parameter}):
            return {}, (f"{schema.name}-{schema.since_version}, the {schema.name} of this opset, "
                        f"takes no {_type_name(element_type)} as {parameter}")
        by_parameter.setdefault(parameter, set()).add(element_type)
    mixed = sorted(parameter for parameter, types in by_parameter.items() if len(types) > 1)
    if mixed:
        return {}, f"input types mixed ({', '.join(mixed)})"
    return by_parameter, None


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


def _tensor_type(element_type: int) -> str:
    """The type's name in ONNX schemas and onnxruntime's signatures: ``tensor(float)``."""
    return f"tensor({onnx.helper.tensor_dtype_to_string(element_type).split('.')[-1].lower()})"


def _signature(value: onnx.ValueInfoProto) -> Signature:
    tensor = value.type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
             for d in tensor.shape.dim] if tensor.HasField("shape") else None
    return Signature(value.name, _tensor_type(tensor.elem_type), shape, tensor.elem_type)
