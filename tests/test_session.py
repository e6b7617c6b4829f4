"""RuntimeSession: loading, feeds, tuning modes, frozen configuration, diagnostics."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from kerneltune._support.aligned import ALIGNMENT
from kerneltune.errors import TuningValidationError, UnknownKernelError, UnsupportedModelError
from kerneltune.kernels import library, register_library
from kerneltune.machine.selectors import CpuSelector
from kerneltune.runtime import RuntimeSession
from kerneltune.runtime.model import prepare_model
from kerneltune.tuning.registry import KernelTuningProfile, KernelTuningRegistry

GRAIN = "parallel.minimum_elements"


def model(nodes, inputs, outputs, opset=17, initializers=()):
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def tensor(name, element_type=TensorProto.FLOAT, shape=("N", 4)):
    return helper.make_tensor_value_info(name, element_type, list(shape))


@pytest.fixture
def add_tanh():
    return model(
        [helper.make_node("Add", ["X", "Y"], ["T"], name="add"),
         helper.make_node("Tanh", ["T"], ["Z"], name="tanh")],
        [tensor("X"), tensor("Y", shape=(4,))], [tensor("Z")])


@pytest.fixture
def registry():
    registry = KernelTuningRegistry()
    register_library(registry)
    return registry


def feeds(rows=3):
    rng = np.random.default_rng(0)
    return {"X": rng.standard_normal((rows, 4)).astype(np.float32),
            "Y": rng.standard_normal(4).astype(np.float32)}


def test_runs_like_onnxruntime(add_tanh, registry, tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(add_tanh, path)
    for source in (add_tanh, add_tanh.SerializeToString(), path, str(path)):
        session = RuntimeSession(source, threads=2, registry=registry)
        (z,) = session.run(None, feeds())
        f = feeds()
        np.testing.assert_allclose(z, np.tanh(f["X"] + f["Y"]), rtol=1e-6)
        assert [i.name for i in session.get_inputs()] == ["X", "Y"]
        assert session.get_inputs()[0].shape == ["N", 4]
        assert session.get_inputs()[0].type == "tensor(float)"
        assert session.get_outputs()[0].name == "Z"
        assert session.run(["Z"], f)[0].shape == (3, 4)


def test_initializers_constants_and_intermediates(registry):
    weights = onnx.numpy_helper.from_array(np.arange(4, dtype=np.float32), "W")
    constant = helper.make_node("Constant", [], ["C"], name="two",
                                value=onnx.numpy_helper.from_array(np.float32(2.0)))
    nodes = [
        constant,
        helper.make_node("Add", ["X", "W"], ["S"], name="shift"),
        helper.make_node("Mul", ["S", "C"], ["Z"], name="double"),
    ]
    graph = helper.make_graph(nodes, "g", [tensor("X")], [tensor("Z"), tensor("S")],
                              initializer=[weights])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = RuntimeSession(proto, registry=registry)
    x = np.ones((2, 4), np.float32)
    z, s = session.run(None, {"X": x})
    np.testing.assert_array_equal(s, x + np.arange(4))
    np.testing.assert_array_equal(z, (x + np.arange(4)) * 2)


def test_constants_start_on_a_cache_line():
    # MatMul reads B in place, so a weight's placement would set its speed
    weights = [onnx.numpy_helper.from_array(np.arange(n, dtype=dtype), f"W{n}{dtype.__name__}")
               for n in range(1, 30) for dtype in (np.float32, np.float64, np.int8)]
    nodes = [helper.make_node("Add", [w.name, w.name], [f"Z{i}"]) for i, w in enumerate(weights)]
    outputs = [helper.make_tensor_value_info(f"Z{i}", w.data_type, w.dims)
               for i, w in enumerate(weights)]
    constants = prepare_model(model(nodes, [], outputs, initializers=weights),
                              library()).constants
    for w in weights:
        assert constants[w.name].ctypes.data % ALIGNMENT == 0
        np.testing.assert_array_equal(constants[w.name], onnx.numpy_helper.to_array(w))


def test_variadic_max_and_gemm_attributes(registry):
    proto = model(
        [helper.make_node("Max", ["A", "B", "C"], ["M"], name="max3"),
         helper.make_node("Gemm", ["M", "B"], ["G"], name="gemm", alpha=0.5, transB=1)],
        [tensor("A", shape=(4, 4)), tensor("B", shape=(4, 4)), tensor("C", shape=(4, 4))],
        [tensor("G", shape=(4, 4))])
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal((4, 4)).astype(np.float32) for _ in range(3))
    (g,) = RuntimeSession(proto, registry=registry).run(None, {"A": a, "B": b, "C": c})
    np.testing.assert_allclose(g, 0.5 * np.maximum(np.maximum(a, b), c) @ b.T, rtol=1e-5)


def test_feed_errors_name_the_input(add_tanh, registry):
    session = RuntimeSession(add_tanh, registry=registry)
    f = feeds()
    with pytest.raises(ValueError, match=r"missing input\(s\) \['Y'\]"):
        session.run(None, {"X": f["X"]})
    with pytest.raises(ValueError, match=r"unknown input\(s\) \['W'\]"):
        session.run(None, {**f, "W": f["Y"]})
    with pytest.raises(TypeError, match="input 'X': expected element type float32"):
        session.run(None, {**f, "X": f["X"].astype(np.float64)})
    with pytest.raises(ValueError, match="input 'X': expected rank 2"):
        session.run(None, {**f, "X": f["X"][0]})
    with pytest.raises(ValueError, match="input 'X': dimension 1 must be 4"):
        session.run(None, {**f, "X": np.ones((3, 5), np.float32)})
    with pytest.raises(ValueError, match="unknown output"):
        session.run(["nope"], f)


def test_an_error_of_a_step_names_its_node(registry):
    proto = model([helper.make_node("Tanh", ["X"], ["T"], name="first"),
                   helper.make_node("Add", ["T", "Y"], ["Z"], name="second")],
                  [tensor("X", shape=("N", "C")), tensor("Y", shape=("M", "D"))],
                  [tensor("Z", shape=("P", "Q"))])
    session = RuntimeSession(proto, registry=registry)
    with pytest.raises(ValueError, match=r"^node 'second' \(Add\): .*broadcast"):
        session.run(None, {"X": np.ones((2, 4), np.float32), "Y": np.ones((3, 5), np.float32)})


def test_symbolic_dimensions_must_agree(registry):
    proto = model([helper.make_node("Add", ["X", "Y"], ["Z"])],
                  [tensor("X"), tensor("Y")], [tensor("Z")])
    session = RuntimeSession(proto, registry=registry)
    with pytest.raises(ValueError, match="'N'"):
        session.run(None, {"X": np.ones((2, 4), np.float32), "Y": np.ones((3, 4), np.float32)})


def test_unsupported_models_name_every_bad_node(registry):
    proto = model(
        [helper.make_node("Cos", ["X"], ["A"], name="cosine"),
         helper.make_node("Exp", ["I"], ["B"], name="integer_exp"),
         helper.make_node("Relu", ["X"], ["C"], name="fine")],
        [tensor("X"), tensor("I", TensorProto.INT32, (2,))],
        [tensor("A"), tensor("B", TensorProto.INT32, (2,)), tensor("C")])
    with pytest.raises(UnsupportedModelError) as error:
        RuntimeSession(proto, registry=registry)
    message = str(error.value)
    assert "2 unsupported" in message
    assert "cosine: op Cos, domain ai.onnx, opset 17" in message
    assert "integer_exp" in message and "INT32" in message and "fine" not in message


@pytest.mark.parametrize("opset", [7, 12, onnx.defs.onnx_opset_version()])
def test_older_and_newer_opsets_run_alike(add_tanh, registry, opset):
    add_tanh.opset_import[0].version = opset
    (z,) = RuntimeSession(add_tanh, registry=registry).run(None, feeds())
    np.testing.assert_allclose(z, np.tanh(feeds()["X"] + feeds()["Y"]), rtol=1e-6)


def test_diagnostics_for_each_tuning_mode(add_tanh, registry):
    key = library()["Add"].tuning_key("FLOAT")
    registry.register_profile(key, CpuSelector(minimum_threads=1), {GRAIN: 4096},
                              name="everywhere")
    resolved = RuntimeSession(add_tanh, registry=registry)
    add = resolved.tuning_diagnostics[0]
    assert add["node"] == "add" and add["op_type"] == "Add"
    assert add["source"]["tier"] == "portable" and add["source"]["profile_name"] == "everywhere"
    assert add["values"][GRAIN] == 4096
    assert set(add["values"]) == set(library()["Add"].schema("FLOAT").parameters)
    assert resolved.tuning_diagnostics[1]["source"]["tier"] == "defaults"
    statistics = resolved.tuning_resolution_statistics
    assert statistics["tunable_kernels"] == 2 and statistics["resolved_from_profile"] == 1
    assert statistics["snapshot_seconds"] >= 0 and statistics["resolution_seconds"] >= 0

    portable = RuntimeSession(add_tanh, tuning="portable", registry=registry)
    assert portable.tuning_diagnostics[0]["source"]["tier"] == "defaults"
    assert portable.tuning_diagnostics[0]["rejected"][0]["reason"] == "tuning"

    named = RuntimeSession(add_tanh, profile_name="everywhere", registry=registry)
    assert named.tuning_diagnostics[0]["values"][GRAIN] == 4096
    digest = named.tuning_diagnostics[0]["source"]["digest"]
    by_digest = RuntimeSession(add_tanh, profile_digest=digest, registry=registry)
    assert by_digest.tuning_diagnostics[0]["source"]["profile_name"] == "everywhere"

    overridden = RuntimeSession(add_tanh, overrides={"Add": {GRAIN: 7}, key: {
        "parallel.maximum_threads": 3}}, registry=registry)
    diagnostics = overridden.tuning_diagnostics[0]
    assert diagnostics["source"]["tier"] == "override"
    assert diagnostics["base_source"]["profile_name"] == "everywhere"
    assert diagnostics["values"][GRAIN] == 7 and diagnostics["values"][
        "parallel.maximum_threads"] == 3


def test_bad_overrides_and_restrictions_fail_at_construction(add_tanh, registry):
    with pytest.raises(TuningValidationError, match=GRAIN):
        RuntimeSession(add_tanh, overrides={"Add": {GRAIN: 0}}, registry=registry)
    with pytest.raises(TuningValidationError, match="unknown parameter"):
        RuntimeSession(add_tanh, overrides={"Tanh": {"parallel.grain": 5}}, registry=registry)
    with pytest.raises(UnknownKernelError, match="Addd"):
        RuntimeSession(add_tanh, overrides={"Addd": {GRAIN: 5}}, registry=registry)
    with pytest.raises(UnknownKernelError, match="named 'missing'"):
        RuntimeSession(add_tanh, profile_name="missing", registry=registry)
    with pytest.raises(UnknownKernelError, match="digest"):
        RuntimeSession(add_tanh, profile_digest="0" * 64, registry=registry)


def test_sessions_keep_their_configuration_after_a_new_publication(add_tanh, registry):
    key = library()["Add"].tuning_key("FLOAT")
    before = RuntimeSession(add_tanh, threads=2, registry=registry)
    x = {"X": np.ones((100_000, 4), np.float32), "Y": np.ones(4, np.float32)}
    registry.register_profiles([KernelTuningProfile(key, {
        GRAIN: 10_000_000, "parallel.broadcast_minimum_elements": 10_000_000},
        selector=CpuSelector(minimum_threads=1))])
    after = RuntimeSession(add_tanh, threads=2, registry=registry)
    assert before.tuning_diagnostics[0]["values"][GRAIN] == 32768
    assert after.tuning_diagnostics[0]["values"][GRAIN] == 10_000_000
    assert before._prepared[0].plan(x["X"], x["Y"]).threads == 2
    assert after._prepared[0].plan(x["X"], x["Y"]).threads == 1
    np.testing.assert_array_equal(before.run(None, x)[0], after.run(None, x)[0])


def test_steady_runs_never_touch_the_registry(add_tanh, registry):
    session = RuntimeSession(add_tanh, registry=registry)
    session.run(None, feeds())
    counts = registry.access_counts()
    for _ in range(50):
        session.run(None, feeds())
    assert registry.access_counts() == counts


def test_outputs_are_fresh_arrays_even_for_passthrough(registry):
    proto = model([helper.make_node("Abs", ["X"], ["Z"])], [tensor("X")],
                  [tensor("Z"), tensor("X")])
    session = RuntimeSession(proto, registry=registry)
    x = -np.ones((2, 4), np.float32)
    z, passthrough = session.run(None, {"X": x})
    assert not np.shares_memory(passthrough, x)
    np.testing.assert_array_equal(passthrough, x)
    np.testing.assert_array_equal(z, 1)


# --- shape-only operators ---------------------------------------------------------------------

def _shaped(nodes, outputs, initializers=(), opset=17, domains=()):
    graph = helper.make_graph(nodes, "shapes", [tensor("X", shape=(2, 3, 4))],
                              [tensor(name, shape=shape) for name, shape in outputs],
                              initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                   *(helper.make_opsetid(d, v)
                                                     for d, v in domains)])


def _int64(name, values):
    return onnx.numpy_helper.from_array(np.array(values, np.int64), name)


def test_shape_only_operators_are_views_without_a_tuning_key():
    proto = _shaped([helper.make_node("Cast", ["X"], ["C"], to=TensorProto.FLOAT),
                     helper.make_node("Flatten", ["C"], ["F"], axis=2),
                     helper.make_node("Tanh", ["F"], ["T"]),
                     helper.make_node("Reshape", ["T", "shape"], ["Y"])],
                    [("Y", (2, 12))], [_int64("shape", [2, -1])])
    session = RuntimeSession(proto)
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    (y,) = session.run(None, {"X": x})
    assert y.shape == (2, 12)
    assert np.array_equal(y, library()["Tanh"].prepare(TensorProto.FLOAT, library()[
        "Tanh"].configure(TensorProto.FLOAT, {}), 1).run(x).reshape(2, 12))
    # only the computing node has a key and a resolution
    assert [row["op_type"] for row in session.tuning_diagnostics] == ["Tanh"]


@pytest.mark.parametrize(("sizes", "given", "bound"), [
    ([2, -1], "constant", True),  # read once: the run calls x.reshape((2, -1))
    ([0, -1], "constant", False),  # a 0 keeps the input's dimension: read every run
    ([2, -1], "input", False),
])
def test_a_reshape_of_constant_sizes_reads_them_once(sizes, given, bound):
    node = helper.make_node("Reshape", ["X", "shape"], ["Y"])
    if given == "constant":
        proto = _shaped([node], [("Y", (2, 12))], [_int64("shape", sizes)])
    else:
        graph = helper.make_graph([node], "shapes", [tensor("X", shape=(2, 3, 4)),
                                                     tensor("shape", TensorProto.INT64, (2,))],
                                  [tensor("Y", shape=(2, 12))])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = RuntimeSession(proto)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    feed = {"X": x} if given == "constant" else {"X": x, "shape": np.array(sizes, np.int64)}
    (y,) = session.run(None, feed)
    np.testing.assert_array_equal(y, x.reshape(2, 12))
    ((_, arguments, _, _),) = session._steps
    assert len(arguments) == (1 if bound else 2)


def test_an_output_that_views_an_input_or_a_constant_or_another_output_is_a_fresh_array():
    proto = _shaped([helper.make_node("Identity", ["X"], ["A"]),
                     helper.make_node("Unsqueeze", ["W", "axes"], ["B"]),
                     helper.make_node("Tanh", ["X"], ["T"]),
                     helper.make_node("Squeeze", ["T"], ["C"]),
                     helper.make_node("Identity", ["T"], ["D"])],
                    [("A", (2, 3, 4)), ("B", (1, 4)), ("C", (2, 3, 4)), ("D", (2, 3, 4))],
                    [onnx.numpy_helper.from_array(np.ones(4, np.float32), "W"),
                     _int64("axes", [0])])
    session = RuntimeSession(proto)
    x = np.zeros((2, 3, 4), np.float32)
    a, b, c, d = session.run(None, {"X": x})
    assert not np.shares_memory(a, x)
    b[...] = 7  # the constant is not the caller's to change
    assert session.run(["B"], {"X": x})[0].tolist() == [[1.0] * 4]
    assert not np.shares_memory(c, d)


def test_a_refused_node_of_another_domain_names_that_domain_s_opset():
    node = helper.make_node("Imputer", ["X"], ["Y"], domain="ai.onnx.ml",
                            imputed_value_floats=[0.0], replaced_value_float=-1.0)
    proto = _shaped([node], [("Y", (2, 3, 4))], domains=[("ai.onnx.ml", 1)])
    proto.ir_version = 8
    with pytest.raises(UnsupportedModelError, match="domain ai.onnx.ml, opset 1,"):
        RuntimeSession(proto)
