"""Unary elementwise kernels, compiled by pythran with OpenMP into ``<variant>.unary``.

Every kernel takes a contiguous 1-D source, a contiguous 1-D destination of
the same length and a thread count, and returns the number of threads that ran
(one contiguous chunk each, chunks aligned to 64 elements; 1 is the serial
path). The caller decides the thread count from the tuning config; the
compiled code only clamps it (``kernels.base.chunked_threads`` mirrors it).

Chunks are processed in blocks small enough to stay in the L1 cache. The
transcendental functions are array expressions over a block, so pythran
vectorises them with xsimd (a scalar loop would call libm once per element);
the integer-friendly ones are plain loops that the C++ compiler vectorises.
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
# pythran export tanh(float32[:], float32[:], int)
# pythran export tanh(float64[:], float64[:], int)
# pythran export not_(bool[:], bool[:], int)

BLOCK = 2048
ALIGN = 64


def _run(x, out, nthreads, block_op, scratch):
    """``block_op(x block, out block, scratch block)`` over the blocks of each thread's chunk.

    ``scratch`` is the length of a thread's own scratch block (0 for operators
    without intermediate values), allocated once per chunk, not per block.
    """
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
            _chunk(x, out, c * chunk, min(n, c * chunk + chunk), block_op, scratch)
    else:
        # No OpenMP region for one thread: entering one costs about 0.45 us, more than
        # Abs on 1000 elements.
        _chunk(x, out, 0, n, block_op, scratch)
    return nthreads


def _chunk(x, out, start, stop, block_op, scratch):
    """One thread's chunk, block by block, with its own scratch block."""
    t = np.empty(scratch, x.dtype)
    for b in range(start, stop, BLOCK):
        e = min(stop, b + BLOCK)
        block_op(x[b:e], out[b:e], t[:e - b])


def _abs(x, out, t):
    for i in range(x.shape[0]):
        out[i] = abs(x[i])


def _neg(x, out, t):
    for i in range(x.shape[0]):
        out[i] = -x[i]


def _relu(x, out, t):
    for i in range(x.shape[0]):
        # NaN stays NaN, as in numpy's maximum(x, 0) and ONNX's reference.
        out[i] = x[i] if (x[i] > 0 or x[i] != x[i]) else 0


def _exp(x, out, t):
    out[:] = np.exp(x)


def _log(x, out, t):
    out[:] = np.log(x)
    for i in range(x.shape[0]):
        # xsimd's float64 log is wrong for subnormal inputs; libm's is not.
        if 0 < x[i] < 2.2250738585072014e-308:
            out[i] = np.log(x[i])


def _sqrt(x, out, t):
    out[:] = np.sqrt(x)


def _sigmoid(x, out, t):
    # Two statements, each vectorised (the fused expression is not), through the
    # scratch block: an expression that reads the array it writes is evaluated
    # element by element.
    t[:] = np.exp(-x)
    out[:] = 1 / (1 + t)


def _tanh(x, out, t):
    out[:] = np.tanh(x)


def _not(x, out, t):
    for i in range(x.shape[0]):
        out[i] = not x[i]


def abs_(x, out, nthreads):
    return _run(x, out, nthreads, _abs, 0)


def neg(x, out, nthreads):
    return _run(x, out, nthreads, _neg, 0)


def relu(x, out, nthreads):
    return _run(x, out, nthreads, _relu, 0)


def exp(x, out, nthreads):
    return _run(x, out, nthreads, _exp, 0)


def log(x, out, nthreads):
    return _run(x, out, nthreads, _log, 0)


def sqrt(x, out, nthreads):
    return _run(x, out, nthreads, _sqrt, 0)


def sigmoid(x, out, nthreads):
    return _run(x, out, nthreads, _sigmoid, BLOCK)


def tanh(x, out, nthreads):
    return _run(x, out, nthreads, _tanh, 0)


def not_(x, out, nthreads):
    return _run(x, out, nthreads, _not, 0)
