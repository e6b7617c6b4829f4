"""Arrays that start on a cache line, so that a kernel's speed does not depend on malloc.

Gemm's compiled path reads B in place below its pack-B threshold, and a SIMD
load that straddles two cache lines costs two (docs/kernels.md, Alignment).
numpy's arrays start wherever malloc puts them, in 16-byte steps, so
calibration inputs placed by it gave each process its own crossovers. The
arrays kerneltune allocates for a kernel to read therefore start on a
multiple of :data:`ALIGNMENT`, as onnxruntime's tensors do: calibration
tensors, a session's constants, FLOAT16 Gemm operands widened to float32,
recycled outputs, B's packed panels and strips; and the compiled modules' own
(src/aligned_malloc.cpp).
"""

from __future__ import annotations

import math

import numpy as np

#: a cache line, and a multiple of every SIMD width
ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a multiple of ALIGNMENT."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    storage = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -storage.ctypes.data % ALIGNMENT
    return storage[start:start + nbytes].view(dtype).reshape(shape)


def aligned(array: np.ndarray) -> np.ndarray:
    """``array`` if it is C-contiguous and aligned, else an aligned C-contiguous copy.

    Arrays of Python objects are returned as they are: no kernel reads them. A numpy
    scalar (what arithmetic on 0-d arrays gives) becomes an aligned 0-d array.
    """
    array = np.asarray(array)
    if array.dtype.hasobject or (array.flags.c_contiguous
                                 and array.ctypes.data % ALIGNMENT == 0):
        return array
    copy = aligned_empty(array.shape, array.dtype)
    copy[...] = array
    return copy
