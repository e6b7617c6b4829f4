"""FLOAT16 <-> float32 conversions on the compiled, bit-exact, parallel kernels.

pythran has no half type, so halves travel as their uint16 bit patterns; the
conversions equal numpy's ``astype`` bit for bit and split across threads,
which ``astype`` does not.
"""

from __future__ import annotations

import numpy as np

from . import outputs
from .variants import load_module

#: the dtypes on both sides of the conversions, for callers' dtype checks too
FLOAT32_DTYPE, FLOAT16_DTYPE = np.dtype(np.float32), np.dtype(np.float16)


def to_float32(x: np.ndarray, threads: int, aligned: bool = False) -> np.ndarray:
    """A float32 copy of a contiguous float16 array, converted on ``threads`` threads
    (into an ``aligned`` array: see :func:`outputs.empty`)."""
    out = outputs.empty(x.shape, FLOAT32_DTYPE, aligned)
    if x.size:
        load_module("convert").widen_half(x.reshape(-1).view(np.uint16), out.reshape(-1), threads)
    return out


def to_float16(x: np.ndarray, threads: int) -> np.ndarray:
    """A float16 copy of a contiguous float32 array, rounded to nearest even like numpy."""
    out = outputs.empty(x.shape, FLOAT16_DTYPE)
    if x.size:
        load_module("convert").narrow_float(x.reshape(-1), out.reshape(-1).view(np.uint16),
                                            threads)
    return out
