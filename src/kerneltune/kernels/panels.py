"""A constant B in panels: the blocked path's packed op(B), packed once.

Where the blocked path packs op(B) (from ``algorithm.pack_b_minimum_elements`` on, and
always with transB), it packs it at every call; for a product of few rows the copy costs
about as much as the multiply-adds. A B that is always the same array (a model's weight,
which a session binds with :meth:`~kerneltune.kernels.PreparedKernel.for_constant`) is
packed once for each grid its products use, as onnxruntime's MLAS packs a constant B when
its session is made, and each of those products runs the path's tasks alone on the
panels: the same sums in the same order, so the same bits (docs/kernels.md, "A constant
B in panels").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._support.aligned import aligned_empty
from .strips import plain_matrix

#: grids remembered per B (products of as many row counts and thread counts): a session's
#: products repeat a few, and a caller that varies its batch at every call only computes
#: grids again
REMEMBERED_GRIDS = 64


def takes_panels(b, dtype: np.dtype, config) -> bool:
    """Whether ``b`` is a B worth panels for a prepared product of ``dtype`` and ``config``:
    a 2-D C-contiguous array of the type with a panel's worth of elements or more
    (``algorithm.pack_b_minimum_elements``). A smaller B is packed at most with transB, at
    a cost that the decision its binding adds to every call would outweigh."""
    return plain_matrix(b, dtype) and b.size >= max(1, config.pack_b_minimum_elements)


class Panels:
    """A constant B and its panels, packed at the first product of each grid that needs
    them.

    ``layout`` is the compiled ``blocked_layout``, ``pack`` the compiled ``pack_blocks``. A
    product's grid (its tiles) depends on its rows and threads (``blocked_layout`` halves
    the tiles until each thread has a task); the packing depends only on its tile of
    columns, so there is one buffer per such tile. Grids are remembered: the layout's call
    cost a tenth of a small product's time.
    """

    def __init__(self, b: np.ndarray, trans_b: bool, config, layout: Callable,
                 pack: Callable):
        self.b = b
        self._trans_b, self._config, self._layout, self._pack = trans_b, config, layout, pack
        self._depth, self._columns = b.shape[::-1] if trans_b else b.shape
        self._packed: dict[int, np.ndarray] = {}
        self._grids: dict[tuple[int, int], tuple[int, int, int, np.ndarray]] = {}

    def grid(self, rows: int, threads: int) -> tuple[int, int, int, np.ndarray]:
        """The tiles and tasks of a product of ``rows`` rows on ``threads`` threads, and the
        panels of its tile of columns (packed now if this is the first such product)."""
        grid = self._grids.get((rows, threads))
        if grid is not None:
            return grid
        config = self._config
        tile_m, tile_n, blocks, tasks, size, width = self._layout(
            rows, self._columns, self._depth, config.tile_m, config.tile_n, config.tile_k,
            True, threads)
        packed = self._packed.get(tile_n)
        if packed is None:  # two threads racing here pack the same values: either serves
            packed = aligned_empty((size, width), self.b.dtype)
            self._pack(self.b, packed, self._trans_b, self._depth, self._columns, tile_n,
                       config.tile_k, 0, blocks)
            self._packed[tile_n] = packed
        if len(self._grids) >= REMEMBERED_GRIDS:
            self._grids.clear()
        grid = self._grids[rows, threads] = (tile_m, tile_n, tasks, packed)
        return grid
