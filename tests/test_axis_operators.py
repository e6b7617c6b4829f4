"""The operators along axes (Softmax, LogSoftmax, ArgMax, ArgMin, ReduceSum, ReduceMean,
ReduceMax, LayerNormalization), Cast between element types, Concat and Where, against
onnxruntime.

Each case is a one-node model run by a RuntimeSession and by onnxruntime, over the element
types both have, the axes and attributes converters write and the opsets where the
operator changed (Softmax's axis in 13, the reductions' axes becoming an input in 13 and
18). Serial and parallel runs give the same bits.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from kerneltune.errors import UnsupportedModelError
from kerneltune.kernels import library, rows
from kerneltune.kernels.variants import installed_variants, selected_variant
from kerneltune.runtime import RuntimeSession
from kerneltune.tuning.dtypes import NUMPY_DTYPES

TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
         np.float16: TensorProto.FLOAT16,
         np.int32: TensorProto.INT32, np.int64: TensorProto.INT64,
         np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8, np.bool_: TensorProto.BOOL,
         np.uint32: TensorProto.UINT32, np.uint64: TensorProto.UINT64,
         np.int16: TensorProto.INT16, np.uint16: TensorProto.UINT16,
         NUMPY_DTYPES[TensorProto.BFLOAT16].type: TensorProto.BFLOAT16}


def _model(op_type: str, x: np.ndarray, opset: int, out_type: int | None = None,
           extra: dict[str, np.ndarray] | None = None, **attributes) -> onnx.ModelProto:
    extra = extra or {}
    node = helper.make_node(op_type, ["x", *extra], ["y"], **attributes)
    graph = helper.make_graph(
        [node], op_type,
        [helper.make_tensor_value_info("x", TYPES[x.dtype.type], list(x.shape))],
        [helper.make_tensor_value_info("y", out_type or TYPES[x.dtype.type], None)],
        [onnx.numpy_helper.from_array(value, name) for name, value in extra.items()])
    # shape inference gives the output the shape a converter would have written
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def _both(model: onnx.ModelProto, x: np.ndarray, threads: int = 2) -> tuple:
    ours = RuntimeSession(model, threads=threads).run(None, {"x": x})[0]
    theirs = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return ours, theirs


def _data(shape, dtype, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-50, 50, shape).astype(dtype)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "axis", "opset"), [
    ((64, 10), 1, 11), ((64, 10), -1, 17), ((3, 4, 5), 1, 11), ((3, 4, 5), 1, 13),
    ((3, 4, 5), 0, 13), ((5000, 3), -1, 13), ((7,), 0, 13)])
def test_softmax_and_log_softmax_match_onnxruntime_on_every_axis_and_opset(
        op_type, dtype, shape, axis, opset):
    x = _data(shape, dtype)
    ours, theirs = _both(_model(op_type, x, opset, axis=axis), x)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_softmax_takes_its_opset_s_default_axis():
    x = _data((2, 3, 4), np.float32)
    for opset in (11, 13):
        ours, theirs = _both(_model("Softmax", x, opset), x)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    # the defaults differ: before 13 over the last two axes together, from 13 the last
    old = RuntimeSession(_model("Softmax", x, 11)).run(None, {"x": x})[0]
    assert np.allclose(old.reshape(2, -1).sum(axis=1), 1.0)
    assert not np.allclose(old.sum(axis=-1), 1.0)


def test_a_plan_counts_the_rows_the_run_computes():
    """Before opset 13 Softmax works on the input as a matrix at its axis: one row here,
    so one thread, where the same axis from opset 13 on makes 50000 rows."""
    x = _data((1, 4, 50000), np.float32)
    coerced, along = (RuntimeSession(_model("Softmax", x, opset, axis=1),
                                     threads=2)._prepared[0] for opset in (11, 13))
    assert coerced.plan(x).threads == 1
    assert along.plan(x).threads == 2


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.int8,
                                   np.uint8, np.int16, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize(("axis", "keepdims", "last"), [
    (1, 1, 0), (1, 0, 0), (0, 1, 0), (-1, 0, 1), (2, 1, 1)])
def test_arg_max_and_min_match_onnxruntime(op_type, dtype, axis, keepdims, last):
    """Against numpy's indices on every type, and onnxruntime's on the types it has."""
    x = _data((40, 6, 5), dtype)
    x[::3, ::2] = x[::3, 1::2].max()  # ties, where select_last_index decides
    model = _model(op_type, x, 13, TensorProto.INT64, axis=axis, keepdims=keepdims,
                   select_last_index=last)
    if dtype in (np.float32, np.float64, np.int32, np.int64):
        ours, theirs = _both(model, x)
    else:
        ours = RuntimeSession(model, threads=2).run(None, {"x": x})[0]
        theirs = None
    shape = list(x.shape)
    shape[axis] = 1
    assert ours.dtype == np.int64 and list(ours.shape) == (
        shape if keepdims else shape[:axis % 3] + shape[axis % 3 + 1:])
    # the first (or last) of equal values, as ONNX defines it; onnxruntime agrees but on
    # ties of integers along an axis other than the last
    find = np.argmax if op_type == "ArgMax" else np.argmin
    expected = (x.shape[axis] - 1 - find(np.flip(x, axis), axis=axis) if last
                else find(x, axis=axis))
    np.testing.assert_array_equal(ours, expected if not keepdims
                                  else np.expand_dims(expected, axis))
    if theirs is not None and (dtype in (np.float32, np.float64) or axis in (-1, 2)):
        np.testing.assert_array_equal(ours, theirs)


def test_arg_max_of_a_row_with_nan_is_the_nan_as_numpy_has_it():
    x = np.array([[1.0, np.nan, 3.0, np.nan]], np.float32)
    model = _model("ArgMax", x, 13, TensorProto.INT64, axis=1, keepdims=0)
    assert RuntimeSession(model).run(None, {"x": x})[0].tolist() == [1]


@pytest.mark.parametrize("variant", installed_variants())
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_arg_max_and_min_swept_by_columns_give_the_row_by_row_indices(variant, dtype,
                                                                      monkeypatch):
    """Runs of many short rows are swept column by column (``rows_pythran._best_rows``); the
    row-by-row loop (a sweep length of 0) gives the same indices on every variant and thread
    count, numpy's: ties to the first (or last) of equals, a NaN before any number."""
    x = _data((9000, 8), dtype)  # two threads' worth, each a run of many sweeps' blocks
    x[::4, 2] = x[::4, 5] = x.max()
    x[1::4, 1] = x[1::4, 6] = x.min()
    if np.issubdtype(dtype, np.floating):
        x[2, 4] = x[3, 0] = x[3, 6] = x[6, 6] = np.nan
    element_type = TYPES[dtype]
    for op_type, find in (("ArgMax", np.argmax), ("ArgMin", np.argmin)):
        for last in (0, 1):
            expected = x.shape[1] - 1 - find(x[:, ::-1], axis=1) if last else find(x, axis=1)
            for sweep in (rows.SWEEP_LENGTHS.get(variant, rows.SWEEP_LENGTH), 0):
                monkeypatch.setitem(rows.SWEEP_LENGTHS, variant, sweep)
                for threads in (1, 2):
                    kernel = library(variant)[op_type].prepare(
                        element_type, threads=threads, axis=1, keepdims=0,
                        select_last_index=last)
                    assert kernel.plan(x).threads == threads
                    np.testing.assert_array_equal(kernel.run(x), expected,
                                                  err_msg=f"{op_type} {last=} {sweep=}")


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("shape", [(1, 2), (64, 3), (2, 3, 4), (7,)])
def test_arg_max_and_min_below_the_compiled_size_are_numpy_s_with_the_same_indices(
        op_type, dtype, shape):
    """Below ``algorithm.compiled_minimum_elements`` numpy's argmax or argmin computes the
    node (a classifier's few scores), along any axis and in any layout; the compiled kernel
    gives the same indices (ties, NaNs) and the same errors, and a node that selects the last
    index takes it at every size."""
    element_type = TYPES[dtype]
    kernel = library(selected_variant())[op_type]
    x = _data(shape, dtype)
    x[..., -1] = x[..., 0]  # ties
    if np.issubdtype(dtype, np.floating) and x.size > 2:
        x.flat[1] = np.nan
    for operand in (x, x.T):  # the transpose: another layout
        for axis in range(-operand.ndim - 1, operand.ndim + 1):  # one past each end: refused
            for keepdims, last in ((1, 0), (0, 0), (1, 1)):
                outcomes = []
                for compiled_from in (0, operand.size + 1):
                    config = kernel.configure(
                        element_type, {"algorithm.compiled_minimum_elements": compiled_from})
                    prepared = kernel.prepare(element_type, config, 1, axis=axis,
                                              keepdims=keepdims, select_last_index=last)
                    try:
                        result = prepared.run(operand)
                        outcomes.append((result.dtype, result.shape, result.tobytes()))
                        numpy = compiled_from and not last
                        assert (prepared.plan(operand).path == "numpy") == bool(numpy)
                    except ValueError as error:
                        outcomes.append(str(error))
                assert outcomes[0] == outcomes[1], (axis, keepdims, last, outcomes)
                assert isinstance(outcomes[0], str) == (not -operand.ndim <= axis < operand.ndim)


@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMean", "ReduceMax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize(("axes", "keepdims"), [
    ((1,), 1), ((-1,), 0), ((0, 2), 1), ((1, 2), 0), (None, 1), (None, 0)])
@pytest.mark.parametrize("opset", [11, 13, 18])
def test_reductions_match_onnxruntime_with_axes_as_attribute_or_input(
        op_type, dtype, axes, keepdims, opset):
    if op_type == "ReduceMean" and dtype in (np.int32, np.int64):
        pytest.skip("ReduceMean computes on floats only")
    x = _data((30, 7, 9), dtype)
    axes_input = opset >= 18 or (op_type == "ReduceSum" and opset >= 13)
    if axes is None:
        model = _model(op_type, x, opset, keepdims=keepdims)
    elif axes_input:
        model = _model(op_type, x, opset, extra={"axes": np.array(axes, np.int64)},
                       keepdims=keepdims)
    else:
        model = _model(op_type, x, opset, axes=list(axes), keepdims=keepdims)
    ours, theirs = _both(model, x)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    # sums of a few values of both signs: a float32 sum in another order differs by ulps
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_reduce_sum_of_unsigned_integers_wraps_as_numpy_s(dtype):
    x = np.random.default_rng(6).integers(0, np.iinfo(dtype).max, (20, 300, 7), dtype,
                                          endpoint=True)
    model = _model("ReduceSum", x, 13, extra={"axes": np.array([1], np.int64)}, keepdims=0)
    ours = RuntimeSession(model, threads=2).run(None, {"x": x})[0]
    expected = np.sum(x, axis=1, dtype=dtype)
    assert ours.dtype == dtype
    np.testing.assert_array_equal(ours, expected)


def test_a_reduction_with_no_axes_and_noop_returns_its_input():
    x = _data((4, 5), np.float32)
    model = _model("ReduceSum", x, 13, extra={"axes": np.array([], np.int64)},
                   noop_with_empty_axes=1)
    ours, theirs = _both(model, x)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, x)


@pytest.mark.parametrize("axes", [[-1], [2], [1], [0, 2], []])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_a_reduction_bound_to_its_constant_axes_gives_its_run_s_results(axes, keepdims):
    x = _data((3, 4, 5), np.float32)
    constant = np.array(axes, np.int64)
    prepared = library()["ReduceSum"].prepare("FLOAT", keepdims=keepdims)
    # bound once, as a session binds a constant input: the axes are not read at every run
    bound = prepared.for_constant(1, constant)
    assert bound is not None
    expected = prepared.run(x, constant)
    ours = bound(x, constant)
    assert ours.shape == expected.shape
    np.testing.assert_array_equal(ours, expected)
    # only a reduction's axes: Softmax has no second input, an input's X is no constant
    assert library()["Softmax"].prepare("FLOAT").for_constant(1, constant) is None
    assert prepared.for_constant(0, x) is None


def test_reduce_max_of_a_row_with_nan_is_nan():
    x = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 3.0]], np.float32)
    model = _model("ReduceMax", x, 13, axes=[1], keepdims=0)
    y = RuntimeSession(model).run(None, {"x": x})[0]
    assert np.isnan(y[0]) and y[1] == 3.0


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.uint32, np.uint64, np.bool_])
@pytest.mark.parametrize(("axes", "keepdims"), [((1,), 1), ((-1,), 0), ((0, 2), 0), (None, 1)])
def test_reduce_max_of_the_opset_20_types(dtype, axes, keepdims):
    """Against onnxruntime where it has the type (not UINT32 and UINT64), else numpy; a
    BOOL's largest value is True where any is; over no element, the type's least value
    (False), as ONNX defines it."""
    x = (np.random.default_rng(0).random((30, 7, 9)) < 0.02 if dtype is np.bool_
         else np.random.default_rng(0).integers(np.iinfo(dtype).min, np.iinfo(dtype).max,
                                                (30, 7, 9), dtype, endpoint=True))
    extra = {} if axes is None else {"axes": np.array(axes, np.int64)}
    model = _model("ReduceMax", x, 20, extra=extra, keepdims=keepdims)
    if dtype in (np.uint32, np.uint64):
        ours = RuntimeSession(model, threads=2).run(None, {"x": x})[0]
        theirs = np.max(x, axis=axes, keepdims=bool(keepdims))
    else:
        ours, theirs = _both(model, x)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)
    empty = np.zeros((3, 0), dtype)
    nothing = _model("ReduceMax", empty, 20, extra={"axes": np.array([1], np.int64)},
                     keepdims=0)
    np.testing.assert_array_equal(RuntimeSession(nothing).run(None, {"x": empty})[0],
                                  np.full(3, False if dtype is np.bool_ else
                                          np.iinfo(dtype).min, dtype))


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "ArgMax", "ArgMin", "ReduceSum",
                                     "ReduceMean", "ReduceMax"])
@pytest.mark.parametrize("element_type", [TensorProto.FLOAT16, TensorProto.BFLOAT16])
@pytest.mark.parametrize("shape", [(64, 9, 128), (3, 2, 5)])
def test_an_operator_along_axes_on_a_16_bit_float_is_the_float_one_rounded_once(
        op_type, element_type, shape):
    """The input widened exactly, the FLOAT kernel, a float result rounded once to nearest
    even (ArgMax and ArgMin: the same indices); FLOAT16 within a unit in the last place of
    onnxruntime's."""
    dtype = NUMPY_DTYPES[element_type]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32).astype(dtype)
    x32 = x.astype(np.float32)
    reduction = op_type.startswith("Reduce")
    attributes = {"keepdims": 0} if reduction else {"axis": 1}
    extra = {"axes": np.array([1, 2], np.int64)} if reduction else None
    out_type = TensorProto.INT64 if op_type.startswith("Arg") else None
    model = _model(op_type, x, 18, out_type, extra, **attributes)
    ours = RuntimeSession(model, threads=2).run(None, {"x": x})[0]
    wide = RuntimeSession(_model(op_type, x32, 18, out_type, extra, **attributes),
                          threads=2).run(None, {"x": x32})[0]
    expected = wide if out_type else wide.astype(dtype)
    assert ours.dtype == expected.dtype and ours.tobytes() == expected.tobytes()
    if element_type == TensorProto.FLOAT16:
        theirs = onnxruntime.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                None, {"x": x})[0]
        tolerance = np.abs(theirs.astype(np.float32)) * 2.0**-10 + 1e-6
        assert (np.abs(ours.astype(np.float32) - theirs.astype(np.float32))
                <= (0 if out_type else tolerance)).all()


@pytest.mark.parametrize("element_type", [TensorProto.FLOAT16, TensorProto.BFLOAT16])
@pytest.mark.parametrize("statistics", [False, True])
def test_layer_normalization_on_a_16_bit_float_is_the_float_one_rounded_once(
        element_type, statistics):
    """X, Scale and B widened exactly, Y rounded once, Mean and InvStdDev the FLOAT node's
    (float32, as ONNX's stash type says); FLOAT16 within a unit in the last place of
    onnxruntime's."""
    dtype = NUMPY_DTYPES[element_type]
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((64, 300)).astype(np.float32).astype(dtype),
             "scale": rng.standard_normal(300).astype(np.float32).astype(dtype),
             "bias": rng.standard_normal(300).astype(np.float32).astype(dtype)}
    outputs = ["y", "mean", "inv_std"] if statistics else ["y"]

    def model(of_type):
        graph = helper.make_graph(
            [helper.make_node("LayerNormalization", list(feeds), outputs)], "layer_norm",
            [helper.make_tensor_value_info(name, of_type, value.shape)
             for name, value in feeds.items()],
            [helper.make_tensor_value_info("y", of_type, [64, 300])]
            + [helper.make_tensor_value_info(name, TensorProto.FLOAT, [64, 1])
               for name in outputs[1:]])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    ours = RuntimeSession(model(element_type), threads=2).run(None, feeds)
    wide = RuntimeSession(model(TensorProto.FLOAT), threads=2).run(
        None, {name: value.astype(np.float32) for name, value in feeds.items()})
    assert ours[0].dtype == dtype and ours[0].tobytes() == wide[0].astype(dtype).tobytes()
    for got, expected in zip(ours[1:], wide[1:], strict=True):
        assert got.dtype == np.float32 and got.tobytes() == expected.tobytes()
    if element_type == TensorProto.FLOAT16:
        theirs = onnxruntime.InferenceSession(
            model(element_type).SerializeToString(),
            providers=["CPUExecutionProvider"]).run(None, feeds)[0].astype(np.float32)
        assert (np.abs(ours[0].astype(np.float32) - theirs)
                <= np.abs(theirs) * 2.0**-10 + 1e-6).all()


@pytest.mark.parametrize(("op_type", "columns"), [("Softmax", 100), ("Softmax", 3),
                                                  ("ArgMax", 100), ("ReduceSum", 100)])
def test_serial_and_parallel_runs_give_the_same_bits(op_type, columns):
    """Softmax of 3 columns takes the short rows' path (exponentials over the matrix)."""
    x = _data((4096 * 100 // columns, columns), np.float32)
    attributes = {"ReduceSum": {"axes": np.array([1], np.int64)}}.get(op_type)
    model = _model(op_type, x, 17, TensorProto.INT64 if op_type == "ArgMax" else None,
                   extra=attributes, **({"axis": 1} if op_type != "ReduceSum" else {}))
    runs = {threads: RuntimeSession(model, threads=threads, contention=None)
            for threads in (1, 2)}
    results = {threads: session.run(None, {"x": x})[0] for threads, session in runs.items()}
    assert results[1].tobytes() == results[2].tobytes()
    # the 2-thread session took two threads for this size (the kernels' default grain)
    axes = () if op_type != "ReduceSum" else (np.array([1], np.int64),)
    assert runs[2]._prepared[0].plan(x, *axes).threads == 2


#: the compiled cast's types, FLOAT16, and the integer types numpy's astype converts
CAST_TYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64,
              np.bool_, np.int16, np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("source", CAST_TYPES)
@pytest.mark.parametrize("target", CAST_TYPES)
def test_cast_between_types_matches_onnxruntime(source, target):
    if source is target:
        pytest.skip("a Cast to its own type is a view (test_session)")
    rng = np.random.default_rng(3)
    if source is np.bool_:
        x = rng.integers(0, 2, (5, 300)).astype(np.bool_)
    elif np.issubdtype(source, np.floating):
        x = (rng.standard_normal((5, 300)) * 50).astype(source)
        x[0, :4] = (0.0, -0.0, 1.5, -1.5)
        x[1, :5] = (np.inf, -np.inf, np.nan, 6e4, -6e4)
        # beyond FLOAT16's range (inf there) and halfway between two of its values
        x[2, :2] = (1e5, 1 + 2**-11) if source is not np.float16 else (1, -1)
    else:
        x = rng.integers(np.iinfo(source).min // 2, np.iinfo(source).max // 2,
                         (5, 300)).astype(source)
    if np.issubdtype(target, np.integer):  # in range of the target: C++ leaves the rest open
        info = np.iinfo(target)
        x = np.clip(x, max(info.min, -100), min(info.max, 100)).astype(source) \
            if source is not np.bool_ else x
    if np.issubdtype(target, np.integer) or target is np.bool_:
        x[1:3] = 7  # C++ leaves a non-finite float's conversion to an integer open
    model = _model("Cast", x, 19, TYPES[target], to=TYPES[target])
    ours, theirs = _both(model, x)
    assert ours.dtype == theirs.dtype == target
    assert ours.tobytes() == theirs.tobytes() or (
        np.issubdtype(target, np.floating)  # NaN's payload may differ
        and np.array_equal(ours, theirs, equal_nan=True))


@pytest.mark.parametrize("source", CAST_TYPES)
def test_a_cast_to_or_from_bfloat16_goes_through_float32(source):
    bfloat16 = NUMPY_DTYPES[TensorProto.BFLOAT16]
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(600) * 300).astype(source)
    if np.issubdtype(source, np.floating):
        x[:6] = (np.inf, -np.inf, np.nan, -0.0, 1 + 2**-8, 3e38 if source is not np.float16 else 1)
    to_bfloat16 = _model("Cast", x, 19, TensorProto.BFLOAT16, to=TensorProto.BFLOAT16)
    narrowed = RuntimeSession(to_bfloat16).run(None, {"x": x})[0]
    expected = x.astype(np.float32).astype(bfloat16)
    assert narrowed.dtype == bfloat16
    assert np.array_equal(narrowed.astype(np.float32), expected.astype(np.float32),
                          equal_nan=True)
    back = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TYPES[source])], "back",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [600])],
        [helper.make_tensor_value_info("y", TYPES[source], [600])])
    model = helper.make_model(back, opset_imports=[helper.make_opsetid("", 19)])
    # finite, and within an integer target's range (C++ leaves the rest open)
    wide = np.clip(np.nan_to_num(expected.astype(np.float32)), -100, 100)
    within = wide.astype(bfloat16) if not np.issubdtype(source, np.floating) else expected
    widened = RuntimeSession(model).run(None, {"x": within})[0]
    assert widened.dtype == source
    assert np.array_equal(widened, within.astype(np.float32).astype(source), equal_nan=True)


def test_a_double_reaches_float16_rounded_to_float32_first_as_onnxruntime_rounds_it():
    # halfway between FLOAT16's 1 and its next value once rounded to float32: to even, 1
    x = np.array([1 + 2**-11 + 2**-30, -(1 + 2**-11 + 2**-30)])
    model = _model("Cast", x, 19, TensorProto.FLOAT16, to=TensorProto.FLOAT16)
    ours, theirs = _both(model, x)
    assert ours.tolist() == theirs.tolist() == [1.0, -1.0]
    assert x.astype(np.float16).tolist() != [1.0, -1.0]  # numpy rounds once


@pytest.mark.parametrize(("source", "target"), [(np.float16, np.float32),
                                                (np.float32, np.float16),
                                                (np.float16, np.int32),
                                                (np.float64, np.float16)])
def test_a_16_bit_cast_gives_the_same_bits_on_one_and_two_threads(source, target):
    x = (np.random.default_rng(6).standard_normal(1 << 17) * 100).astype(source)
    model = _model("Cast", x, 19, TYPES[target], to=TYPES[target])
    one, two = (RuntimeSession(model, threads=threads, contention=None)
                for threads in (1, 2))
    assert two._prepared[0].plan(x).threads == 2
    assert one.run(None, {"x": x})[0].tobytes() == two.run(None, {"x": x})[0].tobytes()


def test_cast_like_to_another_type_is_the_cast_kernel():
    x = np.array([1.7, -2.2], np.float32)
    model = _model("CastLike", x, 15, TensorProto.INT64,
                   extra={"like": np.zeros(1, np.int64)})
    session = RuntimeSession(model)
    assert session.run(None, {"x": x})[0].tolist() == [1, -2]
    (row,) = session.tuning_diagnostics
    assert row["key"]["kernel"] == "Cast"


def test_a_cast_to_a_type_without_a_kernel_is_refused_naming_both_types():
    x = np.array([1.0], np.float32)
    with pytest.raises(UnsupportedModelError,
                       match="no Cast kernel from FLOAT to STRING"):
        RuntimeSession(_model("Cast", x, 19, TensorProto.STRING, to=TensorProto.STRING))


@pytest.mark.parametrize(("axis", "dtype"), [(1, np.float32), (0, np.int64), (-1, np.bool_)])
def test_concat_matches_onnxruntime(axis, dtype):
    x = _data((3, 4), dtype) if dtype is not np.bool_ else np.eye(3, 4, dtype=bool)
    other = np.ascontiguousarray(x[:, :2]) if axis != 0 else x[:1]
    model = _model("Concat", x, 13, extra={"other": other}, axis=axis)
    ours, theirs = _both(model, x)
    np.testing.assert_array_equal(ours, theirs)


def test_every_new_kernel_has_a_tuning_key_and_a_calibration_function():
    from kerneltune.calibration import calibration_function

    kernels = library()
    for name in ("Softmax", "LogSoftmax", "ArgMax", "ArgMin", "ReduceSum", "ReduceMean",
                 "ReduceMax", "Normalizer", "Cast", "LayerNormalization", "Erf", "Gelu",
                 "LeakyRelu", "Clip", "ProbabilityNormalization"):
        for element_type in kernels[name].element_types:
            key = kernels[name].tuning_key(element_type)
            assert calibration_function(key) is not None


def _layer_normalization(x, scale, bias, outputs=("y",), **attributes) -> onnx.ModelProto:
    constants = {"scale": scale, **({} if bias is None else {"bias": bias})}
    node = helper.make_node("LayerNormalization", ["x", *constants], list(outputs),
                            **attributes)
    graph = helper.make_graph(
        [node], "LayerNormalization",
        [helper.make_tensor_value_info("x", TYPES[x.dtype.type], list(x.shape))],
        [helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None)
         for name in outputs if name],
        [onnx.numpy_helper.from_array(value, name) for name, value in constants.items()])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "axis", "scale_shape"), [
    ((64, 768), -1, (768,)), ((2, 3, 16), -1, (16,)), ((2, 3, 16), 1, (3, 16)),
    ((2, 3, 16), 1, (16,)), ((2, 3, 16), 0, (2, 3, 16)), ((5000, 3), -1, (3,)),
    ((7,), 0, (7,))])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_normalization_matches_onnxruntime(dtype, shape, axis, scale_shape, bias):
    x = _data(shape, dtype) * 3 + 5  # a mean far from 0: the variance must not cancel
    scale, offset = _data(scale_shape, dtype, 1), _data(scale_shape, dtype, 2)
    model = _layer_normalization(x, scale, offset if bias else None, axis=axis, epsilon=1e-3)
    ours, theirs = _both(model, x)
    assert ours.dtype == dtype and ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


def test_layer_normalization_gives_its_mean_and_inverse_deviation_where_named():
    x, scale, bias = _data((4, 6, 8), np.float64), _data((8,), np.float64, 1), None
    for outputs in (("y", "mean", "inv"), ("y", "", "inv"), ("y", "mean")):
        model = _layer_normalization(x, scale, bias, outputs, axis=-1)
        ours = RuntimeSession(model).run(None, {"x": x})
        theirs = onnxruntime.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        assert len(ours) == len(theirs) == len([o for o in outputs if o])
        for a, b in zip(ours, theirs, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert ours[1].dtype == np.float32  # the statistics are in the stash type, FLOAT


def test_layer_normalization_serial_and_parallel_runs_give_the_same_bits():
    x = _data((4096, 100), np.float32)
    model = _layer_normalization(x, _data((100,), np.float32, 1), _data((100,), np.float32, 2))
    runs = {threads: RuntimeSession(model, threads=threads, contention=None)
            for threads in (1, 2)}
    results = {threads: session.run(None, {"x": x})[0] for threads, session in runs.items()}
    assert results[1].tobytes() == results[2].tobytes()
    assert runs[2]._prepared[0].plan(x).threads == 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "axis", "bias"), [
    ((1, 256), -1, True), ((64, 16), 1, True), ((2, 3, 16), -1, True), ((7,), -1, False),
    ((5, 8), -1, False)])
def test_layer_normalization_s_common_calls_skip_the_checks_with_the_same_bits(
        dtype, shape, axis, bias, monkeypatch):
    """A C-contiguous input normalised along its last axis by a Scale and B of that axis
    goes straight to the compiled function: the bits of the checked call."""
    x = _data(shape, dtype) * 3 + 5
    scale = _data(shape[-1:], dtype, 1)
    offset = _data(shape[-1:], dtype, 2) if bias else None
    prepared = library()["LayerNormalization"].prepare(dtype, axis=axis)
    expected = prepared._call(x, scale, offset, None)
    monkeypatch.setattr(prepared, "_call", None)  # a call that reached it would fail
    assert prepared.run(x, scale, offset).tobytes() == expected.tobytes()


@pytest.mark.parametrize("case", ["strided", "broadcast scale", "axis 1 of three",
                                  "statistics", "other type"])
def test_layer_normalization_s_other_calls_take_the_checked_call(case):
    x, scale = _data((4, 6, 8), np.float32), _data((8,), np.float32, 1)
    attributes = {"statistics": True} if case == "statistics" else {}
    if case == "strided":
        x = x[:, :, ::2]
        scale = scale[:4]
    elif case == "broadcast scale":  # one element for the last axis
        scale = _data((1,), np.float32, 1)
    elif case == "axis 1 of three":
        scale = _data((6, 8), np.float32, 1)
        attributes["axis"] = 1
    elif case == "other type":
        x = x.astype(np.float64)
    prepared = library()["LayerNormalization"].prepare("FLOAT", **attributes)
    calls = []
    checked = prepared._call
    prepared._call = lambda *args: calls.append(args) or checked(*args)
    if case == "other type":
        with pytest.raises(TypeError, match="X: expected element type float32"):
            prepared.run(x, scale)
    else:
        prepared.run(x, scale)
    assert len(calls) == 1


def test_layer_normalization_refuses_what_it_cannot_compute():
    x = _data((3, 4), np.float32)
    with pytest.raises(ValueError, match="stash_type 11 is not supported"):
        RuntimeSession(_layer_normalization(x, _data((4,), np.float32), None, stash_type=11))
    prepared = library()["LayerNormalization"].prepare("FLOAT")
    with pytest.raises(ValueError, match=r"Scale of shape \[3\] does not broadcast to the "
                                         r"normalised shape \[4\]"):
        prepared.run(x, np.ones(3, np.float32))
    with pytest.raises(UnsupportedModelError, match=r"input types mixed \(T\)"):
        RuntimeSession(_layer_normalization(x.astype(np.float16), np.ones(4, np.float32),
                                            None))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize(("condition_shape", "x_shape", "y_shape"), [
    ((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), (3, 4)), ((4,), (3, 4), ()),
    ((2, 1, 4), (3, 1), (1,))])
def test_where_matches_onnxruntime_over_broadcasts(dtype, condition_shape, x_shape, y_shape):
    rng = np.random.default_rng(5)
    condition = rng.integers(0, 2, condition_shape).astype(np.bool_)
    x = _data(x_shape, dtype) if dtype is not np.bool_ else np.ones(x_shape, np.bool_)
    other = _data(y_shape, dtype, 1) if dtype is not np.bool_ else np.zeros(y_shape, np.bool_)
    node = helper.make_node("Where", ["condition", "x", "other"], ["y"])
    graph = helper.make_graph(
        [node], "Where",
        [helper.make_tensor_value_info("condition", TensorProto.BOOL, list(condition_shape)),
         helper.make_tensor_value_info("x", TYPES[dtype], list(x_shape))],
        [helper.make_tensor_value_info(
            "y", TYPES[dtype], list(np.broadcast_shapes(condition_shape, x_shape, y_shape)))],
        [onnx.numpy_helper.from_array(other, "other")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    feed = {"condition": condition, "x": x}
    ours = RuntimeSession(model).run(None, feed)[0]
    theirs = np.where(condition, x, other) if dtype is np.bool_ else (  # onnxruntime has none
        onnxruntime.InferenceSession(model.SerializeToString(),
                                     providers=["CPUExecutionProvider"]).run(None, feed)[0])
    assert ours.dtype == theirs.dtype == dtype
    np.testing.assert_array_equal(ours, theirs)
