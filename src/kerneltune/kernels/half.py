"""FLOAT16 and BFLOAT16 <-> float32 conversions on the compiled, bit-exact, parallel kernels.

pythran has no 16-bit float types, so both travel as their uint16 bit patterns. FLOAT16's
conversions equal numpy's ``astype`` bit for bit, BFLOAT16's ml_dtypes' (narrowing rounds to
nearest even, a NaN stays a NaN), and both split across threads, which ``astype`` does not.
Every kernel that computes on the two types widens its inputs to float32, runs the float32
kernel and narrows a float result: a :class:`HalfFormat` is what differs between them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..tuning.dtypes import NUMPY_DTYPES
from ..tuning.schema import element_type_number
from . import outputs
from .variants import load_module

FLOAT32_DTYPE = np.dtype(np.float32)
_FLOAT = element_type_number("FLOAT")


@dataclass(frozen=True)
class HalfFormat:
    """A 16-bit float type: its element type and the compiled conversions of its bits."""

    element_type: int
    widen_function: str
    narrow_function: str
    #: the gap from 1 to the next value: one unit in the last place, relative to the value
    epsilon: float

    @functools.cached_property
    def dtype(self) -> np.dtype:
        """numpy's dtype (ml_dtypes' for BFLOAT16, imported when first asked for); looked up
        once, as every narrowing asks for it."""
        return NUMPY_DTYPES[self.element_type]

    def to_float32(self, x: np.ndarray, threads: int, aligned: bool = False) -> np.ndarray:
        """A float32 copy of a contiguous array of this type, converted on ``threads`` threads
        (into an ``aligned`` array: see :func:`outputs.empty`)."""
        out = outputs.empty(x.shape, FLOAT32_DTYPE, aligned)
        if x.size:
            getattr(load_module("convert"), self.widen_function)(
                x.reshape(-1).view(np.uint16), out.reshape(-1), threads)
        return out

    def from_float32(self, x: np.ndarray, threads: int) -> np.ndarray:
        """A copy of a contiguous float32 array in this type, rounded to nearest even."""
        out = outputs.empty(x.shape, self.dtype)
        if x.size:
            getattr(load_module("convert"), self.narrow_function)(
                x.reshape(-1), out.reshape(-1).view(np.uint16), threads)
        return out


FLOAT16 = HalfFormat(element_type_number("FLOAT16"), "widen_half", "narrow_float", 2.0**-10)
BFLOAT16 = HalfFormat(element_type_number("BFLOAT16"), "widen_bfloat16", "narrow_bfloat16",
                      2.0**-7)
#: element type -> its format
FORMATS = {f.element_type: f for f in (FLOAT16, BFLOAT16)}


def compute_type(element_type: int) -> int:
    """The element type a kernel computes ``element_type`` in: FLOAT for a 16-bit float."""
    return _FLOAT if element_type in FORMATS else element_type
