"""Multidirectional broadcasting reduced to the rows the compiled binary kernels walk.

numpy's rules decide the output shape. Dimensions of size 1 in the output are
dropped and neighbouring dimensions that both operands either span or repeat
the same way are merged, so ``(8, 1, 4, 5) + (4, 5)`` becomes one row per
``a`` element block and any broadcast needs at most a few index arithmetic
steps per row, never per element.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

EQUAL, SCALAR, BROADCAST = "equal", "scalar", "broadcast"

_ONE_ROW = np.zeros(1, dtype=np.int64)
_ONE_ROW.flags.writeable = False


@dataclass(frozen=True, eq=False)
class Layout:
    """Where each output row reads its operands (see binary_pythran's module docstring)."""

    shape: tuple[int, ...]
    form: str
    a_offsets: np.ndarray
    b_offsets: np.ndarray
    inner: int
    a_step: int
    b_step: int
    #: elements of the output (a field, not a property: every call reads it)
    size: int


def broadcast_shape(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a_shape, b_shape))
    except ValueError:
        raise ValueError(f"shapes {a_shape} and {b_shape} cannot be broadcast together") from None


@functools.lru_cache(maxsize=1024)
def layout(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> Layout:
    """The row layout for two operand shapes; cached, since a model repeats its shapes."""
    shape = a_shape if a_shape == b_shape else broadcast_shape(a_shape, b_shape)
    size = math.prod(shape)
    a_size, b_size = math.prod(a_shape), math.prod(b_shape)
    if a_shape == b_shape or size == 0 or (a_size == size and b_size == size):
        return Layout(shape, EQUAL, _ONE_ROW, _ONE_ROW, size, 1, 1, size)
    if a_size == 1 or b_size == 1:
        return Layout(shape, SCALAR, _ONE_ROW, _ONE_ROW, size, int(a_size != 1),
                      int(b_size != 1), size)
    dims = _merged_dims(shape, a_shape, b_shape)
    *outer, (inner, a_spans, b_spans) = dims
    sizes = [d[0] for d in dims]
    a_offsets = _row_offsets(outer, sizes, [d[1] for d in dims])
    b_offsets = _row_offsets(outer, sizes, [d[2] for d in dims])
    return Layout(shape, BROADCAST, a_offsets, b_offsets, inner, int(a_spans), int(b_spans),
                  size)


def _merged_dims(shape, a_shape, b_shape) -> list[tuple[int, bool, bool]]:
    """(size, a spans it, b spans it) per dimension, size-1 dimensions dropped, runs merged."""
    rank = len(shape)
    a_full = (1,) * (rank - len(a_shape)) + tuple(a_shape)
    b_full = (1,) * (rank - len(b_shape)) + tuple(b_shape)
    dims: list[tuple[int, bool, bool]] = []
    for size, a_dim, b_dim in zip(shape, a_full, b_full, strict=True):
        if size == 1:
            continue
        pattern = (a_dim != 1, b_dim != 1)
        if dims and dims[-1][1:] == pattern:
            dims[-1] = (dims[-1][0] * size, *pattern)
        else:
            dims.append((size, *pattern))
    return dims


def _row_offsets(outer, sizes, spans) -> np.ndarray:
    """Flat offset of each row's first element in one operand, rows in C order."""
    strides = []
    stride = 1
    for size, spanned in zip(reversed(sizes), reversed(spans), strict=True):
        strides.append(stride if spanned else 0)
        if spanned:
            stride *= size
    strides.reverse()
    offsets = np.zeros(1, dtype=np.int64)
    for (size, *_), step in zip(outer, strides, strict=False):
        offsets = (offsets[:, None] + np.arange(size, dtype=np.int64) * step).reshape(-1)
    offsets.flags.writeable = False
    return offsets
