"""Chains of elementwise nodes run as one call of the ElementwiseChain kernel: fewer steps,
the unfused session's bits."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kerneltune.kernels import library
from kerneltune.runtime import RuntimeSession

CHAIN = "ElementwiseChain"
SIZES = [(1, 1), (1, 17), (3, 5), (2, 2049), (64, 1024), (1, 100_003)]


def _model(nodes, constants=None, outputs=("Y",), dtype=TensorProto.FLOAT, inputs=("X",)):
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info(name, dtype, ["N", "M"])
                         for name in inputs],
        [helper.make_tensor_value_info(name, dtype, ["N", f"{name}1"]) for name in outputs],
        [numpy_helper.from_array(np.asarray(value, np.float32 if dtype == TensorProto.FLOAT
                                            else np.float64), name)
         for name, value in (constants or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _gelu_tanh():
    """GELU's tanh form, written out as exporters write it."""
    node = helper.make_node
    return _model([node("Pow", ["X", "three"], ["x3"], name="pow"),
                   node("Mul", ["x3", "cubic"], ["x3c"], name="mul_cubic"),
                   node("Add", ["X", "x3c"], ["inner"], name="add"),
                   node("Mul", ["inner", "scale"], ["scaled"], name="mul_scale"),
                   node("Tanh", ["scaled"], ["t"], name="tanh"),
                   node("Add", ["t", "one"], ["t1"], name="add_one"),
                   node("Mul", ["X", "t1"], ["xt"], name="mul_x"),
                   node("Mul", ["xt", "half"], ["Y"], name="mul_half")],
                  {"three": 3.0, "cubic": 0.044715, "scale": 0.7978845608028654, "one": 1.0,
                   "half": 0.5})


def _gelu_erf():
    """GELU as the PyTorch exporter writes it below opset 20: x * 0.5 * (1 + erf(x / sqrt 2))."""
    node = helper.make_node
    return _model([node("Div", ["X", "root2"], ["d"]), node("Erf", ["d"], ["e"]),
                   node("Add", ["e", "one"], ["e1"]), node("Mul", ["X", "e1"], ["xe"]),
                   node("Mul", ["xe", "half"], ["Y"])],
                  {"root2": 1.4142135381698608, "one": 1.0, "half": 0.5})


def _silu():
    node = helper.make_node
    return _model([node("Sigmoid", ["X"], ["s"]), node("Mul", ["X", "s"], ["Y"])])


def _sessions(model):
    return [RuntimeSession(model.SerializeToString(), threads=2, fusion=fused, contention=None)
            for fused in (True, False)]


def _inputs(shape, positive=False):
    x = (np.random.default_rng(sum(shape)).standard_normal(shape) * 3).astype(np.float32)
    if positive:
        return np.abs(x) + np.float32(0.1)
    flat = x.reshape(-1)
    flat[: min(4, flat.size)] = [np.nan, np.inf, -np.inf, -0.0][: min(4, flat.size)]
    return x


def _same_bits(model, positive=False):
    fused, unfused = _sessions(model)
    for shape in SIZES:
        x = _inputs(shape, positive)
        (a,), (b,) = fused.run(None, {"X": x}), unfused.run(None, {"X": x})
        assert a.shape == b.shape == x.shape and a.dtype == np.float32
        _assert_same_bits(a, b)
    return fused, unfused


def _assert_same_bits(a, b):
    """The same bits, a NaN's sign aside: IEEE 754 leaves it to the order in which the
    hardware takes two NaN operands, which the compiler picks loop by loop."""
    nan = np.isnan(a)
    assert (nan == np.isnan(b)).all()
    assert a[~nan].tobytes() == b[~nan].tobytes()


@pytest.mark.parametrize(("model", "nodes"), [(_gelu_tanh, 8), (_gelu_erf, 5), (_silu, 2)])
def test_an_activation_written_out_runs_as_one_call_with_the_same_bits(model, nodes):
    fused, unfused = _same_bits(model())
    assert [n.op_type for n in fused._model.nodes] == [CHAIN]
    assert len(unfused._model.nodes) == nodes
    assert fused._model.nodes[0].name.count(" + ") == nodes - 1


UNARY = ["Abs", "Neg", "Relu", "Exp", "Log", "Sqrt", "Sigmoid", "Tanh", "Erf", "Gelu",
         "Reciprocal"]


@pytest.mark.parametrize("op", UNARY)
def test_each_unary_operation_gives_the_unfused_bits(op):
    node = helper.make_node
    model = _model([node(op, ["X"], ["u"]), node("Mul", ["u", "X"], ["Y"])])
    fused, _ = _same_bits(model, positive=op in ("Log", "Sqrt"))
    assert [n.op_type for n in fused._model.nodes] == [CHAIN]


def test_gelu_of_tanh_form_gives_the_unfused_bits():
    node = helper.make_node
    model = _model([node("Gelu", ["X"], ["u"], approximate="tanh"),
                    node("Add", ["u", "X"], ["Y"])])
    fused, _ = _same_bits(model)
    assert [n.op_type for n in fused._model.nodes] == [CHAIN]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("constant_first", [False, True])
@pytest.mark.parametrize("constant", [np.float32(0.3), np.array([0.3], np.float32)])
def test_each_binary_operation_with_a_constant_either_side_gives_the_unfused_bits(
        op, constant_first, constant):
    node = helper.make_node
    inputs = ["c", "X"] if constant_first else ["X", "c"]
    model = _model([node(op, inputs, ["b"]), node("Tanh", ["b"], ["Y"])], {"c": constant})
    fused, _ = _same_bits(model)
    assert [n.op_type for n in fused._model.nodes] == [CHAIN]


@pytest.mark.parametrize("exponent", [2.0, 3.0])
def test_a_power_by_two_or_three_gives_the_unfused_bits(exponent):
    node = helper.make_node
    model = _model([node("Pow", ["X", "e"], ["p"]), node("Sub", ["p", "X"], ["Y"])],
                   {"e": exponent})
    fused, _ = _same_bits(model)
    assert [n.op_type for n in fused._model.nodes] == [CHAIN]


def _unfused(model) -> list[str]:
    return [n.op_type for n in RuntimeSession(model.SerializeToString())._model.nodes]


def test_what_does_not_chain_runs_unfused():
    node = helper.make_node
    silu = [node("Sigmoid", ["X"], ["s"]), node("Mul", ["X", "s"], ["Y"])]
    # an intermediate that is an output too
    assert _unfused(_model(silu, outputs=("Y", "s"))) == ["Sigmoid", "Mul"]
    # two tensors in
    assert _unfused(_model([node("Add", ["X", "Z"], ["a"]), node("Tanh", ["a"], ["Y"])],
                           inputs=("X", "Z"))) == ["Add", "Tanh"]
    # a constant of more than one element (a bias), a power by another exponent
    assert _unfused(_model([node("Add", ["X", "b"], ["a"]), node("Tanh", ["a"], ["Y"])],
                           {"b": [1.0, 2.0]})) == ["Add", "Tanh"]
    assert _unfused(_model([node("Pow", ["X", "e"], ["p"]), node("Tanh", ["p"], ["Y"])],
                           {"e": 4.0})) == ["Pow", "Tanh"]
    # a constant that would add a dimension
    assert _unfused(_model([node("Add", ["X", "b"], ["a"]), node("Tanh", ["a"], ["Y"])],
                           {"b": [[[1.0]]]})) == ["Add", "Tanh"]
    # DOUBLE
    assert _unfused(_model(silu, dtype=TensorProto.DOUBLE)) == ["Sigmoid", "Mul"]


def test_a_chain_read_by_another_node_stops_where_it_is_read():
    node = helper.make_node
    # s feeds the Mul and a MatMul: it ends the chain of Neg and Sigmoid, and the Mul reads
    # two tensors (X and s), so it and the Abs stay steps
    model = _model([node("Neg", ["X"], ["n"]), node("Sigmoid", ["n"], ["s"]),
                    node("Mul", ["X", "s"], ["m"]), node("Abs", ["m"], ["Y"]),
                    node("MatMul", ["s", "w"], ["Z"])], {"w": np.ones((4, 2))},
                   outputs=("Y", "Z"))
    session = RuntimeSession(model.SerializeToString(), contention=None)
    assert [n.op_type for n in session._model.nodes] == [CHAIN, "Mul", "Abs", "MatMul"]
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    unfused = RuntimeSession(model.SerializeToString(), fusion=False, contention=None)
    for a, b in zip(session.run(None, {"X": x}), unfused.run(None, {"X": x}), strict=True):
        _assert_same_bits(a, b)


def test_a_bias_before_an_activation_stays_a_step_and_the_activation_chains():
    node = helper.make_node
    # SiLU after a MatMul and its bias, as exporters write it for a batch of sequences
    # (rank 3: the bias does not fuse into the MatMul)
    model = _model([node("Add", ["X", "b"], ["h"]), node("Sigmoid", ["h"], ["s"]),
                    node("Mul", ["h", "s"], ["Y"])], {"b": [0.5, -0.5, 1.0]})
    fused, unfused = _sessions(model)
    assert [n.op_type for n in fused._model.nodes] == ["Add", CHAIN]
    x = np.random.default_rng(3).standard_normal((5, 3)).astype(np.float32)
    _assert_same_bits(fused.run(None, {"X": x})[0], unfused.run(None, {"X": x})[0])


def test_a_chain_whose_inner_value_is_read_outside_it_runs_unfused():
    node = helper.make_node
    # n feeds b and c (steps), b is read by a MatMul too, c by the last step: the nodes join
    # through n, but b would leave the chain before its end
    model = _model([node("Neg", ["X"], ["n"]), node("Abs", ["n"], ["b"]),
                    node("Exp", ["n"], ["c"]), node("Tanh", ["c"], ["Y"]),
                    node("MatMul", ["b", "w"], ["Z"])], {"w": np.ones((4, 2))},
                   outputs=("Y", "Z"))
    session = RuntimeSession(model.SerializeToString(), contention=None)
    assert [n.op_type for n in session._model.nodes] == ["Neg", "Abs", "Exp", "Tanh",
                                                          "MatMul"]
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    unfused = RuntimeSession(model.SerializeToString(), fusion=False, contention=None)
    for a, b in zip(session.run(None, {"X": x}), unfused.run(None, {"X": x}), strict=True):
        _assert_same_bits(a, b)


def test_the_chain_kernel_has_its_own_key_and_refuses_a_bad_program():
    kernel = library()[CHAIN]
    assert kernel.tuning_key("FLOAT").kernel == CHAIN
    assert kernel.element_types == (TensorProto.FLOAT,)
    x = np.linspace(-4, 4, 1000, dtype=np.float32).reshape(1, -1)
    # the default program (calibration's) is the GELU of tanh form
    (reference,) = RuntimeSession(_gelu_tanh().SerializeToString(), fusion=False).run(
        None, {"X": x})
    assert kernel.prepare("FLOAT").run(x).tobytes() == reference.tobytes()
    for steps, problem in [((), "at least one step"),
                           ((("cosh", 0, 0, 0.0),), "unknown operation 'cosh'"),
                           ((("tanhf_rational", -1, 0, 0.0),), "operand -1"),
                           ((("add", 0, 1, 0.0),), "operand 1"),
                           ((("add", -1, -1, 1.0),), "both operands are constants")]:
        with pytest.raises(ValueError, match=problem):
            kernel.prepare("FLOAT", steps=steps)


def test_a_model_naming_the_chain_kernel_is_refused():
    node = helper.make_node
    with pytest.raises(onnx.checker.ValidationError, match="ElementwiseChain"):
        RuntimeSession(_model([node(CHAIN, ["X"], ["Y"])]).SerializeToString())
