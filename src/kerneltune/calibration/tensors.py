"""Deterministic calibration inputs: the same bytes on every machine for the same arguments.

numpy's ``Generator`` distributions may change between numpy releases and
Box-Muller goes through ``log`` and ``cos``, whose last bits differ between
math libraries. So the inputs are built from PCG64's raw 64-bit stream (fixed
by its specification) with IEEE arithmetic only: a float is the Irwin-Hall sum
of four 32-bit uniforms, centred and scaled to unit variance (close enough to a
normal for timing and exact everywhere); an integer or a bool takes the low
bits of one raw word, so it covers its type's whole range. And they start on a
cache line (:mod:`kerneltune._support.aligned`): where malloc happens to put them would
otherwise move Gemm's crossovers from one process to the next.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from .._support.aligned import aligned_empty
from ..tuning.dtypes import FLOATING, NUMPY_DTYPES
from ..tuning.schema import element_type_name, element_type_number

Allocator = Callable[[tuple[int, ...], np.dtype], np.ndarray]

#: the sum of four uniforms on [0, 1) has mean 2 and variance 4/12
_SCALE = math.sqrt(3.0)


def randn_tensor(
    element_type: object,
    shape: int | Sequence[int],
    seed: int,
    allocator: Allocator | None = None,
) -> np.ndarray:
    """A tensor of ``element_type`` and ``shape`` filled deterministically from ``seed``.

    ``allocator(shape, dtype)`` provides the array to fill (aligned or
    NUMA-placed memory, say); by default a fresh C-contiguous array whose data starts
    on a multiple of :data:`kerneltune._support.aligned.ALIGNMENT` bytes.
    """
    number = element_type_number(element_type)
    if number not in NUMPY_DTYPES:
        raise ValueError(f"randn_tensor has no {element_type_name(number)} tensors; element "
                         f"types: {', '.join(element_type_name(t) for t in NUMPY_DTYPES)}")
    dtype = NUMPY_DTYPES[number]
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    if any(not isinstance(d, int | np.integer) or isinstance(d, bool) or d < 0 for d in shape):
        raise ValueError(f"shape must be non-negative integers, got {shape!r}")
    if not isinstance(seed, int | np.integer) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    shape = tuple(int(d) for d in shape)
    out = (aligned_empty if allocator is None else allocator)(shape, dtype)
    if out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError(f"the allocator returned a {out.dtype} array of shape {out.shape}; "
                         f"expected a C-contiguous {dtype} array of shape {shape}")
    count = out.size
    stream = np.random.PCG64(int(seed))
    if number in FLOATING:
        # two raw words are four 32-bit uniforms; integer sums stay exact (below 2**34)
        words = stream.random_raw(2 * count).astype(np.uint64, copy=False)
        pairs = (words & np.uint64(0xFFFFFFFF)) + (words >> np.uint64(32))
        sums = (pairs[0::2] + pairs[1::2]).astype(np.float64)
        sums *= 1.0 / 2.0**32
        sums -= 2.0
        sums *= _SCALE
        out.reshape(-1)[...] = sums.astype(dtype, copy=False)
    else:
        words = stream.random_raw(count).astype(np.uint64, copy=False)
        if dtype == np.bool_:
            out.reshape(-1)[...] = (words & np.uint64(1)).astype(np.bool_)
        else:
            unsigned = np.dtype(f"uint{dtype.itemsize * 8}")
            out.reshape(-1).view(unsigned)[...] = words.astype(unsigned)
    return out
