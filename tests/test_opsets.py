"""Models of every opset, checked against each opset's schema in onnx.

For every operator of the library, every version of its schema and every element type,
a one-node model importing that version's opset runs exactly when the schema takes the
type and the library has a kernel for it, and then gives the results of the same node in
the newest opset: the operators compute the same since opset 7, and the attributes of the
older ones either change nothing or are refused by name.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from kerneltune.errors import UnsupportedModelError
from kerneltune.kernels import catalog, library
from kerneltune.runtime import RuntimeSession, backend
from kerneltune.runtime.model import _tensor_type
from kerneltune.tuning.dtypes import NUMPY_DTYPES, held_dtype

NEWEST = onnx.defs.onnx_opset_version()
KERNELS = library()
#: every element type a kernel computes, and STRING, which none does
ELEMENT_TYPES = (*NUMPY_DTYPES, TensorProto.STRING)
RNG = np.random.default_rng(20250303)


def versions(op_type: str) -> list[int]:
    """The opsets in which the operator's schema changed (its since_versions)."""
    found = []
    for opset in range(1, NEWEST + 1):
        try:
            schema = onnx.defs.get_schema(op_type, opset)
        except onnx.defs.SchemaError:
            continue
        if not found or found[-1] != schema.since_version:
            found.append(schema.since_version)
    return found


#: input shapes where an operator's are not all 3 x 4
SHAPES = {"Gemm": ([3, 4], [3, 4], [3, 3]), "MatMul": ([3, 4], [4, 3]),
          "LayerNormalization": ([3, 4], [4])}
#: inputs of each operator (Max and Min, variadic, with two; Gemm with C)
ARITY = {"Gemm": 3, "Max": 2, "Min": 2}
#: attributes of the tests' nodes (op(B) must be 4 x 3; a Cast to FLOAT, a view of FLOAT)
NODE_ATTRIBUTES = {"Gemm": {"transB": 1}, "Cast": {"to": TensorProto.FLOAT}}
#: the output's element type where it is not the input's
OUTPUT_TYPES = {"ArgMax": TensorProto.INT64, "ArgMin": TensorProto.INT64,
                "Cast": TensorProto.FLOAT,
                **dict.fromkeys(catalog.BOOLEAN_OUTPUT, TensorProto.BOOL)}
#: the output's shape where it is not the input's: ArgMax and ArgMin along axis 0, the
#: reductions over every axis, keeping them (the defaults)
OUTPUT_SHAPES = {"ArgMax": [1, 4], "ArgMin": [1, 4], "ReduceSum": [1, 1],
                 "ReduceMean": [1, 1], "ReduceMax": [1, 1], "LayerNormalization": [3, 4]}


def one_node(op_type: str, opset: int, element_type: int, arity: int | None = None,
             **attributes):
    """A model of one node of ``op_type`` in ``opset`` on inputs of ``element_type``."""
    if arity is None:
        arity = ARITY.get(op_type, onnx.defs.get_schema(op_type, opset).min_input)
    shapes = SHAPES.get(op_type, [[3, 4]] * arity)
    inputs = [helper.make_tensor_value_info(f"x{i}", element_type, shapes[i])
              for i in range(arity)]
    defaults = dict(NODE_ATTRIBUTES.get(op_type, {}))
    if op_type == "Cast" and opset < 6:  # Cast-1 names its target type
        defaults["to"] = "FLOAT"
    node = helper.make_node(op_type, [i.name for i in inputs], ["y"],
                            **{**defaults, **attributes})
    output = helper.make_tensor_value_info(
        "y", OUTPUT_TYPES.get(op_type, element_type),
        OUTPUT_SHAPES.get(op_type, [3, 3] if op_type in SHAPES else [3, 4]))
    graph = helper.make_graph([node], op_type, inputs, [output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def feeds(model, element_type: int) -> dict[str, np.ndarray]:
    """Small values of the type; the first input's are nonzero (Div's dividend)."""
    dtype = NUMPY_DTYPES[element_type]
    result = {}
    for index, value in enumerate(model.graph.input):
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        values = RNG.integers(0, 4, shape) + (index == 0)
        result[value.name] = values > 1 if dtype.kind == "b" else values.astype(dtype)
    return result


def session(model) -> RuntimeSession:
    return RuntimeSession(model, threads=1)


CASES = [(op_type, opset) for op_type in sorted(KERNELS) for opset in versions(op_type)]


@pytest.mark.parametrize(("op_type", "opset"), CASES, ids=[f"{o}-{v}" for o, v in CASES])
def test_each_schema_version_runs_the_types_it_takes(op_type, opset):
    schema = onnx.defs.get_schema(op_type, opset)
    allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    kernel = KERNELS[op_type]
    for element_type in ELEMENT_TYPES:
        model = one_node(op_type, opset, element_type)
        # every input of one type: each input's type parameter must take it
        taken = all(_tensor_type(element_type) in allowed[formal.type_str]
                    for formal in schema.inputs[:len(model.graph.input)])
        # a Cast converts any type a session holds (runtime/casts.py those the Cast kernel
        # does not compute)
        runs = taken and (held_dtype(element_type) is not None if op_type == "Cast"
                          else element_type in kernel.element_types)
        assert backend.is_compatible(model) == runs, (op_type, opset, element_type)
        if not runs:
            continue
        inputs = feeds(model, element_type)
        newest = one_node(op_type, NEWEST, element_type, len(model.graph.input))
        (got,), (expected,) = (session(m).run(None, inputs) for m in (model, newest))
        np.testing.assert_array_equal(got, expected)


def test_opset_1_to_6_attributes_that_change_nothing_run():
    x, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.arange(4, dtype=np.float32)
    add = one_node("Add", 6, TensorProto.FLOAT, broadcast=1)
    add.graph.input[1].type.tensor_type.shape.dim.pop(0)
    np.testing.assert_array_equal(session(add).run(None, {"x0": x, "x1": b})[0], x + b)
    relu = one_node("Relu", 1, TensorProto.FLOAT, consumed_inputs=[0])
    np.testing.assert_array_equal(session(relu).run(None, {"x0": x - 5})[0],
                                  np.maximum(x - 5, 0))
    gemm = one_node("Gemm", 6, TensorProto.FLOAT, broadcast=1)
    c = np.ones((3, 3), np.float32)
    np.testing.assert_allclose(session(gemm).run(None, {"x0": x, "x1": x, "x2": c})[0],
                               x @ x.T + c)
    maximum = one_node("Max", 6, TensorProto.FLOAT, 3)
    np.testing.assert_array_equal(
        session(maximum).run(None, {"x0": x, "x1": -x, "x2": x - 1})[0], x)


def test_opset_1_to_6_broadcasting_from_an_axis_is_refused_by_name():
    add = one_node("Add", 6, TensorProto.FLOAT, broadcast=1, axis=0)
    with pytest.raises(UnsupportedModelError, match="attribute axis"):
        session(add)
    assert not backend.is_compatible(add)
    # without broadcast=1 the axis means nothing
    assert backend.is_compatible(one_node("Add", 6, TensorProto.FLOAT, axis=0))


def test_a_type_the_opsets_schema_lacks_is_refused_with_the_version():
    assert backend.is_compatible(one_node("Add", 14, TensorProto.INT8))
    with pytest.raises(UnsupportedModelError, match="Add-13, the Add of this opset, takes no "
                                                    "INT8 as T"):
        session(one_node("Add", 13, TensorProto.INT8))
    with pytest.raises(UnsupportedModelError, match="takes no BFLOAT16"):
        session(one_node("Abs", 12, TensorProto.BFLOAT16))


def test_mixed_types_run_only_where_the_schema_gives_an_input_its_own():
    def pow_model(opset, base, exponent):
        model = one_node("Pow", opset, base)
        model.graph.input[1].type.tensor_type.elem_type = exponent
        return model

    assert backend.is_compatible(pow_model(15, TensorProto.FLOAT, TensorProto.UINT8))
    assert backend.is_compatible(pow_model(12, TensorProto.INT32, TensorProto.FLOAT))
    with pytest.raises(UnsupportedModelError, match="takes no INT64 as T"):
        session(pow_model(7, TensorProto.FLOAT, TensorProto.INT64))
    mixed = one_node("Add", 14, TensorProto.FLOAT)
    mixed.graph.input[1].type.tensor_type.elem_type = TensorProto.DOUBLE
    with pytest.raises(UnsupportedModelError, match=r"input types mixed \(T\)"):
        session(mixed)
    x = np.array([[2.0, -3.0, 0.5, 4.0]] * 3, np.float32)
    e = np.array([[3, 2, 5, 0]] * 3, np.uint8)
    (z,) = session(pow_model(15, TensorProto.FLOAT, TensorProto.UINT8)).run(None, {
        "x0": x, "x1": e})
    np.testing.assert_array_equal(z, np.power(x, e.astype(np.float64)).astype(np.float32))
