"""Constant weights laid out once, in the order the products read them.

PyTorch's exporter writes a Linear layer on rows as a Gemm with ``transB=1``: the weight
is stored one output per row, and every run would read op(B) transposed. The compiled
paths transpose it into a packed panel at each call (and an unpacked path cannot take
it), and BLAS runs its kernels for a transposed operand. A session transposes such a
constant B once, as onnxruntime prepacks its weights, and runs the Gemm with
``transB=0``. The compiled paths sum the same products in the same order either way, so
their bits do not change; BLAS's kernels for the two layouts may round differently, as
any BLAS's do between its layouts (docs/kernels.md, "Weights laid out once").
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np

from .._support.aligned import aligned
from .model import Model, Node, value_reads, with_nodes


def lay_out_weights(model: Model) -> Model:
    """``model`` with the constant B of each Gemm of ``transB=1`` transposed once and the
    Gemm given ``transB=0``: one transposed copy per weight, which replaces the weight
    unless another node reads it as stored."""
    gemms = [node for node in model.nodes if _reads_constant_transposed(node, model)]
    if not gemms:
        return model
    reads = value_reads(model)
    weights = Counter(node.inputs[1] for node in gemms)
    constants = dict(model.constants)
    names = {}  # a weight's name -> its transposed copy's
    for weight, count in weights.items():
        names[weight] = weight if reads[weight] == count else f"{weight} transposed"
        constants[names[weight]] = aligned(np.ascontiguousarray(model.constants[weight].T))
    laid_out = {id(node): dataclasses.replace(
        node, inputs=(node.inputs[0], names[node.inputs[1]], *node.inputs[2:]),
        attributes={**node.attributes, "transB": 0}) for node in gemms}
    return with_nodes(model, laid_out, constants=constants)


def _reads_constant_transposed(node: Node, model: Model) -> bool:
    """Whether ``node`` is a Gemm that reads a constant matrix transposed (``transB=1``)."""
    weight = model.constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
    return (node.op_type == "Gemm" and node.kernel is not None
            and bool(node.attributes.get("transB")) and weight is not None and weight.ndim == 2)
