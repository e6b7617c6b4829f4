"""Binary elementwise kernels, compiled by pythran with OpenMP into ``<variant>.binary``.

Every kernel has one signature for the three broadcast forms:
``op(a, b, out, a_offsets, b_offsets, inner, a_step, b_step, nthreads)``.
The output is ``len(a_offsets)`` rows of ``inner`` contiguous elements; row
``r`` reads ``a`` from ``a_offsets[r]`` and ``b`` from ``b_offsets[r]``, each
advancing by its step (1) or staying on one element (0) along the row.

- equal shapes: one row, both steps 1;
- a scalar operand: one row, that operand's step 0;
- multidirectional broadcasting: the caller coalesces the shapes so that the
  last dimension is the row and the others are enumerated in the offsets.

One row is split into ``nthreads`` contiguous chunks starting on multiples of
64 elements; several rows are shared out whole, in contiguous runs of
``ceil(rows / nthreads)`` rows, one per thread (``kernels.base`` mirrors the
thread count for plans). The return value is the number of threads that ran (1: serial).
Elements are computed independently, so serial and parallel results are
identical bit for bit, and ``out`` may be the operand of its shape (a session writes a
result over an intermediate nothing else reads): each element is read before its result is
written.

Semantics follow numpy's where ONNX leaves a choice: integers wrap around;
Max and Min propagate NaN; integer Div truncates toward zero and gives 0 for
a zero divisor (instead of a hardware trap), and INT_MIN / -1 wraps. Pow follows
onnxruntime, as numpy has no answer for ONNX's mixed base and exponent types: a
one-element exponent of 2 or 3 is ``x * x`` or ``x * x * x`` in the base's type;
``pow_wide`` takes a float64 exponent, computes in float64 and stores the result
in the base's type, as C++'s ``std::pow`` of two different types does.
"""

import numpy as np

ALIGN = 64

# A compiled function tries its signatures from the last declared on, about 70 ns for
# each that does not match: the common element types are declared last.
# pythran export add(uint64[:], uint64[:], uint64[:], int64[:], int64[:], int, int, int, int)
# pythran export add(uint32[:], uint32[:], uint32[:], int64[:], int64[:], int, int, int, int)
# pythran export add(uint16[:], uint16[:], uint16[:], int64[:], int64[:], int, int, int, int)
# pythran export add(uint8[:], uint8[:], uint8[:], int64[:], int64[:], int, int, int, int)
# pythran export add(int64[:], int64[:], int64[:], int64[:], int64[:], int, int, int, int)
# pythran export add(int32[:], int32[:], int32[:], int64[:], int64[:], int, int, int, int)
# pythran export add(int16[:], int16[:], int16[:], int64[:], int64[:], int, int, int, int)
# pythran export add(int8[:], int8[:], int8[:], int64[:], int64[:], int, int, int, int)
# pythran export add(float64[:], float64[:], float64[:], int64[:], int64[:], int, int, int, int)
# pythran export add(float32[:], float32[:], float32[:], int64[:], int64[:], int, int, int, int)
# pythran export sub(uint64[:], uint64[:], uint64[:], int64[:], int64[:], int, int, int, int)
# pythran export sub(uint32[:], uint32[:], uint32[:], int64[:], int64[:], int, int, int, int)
# pythran export sub(uint16[:], uint16[:], uint16[:], int64[:], int64[:], int, int, int, int)
# pythran export sub(uint8[:], uint8[:], uint8[:], int64[:], int64[:], int, int, int, int)
# pythran export sub(int64[:], int64[:], int64[:], int64[:], int64[:], int, int, int, int)
# pythran export sub(int32[:], int32[:], int32[:], int64[:], int64[:], int, int, int, int)
# pythran export sub(int16[:], int16[:], int16[:], int64[:], int64[:], int, int, int, int)
# pythran export sub(int8[:], int8[:], int8[:], int64[:], int64[:], int, int, int, int)
# pythran export sub(float64[:], float64[:], float64[:], int64[:], int64[:], int, int, int, int)
# pythran export sub(float32[:], float32[:], float32[:], int64[:], int64[:], int, int, int, int)
# pythran export mul(uint64[:], uint64[:], uint64[:], int64[:], int64[:], int, int, int, int)
# pythran export mul(uint32[:], uint32[:], uint32[:], int64[:], int64[:], int, int, int, int)
# pythran export mul(uint16[:], uint16[:], uint16[:], int64[:], int64[:], int, int, int, int)
# pythran export mul(uint8[:], uint8[:], uint8[:], int64[:], int64[:], int, int, int, int)
# pythran export mul(int64[:], int64[:], int64[:], int64[:], int64[:], int, int, int, int)
# pythran export mul(int32[:], int32[:], int32[:], int64[:], int64[:], int, int, int, int)
# pythran export mul(int16[:], int16[:], int16[:], int64[:], int64[:], int, int, int, int)
# pythran export mul(int8[:], int8[:], int8[:], int64[:], int64[:], int, int, int, int)
# pythran export mul(float64[:], float64[:], float64[:], int64[:], int64[:], int, int, int, int)
# pythran export mul(float32[:], float32[:], float32[:], int64[:], int64[:], int, int, int, int)
# pythran export div(float64[:], float64[:], float64[:], int64[:], int64[:], int, int, int, int)
# pythran export div(float32[:], float32[:], float32[:], int64[:], int64[:], int, int, int, int)
# pythran export idiv16(uint16[:], uint16[:], uint16[:], int64[:], int64[:], int, int, int, int)
# pythran export idiv16(uint8[:], uint8[:], uint8[:], int64[:], int64[:], int, int, int, int)
# pythran export idiv16(int16[:], int16[:], int16[:], int64[:], int64[:], int, int, int, int)
# pythran export idiv16(int8[:], int8[:], int8[:], int64[:], int64[:], int, int, int, int)
# pythran export idiv32(uint32[:], uint32[:], uint32[:], int64[:], int64[:], int, int, int, int)
# pythran export idiv32(int32[:], int32[:], int32[:], int64[:], int64[:], int, int, int, int)
# pythran export idiv(int64[:], int64[:], int64[:], int64[:], int64[:], int, int, int, int)
# pythran export udiv(uint64[:], uint64[:], uint64[:], int64[:], int64[:], int, int, int, int)
# pythran export pow_(float64[:], float64[:], float64[:], int64[:], int64[:], int, int, int, int)
# pythran export pow_(float32[:], float32[:], float32[:], int64[:], int64[:], int, int, int, int)
# pythran export ipow(int64[:], int64[:], int64[:], int64[:], int64[:], int, int, int, int)
# pythran export ipow(int32[:], int32[:], int32[:], int64[:], int64[:], int, int, int, int)
# pythran export pow_wide(int64[:], float64[:], int64[:], int64[:], int64[:], int, int, int, int)
# pythran export pow_wide(int32[:], float64[:], int32[:], int64[:], int64[:], int, int, int, int)
# pythran export pow_wide(float32[:], float64[:], float32[:], int64[:], int64[:], int, int, int, int)
# pythran export max_(uint64[:], uint64[:], uint64[:], int64[:], int64[:], int, int, int, int)
# pythran export max_(uint32[:], uint32[:], uint32[:], int64[:], int64[:], int, int, int, int)
# pythran export max_(uint16[:], uint16[:], uint16[:], int64[:], int64[:], int, int, int, int)
# pythran export max_(uint8[:], uint8[:], uint8[:], int64[:], int64[:], int, int, int, int)
# pythran export max_(int64[:], int64[:], int64[:], int64[:], int64[:], int, int, int, int)
# pythran export max_(int32[:], int32[:], int32[:], int64[:], int64[:], int, int, int, int)
# pythran export max_(int16[:], int16[:], int16[:], int64[:], int64[:], int, int, int, int)
# pythran export max_(int8[:], int8[:], int8[:], int64[:], int64[:], int, int, int, int)
# pythran export max_(float64[:], float64[:], float64[:], int64[:], int64[:], int, int, int, int)
# pythran export max_(float32[:], float32[:], float32[:], int64[:], int64[:], int, int, int, int)
# pythran export min_(uint64[:], uint64[:], uint64[:], int64[:], int64[:], int, int, int, int)
# pythran export min_(uint32[:], uint32[:], uint32[:], int64[:], int64[:], int, int, int, int)
# pythran export min_(uint16[:], uint16[:], uint16[:], int64[:], int64[:], int, int, int, int)
# pythran export min_(uint8[:], uint8[:], uint8[:], int64[:], int64[:], int, int, int, int)
# pythran export min_(int64[:], int64[:], int64[:], int64[:], int64[:], int, int, int, int)
# pythran export min_(int32[:], int32[:], int32[:], int64[:], int64[:], int, int, int, int)
# pythran export min_(int16[:], int16[:], int16[:], int64[:], int64[:], int, int, int, int)
# pythran export min_(int8[:], int8[:], int8[:], int64[:], int64[:], int, int, int, int)
# pythran export min_(float64[:], float64[:], float64[:], int64[:], int64[:], int, int, int, int)
# pythran export min_(float32[:], float32[:], float32[:], int64[:], int64[:], int, int, int, int)
# pythran export greater(uint64[:], uint64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater(uint32[:], uint32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater(uint16[:], uint16[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater(uint8[:], uint8[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater(int64[:], int64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater(int32[:], int32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater(int16[:], int16[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater(int8[:], int8[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater(float64[:], float64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater(float32[:], float32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less(uint64[:], uint64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less(uint32[:], uint32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less(uint16[:], uint16[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less(uint8[:], uint8[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less(int64[:], int64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less(int32[:], int32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less(int16[:], int16[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less(int8[:], int8[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less(float64[:], float64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less(float32[:], float32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater_equal(uint64[:], uint64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater_equal(uint32[:], uint32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater_equal(uint16[:], uint16[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater_equal(uint8[:], uint8[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater_equal(int64[:], int64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater_equal(int32[:], int32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater_equal(int16[:], int16[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater_equal(int8[:], int8[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater_equal(float64[:], float64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export greater_equal(float32[:], float32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less_equal(uint64[:], uint64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less_equal(uint32[:], uint32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less_equal(uint16[:], uint16[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less_equal(uint8[:], uint8[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less_equal(int64[:], int64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less_equal(int32[:], int32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less_equal(int16[:], int16[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less_equal(int8[:], int8[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less_equal(float64[:], float64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export less_equal(float32[:], float32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export equal(bool[:], bool[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export equal(uint64[:], uint64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export equal(uint32[:], uint32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export equal(uint16[:], uint16[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export equal(uint8[:], uint8[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export equal(int64[:], int64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export equal(int32[:], int32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export equal(int16[:], int16[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export equal(int8[:], int8[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export equal(float64[:], float64[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export equal(float32[:], float32[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export and_(bool[:], bool[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export or_(bool[:], bool[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export xor(bool[:], bool[:], bool[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_and(uint64[:], uint64[:], uint64[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_and(uint32[:], uint32[:], uint32[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_and(uint16[:], uint16[:], uint16[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_and(uint8[:], uint8[:], uint8[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_and(int64[:], int64[:], int64[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_and(int32[:], int32[:], int32[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_and(int16[:], int16[:], int16[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_and(int8[:], int8[:], int8[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_or(uint64[:], uint64[:], uint64[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_or(uint32[:], uint32[:], uint32[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_or(uint16[:], uint16[:], uint16[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_or(uint8[:], uint8[:], uint8[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_or(int64[:], int64[:], int64[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_or(int32[:], int32[:], int32[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_or(int16[:], int16[:], int16[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_or(int8[:], int8[:], int8[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_xor(uint64[:], uint64[:], uint64[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_xor(uint32[:], uint32[:], uint32[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_xor(uint16[:], uint16[:], uint16[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_xor(uint8[:], uint8[:], uint8[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_xor(int64[:], int64[:], int64[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_xor(int32[:], int32[:], int32[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_xor(int16[:], int16[:], int16[:], int64[:], int64[:], int, int, int, int)
# pythran export bitwise_xor(int8[:], int8[:], int8[:], int64[:], int64[:], int, int, int, int)


def _span(a, b, out, ao, bo, oo, start, stop, a_step, b_step, op):
    """``out[oo + i]`` for ``start <= i < stop`` of one row, indexing the whole arrays.

    The arrays are views that the caller makes once per thread, in the call
    expression (see :func:`_run`): gcc assumes that a store of a one-byte type
    (INT8, UINT8) may change any array reachable from the OpenMP region, data
    pointers included, so through the shared arrays it reloaded the pointers
    after every element and kept those loops scalar; a
    thread's own view keeps them in registers. No view per row: each touches
    the shared array's reference count, an atomic in OpenMP builds, which made
    many short rows slower on two threads than on one. ``max(0, offset)`` lets
    pythran prove the indices non-negative, so the loops stay vectorised.
    """
    ao = max(0, ao)
    bo = max(0, bo)
    oo = max(0, oo)
    start = max(0, start)
    if a_step and b_step:
        for i in range(start, stop):
            out[oo + i] = op(a[ao + i], b[bo + i])
    elif a_step:
        yv = b[bo]
        for i in range(start, stop):
            out[oo + i] = op(a[ao + i], yv)
    elif b_step:
        xv = a[ao]
        for i in range(start, stop):
            out[oo + i] = op(xv, b[bo + i])
    else:
        v = op(a[ao], b[bo])
        for i in range(start, stop):
            out[oo + i] = v


def _rows(a, b, out, a_offsets, b_offsets, first, last, inner, a_step, b_step, op):
    for r in range(first, last):
        _span(a, b, out, a_offsets[r], b_offsets[r], r * inner, 0, inner, a_step, b_step, op)


def _run(a, b, out, a_offsets, b_offsets, inner, a_step, b_step, nthreads, op):
    rows = a_offsets.shape[0]
    if rows == 0 or inner == 0:
        return 1
    if rows == 1:
        nthreads = max(1, min(nthreads, inner))
        chunk = ((inner + nthreads - 1) // nthreads + ALIGN - 1) // ALIGN * ALIGN
        nthreads = (inner + chunk - 1) // chunk
        ao = a_offsets[0]
        bo = b_offsets[0]
        if nthreads > 1:
            # omp parallel for num_threads(nthreads) schedule(static)
            for c in range(nthreads):
                _span(a[:], b[:], out[:], ao, bo, 0, c * chunk, min(inner, c * chunk + chunk),
                      a_step, b_step, op)
        else:
            # no OpenMP region for one thread: entering one costs more than a small call
            _span(a[:], b[:], out[:], ao, bo, 0, 0, inner, a_step, b_step, op)
    else:
        nthreads = max(1, min(nthreads, rows))
        per = (rows + nthreads - 1) // nthreads
        nthreads = (rows + per - 1) // per
        if nthreads > 1:
            # omp parallel for num_threads(nthreads) schedule(static)
            for c in range(nthreads):
                _rows(a[:], b[:], out[:], a_offsets, b_offsets, c * per,
                      min(rows, c * per + per), inner, a_step, b_step, op)
        else:
            _rows(a[:], b[:], out[:], a_offsets, b_offsets, 0, rows, inner, a_step, b_step, op)
    return nthreads


def _add(x, y):
    return x + y


def _sub(x, y):
    return x - y


def _mul(x, y):
    return x * y


def _div(x, y):
    return x / y


def _float_quotient(x, y, whole):
    """Integers of at most 32 bits, divided in float64, where the division vectorises.

    Both operands are exact in float64 and, as they are below 2**53 in
    magnitude, the rounding of their quotient never reaches the next integer:
    the conversion to ``whole`` truncates toward zero to the exact integer
    quotient. Its store wraps INT_MIN / -1 to INT_MIN, as the integer division
    would. A zero divisor divides by 1 and selects 0, so no conversion sees an
    infinity.
    """
    d = np.float64(y) if y != 0 else np.float64(1)
    q = whole(np.float64(x) / d)
    return q if y != 0 else 0


def _idiv16(x, y):
    # every quotient of 16-bit operands fits int32, whose conversion AVX2 vectorises too
    # (int64's needs AVX-512), so this vectorises on x86_64_v3 as well
    return _float_quotient(x, y, np.int32)


def _idiv32(x, y):
    return _float_quotient(x, y, np.int64)


def _idiv(x, y):
    """INT64 division (too wide for :func:`_float_quotient`), truncated toward zero on uint64 magnitudes.

    ``//`` floors, and ``abs`` overflows on INT_MIN; magnitudes as uint64
    avoid both, and the wrap-around of the result gives INT_MIN / -1 == INT_MIN.
    """
    if y == 0:
        return 0
    zero = np.uint64(0)
    ux = np.uint64(x) if x >= 0 else zero - np.uint64(x)
    uy = np.uint64(y) if y >= 0 else zero - np.uint64(y)
    uq = ux // uy
    return zero - uq if (x < 0) != (y < 0) else uq


def _udiv(x, y):
    return 0 if y == 0 else x // y


def _pow(x, y):
    return x ** y


def _pow_wide(x, y):
    # the float64 power; its store converts it to the base's type (truncating an integer)
    return np.float64(x) ** y


def _cube(x, y):
    # y is x (see _power): onnxruntime's order of the products
    return x * x * x


def _ipow(x, y):
    """Integer power by squaring, wrapping like the integer type; x ** -n is 0 unless |x| is 1."""
    if y < 0:
        if x == 1:
            return 1
        if x == -1:
            return 1 if (y & 1) == 0 else -1
        return 0
    result = x - x + 1
    base = x
    e = y
    while e > 0:
        if e & 1:
            result = result * base
        base = base * base
        e = e >> 1
    return result


def _max(x, y):
    # numpy's rule, -0.0 and 0.0 included: y unless x is strictly greater or NaN.
    return x if (x > y or x != x) else y


def _min(x, y):
    return x if (x < y or x != x) else y


def _greater(x, y):
    return x > y


def _less(x, y):
    return x < y


def _greater_equal(x, y):
    return x >= y


def _less_equal(x, y):
    return x <= y


def _equal(x, y):
    return x == y


def _and(x, y):
    return x & y


def _or(x, y):
    return x | y


def _xor(x, y):
    return x != y


def _bitwise_and(x, y):
    return x & y


def _bitwise_or(x, y):
    return x | y


def _bitwise_xor(x, y):
    return x ^ y


def add(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _add)


def sub(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _sub)


def mul(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _mul)


def div(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _div)


def idiv16(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _idiv16)


def idiv32(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _idiv32)


def idiv(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _idiv)


def udiv(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _udiv)


def _power(a, b, out, ao, bo, inner, sa, sb, nthreads, op):
    """``op`` over the operands, except onnxruntime's products for a one-element exponent.

    Such an exponent is a scalar operand (step 0), so the product reads ``a`` twice.
    """
    if b.shape[0] == 1 and b[0] == 2:
        return _run(a, a, out, ao, ao, inner, sa, sa, nthreads, _mul)
    if b.shape[0] == 1 and b[0] == 3:
        return _run(a, a, out, ao, ao, inner, sa, sa, nthreads, _cube)
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, op)


def pow_(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _power(a, b, out, ao, bo, inner, sa, sb, nthreads, _pow)


def ipow(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _power(a, b, out, ao, bo, inner, sa, sb, nthreads, _ipow)


def pow_wide(a, b, out, ao, bo, inner, sa, sb, nthreads):
    """A base of another type than its float64 exponent: std::pow's promotion to double."""
    return _power(a, b, out, ao, bo, inner, sa, sb, nthreads, _pow_wide)


def max_(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _max)


def min_(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _min)


def greater(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _greater)


def less(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _less)


def greater_equal(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _greater_equal)


def less_equal(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _less_equal)


def equal(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _equal)


def and_(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _and)


def or_(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _or)


def xor(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _xor)


def bitwise_and(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _bitwise_and)


def bitwise_or(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _bitwise_or)


def bitwise_xor(a, b, out, ao, bo, inner, sa, sb, nthreads):
    return _run(a, b, out, ao, bo, inner, sa, sb, nthreads, _bitwise_xor)
