"""Unary elementwise kernels, compiled by pythran with OpenMP into ``<variant>.unary``.

Every kernel takes a contiguous 1-D source, a contiguous 1-D destination of
the same length and a thread count, and returns the number of threads that ran
(one contiguous chunk each, chunks aligned to 64 elements; 1 is the serial
path). The caller decides the thread count from the tuning config; the
compiled code only clamps it (``kernels.base.chunked_threads`` mirrors it). The destination
may be the source itself (a session writes a result over an intermediate nothing else
reads): every loop reads an element before it writes that element's result, and no other.

Chunks are processed in blocks small enough to stay in the L1 cache. The
transcendental functions are array expressions over a block, so pythran
vectorises them with xsimd (a scalar loop would call libm once per element),
except float tanh and erf, whose own approximations are plain loops of arithmetic;
the integer-friendly ones are plain loops too, which the C++ compiler vectorises.
Serial and parallel runs compute every element with the same instructions,
so their results are identical bit for bit.
"""

import math

import numpy as np

# A compiled function tries its signatures from the last declared on, about 70 ns for
# each that does not match: the common element types are declared last.
# pythran export abs_(uint64[:], uint64[:], int)
# pythran export abs_(uint32[:], uint32[:], int)
# pythran export abs_(uint16[:], uint16[:], int)
# pythran export abs_(uint8[:], uint8[:], int)
# pythran export abs_(int64[:], int64[:], int)
# pythran export abs_(int32[:], int32[:], int)
# pythran export abs_(int16[:], int16[:], int)
# pythran export abs_(int8[:], int8[:], int)
# pythran export abs_(float64[:], float64[:], int)
# pythran export abs_(float32[:], float32[:], int)
# pythran export abs_half(uint16[:], uint16[:], int)
# pythran export neg_half(uint16[:], uint16[:], int)
# pythran export neg(int64[:], int64[:], int)
# pythran export neg(int32[:], int32[:], int)
# pythran export neg(int16[:], int16[:], int)
# pythran export neg(int8[:], int8[:], int)
# pythran export neg(float64[:], float64[:], int)
# pythran export neg(float32[:], float32[:], int)
# pythran export relu(int64[:], int64[:], int)
# pythran export relu(int32[:], int32[:], int)
# pythran export relu(int16[:], int16[:], int)
# pythran export relu(int8[:], int8[:], int)
# pythran export relu(float64[:], float64[:], int)
# pythran export relu(float32[:], float32[:], int)
# pythran export exp(float64[:], float64[:], int)
# pythran export exp(float32[:], float32[:], int)
# pythran export logf(float32[:], float32[:], int)
# pythran export log(float64[:], float64[:], int)
# pythran export sqrt(float64[:], float64[:], int)
# pythran export sqrt(float32[:], float32[:], int)
# pythran export reciprocal(float64[:], float64[:], int)
# pythran export reciprocal(float32[:], float32[:], int)
# pythran export sigmoid(float64[:], float64[:], int)
# pythran export sigmoid(float32[:], float32[:], int)
# pythran export tanh(float64[:], float64[:], int)
# pythran export tanhf_rational(float32[:], float32[:], int)
# pythran export erff(float32[:], float32[:], int)
# pythran export erf(float64[:], float64[:], int)
# pythran export geluf(float32[:], float32[:], int)
# pythran export gelu(float64[:], float64[:], int)
# pythran export chain(float32[:], float32[:], int64[:,:] order(C), float32[:], int)
# pythran export gelu_tanhf(float32[:], float32[:], int)
# pythran export gelu_tanh(float64[:], float64[:], int)
# pythran export leaky_relu(float64[:], float64[:], float64, int)
# pythran export leaky_relu(float32[:], float32[:], float32, int)
# pythran export clip(uint64[:], uint64[:], uint64[:], int)
# pythran export clip(uint32[:], uint32[:], uint32[:], int)
# pythran export clip(uint16[:], uint16[:], uint16[:], int)
# pythran export clip(uint8[:], uint8[:], uint8[:], int)
# pythran export clip(int64[:], int64[:], int64[:], int)
# pythran export clip(int32[:], int32[:], int32[:], int)
# pythran export clip(int16[:], int16[:], int16[:], int)
# pythran export clip(int8[:], int8[:], int8[:], int)
# pythran export clip(float64[:], float64[:], float64[:], int)
# pythran export clip(float32[:], float32[:], float32[:], int)
# pythran export not_(bool[:], bool[:], int)
# pythran export bitwise_not(uint64[:], uint64[:], int)
# pythran export bitwise_not(uint32[:], uint32[:], int)
# pythran export bitwise_not(uint16[:], uint16[:], int)
# pythran export bitwise_not(uint8[:], uint8[:], int)
# pythran export bitwise_not(int64[:], int64[:], int)
# pythran export bitwise_not(int32[:], int32[:], int)
# pythran export bitwise_not(int16[:], int16[:], int)
# pythran export bitwise_not(int8[:], int8[:], int)
# Cast's pairs converters write most (FLOAT from and to BOOL, INT64 and DOUBLE) last, those
# from FLOAT at the very end: declared first, a BOOL mask cast to FLOAT tried every other
# pair before its own (docs/kernels.md).
# pythran export cast(bool[:], int64[:], int)
# pythran export cast(bool[:], int32[:], int)
# pythran export cast(bool[:], uint8[:], int)
# pythran export cast(bool[:], int8[:], int)
# pythran export cast(bool[:], float64[:], int)
# pythran export cast(int64[:], bool[:], int)
# pythran export cast(int64[:], int32[:], int)
# pythran export cast(int64[:], uint8[:], int)
# pythran export cast(int64[:], int8[:], int)
# pythran export cast(int64[:], float64[:], int)
# pythran export cast(int32[:], bool[:], int)
# pythran export cast(int32[:], int64[:], int)
# pythran export cast(int32[:], uint8[:], int)
# pythran export cast(int32[:], int8[:], int)
# pythran export cast(int32[:], float64[:], int)
# pythran export cast(int32[:], float32[:], int)
# pythran export cast(uint8[:], bool[:], int)
# pythran export cast(uint8[:], int64[:], int)
# pythran export cast(uint8[:], int32[:], int)
# pythran export cast(uint8[:], int8[:], int)
# pythran export cast(uint8[:], float64[:], int)
# pythran export cast(uint8[:], float32[:], int)
# pythran export cast(int8[:], bool[:], int)
# pythran export cast(int8[:], int64[:], int)
# pythran export cast(int8[:], int32[:], int)
# pythran export cast(int8[:], uint8[:], int)
# pythran export cast(int8[:], float64[:], int)
# pythran export cast(int8[:], float32[:], int)
# pythran export cast(float64[:], bool[:], int)
# pythran export cast(float64[:], int64[:], int)
# pythran export cast(float64[:], int32[:], int)
# pythran export cast(float64[:], uint8[:], int)
# pythran export cast(float64[:], int8[:], int)
# pythran export cast(float32[:], int32[:], int)
# pythran export cast(float32[:], uint8[:], int)
# pythran export cast(float32[:], int8[:], int)
# pythran export cast(bool[:], float32[:], int)
# pythran export cast(int64[:], float32[:], int)
# pythran export cast(float64[:], float32[:], int)
# pythran export cast(float32[:], float64[:], int)
# pythran export cast(float32[:], int64[:], int)
# pythran export cast(float32[:], bool[:], int)

BLOCK = 2048
ALIGN = 64

#: ``chain``'s operations by code: the element operation of the unary function of that name,
#: Pow's by 2 and by 3 (``x * x``, ``x * x * x``), then the binary ones
CHAIN_OPERATIONS = ("abs_", "neg", "relu", "exp", "logf", "sqrt", "sigmoid",
                    "tanhf_rational", "erff", "geluf", "gelu_tanhf", "square", "cube",
                    "reciprocal", "add", "sub", "mul", "div")
#: code of the first binary operation
CHAIN_BINARY = 14
#: ``chain``'s block: its registers (one per step) stay in L1 where the unary kernels'
#: 2048 would spill to L2; blocks start on multiples of ALIGN, so every element takes the
#: same vector or scalar-tail path as in the unary kernels' blocks
CHAIN_BLOCK = 1024
#: elements between the starts of two of ``chain``'s registers: a block and a cache line, so
#: that registers start on cache lines, as the unfused kernels' blocks do, and not 4 KiB
#: apart (a load at the address of a store 4 KiB away waits for it)
REGISTER = CHAIN_BLOCK + 16


def _run(x, out, nthreads, block_op):
    """``block_op(x block, out block)`` over the blocks of each thread's chunk."""
    return _threads(x, out, nthreads,
                    lambda xs, os, start, stop: _chunk(xs, os, start, stop, block_op))


def _threads(x, out, nthreads, chunk_op):
    """``chunk_op(x, out, start, stop)`` over each thread's chunk."""
    n = x.shape[0]
    if n == 0:
        return 1
    chunk, nthreads = _chunks(n, nthreads)
    if nthreads > 1:
        # omp parallel for num_threads(nthreads) schedule(static)
        for c in range(nthreads):
            chunk_op(x, out, c * chunk, min(n, c * chunk + chunk))
    else:
        # No OpenMP region for one thread: entering one costs more than a small call's work.
        chunk_op(x, out, 0, n)
    return nthreads


def _chunks(n, nthreads):
    """Each thread's chunk length and the threads that get one."""
    nthreads = max(1, min(nthreads, n))
    # Chunks start on multiples of ALIGN (a multiple of every SIMD width), so each
    # element takes the same vector or scalar-tail path whatever the thread count.
    chunk = ((n + nthreads - 1) // nthreads + ALIGN - 1) // ALIGN * ALIGN
    return chunk, (n + chunk - 1) // chunk


def _chunk(x, out, start, stop, block_op):
    """One thread's chunk, block by block."""
    for b in range(start, stop, BLOCK):
        e = min(stop, b + BLOCK)
        block_op(x[b:e], out[b:e])


def _chain_chunk(x, out, start, stop, code, constants):
    """One thread's chunk of ``chain``, block by block, each step a loop of its own over the
    block: step ``s`` reads the block of x (register 0) or earlier steps' results (register
    ``r`` is step ``r - 1``'s, kept in L1 in registers made once) and writes register
    ``s + 1``, the last step the block of ``out``.

    Each step runs its operation's own block function or loop, as the unfused kernel's does,
    over a block starting on a multiple of ALIGN: every element takes the same instructions
    (the same vector or scalar-tail path) and gives the same bits. One loop per step, never
    one expression, so that the compiler cannot fuse a product and a sum into one
    multiply-add that the unfused steps round twice.
    """
    steps = code.shape[0]
    registers = np.empty(steps * REGISTER, x.dtype)
    for b in range(start, stop, CHAIN_BLOCK):
        e = min(stop, b + CHAIN_BLOCK)
        for s in range(steps):
            a, c = code[s, 1], code[s, 2]
            _operation(code[s, 0], _register(x, registers, b, e, a),
                       _register(x, registers, b, e, c), constants[s], a < 0, c < 0,
                       out[b:e] if s == steps - 1 else _register(x, registers, b, e, s + 1))


def _register(x, registers, b, e, r):
    """Register ``r`` over the block ``[b, e)``: x's block for 0 (and, unread, for a
    constant), else step ``r - 1``'s result."""
    return x[b:e] if r <= 0 else registers[(r - 1) * REGISTER:(r - 1) * REGISTER + e - b]


def _operation(op, a, b, c, a_constant, b_constant, out):
    """One step of ``chain``: operation ``op`` (a code of ``CHAIN_OPERATIONS``) of ``a`` (and
    ``b``), the constant ``c`` standing for whichever of them is flagged constant."""
    if op >= CHAIN_BINARY:
        if op == CHAIN_BINARY:
            _pairs(_plus, a, b, c, a_constant, b_constant, out)
        elif op == CHAIN_BINARY + 1:
            _pairs(_minus, a, b, c, a_constant, b_constant, out)
        elif op == CHAIN_BINARY + 2:
            _pairs(_times, a, b, c, a_constant, b_constant, out)
        else:
            _pairs(_over, a, b, c, a_constant, b_constant, out)
    elif op == 0:
        _abs(a, out)
    elif op == 1:
        _neg(a, out)
    elif op == 2:
        _relu(a, out)
    elif op == 3:
        _exp(a, out)
    elif op == 4:
        _logf(a, out)
    elif op == 5:
        _sqrt(a, out)
    elif op == 6:
        _sigmoid(a, out)
    elif op == 7:
        _tanhf_rational(a, out)
    elif op == 8:
        _erff(a, out)
    elif op == 9:
        _geluf(a, out)
    elif op == 10:
        _gelu_tanhf(a, out)
    elif op == 11:
        _pairs(_times, a, a, c, False, False, out)
    elif op == 12:
        _cube(a, out)
    else:
        _reciprocal(a, out)


def _pairs(f, a, b, c, a_constant, b_constant, out):
    if a_constant:
        for i in range(out.shape[0]):
            out[i] = f(c, b[i])
    elif b_constant:
        for i in range(out.shape[0]):
            out[i] = f(a[i], c)
    else:
        for i in range(out.shape[0]):
            out[i] = f(a[i], b[i])


def _plus(x, y):
    return x + y


def _minus(x, y):
    return x - y


def _times(x, y):
    return x * y


def _over(x, y):
    return x / y


def _cube(x, out):
    # onnxruntime's order of the products, as the binary module's Pow by 3
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i] * x[i]


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


def _logf(x, out):
    out[:] = np.log(x)


def _log(x, out):
    """xsimd's float64 log is wrong for subnormal inputs, libm's is not: those are redone.

    They are counted first, in a loop that vectorises, so that the loop that
    redoes them, which branches per element, runs only on blocks holding one; that
    loop reads each element before it writes its result, as every loop here does
    (``out`` may be ``x``). float32 needs none of it (``_logf``): its subnormals are right.
    """
    subnormals = 0
    for i in range(x.shape[0]):
        subnormals += 0 < x[i] < 2.2250738585072014e-308
    if not subnormals:
        out[:] = np.log(x)
        return
    vector = np.log(x)
    for i in range(x.shape[0]):
        out[i] = np.log(x[i]) if 0 < x[i] < 2.2250738585072014e-308 else vector[i]


def _sqrt(x, out):
    out[:] = np.sqrt(x)


def _reciprocal(x, out):
    out[:] = np.reciprocal(x)


def _sigmoid(x, out):
    # One fused expression, vectorised through the reciprocal: written as
    # ``1 / (1 + np.exp(-x))`` it is evaluated element by element, and two passes through
    # a scratch block (exp, then the division) are slower for the same bits.
    out[:] = np.reciprocal(np.float32(1) + np.exp(-x))


def _tanh(x, out):
    out[:] = np.tanh(x)


def _tanhf_rational(x, out):
    """tanh on float32 by one rational approximation, within 6 ulp of the correctly rounded
    result, 5 where multiply-adds fuse (x86_64_v3 and v4): every float32 was checked, the
    tests sample every binade. It replaced a 1-ulp pair of rationals selected per lane, which
    issued twice the instructions and was slower on every variant (docs/kernels.md).

    ``tanh(x) = x * P(x*x) / Q(x*x)`` on ``x`` clamped to [-9, 9] (beyond, tanh rounds to
    +-1), ``P`` and ``Q`` of degree 4 with positive coefficients, so that Horner's scheme
    cancels nothing: a Loeb-Lawson fit of the relative error on [0, 9], 2e-8 before the
    coefficients were rounded to float32. Near saturation the float32 rounding of ``P`` and
    ``Q`` sets the error. The formula is odd, as tanh is, so no absolute value or sign is
    restored: -0.0 stays -0.0, and NaN passes both clamps (``min`` and ``max`` keep their
    first operand when it is NaN). A plain loop, which the C++ compiler vectorises.
    """
    for i in range(x.shape[0]):
        out[i] = _tanh_rational(x[i])


def _tanh_rational(v):
    """``_tanhf_rational`` of one float32 (the Gelu of approximate="tanh" calls it too)."""
    a = max(min(v, np.float32(9.0)), np.float32(-9.0))
    s = a * a
    # scalars divide in double here: the cast lets the compiler divide in float32
    return np.float32(
        a * ((((np.float32(1.33549865e-08) * s + np.float32(2.0609334e-05)) * s
               + np.float32(0.0034956043)) * s + np.float32(0.1338104)) * s
             + np.float32(1.0))
        / ((((np.float32(7.7766964e-07) * s + np.float32(0.00032856606)) * s
             + np.float32(0.025877044)) * s + np.float32(0.46714357)) * s
           + np.float32(1.0)))


def _erff(x, out):
    for i in range(x.shape[0]):
        out[i] = _erf_rational(x[i])


def _erf_rational(v):
    """erf of one float32 by one rational approximation, within 8 ulp of the correctly
    rounded result (every float32 was checked; the tests sample every binade).

    ``erf(x) = x * P(x*x) / Q(x*x)`` on ``x`` clamped to [-4, 4] (beyond, erf rounds to
    +-1), ``P`` and ``Q`` of degree 5 with positive coefficients: a Loeb-Lawson fit of the
    relative error on [0, 4], 2.5e-8 before the coefficients were rounded to float32; the
    float32 evaluation sets the rest, largest where erf nears 1. Odd, as erf is: -0.0 stays
    -0.0 and NaN passes both clamps. Inlined into a plain loop, which the C++ compiler
    vectorises (libm's erf is called one element at a time).
    """
    a = max(min(v, np.float32(4.0)), np.float32(-4.0))
    s = a * a
    return np.float32(
        a * (((((np.float32(1.9867102e-06) * s + np.float32(0.000284538)) * s
                + np.float32(0.0038827022)) * s + np.float32(0.053099725)) * s
              + np.float32(0.19353206)) * s + np.float32(1.1283791))
        / (((((np.float32(3.7417958e-05) * s + np.float32(0.0011853902)) * s
              + np.float32(0.0152059775)) * s + np.float32(0.11534435)) * s
            + np.float32(0.50484586)) * s + np.float32(1.0)))


def _erf(x, out):
    for i in range(x.shape[0]):
        out[i] = math.erf(x[i])


def _geluf(x, out):
    # Gelu as onnxruntime writes it: x * 0.5 * (1 + erf(x / sqrt(2)))
    for i in range(x.shape[0]):
        out[i] = x[i] * np.float32(0.5) * (np.float32(1)
                                           + _erf_rational(x[i] * np.float32(0.70710677)))


def _gelu(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * 0.5 * (1 + math.erf(x[i] * 0.7071067811865476))


def _gelu_tanhf(x, out):
    # approximate="tanh": x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = v * np.float32(0.5) * (np.float32(1) + _tanh_rational(
            (v + np.float32(0.044715) * v * v * v) * np.float32(0.7978845608028654)))


def _gelu_tanh(x, out):
    out[:] = x * 0.5 * (1 + np.tanh((x + 0.044715 * x * x * x) * 0.7978845608028654))


def _leaky_relu(x, out, alpha):
    for i in range(x.shape[0]):
        # NaN fails the test and stays NaN (alpha * NaN), -0.0 passes it and stays -0.0
        out[i] = x[i] if x[i] >= 0 else alpha * x[i]


def _clip(x, out, low, high):
    for i in range(x.shape[0]):
        # min(max(x, low), high), NaN kept (it fails both tests), as numpy's clip and
        # onnxruntime's Clip: when low > high, everything becomes high
        v = low if x[i] < low else x[i]
        out[i] = high if v > high else v


def _clear_sign(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] & 0x7FFF


def _flip_sign(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] ^ 0x8000


def _flip(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] ^ 1


def _cast(x, out):
    # Float to integer truncates toward zero, anything to bool is ``!= 0`` (NaN too), as C++'s
    # conversions, onnxruntime's Cast and numpy's astype have it.
    for i in range(x.shape[0]):
        out[i] = x[i]


def _invert(x, out):
    for i in range(x.shape[0]):
        out[i] = ~x[i]


def abs_(x, out, nthreads):
    return _run(x, out, nthreads, _abs)


def abs_half(x, out, nthreads):
    """FLOAT16 Abs on the bit patterns (``uint16`` views): numpy's own way, NaN payloads kept."""
    return _run(x, out, nthreads, _clear_sign)


def neg_half(x, out, nthreads):
    return _run(x, out, nthreads, _flip_sign)


def neg(x, out, nthreads):
    return _run(x, out, nthreads, _neg)


def relu(x, out, nthreads):
    return _run(x, out, nthreads, _relu)


def exp(x, out, nthreads):
    return _run(x, out, nthreads, _exp)


def logf(x, out, nthreads):
    return _run(x, out, nthreads, _logf)


def log(x, out, nthreads):
    return _run(x, out, nthreads, _log)


def sqrt(x, out, nthreads):
    return _run(x, out, nthreads, _sqrt)


def reciprocal(x, out, nthreads):
    return _run(x, out, nthreads, _reciprocal)


def sigmoid(x, out, nthreads):
    return _run(x, out, nthreads, _sigmoid)


def tanh(x, out, nthreads):
    return _run(x, out, nthreads, _tanh)


def tanhf_rational(x, out, nthreads):
    return _run(x, out, nthreads, _tanhf_rational)


def erff(x, out, nthreads):
    return _run(x, out, nthreads, _erff)


def erf(x, out, nthreads):
    return _run(x, out, nthreads, _erf)


def geluf(x, out, nthreads):
    return _run(x, out, nthreads, _geluf)


def gelu(x, out, nthreads):
    return _run(x, out, nthreads, _gelu)


def gelu_tanhf(x, out, nthreads):
    return _run(x, out, nthreads, _gelu_tanhf)


def gelu_tanh(x, out, nthreads):
    return _run(x, out, nthreads, _gelu_tanh)


def leaky_relu(x, out, alpha, nthreads):
    return _run(x, out, nthreads, lambda xb, ob: _leaky_relu(xb, ob, alpha))


def chain(x, out, code, constants, nthreads):
    """Elementwise steps of one input as one call (``_chain_chunk``): ``code`` has a row
    ``(operation, a, b)`` per step, its operands registers (0: x, ``s + 1``: step ``s``'s
    result) or -1 for the step's value in ``constants``; the last step's result is ``out``."""
    return _threads(x, out, nthreads,
                    lambda xs, os, start, stop: _chain_chunk(xs, os, start, stop, code,
                                                             constants))


def clip(x, out, bounds, nthreads):
    # the bounds as an array [min, max]: pythran takes a uint64 scalar above 2**63 for no
    # argument
    low, high = bounds[0], bounds[1]
    return _run(x, out, nthreads, lambda xb, ob: _clip(xb, ob, low, high))


def not_(x, out, nthreads):
    # On the bytes of the booleans: gcc leaves ``not`` on bool (or ``!=`` against a
    # constant) a scalar byte loop, and vectorises the exclusive or of uint8.
    return _run(x.view(np.uint8), out.view(np.uint8), nthreads, _flip)


def bitwise_not(x, out, nthreads):
    return _run(x, out, nthreads, _invert)


def cast(x, out, nthreads):
    return _run(x, out, nthreads, _cast)
