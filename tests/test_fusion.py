"""A MatMul and the Add of its bias run as one call, and a Cast of a constant's selection
folded into the constant: fewer steps, the same bits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kerneltune.kernels.gemm import COMPILED_POOL_VARIANTS
from kerneltune.kernels.variants import selected_variant
from kerneltune.runtime import RuntimeSession, selections
from kerneltune.runtime.program import WORKS, PerWork
from kerneltune.runtime.session import BLAS_POOL, BLAS_POOL_MINIMUM_WEIGHT, OPENMP_POOL

CORPUS = Path(__file__).resolve().parent / "data" / "converted"
TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
         np.float16: TensorProto.FLOAT16}


def _linear(dtype, k: int, n: int, bias_shape=None, output_product=False, rank=2,
            relu=False):
    """X @ W + b, as converters write a Linear layer (W and b constants), and its Relu."""
    rng = np.random.default_rng(k + n)
    w = rng.standard_normal((k, n)).astype(dtype)
    b = rng.standard_normal(bias_shape or (n,)).astype(dtype)
    nodes = [helper.make_node("MatMul", ["X", "W"], ["P"], name="matmul"),
             helper.make_node("Add", ["P", "B"], ["S" if relu else "Y"], name="add")]
    if relu:
        nodes.append(helper.make_node("Relu", ["S"], ["Y"], name="relu"))
    shape = ["N", k] if rank == 2 else ["B", "N", k]
    outputs = [helper.make_tensor_value_info("Y", TYPES[dtype], None)]
    if output_product:
        outputs.append(helper.make_tensor_value_info("P", TYPES[dtype], None))
    graph = helper.make_graph(nodes, "linear",
                              [helper.make_tensor_value_info("X", TYPES[dtype], shape)],
                              outputs, [numpy_helper.from_array(w, "W"),
                                        numpy_helper.from_array(b, "B")])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph))


def _steps(session: RuntimeSession) -> list[str]:
    return [node.op_type for node in session._model.nodes]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("rows", "k", "n"), [(1, 8, 3), (64, 32, 16), (600, 256, 128),
                                              (300, 256, 256)])
@pytest.mark.parametrize("bias_shape", [None, (1, "n"), (1,)])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_matmul_and_its_bias_run_as_one_call_with_the_same_bits(dtype, rows, k, n,
                                                                   bias_shape, threads):
    shape = None if bias_shape is None else tuple(n if d == "n" else d for d in bias_shape)
    model = _linear(dtype, k, n, shape)
    fused, unfused = (RuntimeSession(model, threads=threads, fusion=f, contention=None)
                      for f in (True, False))
    assert _steps(fused) == ["MatMul"] and _steps(unfused) == ["MatMul", "Add"]
    x = np.random.default_rng(rows).standard_normal((rows, k)).astype(dtype)
    (a,), (b,) = fused.run(None, {"X": x}), unfused.run(None, {"X": x})
    assert a.dtype == b.dtype and a.shape == b.shape == (rows, n)
    assert a.tobytes() == b.tobytes()
    # the same thresholds choose the same path: BLAS's for the largest products on one
    # thread (a weight worth panels meets it at its own threshold); on two, a model of two
    # nodes runs its products on the OpenMP pool, fused or not, compiled where the
    # variant's compiled products beat BLAS on one thread, unless its weight is large
    # enough for BLAS's pool
    w, bias = (fused._model.constants[name] for name in ("W", "B"))
    path = fused._prepared[0].plan(x, w, bias).path
    assert path == unfused._prepared[0].plan(x, unfused._model.constants["W"]).path
    compiled = (threads > 1 and selected_variant() in COMPILED_POOL_VARIANTS
                and k * n < BLAS_POOL_MINIMUM_WEIGHT)
    config = fused._prepared[0].config
    on_panels = k * n >= config.pack_b_minimum_elements and rows > config.skinny_m_limit
    blas_from = config.packed_blas_minimum_fmas if on_panels else config.blas_minimum_fmas
    assert (path == "blas") == (rows * k * n >= blas_from and not compiled)


@pytest.mark.parametrize(("dtype", "k", "pool"), [
    (np.float32, 256, BLAS_POOL), (np.float64, 256, BLAS_POOL), (np.float32, 64, OPENMP_POOL),
    (np.float16, 256, OPENMP_POOL)])
def test_a_model_with_a_large_weight_runs_its_other_nodes_on_the_calling_thread(dtype, k,
                                                                               pool):
    """On two threads: BLAS's pool, the Add and Relu on one thread and the product on two,
    for a FLOAT or DOUBLE weight of BLAS_POOL_MINIMUM_WEIGHT elements; else the OpenMP
    pool, every node on two (a 16-bit float product converts on the OpenMP pool)."""
    n = BLAS_POOL_MINIMUM_WEIGHT // 256
    # an override: from the portable defaults alone, a session keeps its products off a
    # BLAS of narrower kernels than the variant, and off its pool (test_narrow_blas)
    session = RuntimeSession(_linear(dtype, k, n, relu=True), threads=2, fusion=False,
                             contention=None, overrides={"MatMul": {"algorithm.tile_m": 64}})
    others = 1 if pool == BLAS_POOL else 2
    assert [prepared.threads for prepared in session._prepared] == [2, others, others]
    assert session._pool(2) == pool and session._pool(1) is None


def test_a_run_whose_products_take_no_blas_runs_the_other_nodes_on_every_thread():
    """On BLAS's pool, a work (the feeds' shapes) whose first run took every product down a
    compiled path runs its other nodes on the session's threads from then on; one whose
    product took BLAS keeps them on the calling thread. The bits are the same either way,
    and a session remembers at most WORKS works."""
    n = BLAS_POOL_MINIMUM_WEIGHT // 256
    model = _linear(np.float32, 256, n, relu=True)
    blas_from = dict.fromkeys(("algorithm.blas_minimum_fmas",
                               "algorithm.packed_blas_minimum_fmas"), 1 << 22)
    session = RuntimeSession(model, threads=2, fusion=False, contention=None,
                             overrides={"MatMul": blas_from})
    alone = RuntimeSession(model, threads=1, fusion=False, contention=None,
                           overrides={"MatMul": blas_from})
    run = session._programs[2]
    assert isinstance(run, PerWork) and session._pool(2) == BLAS_POOL
    assert [prepared.threads for prepared in session._prepared] == [2, 1, 1]
    assert [prepared.threads for prepared in session._prepared_beside] == [2, 2, 2]
    rng, w = np.random.default_rng(0), session._model.constants["W"]
    for rows, path, program in ((16, "blocked_packed", run.beside), (1024, "blas", run.on_blas)):
        x = rng.standard_normal((rows, 256)).astype(np.float32)
        assert session._prepared[0].plan(x, w).path == path
        for _ in range(2):  # the first run decides, the second runs what it decided
            (y,) = session.run(None, {"X": x})
            assert y.tobytes() == alone.run(None, {"X": x})[0].tobytes()
        assert run.works[(x.shape,)] is program
    for rows in range(1, WORKS + 2):
        session.run(None, {"X": np.ones((rows, 256), np.float32)})
    assert 0 < len(run.works) <= WORKS


WORKER_THREADS = """
import json, threading
import numpy as np
from onnx import TensorProto, helper, numpy_helper
from kerneltune.runtime import RuntimeSession

# a product of 64 tasks of the blocked path (4096 x 256 by 256 x 128), alone and with a
# Tanh after it: a model of two kernel nodes, of the OpenMP pool (its weight is small);
# BLAS's crossovers out of reach, or a BLAS built for the processor takes the product
blocked = {"algorithm.blas_minimum_fmas": 2**62, "algorithm.packed_blas_minimum_fmas": 2**62}
weight = numpy_helper.from_array(np.ones((256, 128), np.float32), "W")
threads = {}
for name, nodes in (("openmp pool", [helper.make_node("MatMul", ["X", "W"], ["P"]),
                                     helper.make_node("Tanh", ["P"], ["Y"])]),
                    ("one product", [helper.make_node("MatMul", ["X", "W"], ["Y"])])):
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 256])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 128])],
                              [weight])
    session = RuntimeSession(helper.make_model(graph), threads=2, contention=None,
                             overrides={"MatMul": blocked})
    before = threading.active_count()
    session.run(None, {"X": np.ones((4096, 256), np.float32)})
    threads[name] = threading.active_count() - before
print(json.dumps(threads))
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a second CPU for a worker")
def test_a_model_on_the_openmp_pool_runs_its_products_in_regions_not_on_the_workers():
    """One pool per run: the kernel's Python workers beside OpenMP regions wait for the CPU
    an OpenMP worker spins on after each region; a product alone keeps them."""
    done = subprocess.run([sys.executable, "-c", WORKER_THREADS], capture_output=True,
                          text=True, timeout=300, check=True)
    assert json.loads(done.stdout) == {"openmp pool": 0, "one product": 1}


@pytest.mark.parametrize(("batch", "rows", "k", "n"), [((1,), 1, 8, 3), ((1,), 64, 32, 16),
                                                     ((3,), 100, 256, 256)])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_sequence_through_a_linear_layer_runs_as_one_call_with_the_same_bits(
        batch, rows, k, n, relu, threads):
    model = _linear(np.float32, k, n, rank=3, relu=relu)
    fused, unfused = (RuntimeSession(model, threads=threads, fusion=f, contention=None)
                      for f in (True, False))
    assert _steps(fused) == ["MatMul"]
    assert _steps(unfused) == ["MatMul", "Add", *(["Relu"] if relu else [])]
    x = np.random.default_rng(rows).standard_normal((*batch, rows, k)).astype(np.float32)
    (a,), (b,) = fused.run(None, {"X": x}), unfused.run(None, {"X": x})
    assert a.shape == b.shape == (*batch, rows, n)
    assert a.tobytes() == b.tobytes()
    # the checked route, serial, gives the bits of the unfused product's and an Add (BLAS's
    # bits may differ from the compiled paths', which have no FMA on baseline)
    w, bias = (fused._model.constants[name] for name in ("W", "B"))
    serial = fused._prepared[0].run_serial(x, w, bias)
    expected = unfused._prepared[0].run_serial(x, w) + bias
    assert serial.tobytes() == (np.maximum(expected, 0) if relu else expected).tobytes()


@pytest.mark.parametrize("model", [
    _linear(np.float32, 8, 4, output_product=True),  # the product is an output too
    _linear(np.float16, 8, 4),  # a 16-bit product is rounded before its Add
    _linear(np.float32, 8, 4, bias_shape=(3, 4)),  # C of more than one row
])
def test_what_does_not_fuse_runs_unfused(model):
    assert _steps(RuntimeSession(model)) == ["MatMul", "Add"]


def _gemm_relu(dtype, k: int, n: int):
    """Relu(X @ W.T + b), as exporters write a Linear layer and its activation."""
    rng = np.random.default_rng(k + n)
    nodes = [helper.make_node("Gemm", ["X", "W", "B"], ["P"], name="fc", transB=1),
             helper.make_node("Relu", ["P"], ["Y"], name="relu")]
    graph = helper.make_graph(
        nodes, "layer", [helper.make_tensor_value_info("X", TYPES[dtype], ["N", k])],
        [helper.make_tensor_value_info("Y", TYPES[dtype], ["N", n])],
        [numpy_helper.from_array(rng.standard_normal((n, k)).astype(dtype), "W"),
         numpy_helper.from_array(rng.standard_normal(n).astype(dtype), "B")])
    return helper.make_model(graph)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("rows", "k", "n"), [(1, 8, 3), (64, 32, 16), (300, 256, 256)])
def test_a_gemm_and_its_relu_run_as_one_call_with_the_same_bits(dtype, rows, k, n):
    """On the compiled paths and BLAS's (the largest product), NaN rows included."""
    fused, unfused = (RuntimeSession(_gemm_relu(dtype, k, n), threads=2, fusion=f,
                                     contention=None) for f in (True, False))
    assert _steps(fused) == ["Gemm"] and _steps(unfused) == ["Gemm", "Relu"]
    assert fused._model.nodes[0].name == "fc + relu"
    x = np.random.default_rng(rows).standard_normal((rows, k)).astype(dtype)
    x[rows // 2, 0] = np.nan
    (a,), (b,) = fused.run(None, {"X": x}), unfused.run(None, {"X": x})
    assert a.tobytes() == b.tobytes() and np.isnan(a[rows // 2]).all()
    assert (np.nan_to_num(a) >= 0).all() and ((a > 0).any() or rows == 1)


def test_a_relu_of_a_product_read_twice_runs_unfused():
    model = _gemm_relu(np.float32, 8, 4)
    model.graph.output.append(helper.make_tensor_value_info("P", TensorProto.FLOAT, ["N", 4]))
    assert _steps(RuntimeSession(model)) == ["Gemm", "Relu"]


@pytest.mark.parametrize("name", ["mlp_regressor_relu", "mlp_classifier_zipmap",
                                  "scaler_mlp_regressor"])
def test_a_converted_mlp_fuses_every_layer_with_the_same_bits(name):
    path = CORPUS / f"{name}.onnx"
    fused, unfused = (RuntimeSession(path, threads=2, fusion=f, contention=None)
                      for f in (True, False))
    assert _steps(fused).count("Add") == _steps(unfused).count("Add") - 3
    assert _steps(fused).count("Relu") == 0 and _steps(unfused).count("Relu") == 2
    for rows in (1, 64, 3000):
        x = np.random.default_rng(rows).standard_normal((rows, 8)).astype(np.float32)
        a, b = fused.run(None, {"X": x}), unfused.run(None, {"X": x})
        for ours, theirs in zip(a, b, strict=True):
            if isinstance(ours, list):
                assert ours == theirs
            else:
                assert ours.tobytes() == theirs.tobytes()


def _labels(classes: np.ndarray, to: int, views: int = 1):
    """skl2onnx's label: classes[ArgMax(scores)], reshaped ``views`` times, then Cast."""
    nodes = [helper.make_node("ArgMax", ["S"], ["I"], axis=1),
             helper.make_node("ArrayFeatureExtractor", ["C", "I"], ["L0"],
                              domain="ai.onnx.ml")]
    nodes += [helper.make_node("Reshape", [f"L{i}", "shape"], [f"L{i + 1}"])
              for i in range(views)]
    nodes.append(helper.make_node("Cast", [f"L{views}"], ["Y"], to=to))
    graph = helper.make_graph(
        nodes, "labels", [helper.make_tensor_value_info("S", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("Y", to, ["N"] if views else [1, "N"])],
        [numpy_helper.from_array(classes, "C"),
         numpy_helper.from_array(np.array([-1], np.int64), "shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ai.onnx.ml", 1)])


@pytest.mark.parametrize(("classes", "to", "views", "folded"), [
    (np.array([4, 7, 9], np.int32), TensorProto.INT64, 1, True),
    (np.array([4, 7, 9], np.int32), TensorProto.INT64, 0, True),
    (np.array([4, 7, 9], np.int32), TensorProto.INT64, 2, True),
    (np.array([0.5, 1.5, 2.5], np.float32), TensorProto.DOUBLE, 1, True),
    (np.array([0.5, 1.5, -2.5], np.float32), TensorProto.INT64, 1, False),  # truncates
    (np.array([4, 7, 300], np.int64), TensorProto.INT32, 1, False),  # narrows
])
def test_a_cast_of_a_constant_s_selection_is_folded_into_the_constant(classes, to, views,
                                                                      folded):
    model = _labels(classes, to, views)
    fused, unfused = (RuntimeSession(model, fusion=f) for f in (True, False))
    assert ("Cast" not in _steps(fused)) == folded and "Cast" in _steps(unfused)
    scores = np.random.default_rng(3).standard_normal((50, 3)).astype(np.float32)
    (a,), (b,) = fused.run(None, {"S": scores}), unfused.run(None, {"S": scores})
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_a_selection_read_twice_keeps_its_cast():
    """The selection is also a graph output: folding would change that output's type."""
    model = _labels(np.array([4, 7, 9], np.int32), TensorProto.INT64, 0)
    model.graph.output.append(helper.make_tensor_value_info("L0", TensorProto.INT32, [1, "N"]))
    session = RuntimeSession(model)
    assert "Cast" in _steps(session)
    label, selected = session.run(None, {"S": np.eye(3, dtype=np.float32)})
    assert label.dtype == np.int64 and selected.dtype == np.int32
    np.testing.assert_array_equal(label, [[4, 7, 9]])  # a 1-D input's selection is one row


def _probabilities(dtype, total, axis: int = 1, complement_first: bool = True,
                   subtracted_first: bool = True):
    """skl2onnx's binary probabilities: Concat(total - Sigmoid(S), Sigmoid(S)) (orders
    swapped as asked; ``subtracted_first=False`` writes ``Sigmoid(S) - total``)."""
    sub = ["total", "P"] if subtracted_first else ["P", "total"]
    pair = ["Q", "P"] if complement_first else ["P", "Q"]
    nodes = [helper.make_node("Sigmoid", ["S"], ["P"]),
             helper.make_node("Sub", sub, ["Q"]),
             helper.make_node("Concat", pair, ["Y"], axis=axis)]
    graph = helper.make_graph(
        nodes, "probabilities", [helper.make_tensor_value_info("S", TYPES[dtype], ["N", 1])],
        [helper.make_tensor_value_info("Y", TYPES[dtype], None)],
        [numpy_helper.from_array(np.asarray(total, dtype), "total")])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _hard_scores(dtype, rows: int = 64) -> np.ndarray:
    """Scores whose Sigmoid is 0, 1, a half, NaN and everything between."""
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 30.0, -30.0, 1e-30], dtype)
    rng = np.random.default_rng(rows)
    random = (rng.standard_normal(rows - special.size) * 8).astype(dtype)
    return np.concatenate([special, random]).reshape(rows, 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("total", [1.0, [1.0], [[1.0]], 0.75])
@pytest.mark.parametrize("axis", [1, -1, 0])
@pytest.mark.parametrize("complement_first", [True, False])
def test_a_binary_classifier_s_probabilities_are_one_step_with_the_same_bits(
        dtype, total, axis, complement_first):
    model = _probabilities(dtype, total, axis, complement_first)
    fused, unfused = (RuntimeSession(model, fusion=f) for f in (True, False))
    assert _steps(fused) == ["Sigmoid", "Concat"]
    assert _steps(unfused) == ["Sigmoid", "Sub", "Concat"]
    for rows in (1, 64):
        scores = _hard_scores(dtype, 64)[:rows]
        (a,), (b,) = fused.run(None, {"S": scores}), unfused.run(None, {"S": scores})
        assert a.dtype == b.dtype == dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize(("total", "complement_first", "subtracted_first", "third"), [
    ([1.0, 1.0], True, True, False),  # two elements: a broadcast, not one value
    (1.0, True, False, False),  # P - total
    (1.0, True, True, True),  # a third input
])
def test_what_is_not_a_complement_pair_runs_unfused(total, complement_first,
                                                    subtracted_first, third):
    model = _probabilities(np.float32, total, 1, complement_first, subtracted_first)
    if third:
        model.graph.node[2].input.append("P")
    fused, unfused = (RuntimeSession(model, fusion=f) for f in (True, False))
    assert "Sub" in _steps(fused)
    scores = _hard_scores(np.float32)
    (a,), (b,) = fused.run(None, {"S": scores}), unfused.run(None, {"S": scores})
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("axis", [1, -2, 2])
def test_a_complement_pair_refuses_an_axis_its_input_lacks_as_concat_does(axis):
    pair = selections.complement_pair
    x, total = np.ones((3, 1), np.float32), np.ones((), np.float32)
    if axis == 2:
        with pytest.raises(ValueError, match=r"Concat: axis 2 is outside \[-2, 1\]"):
            selections.concat(x, x, axis=axis)
        with pytest.raises(ValueError, match=r"Concat: axis 2 is outside \[-2, 1\]"):
            pair(x, total, axis=axis, complement_first=False)
        return
    for first in (False, True):
        expected = selections.concat(*((total - x, x) if first else (x, total - x)), axis=axis)
        assert pair(x, total, axis, first).tobytes() == expected.tobytes()
    with pytest.raises(ValueError, match=rf"Concat: axis {axis} is outside \[-1, 0\]"):
        pair(x[:, 0], total, axis=axis, complement_first=False)


def test_a_converted_binary_classifier_fuses_its_probabilities_with_the_same_bits():
    path = CORPUS / "mlp_classifier_tanh_no_zipmap.onnx"
    fused, unfused = (RuntimeSession(path, fusion=f, contention=None) for f in (True, False))
    assert "Sub" not in _steps(fused) and _steps(unfused).count("Sub") == 1
    assert _steps(fused).count("Concat") == _steps(unfused).count("Concat") == 1
    for rows in (1, 64, 3000):
        x = (np.random.default_rng(rows).standard_normal((rows, 8)) * 4).astype(np.float32)
        x[0, 0] = np.nan
        for ours, theirs in zip(fused.run(None, {"X": x}), unfused.run(None, {"X": x}),
                                strict=True):
            assert ours.dtype == theirs.dtype and ours.tobytes() == theirs.tobytes()


def _normalisation(dtype, count=3.0, *, swapped: bool = False, opset: int = 17,
                   axis: int = 1, returned: str | None = None, divided: str = "s"):
    """skl2onnx's normalisation of one-against-the-rest probabilities P of three classes:
    s = ReduceSum(P) along ``axis``, z = Cast(Not(Cast(s, BOOL))), (P + z) / (s + z * count)
    (each Add's and the Mul's operands swapped as asked; the axes an input from opset 13,
    an attribute before; ``returned``: a value the graph also returns; ``divided``: the
    value the divisor adds in place of s)."""
    def pair(a, b):
        return [b, a] if swapped else [a, b]

    axes = {"inputs": ["P", "axis"]} if opset >= 13 else {"inputs": ["P"], "axes": [axis]}
    nodes = [helper.make_node("ReduceSum", outputs=["s"], keepdims=1, **axes),
             helper.make_node("Cast", ["s"], ["b"], to=TensorProto.BOOL),
             helper.make_node("Not", ["b"], ["nb"]),
             helper.make_node("Cast", ["nb"], ["z"], to=TYPES[dtype]),
             helper.make_node("Add", pair("P", "z"), ["shifted"]),
             helper.make_node("Mul", pair("z", "count"), ["m"]),
             helper.make_node("Add", pair(divided, "m"), ["divisor"]),
             helper.make_node("Div", ["shifted", "divisor"], ["Y"])]
    graph = helper.make_graph(
        nodes, "normalisation", [helper.make_tensor_value_info("P", TYPES[dtype], ["N", 3])],
        [helper.make_tensor_value_info(name, TYPES[dtype], None)
         for name in ("Y", returned) if name],
        [numpy_helper.from_array(np.asarray(count, dtype), "count"),
         numpy_helper.from_array(np.array([axis], np.int64), "axis")])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def _hard_probabilities(dtype, rows: int) -> np.ndarray:
    """Rows that sum to zero (of zeros, of negative zeros, of values that cancel), to NaN, to
    infinity, to a subnormal, a negative zero in a row that does not sum to zero, and random
    ones."""
    tiny = np.finfo(dtype).smallest_subnormal
    special = np.array([[0, 0, 0], [-0.0, -0.0, -0.0], [-0.0, 0, 0], [1, -1, 0], [0.5, -0.5, -0.0],
                        [-0.0, 1, 2],
                        [np.nan, 1, 0], [np.inf, 1, 0], [np.inf, -np.inf, 1], [tiny, 0, -0.0],
                        [1e30, 1e30, 1e30] if dtype == np.float32 else [1e300, 1e300, 1e300]],
                       dtype)
    random = np.random.default_rng(rows).uniform(-1, 1, (rows, 3)).astype(dtype)
    return np.concatenate([special, random])[:rows] if rows > len(special) else special[:rows]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("swapped", "opset", "axis"), [(False, 17, 1), (True, 17, -1),
                                                        (False, 11, -1), (True, 11, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_skl2onnx_s_normalised_probabilities_are_one_step_with_the_same_bits(
        dtype, swapped, opset, axis, threads):
    model = _normalisation(dtype, swapped=swapped, opset=opset, axis=axis)
    fused, unfused = (RuntimeSession(model, threads=threads, fusion=f, contention=None)
                      for f in (True, False))
    assert _steps(fused) == ["ProbabilityNormalization"]
    assert len(_steps(unfused)) == 8
    for rows in (1, 10, 64, 100_000):
        p = _hard_probabilities(dtype, rows)
        (a,), (b,) = fused.run(None, {"P": p}), unfused.run(None, {"P": p})
        assert a.dtype == b.dtype == dtype and a.shape == b.shape == p.shape
        assert a.tobytes() == b.tobytes()
    zeros = fused.run(None, {"P": np.zeros((2, 3), dtype)})[0]
    np.testing.assert_array_equal(zeros, np.full((2, 3), 1 / 3, dtype))  # made uniform


@pytest.mark.parametrize(("count", "axis", "returned", "divided"), [
    (np.inf, 1, None, "s"),  # zero times the count is NaN: a row would not divide by s alone
    ([[3.0, 3.0, 3.0]], 1, None, "s"),  # a count per class: a broadcast, not one value
    ([[[3.0]]], 1, None, "s"),  # one count of three axes, which the result takes
    (3.0, 0, None, "s"),  # a sum over the rows, not along them
    (3.0, 1, "z", "s"),  # the zero indicator is returned as well
    (3.0, 1, "s", "s"),  # so is the sum
    (3.0, 1, None, "P"),  # the divisor adds the probabilities, not their sum
    (3.0, 1, None, "m"),  # or the scaled indicator to itself
])
def test_what_is_not_skl2onnx_s_normalisation_runs_unfused(count, axis, returned, divided):
    model = _normalisation(np.float32, count, axis=axis, returned=returned, divided=divided)
    fused, unfused = (RuntimeSession(model, fusion=f) for f in (True, False))
    assert "ProbabilityNormalization" not in _steps(fused)
    assert _steps(fused).count("Div") == 1
    p = _hard_probabilities(np.float32, 64)
    for a, b in zip(fused.run(None, {"P": p}), unfused.run(None, {"P": p}), strict=True):
        assert a.tobytes() == b.tobytes()


def test_the_probability_normalization_kernel_refuses_what_it_cannot_compute():
    from kerneltune.kernels import library

    kernel = library()["ProbabilityNormalization"]
    with pytest.raises(ValueError, match="count nan is not finite"):
        kernel.prepare("FLOAT", count=float("nan"))
    with pytest.raises(ValueError, match="expected rows, got a scalar"):
        kernel.prepare("FLOAT", count=3.0).run(np.ones((), np.float32))
    # along the last axis of any rank
    x = _hard_probabilities(np.float32, 12).reshape(2, 2, 3, 3)
    out = kernel.prepare("FLOAT", count=3.0).run(np.moveaxis(x, 0, -2))
    assert out.shape == (2, 3, 2, 3) and out.flags.c_contiguous


def test_a_converted_sgd_classifier_fuses_its_normalisation_with_the_same_bits():
    path = CORPUS / "sgd_classifier.onnx"
    fused, unfused = (RuntimeSession(path, fusion=f, contention=None) for f in (True, False))
    assert _steps(fused).count("ProbabilityNormalization") == 1
    assert len(_steps(unfused)) - len(_steps(fused)) >= 7
    for rows in (1, 64, 3000):
        x = (np.random.default_rng(rows).standard_normal((rows, 8)) * 4).astype(np.float32)
        x[0, 0] = np.nan
        for ours, theirs in zip(fused.run(None, {"X": x}), unfused.run(None, {"X": x}),
                                strict=True):
            if isinstance(ours, list):  # ZipMap's dictionaries
                assert ours == theirs or str(ours) == str(theirs)
            else:
                assert ours.dtype == theirs.dtype and ours.tobytes() == theirs.tobytes()
