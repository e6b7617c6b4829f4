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

import functools
import operator
import os
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .._support.aligned import aligned
from ..errors import UnsupportedModelError
from ..kernels import Kernel, catalog, layer_normalization
from ..kernels import rows as along_axes
from ..kernels.cast import CastKernel
from ..kernels.elementwise import ElementwiseKernel
from ..tuning.dtypes import NUMPY_DTYPES, held_dtype
from ..tuning.schema import element_type_name
from . import casts, selections, views
from .views import View

#: node attributes each operator's kernel takes, with their ONNX defaults
ATTRIBUTES: Mapping[str, Mapping[str, Any]] = {
    "Gemm": {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0},
    "LayerNormalization": layer_normalization.NODE_ATTRIBUTES,
    **catalog.UNARY_ATTRIBUTES,
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
    """One node bound to its kernel (or, for an operator that only moves elements or a Cast
    the Cast kernel does not compute, to the function that does it: no kernel, no tuning
    key): inputs, output, element type, attributes. ``fresh``: that function makes a new
    value (:mod:`.selections`, :mod:`.casts`) rather than a view of its first input
    (:mod:`.views`)."""

    name: str
    op_type: str
    kernel: Kernel | None
    element_type: int
    inputs: tuple[str, ...]
    output: str
    attributes: Mapping[str, Any]
    view: View | None = None
    fresh: bool = False


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
    #: the rank of each value whose shape inference knows it
    ranks: Mapping[str, int] = field(default_factory=dict)


def value_reads(model: Model) -> Counter:
    """How many times each value is read: by the nodes, and as a graph output."""
    counts = Counter(name for node in model.nodes for name in node.inputs)
    counts.update(s.name for s in model.outputs)
    return counts


def with_nodes(model: Model, replaced: Mapping[int, Node], dropped: Collection[int] = (),
               **changes: Any) -> Model:
    """``model`` with each node whose id ``replaced`` has replaced by its node, the nodes
    whose ids ``dropped`` has left out (order kept), and ``changes`` (constants, say)."""
    nodes = tuple(replaced.get(id(node), node) for node in model.nodes
                  if id(node) not in dropped)
    return replace(model, nodes=nodes, **changes)


def read_model(model: str | os.PathLike[str] | bytes | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    return onnx.load(os.fspath(model))


def prepare_model(proto: onnx.ModelProto, kernels: Mapping[str, Kernel]) -> Model:
    """Check ``proto`` and bind every node to a kernel, or name every node that cannot be."""
    onnx.checker.check_model(proto)
    # a model of ai.onnx.ml operators only may import no opset of the default domain
    opsets = {o.domain or "ai.onnx": o.version for o in proto.opset_import}
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    graph = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type
             for v in (*graph.input, *graph.output, *graph.value_info)}
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    types.update({t.name: t.data_type for t in graph.initializer})
    ranks = {v.name: len(v.type.tensor_type.shape.dim)
             for v in (*graph.input, *graph.output, *graph.value_info)
             if v.type.tensor_type.HasField("shape")}
    nodes, problems = [], []
    # onnx's checker has verified that the nodes are in topological order.
    for index, proto_node in enumerate(graph.node):
        name = proto_node.name or f"node {index} ({proto_node.op_type})"
        if proto_node.op_type == "Constant" and proto_node.domain in ("", "ai.onnx"):
            constants[proto_node.output[0]] = _constant(proto_node)
            types[proto_node.output[0]] = onnx.helper.np_dtype_to_tensor_dtype(
                constants[proto_node.output[0]].dtype)
            continue
        if proto_node.domain == "ai.onnx.ml" and proto_node.op_type in _ml().OPERATORS:
            node, problem = _lowered(proto_node, name, opsets, types, kernels, constants)
        else:
            if proto_node.op_type == "Clip" and proto_node.domain in ("", "ai.onnx"):
                proto_node = _clip_bounds(proto_node, types, constants)
            node, problem = _bind(proto_node, name, opsets, types, kernels)
        if problem:
            problems.append(problem)
            continue
        nodes.extend(node)
        # what shape inference could not type (after an ai.onnx.ml node) the kernels do
        for bound in node:
            types.setdefault(bound.output, _output_type(bound))
            if bound.output not in ranks:
                rank = _output_rank(bound, [ranks.get(i, constants[i].ndim if i in constants
                                                      else None) for i in bound.inputs])
                if rank is not None:
                    ranks[bound.output] = rank
    held = [f"input {v.name!r}: {_type_name(v.type.tensor_type.elem_type)} tensors are none "
            f"a session holds (numbers, booleans and the narrow types)"
            for v in graph.input if v.name not in constants and v.type.HasField("tensor_type")
            and held_dtype(v.type.tensor_type.elem_type) is None]
    if problems or held:
        listed = "\n".join(f"  - {p}" for p in (*held, *problems))
        counts = ", ".join(f"{count} unsupported {what}" for count, what in
                           ((len(held), "input(s)"), (len(problems), "node(s)")) if count)
        raise UnsupportedModelError(f"{counts}:\n{listed}")
    return Model(tuple(nodes), tuple(_signature(v) for v in graph.input
                                     if v.name not in constants),
                 tuple(_signature(v) for v in graph.output),
                 # a weight is B of a MatMul, which reads it in place (_support.aligned says why)
                 {name: aligned(value) for name, value in constants.items()}, ranks)


def _ml() -> ModuleType:
    """:mod:`.ml`, imported by the first model that has an ai.onnx.ml node."""
    from . import ml

    return ml


def _described(node, name, opsets, input_types) -> str:
    """A node as a refusal names it; its opset is its domain's (ai.onnx.ml's for the classic
    ML operators)."""
    domain = node.domain or "ai.onnx"
    return (f"{name}: op {node.op_type}, domain {domain}, opset {opsets.get(domain)}, "
            f"input types {[_type_name(t) for t in input_types]}")


def _lowered(node, name, opsets, types, kernels, constants) -> tuple[list[Node], str | None]:
    """An ai.onnx.ml node bound to the steps that compute it (see :mod:`.ml`), its
    constants added to the model's."""
    input_types = [types.get(i) for i in node.input if i]
    described = _described(node, name, opsets, input_types)
    lowered, problem = _ml().lower(node, input_types)
    if problem:
        return [], f"{described}: {problem}"
    known = {**types, **{k: onnx.helper.np_dtype_to_tensor_dtype(v.dtype)
                         for k, v in lowered.constants.items()}, **lowered.types}
    nodes = []
    for step in lowered.steps:
        element_type = known.get(step.inputs[0])
        if step.selection is not None:
            view = functools.partial(step.selection, **step.attributes)
            nodes.append(Node(name, step.operator, None, element_type, step.inputs,
                              step.output, dict(step.attributes), view, fresh=True))
            continue
        kernel = kernels[step.operator]
        if element_type not in kernel.element_types:
            return [], f"{described}: no {_type_name(element_type)} kernel for {step.operator}"
        nodes.append(Node(name, node.op_type, kernel, element_type, step.inputs, step.output,
                          dict(step.attributes)))
    constants.update(lowered.constants)
    types.update(lowered.types)
    return nodes, None


def _bind(node, name, opsets, types, kernels) -> tuple[list[Node], str | None]:
    present = tuple(i for i in node.input if i)  # an omitted optional input is ""
    input_types = [types.get(i) for i in present]
    opset = opsets.get(node.domain or "ai.onnx")
    described = _described(node, name, opsets, input_types)
    default_domain = node.domain in ("", "ai.onnx")
    kernel = kernels.get(node.op_type) if default_domain else None
    shape_only = default_domain and node.op_type in views.FUNCTIONS
    moved = default_domain and node.op_type in selections.FUNCTIONS
    if kernel is None and not shape_only and not moved:
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
    if node.op_type in ("Cast", "CastLike") and default_domain:
        target = (input_types[1] if node.op_type == "CastLike" else
                  _cast_target(next(a for a in node.attribute if a.name == "to")))
        outputs = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
        if _tensor_type(target) not in outputs.get(schema.outputs[0].type_str, ()):
            return [], (f"{described}: {schema.name}-{schema.since_version}, the "
                        f"{schema.name} of this opset, casts to no {_type_name(target)}")
        if target != element_type:
            return _cast(node, name, described, element_type, target, kernels["Cast"])
    if shape_only:
        return _view(node, name, described, element_type)
    if moved:
        return _selection(node, name, described,
                          input_types[selections.TYPED_BY.get(node.op_type, 0)], present)
    if element_type not in kernel.element_types:
        return [], f"{described}: no {_type_name(element_type)} kernel"
    attributes = _attribute_defaults(node.op_type, schema)
    for parameter, element_types in by_parameter.items():
        if element_types != {element_type}:
            keyword = OWN_TYPE_KEYWORDS.get(node.op_type)
            if keyword is None:
                return [], f"{described}: input types mixed ({parameter})"
            (attributes[keyword],) = element_types
    given = _attributes(node)
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
    if any(node.output[1:]):
        return _with_statistics(node, name, kernel, element_type, present, attributes), None
    return [Node(name, node.op_type, kernel, element_type, present, node.output[0],
                 attributes)], None


def _with_statistics(node, name, kernel, element_type, present, attributes) -> list[Node]:
    """A LayerNormalization that names its Mean or InvStdDev (the only node of more than
    one output a kernel computes): the kernel's tuple of the three, and a view of each one
    named."""
    together = f"{node.output[0]}/{node.op_type}:outputs"
    nodes = [Node(name, node.op_type, kernel, element_type, present, together,
                  {**attributes, "statistics": True})]
    for index, output in enumerate(node.output):
        if output:
            statistic = element_type if index == 0 else onnx.TensorProto.FLOAT
            nodes.append(Node(name, node.op_type, None, statistic, (together,), output, {},
                              operator.itemgetter(index)))
    return nodes


def _clip_bounds(node: onnx.NodeProto, types: dict[str, int],
                 constants: dict[str, np.ndarray]) -> onnx.NodeProto:
    """A Clip with both bounds as inputs: the attributes of opsets 6-10 and the bounds a node
    leaves out (its type's lowest and highest finite values, as onnxruntime has them, so
    an infinity is clipped) become constants."""
    element_type = types.get(node.input[0])
    if element_type not in NUMPY_DTYPES or NUMPY_DTYPES[element_type].kind == "b":
        return node  # refused by _bind, which names the type
    dtype = NUMPY_DTYPES[element_type]
    given = _attributes(node)
    bounded = onnx.NodeProto()
    bounded.CopyFrom(node)
    del bounded.input[1:]
    del bounded.attribute[:]
    bounded.attribute.extend(a for a in node.attribute if a.name not in ("min", "max"))
    for index, bound in enumerate(("min", "max"), start=1):
        if index < len(node.input) and node.input[index]:
            bounded.input.append(node.input[index])
            continue
        if bound in given:
            value = given[bound]
        elif dtype.kind in "iu":
            value = getattr(np.iinfo(dtype), bound)
        elif dtype.kind == "f":
            value = getattr(np.finfo(dtype), bound)
        else:  # BFLOAT16
            import ml_dtypes  # imported already: the dtype is its

            value = getattr(ml_dtypes.finfo(dtype), bound)
        name = f"{node.output[0]}/Clip:{bound}"
        constants[name] = np.asarray(value, dtype)
        types[name] = element_type
        bounded.input.append(name)
    return bounded


def _attribute_defaults(op_type: str, schema: onnx.defs.OpSchema) -> dict[str, Any]:
    """The attributes a node's kernel takes, with their defaults in the node's opset (an
    operator along axes takes its schema's defaults: Softmax's axis moved in opset 13)."""
    kind = along_axes.KINDS.get(op_type)
    if kind is None:
        return dict(ATTRIBUTES.get(op_type, {}))
    attributes = {}
    for attribute in along_axes.ATTRIBUTES[kind]:
        declared = schema.attributes.get(attribute)
        if declared is not None:  # the reductions' axes have no default: all axes
            attributes[attribute] = (onnx.helper.get_attribute_value(declared.default_value)
                                     if declared.default_value.type else None)
    if kind == along_axes.SOFTMAX:
        attributes["coerced"] = schema.since_version < 13
    return attributes


def _cast(node, name, described, element_type, target, kernel) -> tuple[list[Node], str | None]:
    """A Cast (or CastLike) to another element type, bound to the Cast kernel, or where the
    kernel does not compute the pair to its conversion (:mod:`.casts`). ``saturate`` and
    ``round_mode`` only change Casts to 8-bit floats."""
    given = _attributes(node)
    unknown = sorted(set(given) - {"to", "saturate", "round_mode"})
    if unknown:
        return [], f"{described}: attribute {unknown[0]} is not supported"
    if casts.involves(element_type, target, kernel.element_types):
        try:
            convert = casts.conversion(element_type, target, given.get("saturate", 1),
                                       given.get("round_mode", "up"))
        except ValueError as error:
            return [], f"{described}: {error}"
        return [Node(name, "Cast", None, element_type, (node.input[0],), node.output[0],
                     {"to": target}, convert, fresh=True)], None
    if element_type not in kernel.element_types or target not in kernel.element_types:
        return [], (f"{described}: no Cast kernel from {_type_name(element_type)} to "
                    f"{_type_name(target)}")
    return [Node(name, "Cast", kernel, element_type, (node.input[0],), node.output[0],
                 {"to": target})], None


def _cast_target(attribute: onnx.AttributeProto) -> int:
    """Cast's ``to``: a type's number, or before opset 6 its name."""
    value = onnx.helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        try:
            return onnx.TensorProto.DataType.Value(value.decode())
        except ValueError:
            return onnx.TensorProto.UNDEFINED  # refused by name as an unknown type
    return value


def _selection(node, name, described, element_type, present) -> tuple[list[Node], str | None]:
    """An operator that moves elements into a fresh output, bound to its function."""
    given = _attributes(node)
    known = selections.ATTRIBUTES[node.op_type]
    unknown = sorted(set(given) - set(known))
    if unknown:
        return [], f"{described}: attribute {unknown[0]} is not supported"
    attributes = {**known, **given}
    function = functools.partial(selections.FUNCTIONS[node.op_type], **attributes)
    return [Node(name, node.op_type, None, element_type, present, node.output[0], attributes,
                 function, fresh=True)], None


def _output_rank(node: Node, ranks: list[int | None]) -> int | None:
    """The rank of ``node``'s output from its inputs' (None: not known), for what shape
    inference could not give after an ai.onnx.ml node: elementwise kernels, Cast and
    Identity broadcast their inputs, a product of matrices is a matrix."""
    if node.op_type == "Gemm":
        return 2
    if None in ranks:
        return None
    if node.op_type == "MatMul" and min(ranks) >= 2:
        return max(ranks)
    if (isinstance(node.kernel, ElementwiseKernel | CastKernel)
            or node.op_type in ("Identity", "Cast") and node.kernel is None):
        return max(ranks)
    return None


def _output_type(node: Node) -> int | None:
    """The element type of what ``node`` makes (None: not a tensor, ZipMap's maps)."""
    if node.op_type == "ZipMap":
        return None
    if node.op_type == "Cast" and (node.kernel is not None or node.fresh):
        return node.attributes["to"]
    output_dtype = getattr(node.kernel, "output_dtype", None)
    if output_dtype is not None:
        return onnx.helper.np_dtype_to_tensor_dtype(output_dtype(node.element_type))
    return node.element_type


def _view(node, name, described, element_type) -> tuple[list[Node], str | None]:
    """A shape-only node bound to its view, or why it cannot be one."""
    given = _attributes(node)
    known = views.ATTRIBUTES[node.op_type]
    unknown = sorted(set(given) - set(known))
    if unknown:
        return [], f"{described}: attribute {unknown[0]} is not supported"
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
        if parameter in allowed:  # not an input of one fixed type (a Reduce's int64 axes)
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


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes by name, a string's as ``str`` (onnx gives its bytes)."""
    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return {name: value.decode() if isinstance(value, bytes) else value
            for name, value in values.items()}


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
    if value.type.HasField("sequence_type"):
        # ZipMap's list of maps, named as onnxruntime names it
        pair = value.type.sequence_type.elem_type.map_type
        key = onnx.helper.tensor_dtype_to_string(pair.key_type).split(".")[-1].lower()
        values = _tensor_type(pair.value_type.tensor_type.elem_type)
        return Signature(value.name, f"seq(map({key},{values}))", None, 0)
    tensor = value.type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
             for d in tensor.shape.dim] if tensor.HasField("shape") else None
    return Signature(value.name, _tensor_type(tensor.elem_type), shape, tensor.elem_type)
