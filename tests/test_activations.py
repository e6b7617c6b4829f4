"""The activations exporters write (Erf, Gelu, LeakyRelu, Clip), against onnxruntime where it
has the type and against float64 references where it has not.

Each case is a one-node model run by a RuntimeSession: over the element types, the
attributes (LeakyRelu's alpha, Gelu's approximate), Clip's bounds as opset 6's attributes,
as constant or run-time inputs or left out, and the special values (NaN, infinities,
signed zeros). Serial and parallel runs give the same bits, and float erf stays within its
documented ulps on every variant this machine runs.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper

from kerneltune.errors import UnsupportedModelError
from kerneltune.kernels import library
from kerneltune.kernels.variants import installed_variants, load_module
from kerneltune.runtime import RuntimeSession
from kerneltune.tuning.dtypes import NUMPY_DTYPES

TYPES = {np.dtype(NUMPY_DTYPES[t]): t for t in NUMPY_DTYPES}
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -3.5, 4.5, 30.0]


def _model(op_type: str, inputs: dict[str, np.ndarray], opset: int,
           constants: dict[str, np.ndarray] | None = None, node_inputs=None,
           **attributes) -> onnx.ModelProto:
    """One node over graph ``inputs`` and initializer ``constants`` (node_inputs: its input
    names in order, "" for one left out)."""
    constants = constants or {}
    first = next(iter(inputs.values()))
    node = helper.make_node(op_type, node_inputs or [*inputs, *constants], ["y"], **attributes)
    graph = helper.make_graph(
        [node], op_type,
        [helper.make_tensor_value_info(name, TYPES[v.dtype], list(v.shape))
         for name, v in inputs.items()],
        [helper.make_tensor_value_info("y", TYPES[first.dtype], None)],
        [onnx.numpy_helper.from_array(v, name) for name, v in constants.items()])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def _ours(model, feed, threads=2):
    return RuntimeSession(model, threads=threads, contention=None).run(None, feed)[0]


def _theirs(model, feed):
    return onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]


def _floats(dtype, n=3000, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 3).astype(dtype)
    x[:len(SPECIAL)] = SPECIAL
    return x


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64))


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        if approximate == "tanh":
            return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


@pytest.mark.parametrize("approximate", [None, "none", "tanh"])
def test_gelu_float_matches_onnxruntime(approximate):
    x = _floats(np.float32)
    attributes = {} if approximate is None else {"approximate": approximate}
    model = _model("Gelu", {"x": x}, 20, **attributes)
    ours, theirs = _ours(model, {"x": x}), _theirs(model, {"x": x})
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_double_and_half_match_float64_references(approximate):
    for dtype, rtol in ((np.float64, 1e-13), (np.float16, 1e-3)):
        x = _floats(dtype)
        model = _model("Gelu", {"x": x}, 20, approximate=approximate)
        ours = _ours(model, {"x": x})
        assert ours.dtype == dtype
        np.testing.assert_allclose(ours.astype(np.float64), _gelu(x, approximate),
                                   rtol=rtol, atol=rtol)


def test_erf_matches_onnxruntime_and_float64():
    x = _floats(np.float32)
    model = _model("Erf", {"x": x}, 13)
    ours = _ours(model, {"x": x})
    np.testing.assert_allclose(ours, _theirs(model, {"x": x}), rtol=1e-6, atol=1e-7)
    assert np.signbit(ours[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()
    assert ours[1] == 1.0 and ours[2] == -1.0 and np.isnan(ours[0])
    y = _floats(np.float64)
    np.testing.assert_array_equal(_ours(_model("Erf", {"x": y}, 13), {"x": y}), _erf(y))


#: float erf's bound in ulps of the correctly rounded result (unary_pythran._erf_rational)
ERF_ULPS = 8


@pytest.mark.parametrize("variant", installed_variants())
def test_float_erf_is_within_its_ulps_in_every_binade(variant):
    unary = load_module("unary", variant)
    exponents = np.arange(-126, 3)  # erf is +-1 beyond 4 (the clamp)
    rng = np.random.default_rng(7)
    x = (np.ldexp(1 + rng.random((len(exponents), 4096)), exponents[:, None])
         .astype(np.float32).reshape(-1))
    x = np.concatenate([x, -x, np.linspace(3.0, 4.5, 20001, dtype=np.float32)])
    out = np.empty_like(x)
    unary.erff(x, out, 1)
    exact = _erf(x)
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert (np.abs(out - exact) / ulp).max() <= ERF_ULPS


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("alpha", [None, 0.1, -2.0])
def test_leaky_relu_matches_onnxruntime(dtype, alpha):
    x = _floats(dtype)
    attributes = {} if alpha is None else {"alpha": alpha}
    model = _model("LeakyRelu", {"x": x}, 16, **attributes)
    ours = _ours(model, {"x": x})
    assert ours.dtype == dtype
    np.testing.assert_array_equal(ours, _theirs(model, {"x": x}))
    assert np.signbit(ours[4])  # -0.0 stays -0.0


CLIP_TYPES = [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8,
              np.uint64]


def _clip_data(dtype, n=500) -> np.ndarray:
    if np.issubdtype(dtype, np.floating):
        return _floats(dtype, n)
    info = np.iinfo(dtype)
    values = np.random.default_rng(1).integers(info.min, info.max, n, dtype=dtype,
                                               endpoint=True)
    values[:2] = info.min, info.max
    return values


@pytest.mark.parametrize("dtype", CLIP_TYPES)
@pytest.mark.parametrize("bounds", ["both", "min", "max", "neither", "crossed"])
def test_clip_with_constant_bounds_matches_onnxruntime(dtype, bounds):
    x = _clip_data(dtype)
    low, high = (np.array(5, dtype), np.array(2, dtype)) if bounds == "crossed" else (
        np.array(1, dtype), np.array(100, dtype))
    given = {"both": ["low", "high"], "crossed": ["low", "high"], "min": ["low", ""],
             "max": ["", "high"], "neither": []}[bounds]
    constants = {name: value for name, value in (("low", low), ("high", high))
                 if name in given}
    model = _model("Clip", {"x": x}, 13, constants, node_inputs=["x", *given])
    ours = _ours(model, {"x": x})
    assert ours.dtype == dtype
    np.testing.assert_array_equal(ours, _theirs(model, {"x": x}))


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_clip_bounds_given_at_run_time(dtype):
    x = _clip_data(dtype)
    feed = {"x": x, "low": np.array(-3, dtype), "high": np.array(7, dtype)}
    model = _model("Clip", feed, 13)
    session = RuntimeSession(model)
    np.testing.assert_array_equal(session.run(None, feed)[0], _theirs(model, feed))
    feed["high"] = np.array(0, dtype)
    np.testing.assert_array_equal(session.run(None, feed)[0], np.clip(x, -3, 0))
    prepared = session._prepared[0]
    with pytest.raises(ValueError, match=r"Clip: min must be one value, got shape \[2\]"):
        prepared.run(x, np.array([1, 2], dtype), np.array(7, dtype))


def test_clip_of_opset_6_takes_its_bounds_as_attributes():
    x = _floats(np.float32)
    largest = np.finfo(np.float32).max  # opset 6's defaults: infinities are clipped
    for attributes, expected in (({"min": -1.0, "max": 2.0}, np.clip(x, -1, 2)),
                                 ({"max": 0.5}, np.clip(x, -largest, 0.5)),
                                 ({}, np.clip(x, -largest, largest))):
        ours = _ours(_model("Clip", {"x": x}, 6, **attributes), {"x": x})
        np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize(("op_type", "attributes", "dtype"), [
    ("Erf", {}, np.float32), ("Gelu", {"approximate": "tanh"}, np.float32),
    ("Gelu", {}, np.float64), ("LeakyRelu", {"alpha": 0.2}, np.float32),
    ("Clip", {}, np.int32)])
def test_serial_and_parallel_runs_give_the_same_bits(op_type, attributes, dtype):
    x = _clip_data(dtype, 300_000)
    constants = {"low": np.array(-9, dtype), "high": np.array(9, dtype)} \
        if op_type == "Clip" else None
    model = _model(op_type, {"x": x}, 20, constants, **attributes)
    sessions = {t: RuntimeSession(model, threads=t, contention=None,
                                  overrides={op_type: {"parallel.minimum_elements": 1024}})
                for t in (1, 2)}
    results = {t: s.run(None, {"x": x})[0] for t, s in sessions.items()}
    assert results[1].tobytes() == results[2].tobytes()
    assert sessions[2]._prepared[0].plan(x, *(constants or {}).values()).threads == 2


def test_attributes_are_checked_when_prepared():
    kernels = library()
    with pytest.raises(ValueError, match="Gelu: approximate 'exact' is none of none, tanh"):
        kernels["Gelu"].prepare("FLOAT", approximate="exact")
    with pytest.raises(TypeError, match="LeakyRelu takes no attribute beta"):
        kernels["LeakyRelu"].prepare("FLOAT", beta=1.0)
    with pytest.raises(TypeError, match="Clip: max 1.5 is not a value of int8"):
        kernels["Clip"].prepare("INT8").run(np.zeros(3, np.int8), np.int8(0), 1.5)
    model = _model("Gelu", {"x": np.zeros(3, np.float32)}, 20, approximate="exact")
    with pytest.raises(ValueError, match="Gelu: approximate 'exact'"):
        RuntimeSession(model)


def test_a_clip_of_booleans_is_refused_naming_the_schema():
    x = np.zeros(3, np.bool_)
    with pytest.raises(UnsupportedModelError,
                       match="Clip-13, the Clip of this opset, takes no BOOL"):
        RuntimeSession(_model("Clip", {"x": x}, 13))
