"""Elementwise kernels against numpy: every operator, element type and broadcast form.

References are numpy's results, computed in float64 and rounded for the
transcendental functions on FLOAT (numpy's own float32 log, for one, is
itself up to 2 ulp off), and written out where ONNX fixes what numpy leaves
open (integer division truncates and a zero divisor gives 0).
"""

from __future__ import annotations

import math
import threading

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from conftest import host_can_run
from kerneltune.errors import TuningValidationError, UnknownKernelError
from kerneltune.kernels import catalog, library
from kerneltune.kernels.variants import installed_variants, load_module
from kerneltune.tuning.schema import element_type_name, element_type_number

LIBRARY = library()
RNG = np.random.default_rng(20261129)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
#: the 16-bit floats, which the kernels compute in float32
HALVES = (np.dtype(np.float16), BFLOAT16)


def dtype_of(name: str) -> np.dtype:
    return {"FLOAT": np.dtype("float32"), "DOUBLE": np.dtype("float64"),
            "FLOAT16": np.dtype("float16"), "BFLOAT16": BFLOAT16,
            "BOOL": np.dtype(bool)}.get(name) or np.dtype(name.lower())


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype == BFLOAT16


def values(dtype: np.dtype, size: int = 257) -> np.ndarray:
    """Random values plus the edge cases of the type, shuffled (edge cases first if short)."""
    if dtype == BFLOAT16:  # float32's edge cases, rounded (its largest become infinities)
        with np.errstate(over="ignore"):
            return values(np.dtype(np.float32), size).astype(BFLOAT16)
    if dtype.kind == "b":
        return RNG.integers(0, 2, size).astype(bool)
    if size < 32:
        return values(dtype, 32)[:size]
    if dtype.kind == "f":
        info = np.finfo(dtype)
        special = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, info.tiny, -info.tiny,
                   info.tiny / 4, info.max, -info.max, 0.5, 2.0, 3.0]
        body = RNG.standard_normal(size - len(special)) * 4
        return RNG.permutation(np.concatenate([special, body])).astype(dtype)
    info = np.iinfo(dtype)
    special = [0, 1, -1 if info.min < 0 else 2, info.min, info.max, info.min + 1, info.max - 1,
               2, 3]
    body = RNG.integers(info.min, info.max, size - len(special), dtype=dtype, endpoint=True)
    return RNG.permutation(np.concatenate([np.array(special, dtype=dtype), body]))


def positive(dtype, size=257):
    x = np.abs(values(dtype, size).astype(np.float64))
    x[~np.isfinite(x)] = 1.0
    return np.concatenate([[0.0, np.inf, np.nan], x[3:]]).astype(dtype)


def elementwise_python(a, b, function):
    """Apply ``function`` to Python ints and wrap the result into the element type."""
    a, b = np.broadcast_arrays(a, b)
    bits = a.dtype.itemsize * 8
    out = [function(x, y) % 2**bits for x, y in zip(a.ravel().tolist(), b.ravel().tolist(),
                                                     strict=True)]
    return np.array(out, dtype=np.uint64).astype(a.dtype).reshape(a.shape)


def truncated_division(x, y):
    if y == 0:
        return 0
    q = abs(x) // abs(y)
    return -q if (x < 0) != (y < 0) else q


def integer_power(x, y):
    if y >= 0:
        return x**y
    return 1 if x == 1 else (1 if y % 2 == 0 else -1) if x == -1 else 0


def sigmoid(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def erf(x):
    return np.vectorize(math.erf, otypes=[x.dtype])(x)


def leaky_relu(x):
    # alpha is a float32 attribute, 0.01 by default; the 16-bit floats compute in float32
    wide = x.astype(np.float32) if x.dtype in HALVES else x
    return np.where(x >= 0, x, (wide * wide.dtype.type(np.float32(0.01))).astype(x.dtype))


def gelu(x):
    return x * 0.5 * (1 + erf(x / math.sqrt(2)))


UNARY_REFERENCE = {
    "Abs": np.abs, "Neg": np.negative, "Relu": lambda x: np.maximum(x, x.dtype.type(0)),
    "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt, "Reciprocal": np.reciprocal,
    "Sigmoid": sigmoid, "Tanh": np.tanh,
    "Erf": erf, "Gelu": gelu,
    "LeakyRelu": leaky_relu,
    "Clip": lambda x: np.clip(x, x.dtype.type(1), x.dtype.type(5)).astype(x.dtype),
    "Not": np.logical_not, "BitwiseNot": np.invert,
}
#: the inputs after the first, of an operator that takes some (Clip's bounds)
UNARY_BOUNDS = {"Clip": lambda dtype: (np.array(1, dtype), np.array(5, dtype))}
TRANSCENDENTAL = {"Exp", "Log", "Sqrt", "Sigmoid", "Tanh", "Erf"}
#: operators whose float result loses digits to cancellation (Gelu of a negative x is x
#: times a difference near 0): compared within a relative tolerance per element size
CANCELLING = {"Gelu": {2: 2e-3, 4: 1e-5, 8: 1e-13}}


def binary_reference(name, a, b):
    if name == "Div" and a.dtype.kind in "iu":
        return elementwise_python(a, b, truncated_division)
    if name == "Pow" and a.dtype.kind == "i":
        return elementwise_python(a, b, integer_power)
    if name == "Pow":
        # numpy computes a scalar exponent of 0.5 as a square root (pow(-inf, 0.5) is nan,
        # pow(-0.0, 0.5) is -0.0); an exponent array takes C's pow, as onnxruntime does
        a, b = np.broadcast_arrays(a, b)
        b = b.copy()
    function = {
        "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
        "Pow": np.power, "Max": np.maximum, "Min": np.minimum, "Greater": np.greater,
        "Less": np.less, "GreaterOrEqual": np.greater_equal, "LessOrEqual": np.less_equal,
        "Equal": np.equal, "And": np.logical_and, "Or": np.logical_or,
        "Xor": np.logical_xor, "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or,
        "BitwiseXor": np.bitwise_xor,
    }[name]
    with np.errstate(all="ignore"):
        return function(a, b)


def cases(table):
    for name, functions in table.items():
        for element_types in functions.values():
            for element_type in element_types:
                yield name, element_type
            if "FLOAT" in element_types:
                yield name, "FLOAT16"
                yield name, "BFLOAT16"


def assert_same_values(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal values, NaNs where NaNs are: a 16-bit float compared as the float32 it widens to
    exactly (numpy's testing takes ml_dtypes' bfloat16 NaNs for equal in some versions of
    ml_dtypes only)."""
    if actual.dtype in HALVES:
        actual, expected = actual.astype(np.float32), expected.astype(np.float32)
    np.testing.assert_array_equal(actual, expected)


def ulps(actual: np.ndarray, expected: np.ndarray) -> int:
    """Largest distance in units in the last place; equal NaNs and infinities count 0."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    same = (actual == expected) | (np.isnan(actual) & np.isnan(expected))
    if same.all():
        return 0
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[actual.dtype.itemsize]

    def ordered(x):
        i = x.view(bits).astype(np.int64)
        return np.where(i < 0, np.iinfo(bits).min - i, i)

    distance = np.abs(ordered(actual) - ordered(expected))
    return int(distance[~same].max())


def assert_same_bits(x, y):
    assert x.dtype == y.dtype and x.shape == y.shape
    assert x.tobytes() == y.tobytes()


@pytest.mark.parametrize(("name", "element_type"), list(cases(catalog.UNARY)))
def test_unary_against_numpy(name, element_type):
    dtype = dtype_of(element_type)
    x = positive(dtype) if name in {"Log", "Sqrt"} else values(dtype)
    if name in {"Log", "Sqrt"}:
        x = np.concatenate([x, np.array([-1.0, -0.0], dtype)])
    out = LIBRARY[name].run([x, *UNARY_BOUNDS.get(name, lambda dtype: ())(dtype)], threads=2)
    reference = UNARY_REFERENCE[name]
    with np.errstate(all="ignore"):
        if (name in TRANSCENDENTAL or name in CANCELLING) and dtype != np.float64:
            expected = reference(x.astype(np.float64)).astype(dtype)
        else:
            expected = reference(x)
    assert out.dtype == expected.dtype
    if name in CANCELLING:
        tolerance = CANCELLING[name][dtype.itemsize]
        np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64),
                                   rtol=tolerance, atol=tolerance)
    elif name in TRANSCENDENTAL and dtype in HALVES:
        assert ulps(out, expected) <= 1
    elif name in TRANSCENDENTAL:  # the bound of the function that runs, else 2
        function, = (function for function, types in catalog.UNARY[name].items()
                     if element_type in types)
        assert ulps(out, expected) <= FLOAT_ULPS.get(function, 2)
    else:
        assert_same_values(out, expected)


@pytest.mark.parametrize("element_type", ["FLOAT16", "BFLOAT16"])
def test_16_bit_abs_and_neg_touch_only_the_sign_bit_of_every_pattern(element_type):
    """As numpy's do for float16: all 65536 patterns, NaN payloads included, serially and on
    three threads. Nothing is converted, so their schemas have no conversion grain."""
    bits = np.arange(2**16, dtype=np.uint16)
    x = bits.view(dtype_of(element_type))
    for name, reference in (("Abs", bits & 0x7FFF), ("Neg", bits ^ 0x8000)):
        kernel = LIBRARY[name]
        assert "conversion.parallel_minimum_elements" not in kernel.schema(
            element_type).parameters
        prepared = kernel.prepare(element_type, kernel.configure(
            element_type, {"parallel.minimum_elements": 64}), threads=3)
        assert prepared.plan(x).threads == 3
        for out in (prepared.run(x), prepared.run_serial(x), kernel.run([x[1:]], threads=2)):
            assert_same_bits(out, reference[-out.size:].view(x.dtype))


#: the float functions' bounds in ulps (test_activations checks erff's everywhere)
FLOAT_ULPS = {"tanhf_rational": 6, "erff": 8}


@pytest.mark.parametrize("variant", installed_variants())
def test_float_tanh_is_within_its_ulps_everywhere(variant):
    """A sample of every float32 binade, both signs, each variant this host runs.

    Float tanh is a rational approximation of kerneltune's own, so the sample of the test
    above is not enough: this is dense around 1.0 and where tanh rounds to 1 (about 9.01),
    and reaches every exponent elsewhere.
    """
    if not host_can_run(variant):
        pytest.skip(f"this host cannot run {variant}")
    tanhf = load_module("unary", variant).tanhf_rational
    every_float = np.arange(0, 0x7F800001, 4099, dtype=np.int64)
    near_the_seams = np.concatenate([np.arange(bits - 50_000, bits + 50_000) for bits in (
        np.float32(1.0).view(np.int32), np.float32(9.01).view(np.int32))])
    x = np.concatenate([every_float, near_the_seams]).astype(np.int32).view(np.float32)
    # the special values lead, many times over, so that the vectorised loop body (not only
    # its scalar remainder) meets them on each thread
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1.0, -1.0,
                        9.1, -9.1, np.finfo(np.float32).max, -np.finfo(np.float32).max],
                       np.float32)
    x = np.concatenate([np.tile(special, 16), x, -x]).astype(np.float32)
    expected = np.tanh(x.astype(np.float64)).astype(np.float32)
    for threads in (1, 2):
        out = np.empty_like(x)
        assert tanhf(x, out, threads) == threads
        assert ulps(out, expected) <= FLOAT_ULPS["tanhf_rational"]
        assert np.array_equal(np.signbit(out[x == 0]), np.signbit(x[x == 0]))
        assert np.array_equal(np.isnan(out), np.isnan(x))


@pytest.mark.parametrize("element_type", ["FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16"])
def test_pow_by_one_half_is_pow_not_a_square_root(element_type):
    """C's pow (and onnxruntime): pow(-inf, 0.5) is inf and pow(-0.0, 0.5) is +0.0, where
    numpy, given the scalar 0.5, takes a square root (nan and -0.0)."""
    dtype = dtype_of(element_type)
    x = np.array([-np.inf, -0.0, 4.0, np.inf], dtype)
    for threads in (1, 2):
        out = LIBRARY["Pow"].run([x, np.array(0.5, dtype)], threads=threads)
        assert out.tolist() == [np.inf, 0.0, 2.0, np.inf]
        assert not np.signbit(out[1])


@pytest.mark.parametrize(("name", "element_type"), list(cases(catalog.BINARY)))
@pytest.mark.parametrize("form", ["equal", "scalar_right", "scalar_left", "row", "column",
                                  "outer", "three_d"])
def test_binary_against_numpy(name, element_type, form):
    dtype = dtype_of(element_type)
    shapes = {
        "equal": ((7, 9), (7, 9)), "scalar_right": ((7, 9), ()), "scalar_left": ((1,), (7, 9)),
        "row": ((7, 9), (9,)), "column": ((7, 9), (7, 1)), "outer": ((7, 1), (1, 9)),
        "three_d": ((2, 1, 9), (3, 1)),
    }[form]
    a, b = (values(dtype, int(np.prod(shape)) or 1)[: int(np.prod(shape))].reshape(shape)
            for shape in shapes)
    if name == "Pow" and dtype.kind == "i":
        b = (np.abs(b) % 13).astype(dtype) * np.where(RNG.random(b.shape) < 0.1, -1, 1).astype(
            dtype)
    out = LIBRARY[name].run([a, b], threads=2)
    if dtype in HALVES:
        with np.errstate(all="ignore"):
            expected = binary_reference(name, a.astype(np.float32), b.astype(np.float32))
            if expected.dtype == np.float32:
                expected = expected.astype(dtype)
    else:
        expected = binary_reference(name, a, b)
    assert out.shape == np.broadcast_shapes(a.shape, b.shape)
    assert out.dtype == expected.dtype
    if name == "Pow" and is_float(dtype):
        assert ulps(out, expected) <= 2
    else:
        assert_same_values(out, expected)


def test_every_catalog_operator_is_in_the_library():
    assert set(catalog.UNARY) | set(catalog.BINARY) <= set(LIBRARY)
    for name in ("Add", "GreaterOrEqual", "LessOrEqual", "Tanh", "Gemm", "MatMul", "Abs"):
        assert {element_type_number("FLOAT16"), element_type_number("BFLOAT16")} <= set(
            LIBRARY[name].element_types)
    assert element_type_number("FLOAT16") not in LIBRARY["Not"].element_types
    assert set(LIBRARY["BitwiseNot"].element_types) == set(LIBRARY["BitwiseAnd"].element_types)
    for name in ("GreaterOrEqual", "LessOrEqual"):
        assert LIBRARY[name].element_types == LIBRARY["Greater"].element_types
        assert LIBRARY[name].output_dtype(element_type_number("INT8")) == np.bool_


@pytest.mark.parametrize("name", ["Abs", "Exp", "Add", "Greater"])
@pytest.mark.parametrize("shape", [(0,), (3, 0), ()])
def test_empty_and_zero_d(name, shape):
    x = np.ones(shape, np.float32) * 0.5
    inputs = [x] if name in catalog.UNARY else [x, x]
    out = LIBRARY[name].run(inputs)
    assert out.shape == shape
    np.testing.assert_array_equal(out, UNARY_REFERENCE[name](x) if name in catalog.UNARY
                                  else binary_reference(name, x, x))


def test_float_division_by_zero_and_integer_semantics():
    f = np.array([1.0, -1.0, 0.0, np.nan], np.float32)
    out = LIBRARY["Div"].run([f, np.zeros(4, np.float32)])
    np.testing.assert_array_equal(out, [np.inf, -np.inf, np.nan, np.nan])
    i = np.array([-7, 7, -128, 5, 0, -128], np.int8)
    d = np.array([2, -2, -1, 0, 3, 1], np.int8)
    np.testing.assert_array_equal(LIBRARY["Div"].run([i, d]), [-3, -3, -128, 0, 0, -128])
    np.testing.assert_array_equal(
        LIBRARY["Add"].run([np.array([127, -128], np.int8), np.array([1, -1], np.int8)]),
        [-128, 127])
    np.testing.assert_array_equal(LIBRARY["Abs"].run([np.array([-128], np.int8)]), [-128])
    np.testing.assert_array_equal(
        LIBRARY["Div"].run([np.array([7, 0], np.uint8), np.array([0, 0], np.uint8)]), [0, 0])


def division_operands(dtype: np.dtype) -> np.ndarray:
    """Every value of a one-byte type; else the extremes, powers of two and their
    neighbours, and small values, where a quotient rounded the wrong way would show."""
    info = np.iinfo(dtype)
    if info.bits == 8:
        return np.arange(info.min, info.max + 1).astype(dtype)
    powers = [2**k + d for k in range(info.bits) for d in (-1, 0, 1)]
    edges = [info.min, info.min + 1, info.max, info.max - 1, *range(-9, 10), *powers,
             *(-p for p in powers), *(info.max // p for p in powers[3:])]
    return np.unique(np.array([v for v in edges if info.min <= v <= info.max])).astype(dtype)


@pytest.mark.parametrize("element_type", ["INT8", "UINT8", "INT16", "UINT16", "INT32",
                                          "UINT32", "INT64", "UINT64"])
def test_integer_division_is_exact_for_every_pair_of_edge_values(element_type):
    """Integers of up to 32 bits divide in float64, exact only because their quotient is
    below 2**53; every pair of the edge values on each path, against Python's integers."""
    dtype = dtype_of(element_type)
    x = division_operands(dtype)
    a, b = np.broadcast_arrays(x[:, None], x[None, :])
    expected = elementwise_python(a, b, truncated_division)
    div = LIBRARY["Div"]
    parallel = div.prepare(element_type, div.configure(element_type, {
        "parallel.minimum_elements": 64, "parallel.broadcast_minimum_elements": 64}), threads=2)
    for run in (parallel.run, parallel.run_serial):
        assert_same_bits(run(a.copy(), b.copy()), expected)   # equal shapes
        assert_same_bits(run(x[:, None], x[None, :]), expected)   # broadcast rows


def test_max_min_follow_numpy_for_nan_and_signed_zero():
    a = np.array([np.nan, 1.0, -0.0, 0.0, 2.0], np.float32)
    b = np.array([1.0, np.nan, 0.0, -0.0, np.nan], np.float32)
    for name, reference in (("Max", np.maximum), ("Min", np.minimum)):
        assert_same_bits(LIBRARY[name].run([a, b]), reference(a, b))


@pytest.mark.parametrize("name", ["Abs", "Sigmoid", "Tanh", "Add", "Mul", "Greater",
                                  "LessOrEqual", "Max", "Pow"])
@pytest.mark.parametrize("element_type", ["FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16"])
def test_serial_and_parallel_are_bit_identical_around_every_threshold(name, element_type):
    kernel = LIBRARY[name]
    grain = 64
    values_ = {"parallel.minimum_elements": grain, "parallel.broadcast_minimum_elements": grain}
    if "conversion.parallel_minimum_elements" in kernel.schema(element_type).parameters:
        values_["conversion.parallel_minimum_elements"] = grain
    if name in catalog.UNARY:
        values_.pop("parallel.broadcast_minimum_elements")
    config = kernel.configure(element_type, values_)
    prepared = kernel.prepare(element_type, config, threads=3)
    dtype = dtype_of(element_type)
    for size in (2 * grain - 1, 2 * grain, 2 * grain + 1, 3 * grain, 1000):
        a = values(dtype, size)
        if name in catalog.UNARY:
            inputs = [a]
        else:
            inputs = [a.reshape(-1, 1)[: size // 10 * 10].reshape(-1, 10), values(dtype, 10)]
        parallel, serial = prepared.run(*inputs), prepared.run_serial(*inputs)
        assert_same_bits(parallel, serial)
        expected_threads = 1 if np.prod(parallel.shape) < 2 * grain else min(
            3, int(np.prod(parallel.shape)) // grain)
        assert prepared.plan(*inputs).threads == expected_threads


@pytest.mark.parametrize(("name", "element_type"), [
    ("Add", "INT8"), ("Sub", "UINT8"), ("Mul", "INT8"), ("Max", "UINT8"),
    ("BitwiseXor", "INT8"), ("And", "BOOL"), ("Or", "BOOL"), ("Xor", "BOOL"), ("Not", "BOOL"),
])
def test_one_byte_kernels_run_every_form_on_several_threads(name, element_type):
    """The one-byte types compute through per-thread views and Not on the booleans' bytes;
    each thread's part of every form (one row, scalar, rows) must land in the output."""
    kernel = LIBRARY[name]
    unary = name in catalog.UNARY
    grains = {"parallel.minimum_elements": 64}
    if not unary:
        grains["parallel.broadcast_minimum_elements"] = 64
    prepared = kernel.prepare(element_type, kernel.configure(element_type, grains), threads=3)
    dtype = dtype_of(element_type)
    forms = [[values(dtype, 1000)]] if unary else [
        [values(dtype, 1000), values(dtype, 1000)],
        [values(dtype, 1000), values(dtype, 1)[0:1].reshape(())],
        [values(dtype, 40).reshape(40, 1), values(dtype, 25).reshape(1, 25)],
    ]
    for inputs in forms:
        assert prepared.plan(*inputs).threads == 3
        out = prepared.run(*inputs)
        expected = UNARY_REFERENCE[name](*inputs) if unary else binary_reference(name, *inputs)
        assert_same_bits(out, expected)


def test_a_different_threshold_changes_the_path():
    kernel = LIBRARY["Add"]
    a = np.ones(100_000, np.float32)
    default = kernel.prepare("FLOAT", threads=2)
    assert default.plan(a, a).path == "parallel" and default.plan(a, a).threads == 2
    serial = kernel.prepare("FLOAT", kernel.configure("FLOAT", {
        "parallel.minimum_elements": 1_000_000}), threads=2)
    assert serial.plan(a, a).path == "serial" and serial.plan(a, a).threads == 1
    capped = kernel.prepare("FLOAT", kernel.configure("FLOAT", {
        "parallel.minimum_elements": 1000, "parallel.maximum_threads": 1}), threads=2)
    assert capped.plan(a, a).threads == 1
    row = np.ones(1000, np.float32)
    matrix = np.ones((100, 1000), np.float32)
    broadcast_only = kernel.prepare("FLOAT", kernel.configure("FLOAT", {
        "parallel.broadcast_minimum_elements": 1_000_000}), threads=2)
    assert broadcast_only.plan(matrix, row).threads == 1
    assert broadcast_only.plan(a, a).threads == 2
    np.testing.assert_array_equal(serial.run(a, a), default.run(a, a))


def test_compiled_kernels_report_the_threads_that_ran():
    unary = load_module("unary")
    x = np.ones(1000, np.float32)
    assert unary.abs_(x, np.empty_like(x), 3) == 3
    assert unary.abs_(x, np.empty_like(x), 0) == 1
    # Chunks start on multiples of 64 elements: 200 elements give 2 chunks of 128 and 72.
    assert unary.abs_(x[:200].copy(), np.empty(200, np.float32), 3) == 2
    assert unary.abs_(x[:2].copy(), np.empty(2, np.float32), 8) == 1
    assert unary.abs_(x[:0].copy(), np.empty(0, np.float32), 2) == 1


@pytest.mark.parametrize(("rows", "threads", "ran"), [(5, 4, 3), (6, 4, 3), (7, 4, 4), (3, 8, 3)])
def test_broadcast_rows_run_in_contiguous_runs_that_plans_mirror(rows, threads, ran):
    from kerneltune.kernels import broadcast
    a = np.arange(rows, dtype=np.float32).reshape(rows, 1)
    b = np.arange(100, dtype=np.float32)
    layout = broadcast.layout(a.shape, b.shape)
    out = np.empty(layout.shape, np.float32)
    assert load_module("binary").add(a.reshape(-1), b, out.reshape(-1), layout.a_offsets,
                                     layout.b_offsets, layout.inner, layout.a_step,
                                     layout.b_step, threads) == ran
    np.testing.assert_array_equal(out, a + b)
    config = LIBRARY["Add"].configure("FLOAT", {"parallel.broadcast_minimum_elements": 1})
    assert LIBRARY["Add"].prepare("FLOAT", config, threads=threads).plan(a, b).threads == ran


def test_inputs_are_normalised_or_rejected():
    add = LIBRARY["Add"].prepare("FLOAT", threads=2)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    swapped = a.astype(a.dtype.newbyteorder(">"))
    strided = np.arange(24, dtype=np.float32).reshape(3, 8)[:, ::2]
    readonly = a.copy()
    readonly.flags.writeable = False
    subclass = a.view(type("Sub", (np.ndarray,), {}))
    for other in (swapped, strided, readonly, a.T.copy().T, subclass, a[::-1, ::-1]):
        np.testing.assert_array_equal(add.run(a, other), a + np.asarray(other, np.float32))
        np.testing.assert_array_equal(add.run(other, a), np.asarray(other, np.float32) + a)
    neg = LIBRARY["Neg"].prepare("FLOAT", threads=2)
    for x in (swapped, strided, readonly, a.T.copy().T, subclass, a[::-1, ::-1], a[:, 1]):
        np.testing.assert_array_equal(neg.run(x), -np.asarray(x, np.float32))
    np.testing.assert_array_equal(add.run(a, 2), a + 2)
    np.testing.assert_array_equal(add.run(2.5, a), a + 2.5)
    with pytest.raises(TypeError, match="expected element type float32, got float64"):
        add.run(a, a.astype(np.float64))
    with pytest.raises(ValueError, match="cannot be broadcast"):
        add.run(a, np.ones(5, np.float32))
    with pytest.raises(TypeError, match="does not fit"):
        LIBRARY["Add"].prepare("INT8").run(np.ones(3, np.int8), 1000)


def test_outputs_are_fresh_arrays():
    x = np.ones(10, np.float32)
    relu = LIBRARY["Relu"].prepare("FLOAT")
    first, second = relu.run(x), relu.run(x)
    assert first is not second and not np.shares_memory(first, x)
    first[0] = 5
    assert second[0] == 1


def in_place_cases():
    """Every unary and binary kernel and element type, the chain's GELU among them."""
    for name, element_type in [*cases(catalog.UNARY), *cases(catalog.BINARY),
                               ("ElementwiseChain", "FLOAT")]:
        if name != "Clip":  # its bounds come with each call
            yield name, element_type


@pytest.mark.parametrize(("name", "element_type"), list(in_place_cases()))
def test_a_result_written_over_its_operand_has_run_s_bits(name, element_type):
    """Where a kernel offers to write over an operand, it gives ``run``'s bits on the
    serial and the parallel path, in every broadcast form, and returns that operand; where
    the operand cannot take the result (another shape, read-only, strided), a fresh array."""
    kernel = LIBRARY[name]
    grain = 64
    config = kernel.configure(element_type, {"parallel.minimum_elements": grain})
    prepared = kernel.prepare(element_type, config, threads=3)
    dtype = dtype_of(element_type)
    unary = name not in catalog.BINARY
    types = (dtype, getattr(prepared, "b_dtype", dtype))
    shapes = [((1000,),), ((5,),)] if unary else [
        ((40, 25), (40, 25)), ((40, 25), ()), ((), (40, 25)), ((40, 25), (25,)),
        ((40, 1), (40, 25)), ((3, 7), (3, 7))]
    offered = False
    for index in (0, 1):
        run = prepared.in_place(index)
        if run is None:
            continue
        offered = True
        for shape in shapes:
            inputs = [values(t, math.prod(s) or 1)[:math.prod(s)].reshape(s)
                      for s, t in zip(shape, types, strict=False)]
            if name == "Pow" and dtype.kind == "i":
                inputs[1] = np.asarray(np.abs(inputs[1]) % 13, types[1])
            expected = prepared.run(*inputs)
            operand = inputs[index].copy()
            given = [operand if i == index else x for i, x in enumerate(inputs)]
            result = run(*given)
            assert_same_bits(result, expected)
            assert (result is operand) == (operand.shape == expected.shape)
            frozen = inputs[index].copy()
            frozen.flags.writeable = False
            result = run(*[frozen if i == index else x for i, x in enumerate(inputs)])
            assert result is not frozen and frozen.tobytes() == inputs[index].tobytes()
            assert_same_bits(result, expected)
    # a kernel offers it where its result has its operand's type (a 16-bit float computed
    # on float32 copies does not, its sign bits do)
    kept_type = dtype_of(element_type) == prepared.run(*[
        values(t, 4)[:4] for t in types[:1 if unary else 2]]).dtype
    assert offered <= kept_type
    assert offered or not kept_type or dtype in HALVES


def test_in_place_falls_back_to_a_fresh_array_for_a_strided_operand():
    relu = LIBRARY["Relu"].prepare("FLOAT").in_place(0)
    x = np.arange(-5, 5, dtype=np.float32)
    strided = x[::2]
    result = relu(strided)
    assert result is not strided and x.min() == -5
    np.testing.assert_array_equal(result, np.maximum(strided, 0))
    # the other operand strided: read through a contiguous copy
    add = LIBRARY["Add"].prepare("FLOAT").in_place(1)
    b = np.ones(5, np.float32)
    assert add(x[::2], b) is b
    np.testing.assert_array_equal(b, x[::2] + 1)


def test_unsupported_element_type_and_bad_config():
    with pytest.raises(UnknownKernelError, match="Exp has no INT32 kernel"):
        LIBRARY["Exp"].tuning_key("INT32")
    with pytest.raises(TuningValidationError) as error:
        LIBRARY["Add"].configure("FLOAT", {"parallel.minimum_elements": 0,
                                           "parallel.maximum_threads": True})
    assert len(error.value.problems) == 2
    with pytest.raises(ValueError, match="threads"):
        LIBRARY["Add"].prepare("FLOAT", threads=0)


def test_tuning_keys_are_per_element_type_and_variant():
    keys = {LIBRARY["Add"].tuning_key(t) for t in LIBRARY["Add"].element_types}
    assert len(keys) == len(LIBRARY["Add"].element_types)
    key = LIBRARY["Add"].tuning_key("FLOAT16")
    assert (key.library, key.kernel, key.implementation) == (
        "kerneltune_cpu", "Add", LIBRARY["Add"].implementation)
    assert key != LIBRARY["Add"].tuning_key("BFLOAT16")
    for element_type in ("FLOAT16", "BFLOAT16"):
        assert "conversion.parallel_minimum_elements" in LIBRARY["Add"].schema(
            element_type).parameters
    assert "conversion.parallel_minimum_elements" not in LIBRARY["Add"].schema(
        "FLOAT").parameters
    assert element_type_name(key.element_type) == "FLOAT16"


@pytest.mark.parametrize("element_type", ["FLOAT16", "BFLOAT16"])
@pytest.mark.parametrize("name", ["Exp", "Add", "Pow"])
def test_16_bit_defaults_convert_on_two_threads_where_they_compute_on_two(name, element_type):
    """Computing on two threads and converting on one loses to doing both on either."""
    defaults = LIBRARY[name].configure(element_type, {})
    assert defaults.conversion_minimum_elements == defaults.minimum_elements


GRAIN_FIELDS = ("parallel.minimum_elements", "parallel.broadcast_minimum_elements",
                "conversion.parallel_minimum_elements")


def _by_operator_and_type(table):
    return {(name, element_type): grain for name, grains in table.items()
            for grain, element_types in grains.items() for element_type in element_types}


def test_grains_default_to_the_operators_then_the_element_types_then_32768():
    """Every grain field has its operator's grain, else its element type's, else an add's;
    broadcasts have their own where the catalog's ``BROADCAST_GRAINS`` gives one."""
    costly = _by_operator_and_type(catalog.GRAINS)
    broadcasts = _by_operator_and_type(catalog.BROADCAST_GRAINS)
    assert costly and catalog.ELEMENT_GRAINS["INT8"] > catalog.DEFAULT_GRAIN
    assert broadcasts and set(catalog.BROADCAST_GRAINS) <= set(catalog.BINARY)
    for name, kernel in LIBRARY.items():
        if name in ("Gemm", "MatMul"):
            continue
        for element_type in kernel.element_types:
            type_name = element_type_name(element_type)
            grain = costly.get((name, type_name), catalog.ELEMENT_GRAINS.get(
                type_name, catalog.DEFAULT_GRAIN))
            defaults = kernel.schema(element_type).default_values()
            expected = {field: grain for field in GRAIN_FIELDS if field in defaults}
            if (name, type_name) in broadcasts:
                expected["parallel.broadcast_minimum_elements"] = broadcasts[name, type_name]
            assert {field: defaults[field] for field in expected} == expected, \
                (name, type_name)


def test_a_costly_operators_config_keeps_the_names_checks_and_thread_cap_of_its_kind():
    pow_, add = LIBRARY["Pow"].schema("FLOAT16"), LIBRARY["Add"].schema("FLOAT16")
    assert list(pow_.parameters) == list(add.parameters)
    assert pow_.parameters["parallel.minimum_elements"].doc == add.parameters[
        "parallel.minimum_elements"].doc
    assert pow_.defaults.maximum_threads == add.defaults.maximum_threads
    assert LIBRARY["Pow"].config_type(element_type_number("FLOAT16")) is pow_.config_type
    assert LIBRARY["Pow"].configure("FLOAT16", {"parallel.minimum_elements": 100}) \
        .broadcast_minimum_elements == 4096
    with pytest.raises(TuningValidationError, match="parallel.broadcast_minimum_elements"):
        LIBRARY["Pow"].configure("DOUBLE", {"parallel.broadcast_minimum_elements": 0})


@pytest.mark.parametrize(("name", "element_type", "size", "path"), [
    ("Pow", "DOUBLE", 10_000, "parallel"), ("Div", "UINT64", 10_000, "parallel"),
    ("Add", "DOUBLE", 10_000, "serial"), ("Div", "DOUBLE", 10_000, "serial"),
    ("Add", "INT8", 100_000, "serial"), ("Add", "INT32", 100_000, "parallel"),
    ("Div", "INT8", 100_000, "parallel")])
def test_calls_go_parallel_by_default_where_each_element_costs_enough(
        name, element_type, size, path):
    x = positive(dtype_of(element_type), size) if element_type == "DOUBLE" else values(
        dtype_of(element_type), size)
    kernel = LIBRARY[name].prepare(element_type, threads=2)
    assert kernel.plan(x, x).path == path


def test_two_python_threads_run_kernels_at_once():
    kernel = LIBRARY["Sigmoid"].prepare("FLOAT", threads=2)
    x = values(np.dtype(np.float32), 300_000)
    expected = kernel.run_serial(x)
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                results.append(kernel.run(x))
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    workers = [threading.Thread(target=work) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors
    assert all(r.tobytes() == expected.tobytes() for r in results)


@settings(max_examples=60, deadline=None)
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=5),
    seed=st.integers(0, 2**32 - 1),
)
def test_broadcasting_matches_numpy_for_any_shapes(shapes, seed):
    rng = np.random.default_rng(seed)
    a_shape, b_shape = shapes.input_shapes
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    sub = LIBRARY["Sub"].prepare("FLOAT", LIBRARY["Sub"].configure("FLOAT", {
        "parallel.minimum_elements": 1, "parallel.broadcast_minimum_elements": 1}), threads=3)
    assert_same_bits(sub.run(a, b), np.subtract(a, b))
    assert_same_bits(sub.run_serial(a, b), np.subtract(a, b))


def test_every_variant_runs_the_float_tanh_of_the_catalog_on_any_thread_count():
    x = np.linspace(-10, 10, 100_003, dtype=np.float32)
    for variant in filter(host_can_run, installed_variants()):
        expected = np.empty_like(x)
        load_module("unary", variant).tanhf_rational(x, expected, 1)
        kernel = library(variant)["Tanh"]
        assert_same_bits(kernel.run([x], threads=1), expected)
        assert_same_bits(kernel.run([x], threads=2), expected)
