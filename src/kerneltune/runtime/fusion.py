"""Fusions a session makes as it plans its steps, each giving the unfused steps' bits.

A Linear layer is written by converters as a MatMul of the input by a constant weight,
then an Add of a constant bias. A session runs the pair as one call of the MatMul kernel
with the bias as Gemm's C (``beta`` 1): one pass over the output and one step fewer. Every
compiled path computes ``alpha * sum + beta * c`` with both factors 1, which is
``sum + c`` rounded once, as the Add of the product is; the BLAS path adds the bias to
BLAS's product as the Add does. The pair keeps the MatMul key, so the same thresholds
choose the same path. An A with batch dimensions (a sequence through the layer, as
exporters write transformers) is one product of all its rows, fused or not. Only FLOAT and
DOUBLE are fused (a 16-bit product is rounded before its Add, a fused one would not be),
and only where the product feeds nothing else.

A hidden layer ends with its activation: a Relu after the Gemm (or the fused MatMul and
Add) runs in the product's call (``activation="Relu"``), on each block of the output as
the product stores it, with the Relu kernel's expression: the same bits, one step, one
call and one pass over the output fewer.

An activation written out (GELU as eight nodes, SiLU as ``x * Sigmoid(x)``) is a chain of
FLOAT elementwise nodes over one tensor and scalar constants: a session runs it as one
call of the ElementwiseChain kernel (:mod:`kerneltune.kernels.chain`), whose steps run
each node's own code over the same blocks, so the bits are the unfused nodes'.

A binary classifier's probabilities are written by skl2onnx as the Concat of ``1 - p``
(a Sub from a constant) and ``p``: a session runs the pair as one selection, whose
subtraction is numpy's, rounded once as the Sub kernel's is: the same bits, one step fewer.

A linear classifier of several classes (one against the rest) normalises its probabilities
as skl2onnx writes it, a row that sums to zero made uniform: ``s = ReduceSum(p)`` along the
last axis, ``z = Cast(Not(Cast(s, BOOL)), T)``, then ``(p + z) / (s + z * count)``. A
session runs the eight nodes as one call of the ProbabilityNormalization kernel
(:mod:`kerneltune.kernels.rows`), which sums a row as ReduceSum does and rounds each
operation as its node does: the same bits, seven steps fewer. ``count`` must be finite (zero
times it is then zero).

A classifier's label is written by skl2onnx as its classes (a constant) indexed by the
ArgMax of its scores, reshaped, then Cast to the label's type. Where that Cast is exact
(numpy's safe casting: int32 to int64, float32 to float64), a session casts the constant
once instead, and the selection and its views carry the cast type: each element is the
value the Cast would have made of it, and the run has one step fewer. Its
ArrayFeatureExtractor, whose indices are the ArgMax's, skips the search for negative
indices (which it refuses), as an ArgMax gives none: a microsecond at 64 rows.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping

import numpy as np
import onnx

from ..kernels import Kernel
from ..kernels.chain import BINARY, CHAIN, CODES, CONSTANT, POWERS
from ..kernels.rows import PROBABILITY_NORMALIZATION
from ..tuning.dtypes import NUMPY_DTYPES
from . import selections
from .model import Model, Node, value_reads, with_nodes

#: element types whose products fuse with their bias or their Relu
FUSED_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE})


#: selections that copy elements of their first input, which a Cast after them may go before
ELEMENT_SELECTIONS = frozenset({"ArrayFeatureExtractor", "Take"})


def fuse(model: Model, kernels: Mapping[str, Kernel]) -> Model:
    """``model`` with each MatMul and Add of a bias that can be one call made one, and each
    Relu after a product run in the product's call, each chain of elementwise nodes run as
    one call of ``kernels``' chain kernel, and each Cast of a constant's selection folded
    into the constant, and each ArrayFeatureExtractor of an ArgMax's indices told so."""
    fused = _fuse_pairs(_fuse_pairs(_fuse_pairs(model, _join_bias), _join_relu),
                        _join_complement)
    fused = _fuse_probabilities(fused, kernels[PROBABILITY_NORMALIZATION])
    return _known_indices(_fold_casts(_fuse_chains(fused, kernels[CHAIN])))


def _fuse_pairs(model: Model, join: Callable[[Node, Node, Model], Node | None]) -> Model:
    """``model`` with each node whose output only ``after`` reads, and ``after``, replaced
    by ``join(node, after, model)`` where that gives a node (in ``after``'s place)."""
    uses = value_reads(model)
    consumer = {name: node for node in model.nodes for name in node.inputs}
    fused: dict[int, Node] = {}  # id of the node replaced -> the fused node
    dropped: set[int] = set()  # ids of the nodes folded into it
    for node in model.nodes:
        after = consumer.get(node.output)
        joined = (join(node, after, model) if after is not None and uses[node.output] == 1
                  else None)
        if joined is not None:
            fused[id(after)] = dataclasses.replace(joined, name=f"{node.name} + {after.name}",
                                                   output=after.output)
            dropped.add(id(node))
    return with_nodes(model, fused, dropped) if fused else model


def _join_bias(matmul: Node, add: Node, model: Model) -> Node | None:
    """The MatMul of a bias's Add, with the bias as Gemm's C (``batch``: A's leading
    dimensions are rows of the one product)."""
    bias = _bias(matmul, add, model.constants, model.ranks)
    if bias is None:
        return None
    batch = {"batch": 1} if model.ranks[matmul.inputs[0]] > 2 else {}
    return dataclasses.replace(matmul, inputs=(*matmul.inputs, bias),
                               attributes={"bias": 1, **batch})


def _join_relu(product: Node, relu: Node, model: Model) -> Node | None:
    """A Gemm (or fused MatMul and Add) that applies the Relu after it."""
    if (relu.op_type == "Relu" and relu.kernel is not None and product.kernel is not None
            and (product.op_type == "Gemm" or product.attributes.get("bias") == 1)
            and product.element_type in FUSED_TYPES
            and relu.element_type == product.element_type):
        return dataclasses.replace(product, attributes={**product.attributes,
                                                        "activation": "Relu"})
    return None


def _join_complement(sub: Node, concat: Node, model: Model) -> Node | None:
    """The Concat of ``c - x`` and ``x`` itself (either order), ``c`` a constant of one
    FLOAT or DOUBLE element, as one selection (:func:`.selections.complement_pair`)."""
    if (sub.op_type != "Sub" or sub.kernel is None or sub.element_type not in FUSED_TYPES
            or concat.op_type != "Concat" or concat.view is None or len(concat.inputs) != 2
            or concat.element_type != sub.element_type):
        return None
    total, x = sub.inputs
    value = model.constants.get(total)
    rank = model.ranks.get(x)
    if (value is None or value.size != 1 or value.dtype != NUMPY_DTYPES[sub.element_type]
            or x in model.constants or rank is None or value.ndim > rank
            or sorted(concat.inputs) != sorted((sub.output, x))):
        return None
    return dataclasses.replace(concat, inputs=(x, total), view=functools.partial(
        selections.complement_pair, complement_first=concat.inputs[0] == sub.output,
        **concat.view.keywords))


def _bias(matmul: Node, add: Node, constants: Mapping, ranks: Mapping[str, int]) -> str | None:
    """The name of the bias ``add`` adds to ``matmul``'s product, if the two fuse."""
    element_type = matmul.element_type
    if (not _computes(matmul, "MatMul", element_type) or not _computes(add, "Add", element_type)
            or element_type not in FUSED_TYPES or ranks.get(matmul.inputs[0], 0) < 2):
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


def _fuse_probabilities(model: Model, kernel: Kernel) -> Model:
    """``model`` with each normalisation of probabilities as skl2onnx writes it made one node
    of ``kernel`` (see the module's docstring), where its other nodes' values are read by
    none but its own."""
    producer = {node.output: node for node in model.nodes}
    reads = value_reads(model)
    replaced, dropped = {}, set()
    for div in model.nodes:
        found = _normalised_probabilities(div, producer, model)
        if found is None:
            continue
        probabilities, count, nodes = found
        total, zero = nodes[0].output, nodes[3].output
        if any(reads[node.output] != (2 if node.output in (total, zero) else 1)
               for node in nodes):
            continue
        replaced[id(div)] = Node(" + ".join(node.name for node in (*nodes, div)),
                                 PROBABILITY_NORMALIZATION, kernel, div.element_type,
                                 (probabilities,), div.output, {"count": count})
        dropped.update(id(node) for node in nodes)
    return with_nodes(model, replaced, dropped) if replaced else model


def _normalised_probabilities(div: Node, producer: Mapping[str, Node],
                              model: Model) -> tuple[str, float, list[Node]] | None:
    """The probabilities ``div`` ends skl2onnx's normalisation of, its count, and the nodes
    before ``div`` (the ReduceSum, the Casts and Not, the Adds and Mul: the sum and the zero
    indicator first and fourth), or None where ``div`` ends none."""
    element_type = div.element_type
    if not _computes(div, "Div", element_type) or element_type not in FUSED_TYPES:
        return None
    shifted, divisor = (producer.get(name) for name in div.inputs)
    if not (_computes(shifted, "Add", element_type) and _computes(divisor, "Add", element_type)):
        return None
    for probabilities, zero in (shifted.inputs, shifted.inputs[::-1]):
        indicator = _zero_indicator(producer.get(zero), probabilities, element_type, producer,
                                    model)
        if indicator is None:
            continue
        scaled = [name for name in divisor.inputs if name != indicator[0].output]
        product = producer.get(scaled[0]) if len(scaled) == 1 else None
        if not _computes(product, "Mul", element_type) or zero not in product.inputs:
            return None
        constant = [name for name in product.inputs if name != zero]
        value = model.constants.get(constant[0]) if len(constant) == 1 else None
        if (value is None or value.size != 1 or value.dtype != NUMPY_DTYPES[element_type]
                or value.ndim > model.ranks[probabilities] or not np.isfinite(value).all()):
            return None
        return probabilities, float(value.reshape(-1)[0]), [*indicator, shifted, product,
                                                           divisor]
    return None


def _zero_indicator(node: Node | None, probabilities: str, element_type: int,
                    producer: Mapping[str, Node], model: Model) -> list[Node] | None:
    """The ReduceSum, Cast, Not and Cast by which ``node`` is 1 where the last axis of
    ``probabilities`` sums to zero and 0 elsewhere, or None."""
    chain = []
    for op_type, to in (("Cast", element_type), ("Not", None), ("Cast", onnx.TensorProto.BOOL)):
        if node is None or node.op_type != op_type or node.attributes.get("to") != to:
            return None
        chain.append(node)
        node = producer.get(node.inputs[0])
    rank = model.ranks.get(probabilities)
    if (not _computes(node, "ReduceSum", element_type) or node.inputs[0] != probabilities
            or rank is None or not node.attributes.get("keepdims", 1)):
        return None
    axes = (model.constants.get(node.inputs[1]) if len(node.inputs) > 1
            else node.attributes.get("axes"))
    if axes is None or [int(axis) for axis in np.reshape(axes, -1)] not in ([-1], [rank - 1]):
        return None
    return [node, *reversed(chain)]


def _computes(node: Node | None, op_type: str, element_type: int) -> bool:
    """Whether ``node`` is a kernel's ``op_type`` on ``element_type``."""
    return (node is not None and node.kernel is not None and node.op_type == op_type
            and node.element_type == element_type)


def _fuse_chains(model: Model, chain: Kernel) -> Model:
    """``model`` with each chain of two FLOAT elementwise nodes or more made one node of
    ``chain``: nodes joined through values that only nodes of the chain read, computed from
    one tensor and constants of one element, one value leaving the chain (its last node's)."""
    steps = {id(node): step for node in model.nodes
             if (step := _step(node, model)) is not None}
    consumers: dict[str, list[Node]] = {}
    for node in model.nodes:
        for name in set(node.inputs):
            consumers.setdefault(name, []).append(node)
    outputs = {s.name for s in model.outputs}
    group = {id(node): id(node) for node in model.nodes if id(node) in steps}

    def root(key: int) -> int:
        while group[key] != key:
            key = group[key]
        return key

    for node in model.nodes:
        readers = consumers.get(node.output, [])
        # joined to its readers where only nodes of chains read it
        if (id(node) in steps and node.output not in outputs and readers
                and all(id(r) in steps for r in readers)):
            for reader in readers:
                group[root(id(reader))] = root(id(node))
    members: dict[int, list[Node]] = {}
    for node in model.nodes:
        if id(node) in steps:
            members.setdefault(root(id(node)), []).append(node)
    replaced, dropped = {}, set()
    for nodes in members.values():
        inside = {id(node) for node in nodes}
        # a value read outside the chain (or returned) may only be its last node's
        if any(node.output in outputs or any(id(r) not in inside
                                              for r in consumers.get(node.output, []))
               for node in nodes[:-1]):
            continue
        made = _chain_node(nodes, [steps[id(node)] for node in nodes], chain)
        if made is not None:
            replaced[id(nodes[-1])] = made
            dropped.update(id(node) for node in nodes[:-1])
    return with_nodes(model, replaced, dropped) if replaced else model


def _chain_node(nodes: list[Node], steps: list[tuple], chain: Kernel) -> Node | None:
    """One node of ``chain`` for ``nodes`` (in graph order) and their ``steps``, if they
    read one tensor besides each other's outputs (a chain has one input)."""
    registers = {node.output: index + 1 for index, node in enumerate(nodes)}
    inputs = {name for _, operands, _ in steps for name in operands
              if name is not None and name not in registers}
    if len(nodes) < 2 or len(inputs) != 1:
        return None
    (source,) = inputs
    registers[source] = 0
    program = tuple(
        (operation, *(CONSTANT if name is None else registers[name] for name in operands),
         constant)
        for operation, operands, constant in steps)
    last = nodes[-1]
    return Node(" + ".join(node.name for node in nodes), CHAIN, chain, last.element_type,
                (source,), last.output, {"steps": program})


def _step(node: Node, model: Model) -> tuple[str, tuple, float] | None:
    """A chain's step for ``node``: its operation, its two operands (None: the constant) and
    the constant, or None where the node cannot join a chain."""
    if node.kernel is None or node.element_type != onnx.TensorProto.FLOAT or node.view:
        return None
    if node.op_type in BINARY or node.op_type == "Pow":
        constants = [_scalar(name, model, node.inputs) for name in node.inputs]
        if (len(node.inputs) != 2 or all(c is not None for c in constants)
                or any(c is None and name in model.constants  # a bias: not one value
                       for name, c in zip(node.inputs, constants, strict=True))):
            return None
        if node.op_type == "Pow":
            power = POWERS.get(constants[1]) if constants[0] is None else None
            return None if power is None else (power, (node.inputs[0], node.inputs[0]), 0.0)
        constant = next((c for c in constants if c is not None), 0.0)
        return (BINARY[node.op_type],
                tuple(None if c is not None else name
                      for name, c in zip(node.inputs, constants, strict=True)), constant)
    name = getattr(node.kernel, "function_name", None)
    operation = name(node.element_type, node.attributes) if name is not None else None
    if operation not in CODES or len(node.inputs) != 1:
        return None
    return operation, (node.inputs[0], node.inputs[0]), 0.0


def _scalar(name: str, model: Model, inputs: tuple[str, ...]) -> float | None:
    """The value of constant ``name`` if it is one FLOAT element that broadcasts to no more
    dimensions than the other input has (None otherwise)."""
    value = model.constants.get(name)
    if value is None or value.size != 1 or value.dtype != np.float32:
        return None
    others = [model.ranks.get(other) for other in inputs if other != name]
    if value.ndim and not (others and others[0] is not None and value.ndim <= others[0]):
        return None
    return float(value.reshape(-1)[0])


def _fold_casts(model: Model) -> Model:
    """Each exact Cast of elements selected from a constant (through views read by nothing
    else) made a selection from the constant cast once."""
    uses = value_reads(model)
    producer = {node.output: node for node in model.nodes}
    constants = dict(model.constants)
    replaced: dict[int, Node] = {}  # id of a node -> the node that replaces it
    dropped: set[int] = set()
    for cast in model.nodes:
        if cast.op_type != "Cast" or cast.kernel is None:
            continue
        chain, node = [], producer.get(cast.inputs[0])
        while node is not None and node.view is not None and not node.fresh:
            chain.append(node)
            node = producer.get(node.inputs[0])
        if (node is None or node.op_type not in ELEMENT_SELECTIONS
                or node.inputs[0] not in constants
                or any(uses[n.output] != 1 for n in (node, *chain))):
            continue
        source, target = constants[node.inputs[0]], NUMPY_DTYPES[cast.attributes["to"]]
        if not np.can_cast(source.dtype, target, "safe"):
            continue
        name = f"{node.inputs[0]} as {target.name} for {cast.output}"
        constants[name] = source.astype(target)
        to = cast.attributes["to"]
        # the selection first, then the views up to the Cast; the last takes the Cast's output
        path = [dataclasses.replace(node, inputs=(name, *node.inputs[1:]), element_type=to),
                *(dataclasses.replace(view, element_type=to) for view in reversed(chain))]
        path[-1] = dataclasses.replace(path[-1], output=cast.output)
        for old, new in zip((node, *reversed(chain)), path, strict=True):
            replaced[id(old)] = new
        dropped.add(id(cast))
    return with_nodes(model, replaced, dropped, constants=constants) if dropped else model


def _known_indices(model: Model) -> Model:
    """Each ArrayFeatureExtractor whose indices an ArgMax or ArgMin makes, told that none is
    negative."""
    producer = {node.output: node for node in model.nodes}
    replaced = {}
    for node in model.nodes:
        made_by = producer.get(node.inputs[1]) if len(node.inputs) > 1 else None
        if (getattr(node.view, "func", node.view) is selections.array_feature_extractor
                and made_by is not None and made_by.op_type in ("ArgMax", "ArgMin")):
            replaced[id(node)] = dataclasses.replace(node, view=functools.partial(
                selections.array_feature_extractor, nonnegative=True))
    return with_nodes(model, replaced) if replaced else model
