"""A constant B in strips: the skinny path's products of one or two rows on a weight
packed once.

In place, the skinny path reads each row of a strip of B as a run of ``SW`` columns
strided by N; from rows of a page on, every row of B starts a page, where the hardware
prefetcher stops. A B that is always the same array (a model's weight, which a session
binds with :meth:`~kerneltune.kernels.PreparedKernel.for_constant`) is copied once into
strips that are each one contiguous run, as onnxruntime's MLAS packs a constant B when its
session is made; the same sums of each column, so the same bits (docs/kernels.md, "A
constant B in strips").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._support.aligned import aligned_empty
from .gemm_pythran import SW

#: a B read in place whose rows are this long (a page) or longer goes faster in strips:
#: each row starts a page; shorter rows read as stored kept up (docs/kernels.md)
STRIPS_MINIMUM_ROW_BYTES = 4096


def plain_matrix(b, dtype: np.dtype) -> bool:
    """Whether ``b`` is a 2-D C-contiguous array of ``dtype``: a B that the packing of its
    strips or its panels reads as such."""
    return (type(b) is np.ndarray and b.dtype is dtype and b.ndim == 2
            and b.flags.c_contiguous)


def takes_strips(b, dtype: np.dtype, trans_b: bool, config) -> bool:
    """Whether ``b`` is a B worth strips for a prepared product of ``dtype``, ``trans_b``
    and ``config``: a 2-D C-contiguous array of the type, of
    ``algorithm.skinny_minimum_b_elements`` or more, read transposed (then every run in
    place transposes it) or in rows of ``STRIPS_MINIMUM_ROW_BYTES`` or more."""
    return (plain_matrix(b, dtype) and config.skinny_m_limit > 0
            and b.size >= config.skinny_minimum_b_elements
            and (trans_b or b.strides[0] >= STRIPS_MINIMUM_ROW_BYTES))


class Strips:
    """A constant B and, once its first skinny product needs them, its strips.

    ``entries`` are ``gemm_strips`` of the build without OpenMP and of the product's own
    build, ``pack`` its ``pack_strips``, ``scalars`` its alpha, beta and thresholds (as
    ``gemm`` takes them).
    """

    def __init__(self, b: np.ndarray, entries: tuple[Callable, Callable], pack: Callable,
                 trans_b: bool, scalars: tuple):
        self.b = b
        self._entries, self._pack, self._trans_b, self._scalars = (entries, pack, trans_b,
                                                                   scalars)
        self._strips = np.empty((0, SW), b.dtype)

    def run(self, a, bias, one_thread: bool) -> np.ndarray | None:
        """``gemm``'s result for A, this B and ``bias`` where the product is the skinny
        path's (on the build without OpenMP when ``one_thread``); None where it is not."""
        entry = self._entries[not one_thread]
        out = entry(a, self.b, self._strips, bias, *self._scalars)
        if out.shape == (0, 3):  # the first skinny product: pack the strips
            depth, columns = self.b.shape[::-1] if self._trans_b else self.b.shape
            strips = aligned_empty(((columns + SW - 1) // SW * depth, SW), self.b.dtype)
            self._pack(self.b, strips, self._trans_b, depth, columns)
            self._strips = strips
            out = entry(a, self.b, strips, bias, *self._scalars)
        return None if out.shape == (0, 2) else out
