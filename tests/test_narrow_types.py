"""The narrow element types (8-, 6- and 4-bit floats, 4- and 2-bit integers): sessions hold
them and cast them to and from every other type as ONNX's reference does, and refuse what
they cannot hold by name."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from kerneltune.errors import UnsupportedModelError
from kerneltune.runtime import RuntimeSession
from kerneltune.tuning.dtypes import NARROW_DTYPES

NEWEST = 28
FLOAT8 = ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")
NARROW = (*FLOAT8, "FLOAT8E8M0", "FLOAT6E2M3", "FLOAT6E3M2", "FLOAT4E2M1", "UINT4", "INT4",
          "UINT2", "INT2")
WIDE = ("FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16", "INT8", "UINT8", "INT32", "INT64", "BOOL")
#: float32 values around every narrow type's range: ties, overflows, underflows, specials
EDGES = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e9, -1e9, 448, 449, 464, 480, 57344,
                  61440, 65536, 1e-9, -1e-9, 2**-10, 1.5 * 2**-9, 0.5, 2.5, 3.5, -8, -9, 15,
                  16, 7.5, -7.5, 6, 7, 1e-40, 2**-127, 3 * 2**-128, 1.5, 0.75, -1.25],
                 np.float32)


def _cast_model(source: int, target: int, opset: int = NEWEST, like: bool = False,
                **attributes) -> object:
    if like:
        node = helper.make_node("CastLike", ["x", "t"], ["y"], **attributes)
        inputs = [helper.make_tensor_value_info("x", source, [None]),
                  helper.make_tensor_value_info("t", target, [1])]
    else:
        node = helper.make_node("Cast", ["x"], ["y"], to=target, **attributes)
        inputs = [helper.make_tensor_value_info("x", source, [None])]
    graph = helper.make_graph([node], "cast", inputs,
                              [helper.make_tensor_value_info("y", target, [None])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _values(element_type: int) -> np.ndarray:
    """Every value of a narrow type; else the edges (and random floats) in that type."""
    dtype = helper.tensor_dtype_to_np_dtype(element_type)
    if element_type in NARROW_DTYPES:
        if np.issubdtype(dtype, np.integer) or dtype in (ml_dtypes.int4, ml_dtypes.uint4,
                                                          ml_dtypes.int2, ml_dtypes.uint2):
            info = ml_dtypes.iinfo(dtype)
            return np.arange(int(info.min), int(info.max) + 1).astype(dtype)
        return np.arange(2 ** ml_dtypes.finfo(dtype).bits, dtype=np.uint8).view(dtype)
    if dtype == np.bool_:
        return np.array([True, False, True])
    floats = np.concatenate([EDGES, np.random.default_rng(0).standard_normal(200)
                             .astype(np.float32) * np.float32(50)])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        finite = np.nan_to_num(floats, posinf=0, neginf=0)
        return np.clip(finite, info.min, info.max).astype(dtype)
    with np.errstate(over="ignore"):
        return floats.astype(dtype)


def _same(ours: np.ndarray, reference: np.ndarray) -> None:
    assert ours.dtype == reference.dtype and ours.shape == reference.shape
    assert ours.tobytes() == reference.tobytes()


@pytest.mark.parametrize("narrow", NARROW)
def test_casts_from_and_to_a_narrow_type_are_the_reference_s_bit_for_bit(narrow):
    narrow_type = getattr(TensorProto, narrow)
    partners = [getattr(TensorProto, name) for name in (*WIDE, *NARROW) if name != narrow]
    for partner in partners:
        for source, target in ((narrow_type, partner), (partner, narrow_type)):
            modes = [{}]
            if target in (getattr(TensorProto, name) for name in FLOAT8):
                modes = [{}, {"saturate": 0}]
            elif target == TensorProto.FLOAT8E8M0:
                modes = [{}, {"saturate": 0}, {"round_mode": "down"},
                         {"round_mode": "nearest"}, {"round_mode": "nearest", "saturate": 0}]
            x = {"x": _values(source)}
            for attributes in modes:
                model = _cast_model(source, target, **attributes)
                (ours,) = RuntimeSession(model).run(None, x)
                try:
                    (expected,) = ReferenceEvaluator(model).run(None, x)
                except TypeError:  # a pair ml_dtypes converts only through float32
                    (expected,) = ReferenceEvaluator(
                        _cast_model(TensorProto.FLOAT, target, **attributes)).run(
                            None, {"x": x["x"].astype(np.float32)})
                _same(ours, expected)


@pytest.mark.parametrize("narrow", FLOAT8)
@pytest.mark.parametrize("saturate", [1, 0])
def test_a_round_trip_through_an_8_bit_float_matches_onnxruntime(narrow, saturate):
    """onnxruntime converts on its own; only the two values that lie exactly halfway
    between the largest finite value and the next power of two are its own (it saturates
    480 into FLOAT8E4M3FN and makes 61440 a NaN of FLOAT8E5M2, where both the spec's table
    and ONNX's reference overflow)."""
    x = np.concatenate([EDGES, np.random.default_rng(1).standard_normal(4000)
                        .astype(np.float32) * np.float32(100)])
    ties = np.isin(x, [480, -480, 61440, -61440]) if not saturate else np.zeros(x.shape, bool)
    cast = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=getattr(TensorProto, narrow),
                          saturate=saturate),
         helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)], "round_trip",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None])])
    model = helper.make_model(cast, opset_imports=[helper.make_opsetid("", 21)])
    (ours,) = RuntimeSession(model).run(None, {"x": x})
    (peer,) = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    equal = (ours.view(np.uint32) == peer.view(np.uint32)) | (np.isnan(ours) & np.isnan(peer))
    assert equal[~ties].all(), x[~ties][~equal[~ties]][:5]


def test_cast_like_takes_the_narrow_type_of_its_second_input():
    model = _cast_model(TensorProto.FLOAT, TensorProto.FLOAT8E5M2, like=True, saturate=0)
    x = {"x": EDGES, "t": np.zeros(1, ml_dtypes.float8_e5m2)}
    (expected,) = ReferenceEvaluator(model).run(None, x)
    (ours,) = RuntimeSession(model).run(None, x)
    _same(ours, expected)


def test_shape_only_operators_hold_a_narrow_tensor_as_it_came():
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Identity", ["r"], ["y"])], "views",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [3, 2])],
        [numpy_helper.from_array(np.array([3, 2], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = np.arange(6, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).reshape(2, 3)
    session = RuntimeSession(model)
    assert session.get_inputs()[0].type == "tensor(float8e4m3fn)"
    (y,) = session.run(None, {"x": x})
    assert y.dtype == x.dtype and y.shape == (3, 2) and y.tobytes() == x.tobytes()
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        session.run(None, {"x": x.astype(np.float32)})


def test_a_packed_int4_weight_is_unpacked_and_cast():
    weight = np.array([[-8, -1, 0], [3, 7, -5]], ml_dtypes.int4)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "wf"], ["y"])], "int4_weight",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = np.full((2, 3), 2.0, np.float32)
    (y,) = RuntimeSession(model).run(None, {"x": x})
    np.testing.assert_array_equal(y, 2 * weight.astype(np.float32))


def test_an_input_of_a_type_no_session_holds_is_refused_by_name():
    for element_type, name in ((TensorProto.STRING, "STRING"),
                               (TensorProto.COMPLEX64, "COMPLEX64")):
        graph = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])], "held",
            [helper.make_tensor_value_info("x", element_type, [2])],
            [helper.make_tensor_value_info("y", element_type, [2])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
        with pytest.raises(UnsupportedModelError,
                           match=rf"1 unsupported input\(s\):\n  - input 'x': {name} tensors"):
            RuntimeSession(model)


def test_a_cast_the_opset_does_not_allow_is_refused_with_the_node():
    model = _cast_model(TensorProto.FLOAT, TensorProto.FLOAT8E8M0, opset=21)
    with pytest.raises(Exception, match="FLOAT8E8M0"):
        RuntimeSession(model)
