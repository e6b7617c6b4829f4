"""Gemm and MatMul calibration: tiles, each algorithm threshold, then the parallel grain.

Tiles are judged on one thread on shape families that stress each dimension;
the thresholds between the blocked, skinny-M, one-row and BLAS paths are
crossovers searched on those families (docs/calibration.md, Gemm and MatMul).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from ..calibration import (
    CalibrationContext,
    Case,
    Comparison,
    Crossover,
    Setting,
    Tolerance,
    Workload,
    compare_settings,
    decide_crossover,
    decide_shared_crossover,
    geometric_grid,
)
from ..calibration.search import RESOLUTION_OCTAVES
from ..tuning.dtypes import NUMPY_DTYPES
from . import half
from .base import Plan
from .calibrate import (
    CONVERSION_MINIMUM,
    GRAIN_RESOLUTION_OCTAVES,
    NEVER,
    KernelCalibration,
    grain_of,
)
from .gemm import BLOCKED as BLOCKED_PLAN
from .gemm import BLOCKED_PACKED as BLOCKED_PACKED_PLAN
from .gemm import KU, MR, NR, STRIP_ROWS, Gemm
from .gemm import SKINNY as SKINNY_PLAN
from .matmul import MatMul

#: How far apart, in octaves of N, two calibrations measure where BLAS starts to beat the
#: compiled path on one-row products (1 x N x N): BLAS's speed there is drawn per process.
VECTOR_BLAS_RESOLUTION_OCTAVES = 2.0
#: How far apart, in octaves of rows, two calibrations on more than one thread measure the
#: skinny path's row limit: the blocked path it races runs at a speed drawn per process
#: there (on one thread the crossover repeats within an octave). The band stays until
#: calibrations without it are shown to repeat.
SKINNY_PARALLEL_RESOLUTION_OCTAVES = 2.0
TILE_M, TILE_N, TILE_K = "algorithm.tile_m", "algorithm.tile_n", "algorithm.tile_k"
PACK_B = "algorithm.pack_b_minimum_elements"
SKINNY = "algorithm.skinny_m_limit"
COLUMN = "algorithm.column_n_limit"
PANEL = "algorithm.panel_n_limit"
ROW = "algorithm.row_m_limit"
SKINNY_B = "algorithm.skinny_minimum_b_elements"
BLAS = "algorithm.blas_minimum_fmas"
SKINNY_BLAS = "algorithm.skinny_blas_minimum_fmas"
VECTOR_BLAS = "algorithm.vector_blas_minimum_fmas"
COLUMN_BLAS = "algorithm.column_blas_minimum_fmas"
PANEL_BLAS = "algorithm.panel_blas_minimum_fmas"
PACKED_BLAS = "algorithm.packed_blas_minimum_fmas"
FMAS_PER_UNIT = "parallel.fmas_per_work_unit"
SKINNY_UNIT = "parallel.skinny_fmas_per_work_unit"
MINIMUM_TASKS = "parallel.minimum_tasks"
#: thresholds that keep every product off BLAS: the compiled paths are compared under them
COMPILED = MappingProxyType(dict.fromkeys(
    (BLAS, SKINNY_BLAS, VECTOR_BLAS, COLUMN_BLAS, PANEL_BLAS, PACKED_BLAS), NEVER))
#: depth and width of the skinny-M family
SKINNY_DEPTH = 512
#: the weight family: rows by a constant B of this depth and width, bound as a session binds
#: a model's weight (its own salt: a B no other family reads)
WEIGHT_CASE, WEIGHT_DEPTH, WEIGHT_SALT = "rows by a weight", 512, 2
#: N of the row path's cases (rows x N by N x N): a hidden layer's width, and one just below
#: the default skinny_minimum_b_elements, where a second row on `x86_64_v4` ran slower
ROW_SIZES = (32, 96)
#: rows and depth of the narrow-N family (a classifier's scores over a batch)
NARROW_ROWS, NARROW_DEPTH = 1024, 64
#: depth of the tall family, on which BLAS races the column path (the last layer of an MLP,
#: a linear model's features) and the panel path (its hidden layers)
TALL_DEPTH = 32
#: the cache sizes assumed when the descriptor does not know them
DEFAULT_L1, DEFAULT_L2 = 32 * 1024, 512 * 1024


def tile_candidates(l1_bytes: int | None, l2_bytes: int | None, itemsize: int,
                    limit: int = 6) -> list[tuple[int, int, int]]:
    """(tile_m, tile_n, tile_k) worth trying for these caches, best guesses first.

    A ``tile_k x tile_n`` panel of B is reused by every row block, so it should
    fill about half of L2; a ``tile_m x tile_k`` block of A streams through L1
    once per panel and should not exceed L2's other half. Tiles are multiples
    of the micro-kernel's shape (MR x NR, depth KU).
    """
    l2 = l2_bytes or DEFAULT_L2
    target = l2 // 2
    found = []
    for tile_n in (NR * 2, NR * 4, NR * 8):
        for tile_k in (KU * 32, KU * 64, KU * 128):
            for tile_m in (MR * 8, MR * 16, MR * 32):
                panel, block = tile_k * tile_n * itemsize, tile_m * tile_k * itemsize
                if panel <= target and block <= l2 - panel:
                    found.append((abs(math.log(panel / target)), -tile_m,
                                  (tile_m, tile_n, tile_k)))
    return [tiles for *_, tiles in sorted(found)][:limit]


def whole_block_grid(low: int, high: int, steps_per_octave: int) -> list[int]:
    """A geometric grid whose sizes from ``NR`` on are whole ``NR``-column blocks.

    The compiled path runs a block narrower than ``NR`` columns in a loop of
    variable length, which gcc vectorises worse: on a plain grid (181, 362)
    its speed zig-zags from one size to the next, and a crossover that needs
    two consecutive wins stopped at the first awkward size.
    """
    return ([s for s in geometric_grid(low, high, steps_per_octave) if s < NR]
            + geometric_grid(max(low, NR), high, steps_per_octave, NR))


def _grid_below(grid: Sequence[int], other_from: int) -> int:
    """A path's size limit (rows of the skinny path, columns of the column path) when the
    path it races wins from ``other_from`` on: the grid's size below it.

    A limit on the grid (the defaults, 8 rows and 8 columns, are) keeps every value the
    search decides on it, so two calibrations a grid step apart differ by one step;
    ``other_from - 1``, the largest limit the measurements allow, would lie off the grid
    beside a kept default.
    """
    return max((size for size in grid if size < other_from), default=0)


#: the config fields that shape a compiled product's blocks, by path (the skinny path cuts
#: column strips only; BLAS has none of ours)
_TILES = {BLOCKED_PLAN: ("tile_m", "tile_n", "tile_k"),
          BLOCKED_PACKED_PLAN: ("tile_m", "tile_n", "tile_k"), SKINNY_PLAN: ("tile_n",)}


def _wide(context: CalibrationContext) -> list[int]:
    """N of the one-row and skinny families (N x N B): whole micro-kernel blocks, 64 to 4096."""
    return whole_block_grid(64, 4096, context.options.level.steps_per_octave)


class GemmCalibration(KernelCalibration):
    """Tiles on shape families (on one thread), then each algorithm threshold, then the
    parallel grain.

    Every search runs the compiled kernel with the values decided before it,
    and the paths it does not study switched off (BLAS above no size, skinny
    for no M), so each threshold is measured on its own.
    """

    kernel: Gemm

    def _compute_itemsize(self) -> int:
        return NUMPY_DTYPES[half.compute_type(self.element_type)].itemsize

    def _tolerance(self) -> Tolerance:
        """BLAS sums in another order: agreement to a few units in the last place per K, and
        to one of a 16-bit result's, where float32 sums that straddle its rounding point
        narrow a unit apart (a BFLOAT16 unit is 2**-7 of the value, beyond float32's)."""
        rtol = 2e-3 if self._compute_itemsize() == 4 else 1e-10
        narrow = half.FORMATS.get(self.element_type)
        rtol = max(rtol, narrow.epsilon) if narrow is not None else rtol
        return Tolerance(rtol, rtol * 32)

    def _matrix(self, context: CalibrationContext, rows: int, columns: int, salt: int):
        return context.randn(self.element_type, (rows, columns), salt)

    def _product(self, name: str, context: CalibrationContext, m: Callable[[int], int],
                 k: Callable[[int], int], n: Callable[[int], int], unit: str,
                 trans_b: bool = False, b_salt: int = 1) -> Case:
        """A product of ``m(size) x k(size)`` by ``k(size) x n(size)``; ``unit`` says what
        the size counts, shapes included."""
        item = NUMPY_DTYPES[self.element_type].itemsize

        def inputs(size: int) -> tuple:
            b_shape = (n(size), k(size)) if trans_b else (k(size), n(size))
            return (self._matrix(context, m(size), k(size), 0),
                    self._matrix(context, *b_shape, b_salt))

        return Case(name, inputs,
                    lambda s: item * (m(s) * k(s) + k(s) * n(s) + m(s) * n(s)), unit)

    def _square(self, context: CalibrationContext) -> Case:
        return self._product("square", context, int, int, int, "N (N x N by N x N)")

    def _rows(self, context: CalibrationContext, rows: int) -> Case:
        """``rows`` x N by N x N: the one-row and few-row families, on the size N."""
        return self._product(f"{rows} x N x N", context, lambda s: rows, int, int,
                             f"N ({rows} x N by N x N)")

    def _skinny_m(self, context: CalibrationContext) -> Case:
        """M x 512 by 512 x 512, on the rows M."""
        return self._product("skinny M", context, int, lambda s: SKINNY_DEPTH,
                             lambda s: SKINNY_DEPTH,
                             f"rows M (M x {SKINNY_DEPTH} by {SKINNY_DEPTH} x {SKINNY_DEPTH})")

    def _weight(self, context: CalibrationContext) -> Case:
        """M x 512 by a constant 512 x 512, bound as a session binds a model's weight (its
        products of more rows than the skinny path takes run on its panels), on the rows M."""
        return self._product(WEIGHT_CASE, context, int, lambda s: WEIGHT_DEPTH,
                             lambda s: WEIGHT_DEPTH,
                             f"rows M (M x {WEIGHT_DEPTH} by a constant {WEIGHT_DEPTH} x "
                             f"{WEIGHT_DEPTH})", b_salt=WEIGHT_SALT)

    def _weight_b(self, context: CalibrationContext) -> np.ndarray:
        """The weight family's B: the same array at every size (the context keeps it)."""
        return self._matrix(context, WEIGHT_DEPTH, WEIGHT_DEPTH, WEIGHT_SALT)

    def _narrow(self, context: CalibrationContext) -> Case:
        """1024 x 64 by 64 x N, on the columns N."""
        return self._product("narrow N", context, lambda s: NARROW_ROWS,
                             lambda s: NARROW_DEPTH, int,
                             f"columns N ({NARROW_ROWS} x {NARROW_DEPTH} by {NARROW_DEPTH} x N)")

    def _tall(self, context: CalibrationContext, columns: int) -> Case:
        """M x 32 by 32 x ``columns``, on the rows M."""
        return self._product(f"M x {TALL_DEPTH} x {columns}", context, int,
                             lambda s: TALL_DEPTH, lambda s: columns,
                             f"rows M (M x {TALL_DEPTH} by {TALL_DEPTH} x {columns})")

    def families(self, context: CalibrationContext) -> list[tuple[Case, int]]:
        """Square, wide N, large K and (Gemm only) transposed B: the cases tiles are judged on."""
        product = self._product
        families = [
            (self._square(context), 256),
            (product("wide N", context, lambda s: s // 4, lambda s: s, lambda s: s * 4,
                     "N (N/4 x N by N x 4N)"), 256),
            (product("large K", context, lambda s: s, lambda s: s * 16, lambda s: s,
                     "N (N x 16N by 16N x N)"), 128),
        ]
        if not isinstance(self.kernel, MatMul):
            families.append((product("transposed B", context, int, lambda s: s // 2, int,
                                     "N (N x N/2 by N/2 x N, B transposed)", trans_b=True),
                             256))
        return families

    def _runner_for(self, config: Any, threads: int, weight: np.ndarray
                    ) -> Callable[..., np.ndarray]:
        """A run for plain and transposed-B cases, told apart by B's shape, bound to
        ``weight`` (the weight family's B) as a session binds a model's weight.

        The transposed family is never square in (K, N), so a B whose first
        dimension is not A's last is the transposed one.
        """
        prepared = self.prepared_of(config, threads)
        plain, bound = prepared.run, prepared.for_constant(1, weight) or prepared.run
        transposed = (None if isinstance(self.kernel, MatMul)
                      else self.run_of(config, threads, transB=1))

        def run(a, b):
            if b is weight:
                return bound(a, b)
            return plain(a, b) if a.shape[1] == b.shape[0] else transposed(a, b)
        return run

    def _runner(self, context: CalibrationContext, values: dict, threads: int | None = None):
        return self._runner_for(context.configure(values), threads or context.threads,
                                self._weight_b(context))

    def plan_of(self, config: Any, threads: int, case: Case, size: int) -> Plan:
        """The plan of :meth:`KernelCalibration.plan_of`, the weight family's B bound."""
        inputs = case.inputs(size)
        prepared = self.prepared_of(config, threads, **self.attributes_of(inputs))
        if case.name == WEIGHT_CASE:
            prepared.for_constant(1, inputs[1])
        return prepared.plan(*inputs)

    def __call__(self, context: CalibrationContext) -> None:
        self._tiles(context)
        square = self._square(context)
        steps = context.options.level.steps_per_octave
        squares = whole_block_grid(16, 724, steps)
        blocked = {**COMPILED, SKINNY: 0}
        never_pack, always_pack = ({**blocked, PACK_B: NEVER}, {**blocked, PACK_B: 0})
        tile_k, tile_n = int(context.values[TILE_K]), int(context.values[TILE_N])
        decide_crossover(context, Crossover(
            PACK_B, square, squares, ("B read in place", self._runner(context, never_pack)),
            ("B packed", self._runner(context, always_pack)),
            lambda s: min(s, tile_k) * min(s, tile_n),
            max(1, math.isqrt(int(context.values[PACK_B])))))
        self._skinny(context)
        self._skinny_parallel(context)
        self._row(context)
        self._panel(context)
        self._column(context)
        self._blas(context, square, squares)
        self._parallel(context, square, squares)
        context.keep(MINIMUM_TASKS, "kept: parallel.fmas_per_work_unit decides when a product "
                                    "is worth threads; the task count is not searched")
        if CONVERSION_MINIMUM in context.schema.parameters:
            self._conversion(context)

    def _tiles(self, context: CalibrationContext) -> None:
        """The tile set, judged on one thread whatever the batch's thread count.

        Tiles size the blocks one core's caches hold, as BLAS libraries' blocking
        is set per processor, not per thread count; how many threads the task grid
        feeds is ``parallel.fmas_per_work_unit``'s to decide. Judged on two threads of
        a shared machine, the winner was drawn per process.
        """
        processor = context.execution.processor
        current = tuple(int(context.values[p]) for p in (TILE_M, TILE_N, TILE_K))
        skinny = int(context.values[SKINNY])
        candidates = [current] + [t for t in tile_candidates(
            processor.l1_data_bytes, processor.l2_bytes, self._compute_itemsize())
            if t != current and t[0] >= skinny]
        settings = [Setting(f"tiles {m}x{n}x{k}", {TILE_M: m, TILE_N: n, TILE_K: k},
                            self._runner(context, {**COMPILED, TILE_M: m, TILE_N: n, TILE_K: k},
                                         threads=1))
                    for m, n, k in candidates]
        result = compare_settings(context, Comparison(self.families(context), settings))
        context.comparison.extend(result.table)
        reason = result.reason + ("; judged on one thread" if context.threads > 1 else "")
        for parameter in (TILE_M, TILE_N, TILE_K):
            context.decide(parameter, result.chosen.values[parameter], reason,
                           result.candidates if parameter == TILE_M else ())

    def _skinny(self, context: CalibrationContext) -> None:
        """The rows up to which the skinny path beats the blocked one on a large B, then the
        size of B from which it does so for half that many rows.

        The skinny path pays by streaming B once; a B that stays in cache goes faster
        through the blocked path whatever the rows, so one row limit measured on a large
        B would send small products the slow way.
        """
        tile_m = int(context.values[TILE_M])
        steps = context.options.level.steps_per_octave
        rows = geometric_grid(1, tile_m, steps)
        case = self._skinny_m(context)
        skinny = self._runner(context, {**COMPILED, SKINNY: tile_m, SKINNY_B: 0})
        blocked = self._runner(context, {**COMPILED, SKINNY: 0})
        decide_crossover(context, Crossover(
            SKINNY, case, rows, ("skinny", skinny), ("blocked", blocked),
            functools.partial(_grid_below, rows),
            next((m for m in rows if m > int(context.values[SKINNY])), rows[-1]),
            resolution=(SKINNY_PARALLEL_RESOLUTION_OCTAVES if context.threads > 1
                        else RESOLUTION_OCTAVES)))
        limit = int(context.values[SKINNY])
        if limit < 1:
            context.keep(SKINNY_B, f"kept: algorithm.skinny_m_limit is {limit}, no product "
                                   f"is skinny")
            return
        # from one micro-kernel block wide on: below, calls cost mostly their overhead and
        # neither path wins, which would end the search where it starts
        few = max(1, limit // 2)
        decide_crossover(context, Crossover(
            SKINNY_B, self._rows(context, few),
            whole_block_grid(NR, SKINNY_DEPTH, steps), ("blocked", blocked), ("skinny", skinny),
            lambda s: s * s, max(1, math.isqrt(int(context.values[SKINNY_B])))))

    def _row(self, context: CalibrationContext) -> None:
        """The rows (at most ``STRIP_ROWS``) up to which the row path takes a product of a
        B in cache: each limit's run compared on one and two rows, the limit in use kept
        unless another is faster on the whole and slower on no case."""
        smallest_b = int(context.values[SKINNY_B])
        sizes = [size for size in ROW_SIZES if size * size < smallest_b]
        if not sizes:
            context.keep(ROW, f"kept: algorithm.skinny_minimum_b_elements is {smallest_b}, "
                              f"so the skinny path takes the B of every case")
            return
        in_use = int(context.values[ROW])
        limits = [in_use] + [limit for limit in range(STRIP_ROWS + 1) if limit != in_use]
        settings = [Setting(f"row path up to {limit} rows", {ROW: limit},
                            self._runner(context, {**COMPILED, ROW: limit}))
                    for limit in limits]
        cases = [(self._rows(context, rows), size)
                 for rows in range(1, STRIP_ROWS + 1) for size in sizes]
        result = compare_settings(context, Comparison(cases, settings))
        context.comparison.extend(result.table)
        context.decide(ROW, result.chosen.values[ROW], result.reason, result.candidates)

    def _panel(self, context: CalibrationContext) -> None:
        """The columns of op(B) up to which the panel path beats the blocked one (the
        column path out of the race)."""
        widths = geometric_grid(1, NR, context.options.level.steps_per_octave)
        decide_crossover(context, Crossover(
            PANEL, self._narrow(context), widths,
            ("panel", self._runner(context, {**COMPILED, COLUMN: 0, PANEL: NR})),
            ("blocked", self._runner(context, {**COMPILED, COLUMN: 0, PANEL: 0})),
            functools.partial(_grid_below, widths),
            next((n for n in widths if n > int(context.values[PANEL])), widths[-1])))

    def _column(self, context: CalibrationContext) -> None:
        """The columns of op(B) up to which the column path beats the path that takes the
        product otherwise: the panel path up to ``NR`` columns, the blocked one beyond."""
        widths = geometric_grid(1, 2 * NR, context.options.level.steps_per_octave)
        decide_crossover(context, Crossover(
            COLUMN, self._narrow(context), widths,
            ("column", self._runner(context, {**COMPILED, COLUMN: 2 * NR})),
            ("panel or blocked", self._runner(context, {**COMPILED, COLUMN: 0})),
            functools.partial(_grid_below, widths),
            next((n for n in widths if n > int(context.values[COLUMN])), widths[-1])))

    def _skinny_sizes(self, context: CalibrationContext, parameter: str) -> list[int] | None:
        """The sizes N of the wide grid whose N x N B the skinny path takes; None, with
        ``parameter`` kept, when there are fewer than two."""
        smallest_b = int(context.values[SKINNY_B])
        wide = _wide(context)
        sizes = [s for s in wide if s * s >= smallest_b]
        if len(sizes) < 2:
            context.keep(parameter, f"kept: algorithm.skinny_minimum_b_elements is "
                                    f"{smallest_b}, so the skinny path takes fewer than two "
                                    f"of the sizes searched (N up to {wide[-1]})")
            return None
        return sizes

    def _skinny_parallel(self, context: CalibrationContext) -> None:
        """The skinny path's work unit, on one-row products (a batch of one through a dense
        layer), before the one-row BLAS threshold is measured against the path it sets."""
        if context.threads == 1:
            context.keep(SKINNY_UNIT, "kept: one thread, so no parallel path to tune")
            return
        if int(context.values[SKINNY]) < 1:
            context.keep(SKINNY_UNIT, "kept: algorithm.skinny_m_limit is 0, no product is "
                                      "skinny")
            return
        sizes = self._skinny_sizes(context, SKINNY_UNIT)
        if sizes is None:
            return
        decide_crossover(context, Crossover(
            SKINNY_UNIT, self._rows(context, 1), sizes,
            ("serial", self._runner(context, {**COMPILED, SKINNY_UNIT: NEVER})),
            ("parallel", self._runner(context, {**COMPILED, SKINNY_UNIT: 1}, 2)),
            lambda s: max(1, s * s // 2),
            max(1, math.isqrt(2 * int(context.values[SKINNY_UNIT]))), parallel_above=True))

    def _blas(self, context: CalibrationContext, square: Case, squares: list[int]) -> None:
        """The BLAS crossovers, in multiply-adds: square, one-row, column-path, panel-path and
        skinny products."""
        on_blas = ("BLAS", self._runner(context, dict.fromkeys(COMPILED, 0)))
        compiled_run = ("compiled", self._runner(context, COMPILED))
        decide_crossover(context, Crossover(
            BLAS, square, squares, compiled_run, on_blas,
            lambda s: s ** 3, max(1, round(int(context.values[BLAS]) ** (1 / 3))),
            self._tolerance()))
        decide_crossover(context, Crossover(
            VECTOR_BLAS, self._rows(context, 1), _wide(context), compiled_run, on_blas,
            lambda s: s * s, max(1, math.isqrt(int(context.values[VECTOR_BLAS]))),
            self._tolerance(), VECTOR_BLAS_RESOLUTION_OCTAVES))
        self._column_blas(context, compiled_run, on_blas)
        self._panel_blas(context, compiled_run, on_blas)
        self._packed_blas(context, compiled_run, on_blas)
        limit = int(context.values[SKINNY])
        if limit < 2:
            context.keep(SKINNY_BLAS, f"kept: algorithm.skinny_m_limit is {limit}, no product of "
                                      f"2 rows or more is skinny")
            return
        # one threshold in multiply-adds serves few rows and many, measured on both (from 2
        # rows: one row has its own threshold), on the sizes of B the skinny path takes; a
        # smaller B meets the blocked path's threshold
        skinny_sizes = self._skinny_sizes(context, SKINNY_BLAS)
        if skinny_sizes is None:
            return
        skinny = self._runner(context, COMPILED)
        decide_shared_crossover(context, [
            Crossover(SKINNY_BLAS, self._rows(context, rows), skinny_sizes,
                      ("skinny", skinny), on_blas,
                      lambda s, rows=rows: rows * s * s,
                      max(1, math.isqrt(int(context.values[SKINNY_BLAS]) // rows)),
                      self._tolerance())
            for rows in sorted({2, max(2, limit // 2)})])

    def _column_blas(self, context: CalibrationContext, compiled_run: tuple,
                     on_blas: tuple) -> None:
        """Where BLAS beats the column path, in multiply-adds, on tall products of one column
        and of the column limit's together: one threshold serves both."""
        limit = int(context.values[COLUMN])
        if limit < 1:
            context.keep(COLUMN_BLAS, f"kept: algorithm.column_n_limit is {limit}, no product "
                                      f"takes the column path")
            return
        self._tall_blas(context, COLUMN_BLAS, sorted({1, limit}), compiled_run, on_blas)

    def _panel_blas(self, context: CalibrationContext, compiled_run: tuple,
                    on_blas: tuple) -> None:
        """Where BLAS beats the panel path, in multiply-adds, on tall products of the panel
        path's narrowest and widest op(B) together: one threshold serves both."""
        narrowest, widest = int(context.values[COLUMN]) + 1, int(context.values[PANEL])
        if widest < narrowest or int(context.values[TILE_K]) < TALL_DEPTH:
            context.keep(PANEL_BLAS, f"kept: no product of {TALL_DEPTH} rows of op(B) takes "
                                     f"the panel path (algorithm.panel_n_limit {widest}, "
                                     f"algorithm.column_n_limit {narrowest - 1}, "
                                     f"algorithm.tile_k {int(context.values[TILE_K])})")
            return
        self._tall_blas(context, PANEL_BLAS, sorted({narrowest, widest}), compiled_run,
                        on_blas)

    def _tall_blas(self, context: CalibrationContext, parameter: str, widths: list[int],
                   compiled_run: tuple, on_blas: tuple) -> None:
        """``parameter``, a BLAS crossover in multiply-adds, shared by the tall products of
        each of ``widths`` columns, on their rows."""
        rows = geometric_grid(16, 16384, context.options.level.steps_per_octave)
        in_use = int(context.values[parameter])
        decide_shared_crossover(context, [
            Crossover(parameter, self._tall(context, columns), rows, compiled_run, on_blas,
                      lambda s, columns=columns: s * TALL_DEPTH * columns,
                      max(1, in_use // (TALL_DEPTH * columns)), self._tolerance())
            for columns in widths])

    def _packed_blas(self, context: CalibrationContext, compiled_run: tuple,
                     on_blas: tuple) -> None:
        """Where BLAS, which packs B at every call, beats the packed path on a constant B's
        panels, in multiply-adds, on the weight family's rows (from twice the skinny path's
        limit: fewer rows do not run on the panels)."""
        low = 2 * max(8, int(context.values[SKINNY]))
        rows = geometric_grid(low, max(low, 4096), context.options.level.steps_per_octave)
        area = WEIGHT_DEPTH * WEIGHT_DEPTH
        decide_crossover(context, Crossover(
            PACKED_BLAS, self._weight(context), rows, compiled_run, on_blas,
            lambda s: s * area, max(1, int(context.values[PACKED_BLAS]) // area),
            self._tolerance()))

    def _parallel(self, context: CalibrationContext, square: Case, squares: list[int]) -> None:
        if context.threads == 1:
            context.keep(FMAS_PER_UNIT, "kept: one thread, so no parallel path to tune")
            return
        blas = int(context.values[BLAS])
        below_blas = [s for s in squares if s ** 3 < blas] or squares
        decide_crossover(context, Crossover(
            FMAS_PER_UNIT, square, below_blas,
            ("serial", self._runner(context, {**COMPILED, FMAS_PER_UNIT: NEVER})),
            ("parallel", self._runner(context, {**COMPILED, FMAS_PER_UNIT: 1}, 2)),
            lambda s: max(1, s ** 3 // 2),
            max(1, round((2 * int(context.values[FMAS_PER_UNIT])) ** (1 / 3))),
            parallel_above=True))

    def _conversion(self, context: CalibrationContext) -> None:
        if context.threads == 1:
            context.keep(CONVERSION_MINIMUM, "kept: one thread, so no parallel path to tune")
            return
        width = 64
        case = self._product("tall", context, lambda s: s // width, lambda s: width,
                             lambda s: width,
                             f"elements of A (N/{width} x {width} by {width} x {width})")
        sizes = geometric_grid(1 << 12, min(1 << 20, context.options.level.largest_elements),
                               context.options.level.steps_per_octave, width)
        # pure modes on both sides, as for the elementwise kernels (see _pure_modes there)
        serial = {**COMPILED, FMAS_PER_UNIT: NEVER, CONVERSION_MINIMUM: NEVER}
        parallel = {**COMPILED, FMAS_PER_UNIT: 1, CONVERSION_MINIMUM: 1}
        decide_crossover(context, Crossover(
            CONVERSION_MINIMUM, case, sizes, ("serial", self._runner(context, serial, 2)),
            ("parallel", self._runner(context, parallel, 2)),
            grain_of, 2 * int(context.values[CONVERSION_MINIMUM]),
            resolution=GRAIN_RESOLUTION_OCTAVES, parallel_above=True))

    def workload(self, context: CalibrationContext) -> Workload:
        """The tile families, skinny products of a few row counts, narrow ones of a few
        column counts, tall ones of one and 16 columns, and the square, one-row
        and two-row products an octave apart, on which the thresholds between paths move."""
        cases = [*self.families(context),
                 *((self._skinny_m(context), rows) for rows in (4, 12, 24)),
                 *((self._narrow(context), columns) for columns in (3, 16, 48)),
                 *((self._tall(context, columns), rows) for columns in (1, 16)
                   for rows in (256, 1024, 4096)),
                 *((self._weight(context), rows) for rows in (64, 512, 4096)),
                 *((self._square(context), size) for size in whole_block_grid(16, 724, 1)),
                 *((self._rows(context, rows), size) for rows in (1, 2)
                   for size in whole_block_grid(64, 4096, 1))]
        weight = self._weight_b(context)
        return Workload(cases, lambda config: self._runner_for(config, context.threads, weight),
                        self._tolerance(), self.differs(context.threads))

    def attributes_of(self, inputs: Sequence[object]) -> dict[str, Any]:
        """Gemm runs a B whose first dimension is not A's last transposed (see
        :meth:`_runner_for`)."""
        a, b = inputs[:2]
        plain = isinstance(self.kernel, MatMul) or np.shape(a)[1] == np.shape(b)[0]
        return {} if plain else {"transB": 1}

    def differs(self, threads: int) -> Callable[[Any, Any, Case, int], bool]:
        """By plans, and on a compiled path by the tiles it uses, which no plan shows."""
        def differs(a: Any, b: Any, case: Case, size: int) -> bool:
            plan = self.plan_of(a, threads, case, size)
            if plan != self.plan_of(b, threads, case, size):
                return True
            return any(getattr(a, tile) != getattr(b, tile) for tile in _TILES.get(plan.path, ()))
        return differs
