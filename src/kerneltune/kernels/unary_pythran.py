"""Unary elementwise kernels, compiled by pythran with OpenMP into ``<variant>.unary``.

Every kernel takes a contiguous 1-D source, a contiguous 1-D destination of
the same length and a thread count, and returns the number of threads that ran
(one contiguous chunk each, chunks aligned to 64 elements; 1 is the serial
path). The caller decides the thread count from the tuning config; the
compiled code only clamps it (``kernels.base.chunked_threads`` mirrors it).

Chunks are processed in blocks small enough to stay in the L1 cache. The
transcendental functions are array expressions over a block, so pythran
vectorises them with xsimd (a scalar loop would call libm once per element),
except float tanh, whose own approximation is a plain loop of arithmetic; the
integer-friendly ones are plain loops too, which the C++ compiler vectorises.
Serial and parallel runs compute every element with the same instructions,
so their results are identical bit for bit.
"""

import numpy as np

# pythran export abs_(float32[:], float32[:], int)
# pythran export abs_(float64[:], float64[:], int)
# pythran export abs_(int8[:], int8[:], int)
# pythran export abs_(int16[:], int16[:], int)
# pythran export abs_(int32[:], int32[:], int)
# pythran export abs_(int64[:], int64[:], int)
# pythran export abs_(uint8[:], uint8[:], int)
# pythran export abs_(uint16[:], uint16[:], int)
# pythran export abs_(uint32[:], uint32[:], int)
# pythran export abs_(uint64[:], uint64[:], int)
# pythran export neg(float32[:], float32[:], int)
# pythran export neg(float64[:], float64[:], int)
# pythran export neg(int8[:], int8[:], int)
# pythran export neg(int16[:], int16[:], int)
# pythran export neg(int32[:], int32[:], int)
# pythran export neg(int64[:], int64[:], int)
# pythran export relu(float32[:], float32[:], int)
# pythran export relu(float64[:], float64[:], int)
# pythran export relu(int8[:], int8[:], int)
# pythran export relu(int16[:], int16[:], int)
# pythran export relu(int32[:], int32[:], int)
# pythran export relu(int64[:], int64[:], int)
# pythran export exp(float32[:], float32[:], int)
# pythran export exp(float64[:], float64[:], int)
# pythran export log(float32[:], float32[:], int)
# pythran export log(float64[:], float64[:], int)
# pythran export sqrt(float32[:], float32[:], int)
# pythran export sqrt(float64[:], float64[:], int)
# pythran export sigmoid(float32[:], float32[:], int)
# pythran export sigmoid(float64[:], float64[:], int)
# pythran export tanh(float64[:], float64[:], int)
# pythran export tanhf(float32[:], float32[:], int)
# pythran export not_(bool[:], bool[:], int)

BLOCK = 2048
ALIGN = 64


def _run(x, out, nthreads, block_op):
    """``block_op(x block, out block)`` over the blocks of each thread's chunk."""
    n = x.shape[0]
    if n == 0:
        return 1
    nthreads = max(1, min(nthreads, n))
    # Chunks start on multiples of ALIGN (a multiple of every SIMD width), so each
    # element takes the same vector or scalar-tail path whatever the thread count.
    chunk = ((n + nthreads - 1) // nthreads + ALIGN - 1) // ALIGN * ALIGN
    nthreads = (n + chunk - 1) // chunk
    if nthreads > 1:
        # omp parallel for num_threads(nthreads) schedule(static)
        for c in range(nthreads):
            _chunk(x, out, c * chunk, min(n, c * chunk + chunk), block_op)
    else:
        # No OpenMP region for one thread: entering one costs about 0.45 us, more than
        # Abs on 1000 elements.
        _chunk(x, out, 0, n, block_op)
    return nthreads


def _chunk(x, out, start, stop, block_op):
    """One thread's chunk, block by block."""
    for b in range(start, stop, BLOCK):
        e = min(stop, b + BLOCK)
        block_op(x[b:e], out[b:e])


def _abs(x, out):
    for i in range(x.shape[0]):
        out[i] = abs(x[i])


def _neg(x, out):
    for i in range(x.shape[0]):
        out[i] = -x[i]


def _relu(x, out):
    for i in range(x.shape[0]):
        # NaN stays NaN, as in numpy's maximum(x, 0) and ONNX's reference.
        out[i] = x[i] if (x[i] > 0 or x[i] != x[i]) else 0


def _exp(x, out):
    out[:] = np.exp(x)


def _log(x, out):
    out[:] = np.log(x)
    for i in range(x.shape[0]):
        # xsimd's float64 log is wrong for subnormal inputs; libm's is not.
        if 0 < x[i] < 2.2250738585072014e-308:
            out[i] = np.log(x[i])


def _sqrt(x, out):
    out[:] = np.sqrt(x)


def _sigmoid(x, out):
    # One fused expression, vectorised through the reciprocal: as ``1 / (1 + np.exp(-x))``
    # (ones of either type) it is evaluated element by element, 10x slower. Two passes
    # through a scratch block, exp then the division, gave the same bits and took 20%
    # longer at 1.6e7 elements on two threads.
    out[:] = np.reciprocal(np.float32(1) + np.exp(-x))


def _tanh(x, out):
    out[:] = np.tanh(x)


def _tanhf(x, out):
    """tanh on float32 by two rational approximations, selected per lane.

    xsimd's float tanh evaluates exp, a polynomial and a division for every lane
    and selects; this costs a quarter less and is within 1 ulp of the correctly
    rounded result for every float32 (the tests sweep them). With ``a = |x|``
    (tanh rounds to 1 from about 9.01):

    - ``a < 1``: ``tanh(a) = a - a**3 * h(a*a)``, ``h`` a (2, 1) rational;
    - ``a >= 1``: ``tanh(a) = 1 - R(min(a, 9.1) - 1)``, ``R`` a (5, 6) rational.

    Both are minimax fits (Lawson-weighted least squares on the linearised
    error; relative error for ``h``, absolute for ``R``) with the coefficients
    rounded to float32. Each result is an exact term plus a correction at most a
    third of it, so the correction's rounding errors reach the result damped:
    the float32 evaluation stays within 1 ulp, with or without FMA.

    A plain loop, which the C++ compiler vectorises by computing both branches and
    selecting (the quotient of the selected terms becomes one division per branch).
    Only the large branch clamps: NaN fails ``a >= 1`` and stays NaN through the
    small one, so nothing else guards it; clamping ``a`` for both branches cost 6%.
    Pythran divides scalars in double; the float32 cast of the quotient lets the
    compiler narrow that back to a float32 division, which gives the same bits.
    """
    one = np.float32(1)
    for i in range(x.shape[0]):
        a = abs(x[i])
        s = a * a
        d = min(a, np.float32(9.1)) - one
        small_num = (np.float32(-5.729409895138815e-05) * s
                     + np.float32(0.0017275670543313026)) * s + np.float32(0.3333333134651184)
        small_den = np.float32(0.40518203377723694) * s + one
        large_num = (((((np.float32(-1.20230015454581e-05) * d
                         + np.float32(0.0004152235924266279)) * d
                        + np.float32(-0.005843956023454666)) * d
                       + np.float32(0.04209458455443382)) * d
                      + np.float32(-0.15588605403900146)) * d
                     + np.float32(0.23840582370758057))
        large_den = ((((((np.float32(0.0034196607302874327) * d
                          + np.float32(0.0167030431330204)) * d
                         + np.float32(0.09010496735572815)) * d
                        + np.float32(0.30856168270111084)) * d
                       + np.float32(0.786406934261322)) * d
                      + np.float32(1.1077191829681396)) * d
                     + one)
        large = a >= one
        r = np.float32((large_num if large else small_num) / (large_den if large else small_den))
        scale = -one if large else -(a * s)
        base = one if large else a
        # The sign goes on last: tanh is odd, and -0.0 stays -0.0.
        out[i] = np.copysign(scale * r + base, x[i])


def _not(x, out):
    for i in range(x.shape[0]):
        out[i] = not x[i]


def abs_(x, out, nthreads):
    return _run(x, out, nthreads, _abs)


def neg(x, out, nthreads):
    return _run(x, out, nthreads, _neg)


def relu(x, out, nthreads):
    return _run(x, out, nthreads, _relu)


def exp(x, out, nthreads):
    return _run(x, out, nthreads, _exp)


def log(x, out, nthreads):
    return _run(x, out, nthreads, _log)


def sqrt(x, out, nthreads):
    return _run(x, out, nthreads, _sqrt)


def sigmoid(x, out, nthreads):
    return _run(x, out, nthreads, _sigmoid)


def tanh(x, out, nthreads):
    return _run(x, out, nthreads, _tanh)


def tanhf(x, out, nthreads):
    return _run(x, out, nthreads, _tanhf)


def not_(x, out, nthreads):
    return _run(x, out, nthreads, _not)
