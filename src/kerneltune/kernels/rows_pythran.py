"""Row-wise kernels, compiled by pythran with OpenMP into ``<variant>.rows``.

Every kernel reads a C-contiguous 2-D source of ``rows`` rows and works along each row:
Softmax and LogSoftmax and the ai.onnx.ml Normalizer write a row of the same length, the
reductions (ArgMax, ArgMin, ReduceSum, ReduceMean, ReduceMax) one value per row. The caller
moves the axes an ONNX node works along to the end (:mod:`kerneltune.kernels.rows`); the
threads take contiguous runs of rows, so a row is computed by one thread with the same
instructions whatever the thread count, and serial and parallel runs give identical bits.
Each function returns the number of threads that ran (1: the serial path, with no OpenMP
region at all). ArgMax and ArgMin take ``(select_last_index, sweep)``: ``sweep`` is the
longest row they sweep column by column (``_best_rows``), the variant's (``kernels.rows``).
Rows must not be empty (the caller handles empty rows). The module is
compiled without contracting a multiply and an add into one rounding (meson.build), so
the serial and the parallel copy of a loop round alike.
"""

import numpy as np

# A compiled function tries its signatures from the last declared on, about 70 ns for
# each that does not match: the common element types are declared last.
# pythran export softmax(float64[:,:] order(C), float64[:,:] order(C), int)
# pythran export softmax(float32[:,:] order(C), float32[:,:] order(C), int)
# pythran export log_softmax(float64[:,:] order(C), float64[:,:] order(C), int)
# pythran export log_softmax(float32[:,:] order(C), float32[:,:] order(C), int)
# pythran export normalize(float64[:,:] order(C), float64[:,:] order(C), int, int)
# pythran export normalize(float32[:,:] order(C), float32[:,:] order(C), int, int)
# pythran export normalize_probabilities(float64[:,:] order(C), float64[:,:] order(C), float, int)
# pythran export normalize_probabilities(float32[:,:] order(C), float32[:,:] order(C), float, int)
# pythran export layer_norm(float64[:,:] order(C), float64[:,:] order(C), float64[:], float64[:], float64[:], float64[:], float, int)
# pythran export layer_norm(float32[:,:] order(C), float32[:,:] order(C), float32[:], float32[:], float32[:], float32[:], float, int)
# pythran export argmax(uint64[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmax(uint32[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmax(uint16[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmax(uint8[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmax(int16[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmax(int8[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmax(int64[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmax(int32[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmax(float64[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmax(float32[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmin(uint64[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmin(uint32[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmin(uint16[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmin(uint8[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmin(int16[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmin(int8[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmin(int64[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmin(int32[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmin(float64[:,:] order(C), int64[:], (bool, int), int)
# pythran export argmin(float32[:,:] order(C), int64[:], (bool, int), int)
# pythran export reduce_sum(uint64[:,:] order(C), uint64[:], int)
# pythran export reduce_sum(uint32[:,:] order(C), uint32[:], int)
# pythran export reduce_sum(int64[:,:] order(C), int64[:], int)
# pythran export reduce_sum(int32[:,:] order(C), int32[:], int)
# pythran export reduce_sum(float64[:,:] order(C), float64[:], int)
# pythran export reduce_sum(float32[:,:] order(C), float32[:], int)
# pythran export reduce_mean(float64[:,:] order(C), float64[:], int)
# pythran export reduce_mean(float32[:,:] order(C), float32[:], int)
# pythran export reduce_max(bool[:,:] order(C), bool[:], int)
# pythran export reduce_max(uint64[:,:] order(C), uint64[:], int)
# pythran export reduce_max(uint32[:,:] order(C), uint32[:], int)
# pythran export reduce_max(uint8[:,:] order(C), uint8[:], int)
# pythran export reduce_max(int8[:,:] order(C), int8[:], int)
# pythran export reduce_max(int64[:,:] order(C), int64[:], int)
# pythran export reduce_max(int32[:,:] order(C), int32[:], int)
# pythran export reduce_max(float64[:,:] order(C), float64[:], int)
# pythran export reduce_max(float32[:,:] order(C), float32[:], int)

#: rows at most this long take the softmax of short rows (_softmax_short)
SHORT_ROW = 16
#: the short rows' exponentials: blocks of this many elements, in chunks starting on
#: multiples of ALIGN, as the unary kernels' (unary_pythran)
BLOCK = 2048
ALIGN = 64

#: runs of rows from which ArgMax and ArgMin sweep columns (_best_rows), SWEEP_ROWS rows at
#: a time (their cache lines stay in L1 from one column to the next)
SWEEP_MINIMUM_ROWS = 16
SWEEP_ROWS = 256

#: Normalizer's norms, as the caller names them
NORM_MAX = 0
NORM_L1 = 1
NORM_L2 = 2


def _run(x, out, arg, nthreads, rows_op):
    """``rows_op(x, out, arg, start, stop)`` over each thread's contiguous run of rows."""
    rows = x.shape[0]
    nthreads = max(1, min(nthreads, rows))
    chunk = (rows + nthreads - 1) // nthreads
    nthreads = (rows + chunk - 1) // chunk
    if nthreads > 1:
        # omp parallel for num_threads(nthreads) schedule(static)
        for c in range(nthreads):
            rows_op(x, out, arg, c * chunk, min(rows, c * chunk + chunk))
    else:
        # No OpenMP region for one thread: entering one costs more than a small call's work.
        rows_op(x, out, arg, 0, rows)
    return nthreads


def _softmax_rows(x, out, unused, start, stop):
    # each expression straight into the output row: a temporary array per row cost more
    # than a row of a few classes' arithmetic
    for r in range(start, stop):
        row = x[r]
        out[r] = np.exp(row - np.max(row))
        out[r] *= 1 / np.sum(out[r])


def _log_softmax_rows(x, out, unused, start, stop):
    for r in range(start, stop):
        row = x[r]
        largest = np.max(row)
        out[r] = row - (largest + np.log(np.sum(np.exp(row - largest))))


def _normalize_rows(x, out, norm, start, stop):
    """Normalizer: each row over its largest value (MAX), the sum of its magnitudes (L1) or
    their Euclidean length (L2); a row whose norm is 0 is kept as it is."""
    for r in range(start, stop):
        row = x[r]
        if norm == NORM_MAX:
            scale = np.max(row)
        elif norm == NORM_L1:
            scale = np.sum(np.abs(row))
        else:
            scale = np.sqrt(np.sum(row * row))
        if scale == 0:
            out[r] = row
        else:
            out[r] = row / scale


def _probability_rows(x, out, count, start, stop):
    """A classifier's probabilities as skl2onnx normalises them: each row over its sum, a row
    that sums to zero (not NaN) as its elements plus one over the sum plus ``count``. The
    sum is ReduceSum's, read back in the element type; each row is rounded to the element
    type before it is divided, as the unfused Add is (a float32 quotient computed in
    float64 rounds to the float32 one)."""
    for r in range(start, stop):
        out[r, 0] = np.sum(x[r])
        total = out[r, 0]
        if total == 0:
            out[r] = x[r] + 1
            out[r] /= total + count
        else:
            out[r] = x[r] + 0  # -0 made +0, as the unfused Add of a zero does
            out[r] /= total


def _layer_norm_rows(x, out, arg, start, stop):
    """LayerNormalization: each row less its mean, over its standard deviation (``epsilon``
    added to the variance), times ``scale`` plus ``bias``; each row's mean and the
    reciprocal of its deviation go to ``mean`` and ``inv_std``. Two passes over the row
    (mean, then the squared deviations from it) rather than the mean of squares less the
    squared mean, which cancels when the mean is large against the deviation."""
    scale, bias, mean, inv_std, epsilon = arg
    n = x.shape[1]
    for r in range(start, stop):
        row = x[r]
        # each statistic read back from its array, so that the row's arithmetic is all in
        # the element type rather than mixed with float64 scalars
        mean[r] = np.sum(row) / n
        m = mean[r]
        inv_std[r] = 1 / np.sqrt(np.sum((row - m) * (row - m)) / n + epsilon)
        out[r] = (row - m) * inv_std[r] * scale + bias


def _first_nan(row):
    """The index of the row's first NaN, or -1: a NaN is the largest and the smallest value,
    as numpy's argmax, argmin and max have it (the compiled ones skip NaNs)."""
    for i in range(row.shape[0]):
        if row[i] != row[i]:
            return i
    return -1


def _best(row, larger, last):
    """The index of the row's largest (or smallest) value, the first of equals or the last.

    A loop of its own: pythran's vectorised argmax and argmin of integers may return
    another of equal values than the first.
    """
    nan = _first_nan(row)
    if nan >= 0:
        return row.shape[0] - 1 - _first_nan(row[::-1]) if last else nan
    best = 0
    value = row[0]
    for i in range(1, row.shape[0]):
        e = row[i]
        if (e > value if larger else e < value) or (last and e == value):
            best = i
            value = e
    return best


def _argmax_rows(x, out, arg, start, stop):
    _best_rows(x, out, True, arg[0], arg[1], start, stop)


def _argmin_rows(x, out, arg, start, stop):
    _best_rows(x, out, False, arg[0], arg[1], start, stop)


def _best_rows(x, out, larger, last, sweep, start, stop):
    """``out[r] = _best(x[r], larger, last)`` for the rows ``start`` to ``stop``.

    A run of ``SWEEP_MINIMUM_ROWS`` rows or more, at most ``sweep`` long, is swept
    column by column, ``SWEEP_ROWS`` rows at a time, each row's best so far kept by
    selection: row by row, each element was a branch that mispredicted as often as not on
    a classifier's few scores. The same comparisons in the same order per row, so the same
    index.
    """
    n = x.shape[1]
    if stop - start < SWEEP_MINIMUM_ROWS or n > sweep:
        for r in range(start, stop):
            out[r] = _best(x[r], larger, last)
        return
    start = max(start, 0)
    value = np.empty(SWEEP_ROWS, x.dtype)
    nan = np.empty(SWEEP_ROWS, np.int64)  # each row's first NaN (last, with ``last``), or -1
    for b in range(start, stop, SWEEP_ROWS):
        count = min(SWEEP_ROWS, stop - b)
        for j in range(count):
            value[j] = x[b + j, 0]
            out[b + j] = 0
            nan[j] = 0 if x[b + j, 0] != x[b + j, 0] else -1
        for i in range(1, n):
            for j in range(count):
                e = x[b + j, i]
                v = value[j]
                better = (e > v if larger else e < v) or (last and e == v)
                out[b + j] = i if better else out[b + j]
                value[j] = e if better else v
                nan[j] = i if e != e and (last or nan[j] < 0) else nan[j]
        for j in range(count):
            out[b + j] = nan[j] if nan[j] >= 0 else out[b + j]


def _sum_rows(x, out, unused, start, stop):
    for r in range(start, stop):
        out[r] = np.sum(x[r])


def _mean_rows(x, out, unused, start, stop):
    for r in range(start, stop):
        out[r] = np.sum(x[r]) / x.shape[1]


def _max_rows(x, out, unused, start, stop):
    for r in range(start, stop):
        row = x[r]
        out[r] = row[_first_nan(row)] if _first_nan(row) >= 0 else np.max(row)


def softmax(x, out, nthreads):
    if x.shape[1] <= SHORT_ROW:
        return _softmax_short(x, out, nthreads)
    return _run(x, out, 0, nthreads, _softmax_rows)


def _softmax_short(x, out, nthreads):
    """Softmax of rows shorter than a few vectors (a classifier's classes): each row less its
    largest value, then the exponentials over the whole matrix as one array, then each row
    over its sum. Row by row, a short row's exponentials were library calls one element
    at a time. The exponentials' chunks start on multiples of ``ALIGN`` elements, as the
    unary kernels' do, so each element takes the same vector or scalar path whatever the
    thread count; the row phases compute each row whole."""
    _run(x, out, 0, nthreads, _shift_rows)
    flat = out.reshape(-1)
    n = flat.shape[0]
    chunk = ((n + nthreads - 1) // nthreads + ALIGN - 1) // ALIGN * ALIGN
    parts = (n + chunk - 1) // chunk
    if parts > 1:
        # omp parallel for num_threads(parts) schedule(static)
        for c in range(parts):
            _exp_chunk(flat, c * chunk, min(n, c * chunk + chunk))
    else:
        _exp_chunk(flat, 0, n)
    return _run(out, out, 0, nthreads, _scale_rows)


def _shift_rows(x, out, unused, start, stop):
    for r in range(start, stop):
        largest = x[r, 0]
        for i in range(1, x.shape[1]):
            largest = max(largest, x[r, i])  # a NaN makes the row NaN through its sum
        for i in range(x.shape[1]):
            out[r, i] = x[r, i] - largest


def _exp_chunk(flat, start, stop):
    for b in range(start, stop, BLOCK):
        e = min(stop, b + BLOCK)
        flat[b:e] = np.exp(flat[b:e])


def _scale_rows(x, out, unused, start, stop):
    for r in range(start, stop):
        total = x[r, 0]
        for i in range(1, x.shape[1]):
            total += x[r, i]
        scale = 1 / total
        for i in range(x.shape[1]):
            out[r, i] = x[r, i] * scale


def log_softmax(x, out, nthreads):
    return _run(x, out, 0, nthreads, _log_softmax_rows)


def normalize(x, out, norm, nthreads):
    return _run(x, out, norm, nthreads, _normalize_rows)


def normalize_probabilities(x, out, count, nthreads):
    return _run(x, out, count, nthreads, _probability_rows)


def layer_norm(x, out, scale, bias, mean, inv_std, epsilon, nthreads):
    return _run(x, out, (scale, bias, mean, inv_std, epsilon), nthreads, _layer_norm_rows)


def argmax(x, out, arg, nthreads):
    return _run(x, out, arg, nthreads, _argmax_rows)


def argmin(x, out, arg, nthreads):
    return _run(x, out, arg, nthreads, _argmin_rows)


def reduce_sum(x, out, nthreads):
    return _run(x, out, 0, nthreads, _sum_rows)


def reduce_mean(x, out, nthreads):
    return _run(x, out, 0, nthreads, _mean_rows)


def reduce_max(x, out, nthreads):
    return _run(x, out, 0, nthreads, _max_rows)
