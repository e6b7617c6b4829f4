"""FLOAT16 and BFLOAT16 <-> FLOAT32 conversions, compiled by pythran with OpenMP into
``<variant>.convert``.

pythran has no 16-bit float types, so their values travel as uint16 bit patterns (numpy:
``h.view(np.uint16)``). Exported signatures (every array 1-D and contiguous, ``dst`` as long
as ``src``, else ``ValueError``)::

    widen_half(src: uint16[:], dst: float32[:], nthreads: int) -> int
    narrow_float(src: float32[:], dst: uint16[:], nthreads: int) -> int
    widen_bfloat16(src: uint16[:], dst: float32[:], nthreads: int) -> int
    narrow_bfloat16(src: float32[:], dst: uint16[:], nthreads: int) -> int

Both split the range into ``nthreads`` contiguous static chunks, one per OpenMP thread, with
``nthreads`` clamped to ``[1, max(len(src), 1)]``, and return that number of chunks (1 is the
serial path; an empty array gives 1).

The FLOAT16 results equal numpy's own conversions bit for bit, for every input:

- ``widen_half(h.view(np.uint16), f, n)`` gives ``h.astype(np.float32)``: normals, subnormals,
  +-0 and +-inf exactly; a NaN keeps its sign and its 10 payload bits shifted left by 13, and
  a signalling NaN stays signalling (numpy does not set the quiet bit).
- ``narrow_float(x, h.view(np.uint16), n)`` gives ``x.astype(np.float16)``: round to nearest
  even, magnitudes from 65520 up to +-inf, underflow to subnormals or +-0 (2**-25 itself
  rounds to zero, anything above it to the smallest subnormal). A NaN keeps its sign and the
  top 10 bits of its payload, truncated, not rounded, and not quieted; when those are all
  zero the result is 0x7c01 (with the sign), so that it stays a NaN.

That is numpy's portable C conversion (``npy_floatbits_to_halfbits`` and
``npy_halfbits_to_floatbits``). A numpy built to use the F16C/AVX512-FP16 instructions for
``astype`` would quiet signalling NaNs instead; its finite and infinite results are the same.

The BFLOAT16 results equal ml_dtypes' ``astype`` bit for bit, for every input: a bfloat16 is
the top half of a float32, so widening shifts it up (NaN payloads kept, signalling or not),
and narrowing rounds the float32 bits to nearest even at bit 16, which carries into the
exponent where it must (to +-inf from 3.3961e38 up); a NaN becomes the quiet NaN 0x7fc0 with
its sign, as rounding its bits could make it an infinity.

The float32 bits are read and written through ``ndarray.view`` (pythran supports it on
arrays, not on scalars), so callers pass float32 arrays as they are. The loops are pure
integer bit manipulation that the C++ compiler vectorises. Subnormals (normalising a half
subnormal, or rounding by a variable shift into one) do not vectorise well, so every block of
``BLOCK`` elements is converted by one branch-free pass that handles everything else and
reports whether the block holds a subnormal case; only then does a scalar pass patch those
elements. Serial and parallel runs compute every element with the same instructions, so
their results are identical bit for bit.

Run as plain Python (no compilation) the ``omp`` comments are mere comments and everything
runs serially, with the same results.
"""

import numpy as np

# pythran export widen_half(uint16[:], float32[:], int)
# pythran export narrow_float(float32[:], uint16[:], int)
# pythran export widen_bfloat16(uint16[:], float32[:], int)
# pythran export narrow_bfloat16(float32[:], uint16[:], int)

BLOCK = 2048


def _widen_block(src, dst):
    """Widen ``src`` into the float32 bits ``dst``, subnormals as zeros; whether there were any.

    Half ``s eeeee mmmmmmmmmm`` -> float32 ``s (e + 112) (m << 13)``; for ``e == 31`` (inf and
    NaN) the exponent becomes 255 by adding the bias difference twice.
    """
    u = np.uint32
    found = u(0)
    for i in range(src.shape[0]):
        h = u(src[i])
        a = h & u(0x7FFF)
        r = (a << 13) + u(0x38000000)
        if a >= u(0x7C00):
            r += u(0x38000000)
        if a < u(0x400):
            r = u(0)
        found |= u(a != u(0)) & u(a < u(0x400))
        dst[i] = r | ((h & u(0x8000)) << 16)
    return found


def _widen_subnormals(src, dst):
    """Patch the float32 bits in ``dst`` of every subnormal half of ``src``."""
    u = np.uint32
    for i in range(src.shape[0]):
        h = u(src[i])
        m = h & u(0x7FFF)
        if m != u(0) and m < u(0x400):
            # m * 2**-24: shift the leading one up to the implicit bit (bit 10).
            e = u(113)
            while m < u(0x400):
                m <<= 1
                e -= u(1)
            dst[i] = ((h & u(0x8000)) << 16) | (e << 23) | ((m << 13) & u(0x7FFFFF))


def _widen_range(src, dst):
    n = src.shape[0]
    for b in range(0, n, BLOCK):
        e = min(b + BLOCK, n)
        if _widen_block(src[b:e], dst[b:e]):
            _widen_subnormals(src[b:e], dst[b:e])


def _chunks(src, dst, nthreads, convert_range):
    """``convert_range(src chunk, dst chunk)`` over ``nthreads`` static chunks; chunks used.

    Each thread converts views made for it, in the call: a loop over the shared arrays
    themselves reloads their data pointers after every store and runs many times slower.
    """
    n = src.shape[0]
    nthreads = min(max(nthreads, 1), max(n, 1))
    if nthreads > 1:
        # omp parallel for num_threads(nthreads) schedule(static)
        for c in range(nthreads):
            convert_range(src[c * n // nthreads:(c + 1) * n // nthreads],
                          dst[c * n // nthreads:(c + 1) * n // nthreads])
    else:
        convert_range(src, dst)  # no OpenMP region for one thread
    return nthreads


def widen_half(src, dst, nthreads):
    """FLOAT16 bit patterns ``src`` to float32 ``dst`` on ``nthreads`` chunks; chunks used."""
    if dst.shape[0] != src.shape[0]:
        raise ValueError("widen_half: src and dst differ in length")
    return _chunks(src, dst.view(np.uint32), nthreads, _widen_range)


def _narrow_block(src, dst):
    """Narrow the float32 bits ``src`` into ``dst``, subnormal results as zeros; any of them.

    Signed 32-bit arithmetic: ``a`` is the magnitude's bits, below 2**31, and nothing
    overflows.
    """
    w = np.int32
    found = w(0)
    for i in range(src.shape[0]):
        f = src[i]
        a = f & w(0x7FFFFFFF)
        # Normal halves: rebias the exponent, round to nearest even at bit 13.
        r = (a - w(0x38000000) + w(0xFFF) + ((a >> 13) & w(1))) >> 13
        # 65520 = 0x477FF000 is halfway between 65504 and 65536: it and above round to inf.
        if a >= w(0x477FF000):
            r = w(0x7C00)
        m = (a >> 13) & w(0x3FF)
        if a > w(0x7F800000):
            r = w(0x7C00) | m | w(m == w(0))
        # Below 2**-14 the result is subnormal (patched afterwards) or, below 2**-25 and at
        # 2**-25 itself (halfway to the smallest subnormal, even side), zero.
        if a < w(0x38800000):
            r = w(0)
        found |= w(a > w(0x33000000)) & w(a < w(0x38800000))
        dst[i] = r | ((f >> 16) & w(0x8000))
    return found


def _narrow_subnormals(src, dst):
    """Patch every element of ``dst`` whose float32 ``src`` rounds to a subnormal half."""
    w = np.int32
    for i in range(src.shape[0]):
        f = src[i]
        a = f & w(0x7FFFFFFF)
        if a > w(0x33000000) and a < w(0x38800000):
            # The half significand is sig >> s, 14 <= s <= 24, rounded to nearest even.
            s = w(126) - (a >> 23)
            sig = (a & w(0x7FFFFF)) | w(0x800000)
            r = (sig + (w(1) << (s - w(1))) - w(1) + ((sig >> s) & w(1))) >> s
            dst[i] = r | ((f >> 16) & w(0x8000))


def _narrow_range(src, dst):
    n = src.shape[0]
    for b in range(0, n, BLOCK):
        e = min(b + BLOCK, n)
        if _narrow_block(src[b:e], dst[b:e]):
            _narrow_subnormals(src[b:e], dst[b:e])


def narrow_float(src, dst, nthreads):
    """float32 ``src`` to FLOAT16 bit patterns ``dst`` on ``nthreads`` chunks; chunks used."""
    if dst.shape[0] != src.shape[0]:
        raise ValueError("narrow_float: src and dst differ in length")
    return _chunks(src.view(np.int32), dst, nthreads, _narrow_range)


def _widen_bfloat16_range(src, dst):
    u = np.uint32
    for i in range(src.shape[0]):
        dst[i] = u(src[i]) << 16


def _narrow_bfloat16_range(src, dst):
    """Round the float32 bits ``src`` to nearest even at bit 16; NaN to the quiet 0x7fc0.

    Only a NaN's sum can pass 2**32 (-inf's is 0xff807fff); it wraps, and is replaced.
    """
    u = np.uint32
    for i in range(src.shape[0]):
        f = src[i]
        r = (f + u(0x7FFF) + ((f >> 16) & u(1))) >> 16
        if (f & u(0x7FFFFFFF)) > u(0x7F800000):
            r = ((f >> 16) & u(0x8000)) | u(0x7FC0)
        dst[i] = r


def widen_bfloat16(src, dst, nthreads):
    """BFLOAT16 bit patterns ``src`` to float32 ``dst`` on ``nthreads`` chunks; chunks used."""
    if dst.shape[0] != src.shape[0]:
        raise ValueError("widen_bfloat16: src and dst differ in length")
    return _chunks(src, dst.view(np.uint32), nthreads, _widen_bfloat16_range)


def narrow_bfloat16(src, dst, nthreads):
    """float32 ``src`` to BFLOAT16 bit patterns ``dst`` on ``nthreads`` chunks; chunks used."""
    if dst.shape[0] != src.shape[0]:
        raise ValueError("narrow_bfloat16: src and dst differ in length")
    return _chunks(src.view(np.uint32), dst, nthreads, _narrow_bfloat16_range)
