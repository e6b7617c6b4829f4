"""FLOAT16 and BFLOAT16 <-> FLOAT32 conversion kernels: bit-identical to numpy and ml_dtypes,
serial or parallel.

The compiled module is imported from the installed package (the baseline ISA variant, which
every processor runs). Halves travel as uint16 bit patterns; results are compared as bits, so
NaNs compare by sign and payload too.
"""

from __future__ import annotations

import importlib
import importlib.machinery
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

MODULE = "kerneltune.kernels._variants.baseline.convert"
THREADS = (1, 2, 3, 7)
ALL_HALVES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


@pytest.fixture(scope="module")
def convert():
    return importlib.import_module(MODULE)


def numpy_widen(bits: np.ndarray) -> np.ndarray:
    """numpy's float32 of each half bit pattern, as float32 bits."""
    return bits.view(np.float16).astype(np.float32).view(np.uint32)


def numpy_narrow(bits: np.ndarray) -> np.ndarray:
    """numpy's half of each float32 bit pattern, as half bits."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bits.view(np.float32).astype(np.float16).view(np.uint16)


def widen(convert, bits: np.ndarray, nthreads: int) -> tuple[np.ndarray, int]:
    out = np.full(bits.shape[0], np.nan, dtype=np.float32)
    used = convert.widen_half(bits, out, nthreads)
    return out.view(np.uint32), used


def narrow(convert, bits: np.ndarray, nthreads: int) -> tuple[np.ndarray, int]:
    out = np.full(bits.shape[0], 0xDEAD, dtype=np.uint16)
    used = convert.narrow_float(bits.view(np.float32), out, nthreads)
    return out, used


def assert_bits_equal(actual: np.ndarray, expected: np.ndarray, source: np.ndarray) -> None:
    bad = np.flatnonzero(actual != expected)
    shown = [(hex(source[i]), hex(actual[i]), hex(expected[i])) for i in bad[:10]]
    assert bad.size == 0, f"{bad.size} mismatches (input, got, numpy): {shown}"


def dense_float32_sample() -> np.ndarray:
    """float32 bit patterns around every rounding decision of float32 -> float16."""
    parts = []
    # Every exponent, NaN and inf included, with mantissas made of single bits, runs of ones,
    # the halfway bit of every shift (13 for normal halves, 14..24 for subnormal ones) with
    # even and odd bits above it, and its neighbours.
    mantissas = {0, 0x7FE000, 0x7FEFFF, 0x7FF000, 0x7FF001, 0x400001, 0x401000, 0x403000}
    for k in range(24):
        for mantissa in ((1 << k) - 1, 1 << k, (1 << k) + 1, 3 << k, 5 << k, 7 << k):
            mantissas.add(mantissa & 0x7FFFFF)
    exponents = np.arange(256, dtype=np.uint32) << 23
    parts.append((exponents[:, None] | np.array(sorted(mantissas), np.uint32)[None, :]).ravel())
    # Every finite half, the exact midpoint between it and the next half up, and the float32
    # neighbours of both: round to nearest even, subnormals, and the overflow threshold
    # (65520, midway between 65504 and 65536, rounds to inf).
    halves = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    above = np.append(halves[1:], 65536.0)
    midpoints = ((halves + above) / 2).astype(np.float32)
    assert np.array_equal(midpoints.astype(np.float64), (halves + above) / 2)  # exact
    for values in (halves.astype(np.float32), midpoints):
        parts += [values.view(np.uint32)]
        for direction in (-np.inf, np.inf):
            parts.append(np.nextafter(values, np.float32(direction)).view(np.uint32))
    # Named values: the overflow threshold, the largest half, the smallest subnormal (2**-24),
    # half of it (2**-25, rounds to zero) and the smallest normal (2**-14).
    named = np.array([65504.0, 65519.996, 65520.0, 65520.004, 65536.0, 1e30, 2.0**-24,
                      2.0**-25, 3 * 2.0**-26, 2.0**-14, 2.0**-126, 2.0**-149, 0.0, np.inf],
                     dtype=np.float32)
    parts.append(named.view(np.uint32))
    parts.append(np.array([0x7FC00000, 0x7F800001, 0x7FBFFFFF, 0x7F802000, 0x7F801FFF,
                           0x7FFFFFFF, 0x7FC00001, 0x7F80E000], dtype=np.uint32))
    sample = np.concatenate(parts)
    return np.concatenate([sample, sample | np.uint32(0x80000000)])


@pytest.fixture(scope="module")
def float32_sample() -> np.ndarray:
    random = np.random.default_rng(20240611).integers(0, 1 << 32, 10**6, dtype=np.uint32)
    return np.concatenate([dense_float32_sample(), random])


def test_is_the_compiled_extension(convert) -> None:
    path = Path(convert.__file__)
    assert path.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), path
    assert path.parent.name == "baseline"


def test_numpy_reference_is_the_portable_conversion() -> None:
    """The reference: numpy's C conversion keeps NaN payloads and does not quiet them.

    A numpy built for F16C (an x86-64-v3 baseline) would convert with the hardware, which
    quiets signalling NaNs, and the kernels (which copy the portable numpy) would then
    differ from it for those NaNs only.
    """
    assert numpy_widen(np.array([0x7C01, 0xFD00], np.uint16)).tolist() == [0x7F802000,
                                                                           0xFFA00000]
    assert numpy_narrow(np.array([0x7F800001, 0x7FA00000, 0xFFC00001], np.uint32)).tolist() == [
        0x7C01, 0x7D00, 0xFE00]


def test_dense_sample_covers_the_cases() -> None:
    sample = dense_float32_sample()
    values = sample.view(np.float32)
    with np.errstate(over="ignore"):
        halves = values.astype(np.float16)
    assert np.isnan(values).sum() > 200
    assert np.isinf(values).any() and (values == 0).any()
    assert ((np.abs(values) >= 65520) & np.isfinite(values)).any()
    assert ((np.abs(values) < 65520) & (np.abs(values) > 65504)).any()
    subnormal = (halves != 0) & (np.abs(halves) < np.float16(2.0**-14))
    assert subnormal.sum() > 10000


@pytest.mark.parametrize("nthreads", THREADS)
def test_widen_every_half_bit_identical(convert, nthreads) -> None:
    got, used = widen(convert, ALL_HALVES, nthreads)
    assert used == nthreads
    assert_bits_equal(got, numpy_widen(ALL_HALVES), ALL_HALVES)


def test_widen_special_values(convert) -> None:
    bits = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0x7BFF, 0x7C00,
                     0xFC00, 0x7C01, 0x7DFF, 0x7E00, 0xFE01, 0x7FFF], dtype=np.uint16)
    got, _ = widen(convert, bits, 1)
    expected = [0x00000000, 0x80000000, 0x33800000, 0xB3800000, 0x387FC000, 0x38800000,
                0x3F800000, 0x477FE000, 0x7F800000, 0xFF800000, 0x7F802000, 0x7FBFE000,
                0x7FC00000, 0xFFC02000, 0x7FFFE000]
    assert [hex(v) for v in got] == [hex(v) for v in expected]


def test_every_half_round_trips(convert) -> None:
    """NaNs included: their payload bits survive both ways, as in numpy."""
    wide, _ = widen(convert, ALL_HALVES, 3)
    back, _ = narrow(convert, wide, 3)
    assert_bits_equal(back, ALL_HALVES, ALL_HALVES)


@pytest.mark.parametrize("nthreads", THREADS)
def test_narrow_bit_identical(convert, float32_sample, nthreads) -> None:
    got, used = narrow(convert, float32_sample, nthreads)
    assert used == nthreads
    assert_bits_equal(got, numpy_narrow(float32_sample), float32_sample)


def test_narrow_special_values(convert) -> None:
    bits = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x477FE000, 0x477FEFFF,
                     0x477FF000, 0xC77FF000, 0x33000000, 0x33000001, 0x33800000, 0x7FC00000,
                     0x7F800001, 0xFF801FFF, 0x7F802000, 0x7FBFFFFF, 0xFFFFFFFF, 0x7F80E000],
                    dtype=np.uint32)
    got, _ = narrow(convert, bits, 1)
    expected = [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7BFF, 0x7BFF, 0x7C00, 0xFC00, 0x0000,
                0x0001, 0x0001, 0x7E00, 0x7C01, 0xFC01, 0x7C01, 0x7DFF, 0xFFFF, 0x7C07]
    assert [hex(v) for v in got] == [hex(v) for v in expected]


def test_serial_and_parallel_identical(convert, float32_sample) -> None:
    serial_narrow, _ = narrow(convert, float32_sample, 1)
    serial_widen, _ = widen(convert, serial_narrow, 1)
    for nthreads in THREADS[1:]:
        parallel_narrow, _ = narrow(convert, float32_sample, nthreads)
        parallel_widen, _ = widen(convert, serial_narrow, nthreads)
        assert np.array_equal(parallel_narrow, serial_narrow), nthreads
        assert np.array_equal(parallel_widen, serial_widen), nthreads


@pytest.mark.parametrize("nthreads", [1, 3])
def test_isolated_subnormals_in_every_block(convert, nthreads) -> None:
    """A block of normal values with one subnormal case still gets it right."""
    n = 10_000
    positions = [0, 1, 2047, 2048, 3333, 3334, 4095, 4096, 6666, 6667, 9998, 9999]
    halves = np.full(n, 0x3C00, dtype=np.uint16)
    halves[positions] = [0x0001, 0x8001, 0x03FF, 0x0200, 0x8123, 0x0010, 0x0000, 0x8000,
                         0x0155, 0x83FF, 0x0002, 0x0003]
    got, _ = widen(convert, halves, nthreads)
    assert_bits_equal(got, numpy_widen(halves), halves)
    floats = np.full(n, 0x3F800000, dtype=np.uint32)
    floats[positions] = [0x33000001, 0xB3800000, 0x387FFFFF, 0x38000000, 0xB7000000,
                         0x35000000, 0x33000000, 0x387FF000, 0x34C00000, 0xB4400001,
                         0x38000FFF, 0x36801000]
    got, _ = narrow(convert, floats, nthreads)
    assert_bits_equal(got, numpy_narrow(floats), floats)


@pytest.mark.parametrize("nthreads", [0, -1, -100])
def test_nonpositive_threads_run_serially(convert, float32_sample, nthreads) -> None:
    got, used = narrow(convert, float32_sample[:5000], nthreads)
    assert used == 1
    assert_bits_equal(got, numpy_narrow(float32_sample[:5000]), float32_sample[:5000])
    got, used = widen(convert, ALL_HALVES, nthreads)
    assert used == 1
    assert_bits_equal(got, numpy_widen(ALL_HALVES), ALL_HALVES)


@pytest.mark.parametrize("length", [1, 2, 3, 6])
def test_threads_clamped_to_length(convert, length) -> None:
    floats = np.linspace(-3, 3, length, dtype=np.float32).view(np.uint32)
    got, used = narrow(convert, floats, 7)
    assert used == length
    assert_bits_equal(got, numpy_narrow(floats), floats)
    halves = ALL_HALVES[0x3BFE:0x3BFE + length]
    got, used = widen(convert, halves, 7)
    assert used == length
    assert_bits_equal(got, numpy_widen(halves), halves)


@pytest.mark.parametrize("nthreads", [-1, 0, 1, 4])
def test_empty_arrays(convert, nthreads) -> None:
    assert convert.widen_half(np.empty(0, np.uint16), np.empty(0, np.float32), nthreads) == 1
    assert convert.narrow_float(np.empty(0, np.float32), np.empty(0, np.uint16), nthreads) == 1


def test_plain_python_source_agrees() -> None:
    """The shipped pythran source, run as plain Python, gives the same bits (serially)."""
    source = importlib.import_module("kerneltune.kernels.convert_pythran")
    halves = ALL_HALVES[::7]
    wide = np.empty(halves.shape[0], np.float32)
    assert source.widen_half(halves, wide, 3) == 3
    assert_bits_equal(wide.view(np.uint32), numpy_widen(halves), halves)
    floats = dense_float32_sample()[::37]
    narrowed = np.empty(floats.shape[0], np.uint16)
    assert source.narrow_float(floats.view(np.float32), narrowed, 2) == 2
    assert_bits_equal(narrowed, numpy_narrow(floats), floats)


def test_lengths_must_match(convert) -> None:
    with pytest.raises(ValueError):
        convert.widen_half(np.zeros(4, np.uint16), np.zeros(3, np.float32), 1)
    with pytest.raises(ValueError):
        convert.narrow_float(np.zeros(3, np.float32), np.zeros(4, np.uint16), 1)


def test_views_into_larger_buffers(convert) -> None:
    """Contiguous slices that do not start the buffer convert only their own elements."""
    floats = np.linspace(-70000, 70000, 9000, dtype=np.float32)
    halves = np.zeros(9004, np.uint16)
    convert.narrow_float(floats[1:-1], halves[2:-4], 3)
    assert not halves[:2].any() and not halves[-4:].any()
    assert_bits_equal(halves[2:-4], numpy_narrow(floats[1:-1].view(np.uint32)), halves[2:-4])
    wide = np.zeros(9004, np.float32)
    convert.widen_half(halves[2:-4], wide[3:-3], 2)
    assert not wide[:3].any() and not wide[-3:].any()
    assert_bits_equal(wide[3:-3].view(np.uint32), numpy_widen(halves[2:-4]), halves[2:-4])


# The 0xF802 halves that are not NaN: 0x0000..0x7C00 and 0x8000..0xFC00.
NOT_NAN_HALVES = st.integers(0, 0xF801).map(lambda k: k if k <= 0x7C00 else k + 0x3FF)


@settings(max_examples=150, deadline=None)
@given(
    halves=hnp.arrays(np.uint16, st.integers(0, 3000), elements=NOT_NAN_HALVES),
    nthreads=st.integers(-2, 8),
)
def test_round_trip_property(convert, halves, nthreads) -> None:
    """narrow(widen(h)) == h for every non-NaN half, on any thread count."""
    assert not np.isnan(halves.view(np.float16)).any()
    wide = np.empty(halves.shape[0], np.float32)
    convert.widen_half(halves, wide, nthreads)
    back = np.empty(halves.shape[0], np.uint16)
    convert.narrow_float(wide, back, nthreads)
    assert np.array_equal(back, halves)


# --- BFLOAT16 ------------------------------------------------------------------------------

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
#: the low halves of float32 patterns that settle every rounding decision at bit 16: exact,
#: just above, just below, at and above the halfway point, and the largest
LOW_HALVES = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=np.uint32)


def rounded_bfloat16(bits: np.ndarray) -> np.ndarray:
    """The reference: float32 bits rounded to nearest even at bit 16, in integers; a NaN is
    the quiet NaN 0x7fc0 with its sign."""
    wide = bits.astype(np.uint64)
    rounded = ((wide + 0x7FFF + ((wide >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    quiet = ((bits >> 16) & np.uint32(0x8000)).astype(np.uint16) | np.uint16(0x7FC0)
    return np.where(nan, quiet, rounded)


def narrow_bfloat16(convert, bits: np.ndarray, nthreads: int) -> tuple[np.ndarray, int]:
    out = np.full(bits.shape[0], 0xDEAD, dtype=np.uint16)
    return out, convert.narrow_bfloat16(bits.view(np.float32), out, nthreads)


@pytest.fixture(scope="module")
def every_rounding_decision() -> np.ndarray:
    """Each of the 65536 upper halves with each low half of ``LOW_HALVES``, then 1e6 random
    float32 patterns."""
    every = ((ALL_HALVES.astype(np.uint32) << 16)[:, None] | LOW_HALVES[None, :]).ravel()
    random = np.random.default_rng(20250301).integers(0, 1 << 32, 10**6, dtype=np.uint32)
    return np.concatenate([every, random])


@pytest.mark.parametrize("nthreads", THREADS)
def test_bfloat16_widen_every_pattern_bit_identical(convert, nthreads) -> None:
    """Every bfloat16 is the top half of its float32: NaN payloads, signalling ones too."""
    out = np.full(ALL_HALVES.shape[0], np.nan, dtype=np.float32)
    assert convert.widen_bfloat16(ALL_HALVES, out, nthreads) == nthreads
    expected = ALL_HALVES.astype(np.uint32) << 16
    assert_bits_equal(out.view(np.uint32), expected, ALL_HALVES)
    reference = ALL_HALVES.view(BFLOAT16).astype(np.float32).view(np.uint32)
    assert_bits_equal(out.view(np.uint32), reference, ALL_HALVES)


@pytest.mark.parametrize("nthreads", THREADS)
def test_bfloat16_narrow_every_rounding_decision(convert, every_rounding_decision,
                                                 nthreads) -> None:
    got, used = narrow_bfloat16(convert, every_rounding_decision, nthreads)
    assert used == nthreads
    assert_bits_equal(got, rounded_bfloat16(every_rounding_decision), every_rounding_decision)
    with np.errstate(over="ignore", invalid="ignore"):
        ml = every_rounding_decision.view(np.float32).astype(BFLOAT16).view(np.uint16)
    assert_bits_equal(got, ml, every_rounding_decision)


def test_bfloat16_special_values(convert) -> None:
    bits = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x3F808000, 0x3F818000,
                     0x3F808001, 0x7F7F8000, 0x7F7FFFFF, 0x00008000, 0x00018000, 0x7F800001,
                     0xFFC00000, 0x7FBFFFFF, 0xFFFFFFFF], dtype=np.uint32)
    got, _ = narrow_bfloat16(convert, bits, 1)
    expected = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x3F80, 0x3F82, 0x3F81, 0x7F80, 0x7F80,
                0x0000, 0x0002, 0x7FC0, 0xFFC0, 0x7FC0, 0xFFC0]
    assert [hex(v) for v in got] == [hex(v) for v in expected]


def test_bfloat16_round_trips_and_runs_in_parallel_as_serially(convert,
                                                                every_rounding_decision) -> None:
    wide = np.empty(ALL_HALVES.shape[0], np.float32)
    convert.widen_bfloat16(ALL_HALVES, wide, 3)
    back, _ = narrow_bfloat16(convert, wide.view(np.uint32), 3)
    nan = np.isnan(ALL_HALVES.view(BFLOAT16).astype(np.float32))
    assert_bits_equal(back[~nan], ALL_HALVES[~nan], ALL_HALVES[~nan])
    assert np.isnan(back[nan].view(BFLOAT16).astype(np.float32)).all()
    serial, _ = narrow_bfloat16(convert, every_rounding_decision, 1)
    for nthreads in THREADS[1:]:
        assert np.array_equal(narrow_bfloat16(convert, every_rounding_decision, nthreads)[0],
                              serial)


def test_bfloat16_plain_python_source_agrees_and_checks_lengths(convert) -> None:
    source = importlib.import_module("kerneltune.kernels.convert_pythran")
    floats = dense_float32_sample()[::37]
    narrowed = np.empty(floats.shape[0], np.uint16)
    with np.errstate(over="ignore"):  # the wrapping sums of NaNs, as unsigned C++ does
        assert source.narrow_bfloat16(floats.view(np.float32), narrowed, 2) == 2
    assert_bits_equal(narrowed, rounded_bfloat16(floats), floats)
    wide = np.empty(narrowed.shape[0], np.float32)
    assert source.widen_bfloat16(narrowed, wide, 3) == 3
    assert_bits_equal(wide.view(np.uint32), narrowed.astype(np.uint32) << 16, narrowed)
    for function in (convert.widen_bfloat16, source.widen_bfloat16):
        with pytest.raises(ValueError):
            function(np.zeros(4, np.uint16), np.zeros(3, np.float32), 1)
    with pytest.raises(ValueError):
        convert.narrow_bfloat16(np.zeros(3, np.float32), np.zeros(4, np.uint16), 1)
    assert convert.widen_bfloat16(np.empty(0, np.uint16), np.empty(0, np.float32), 2) == 1
