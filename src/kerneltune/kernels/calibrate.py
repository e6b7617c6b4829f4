"""The calibration functions of the kernel library: which searches settle which parameter.

The core's searches (:mod:`kerneltune.calibration.search`) are generic; this
module says, per kernel, which configured instances of the real kernel they
compare, on which cases, and how a measured crossover becomes a parameter
value. Elementwise kernels share one function (the case groups differ between
unary and binary); Gemm and MatMul share another (:mod:`.calibrate_gemm`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._support.aligned import aligned
from ..calibration import (
    CalibrationContext,
    Case,
    Crossover,
    Decision,
    Workload,
    decide_crossover,
    decide_shared_crossover,
    geometric_grid,
    search_threads,
    thread_counts,
)
from ..tuning.dtypes import FLOATING, NUMPY_DTYPES
from ..tuning.schema import element_type_number
from .base import CHUNK_ALIGNMENT, Kernel, Plan, PreparedKernel
from .elementwise import BinaryKernel, ElementwiseKernel
from .rows import ARG, KINDS, NORMALIZE, REDUCE

#: a value no size reaches, which forces the other side of a threshold
NEVER = 1 << 62
#: elementwise sizes start here: below it a call is mostly Python overhead
SMALLEST_ELEMENTS = 1 << 10
#: columns of the multidirectional broadcast case (rows of shape (R, 1) against (1, C))
BROADCAST_COLUMNS = 256
#: operators whose float inputs must be positive to stay in the domain the timing is about
POSITIVE_INPUTS = frozenset({"Log", "Sqrt", "Pow"})
#: How far apart, in octaves of size, two calibrations measure the serial/parallel
#: crossover of an elementwise loop (the crossover's ``resolution``): it moves with the
#: machine's parallel speed, and a band of one octave left many decisions on its edge
#: (docs/calibration.md, The resolution rule).
GRAIN_RESOLUTION_OCTAVES = 2.0
PARALLEL_MINIMUM = "parallel.minimum_elements"
MAXIMUM_THREADS = "parallel.maximum_threads"
BROADCAST_MINIMUM = "parallel.broadcast_minimum_elements"
CONVERSION_MINIMUM = "conversion.parallel_minimum_elements"
COMPILED_MINIMUM = "algorithm.compiled_minimum_elements"
#: elements of a row of an operator along axes (RowsCalibration)
ROW_ELEMENTS = 256
#: columns of ArgMax's and ArgMin's numpy/compiled case: a classifier's scores, whose few
#: columns a row are where numpy's call wins
SCORES = 4
#: the numpy/compiled search grid's ends (elements per call)
NUMPY_SIZES = (64, 1 << 16)
FLOAT = element_type_number("FLOAT")
#: Cast's calibration target per source type where it is not FLOAT
CAST_TARGETS = {FLOAT: element_type_number("INT64")}
#: what the sizes of every elementwise case count (a report's axis label)
ELEMENTS = "elements per call"


def grain_of(size: int) -> int:
    """The per-thread grain that makes a call of ``size`` elements the first to use two threads."""
    return max(CHUNK_ALIGNMENT, size // 2 // CHUNK_ALIGNMENT * CHUNK_ALIGNMENT)


class KernelCalibration:
    """A calibration function bound to one kernel and element type."""

    def __init__(self, kernel: Kernel, element_type: int):
        self.kernel, self.element_type = kernel, element_type

    def fixed_attributes(self) -> dict[str, Any]:
        """The node attributes every run of the calibration takes (none: plain calls)."""
        return {}

    def prepared_of(self, config: Any, threads: int, **attributes: Any) -> PreparedKernel:
        """The real kernel, prepared with ``config`` for ``threads``."""
        return self.kernel.prepare(self.element_type, config, threads,
                                   **self.fixed_attributes(), **attributes)

    def run_of(self, config: Any, threads: int, **attributes: Any) -> Callable[..., np.ndarray]:
        """The real kernel's ``run``, prepared with ``config`` for ``threads``."""
        return self.prepared_of(config, threads, **attributes).run

    def attributes_of(self, inputs: Sequence[object]) -> dict[str, Any]:
        """The node attributes a case's inputs are run with (none: plain calls)."""
        return {}

    def plan_of(self, config: Any, threads: int, case: Case, size: int) -> Plan:
        """How the real kernel runs ``case`` at ``size`` with ``config``."""
        inputs = case.inputs(size)
        return self.prepared_of(config, threads, **self.attributes_of(inputs)).plan(*inputs)

    def differs(self, threads: int) -> Callable[[Any, Any, Case, int], bool]:
        """Whether two configs run a case differently (a workload's ``differs``): by their
        plans, the path and threads their thresholds choose."""
        def differs(a: Any, b: Any, case: Case, size: int) -> bool:
            return self.plan_of(a, threads, case, size) != self.plan_of(b, threads, case, size)
        return differs


# --- elementwise -------------------------------------------------------------------------------


class ElementwiseCalibration(KernelCalibration):
    """Thread cap first (at large sizes), then each grain's serial/parallel crossover.

    A 16-bit float's conversion grain follows its computation grain (see
    :meth:`_pure_modes`).
    """

    kernel: ElementwiseKernel

    def _dtype(self) -> np.dtype:
        return NUMPY_DTYPES[self.element_type]

    def _operand(self, context: CalibrationContext, shape, salt: int) -> np.ndarray:
        x = context.randn(self.element_type, shape, salt)
        # results of numpy's arithmetic are placed again, as randn_tensor places its own
        if self.kernel.name in POSITIVE_INPUTS and self.element_type in FLOATING:
            return aligned(np.abs(x) + np.asarray(0.5, x.dtype))
        if self.kernel.name == "Pow" and salt == 1:
            return aligned(x & np.asarray(7, x.dtype))  # integer exponents of a typical size
        return x

    def _output_itemsize(self) -> int:
        return self.kernel.output_dtype(self.element_type).itemsize

    def _unary(self, context: CalibrationContext, n: int) -> tuple:
        """The one input of a unary case of ``n`` elements."""
        return (self._operand(context, n, 0),)

    def cases(self, context: CalibrationContext) -> dict[str, Case]:
        """The case groups: unary; binary equal-shape, scalar and multidirectional broadcast."""
        item, out = self._dtype().itemsize, self._output_itemsize()
        if not isinstance(self.kernel, BinaryKernel):
            return {"unary": Case("unary", lambda n: self._unary(context, n),
                                  lambda n: n * (item + out), ELEMENTS)}

        def broadcast(n: int) -> tuple:
            rows = max(1, n // BROADCAST_COLUMNS)
            return (self._operand(context, (rows, 1), 0),
                    self._operand(context, (1, BROADCAST_COLUMNS), 1))

        return {
            "equal": Case("equal", lambda n: (self._operand(context, n, 0),
                                              self._operand(context, n, 1)),
                          lambda n: n * (2 * item + out), ELEMENTS),
            "scalar": Case("scalar", lambda n: (self._operand(context, n, 0),
                                                self._operand(context, (), 1)),
                           lambda n: n * (item + out), ELEMENTS),
            "broadcast": Case("broadcast", broadcast, lambda n: n * (item + out),
                              f"{ELEMENTS} (N/{BROADCAST_COLUMNS} x 1 by 1 x "
                              f"{BROADCAST_COLUMNS})"),
        }

    def sizes(self, context: CalibrationContext, steps_per_octave: int | None = None
              ) -> list[int]:
        """The search grid; ``steps_per_octave`` (default: the effort's) lets a benchmark
        judge the values found against a finer grid."""
        level = context.options.level
        return geometric_grid(SMALLEST_ELEMENTS, level.largest_elements,
                              steps_per_octave or level.steps_per_octave, 2 * CHUNK_ALIGNMENT)

    def __call__(self, context: CalibrationContext) -> None:
        parameters = context.schema.parameters
        if context.threads == 1:
            for name in (CONVERSION_MINIMUM, MAXIMUM_THREADS, PARALLEL_MINIMUM,
                         BROADCAST_MINIMUM):
                if name in parameters:
                    context.keep(name, "kept: one thread, so no parallel path to tune")
            return
        cases, sizes = self.cases(context), self.sizes(context)
        # a cap of 1 in use is raced like any other: a calibration on a busy machine may
        # have chosen it, and the grains would never be measured again
        self._maximum_threads(context, next(iter(cases.values())), sizes)
        if context.values[MAXIMUM_THREADS] == 1:
            for name in (CONVERSION_MINIMUM, PARALLEL_MINIMUM, BROADCAST_MINIMUM):
                if name in parameters:
                    context.keep(name, "kept: parallel.maximum_threads is 1, so calls run "
                                       "serially")
            return
        groups = [case for name, case in cases.items() if name != "broadcast"]
        grain = self._grain(context, PARALLEL_MINIMUM, groups, sizes, self._pure_modes(context))
        if CONVERSION_MINIMUM in parameters:
            self._conversion(context, grain)
        if BROADCAST_MINIMUM in parameters:
            self._grain(context, BROADCAST_MINIMUM, [cases["broadcast"]], sizes, ({}, {}))

    def _pure_modes(self, context: CalibrationContext) -> tuple[dict, dict]:
        """A 16-bit float's conversions switch with its computation while its first grain is
        measured.

        A call that widens on two threads, computes on one and narrows on two
        can lose to both pure modes (the workers fall asleep and wake per
        phase), so the first crossover is measured between the pure modes and
        the conversion grain follows it; later searches keep it fixed.
        """
        if CONVERSION_MINIMUM not in context.schema.parameters:
            return {}, {}
        return {CONVERSION_MINIMUM: NEVER}, {CONVERSION_MINIMUM: 1}

    def _conversion(self, context: CalibrationContext, grain: Decision) -> None:
        """The conversion grain takes the computation grain's value whenever that was measured.

        A kept grain counts too (the crossover fell within an octave of it):
        following only a moved grain would leave the conversions at their own
        default beside a grain measured with them, and two runs a grid step
        apart would differ by far more in the conversion grain.
        """
        if grain.measured is None:
            context.keep(CONVERSION_MINIMUM, "kept: parallel.minimum_elements was not measured")
            return
        context.decide(CONVERSION_MINIMUM, grain.value,
                       "follows parallel.minimum_elements, measured with the conversions "
                       "switching to parallel with the computation",
                       fewer_threads=grain.fewer_threads)

    def _maximum_threads(self, context: CalibrationContext, case: Case, sizes: list[int]) -> None:
        """The thread counts of the matrix race the value in use, which may lie between them
        (3 of 4 threads, from a profile)."""
        in_use = int(context.values[MAXIMUM_THREADS])
        counts = {*thread_counts(context.threads), min(in_use, context.threads)}
        runs = {count: self.run_of(context.configure({
            PARALLEL_MINIMUM: 1, MAXIMUM_THREADS: count, **self._pure_modes(context)[1]}),
            context.threads) for count in sorted(counts)}
        search_threads(context, MAXIMUM_THREADS, case, sizes, runs, in_use)

    def _grain(self, context: CalibrationContext, parameter: str, groups: Sequence[Case],
               sizes: list[int], modes: tuple[dict, dict]) -> Decision:
        """One grain from every case group that uses it (see :func:`decide_shared_crossover`).

        ``modes`` holds what else the serial and the parallel instance set
        (see :meth:`_pure_modes`).
        """
        serial_values, parallel_values = modes
        serial = self.run_of(context.configure({parameter: NEVER, **serial_values}), 2)
        parallel = self.run_of(context.configure({parameter: 1, **parallel_values}), 2)
        return decide_shared_crossover(context, [
            Crossover(parameter, case, sizes, ("serial", serial), ("parallel", parallel),
                      grain_of, 2 * int(context.values[parameter]),
                      resolution=GRAIN_RESOLUTION_OCTAVES, parallel_above=True)
            for case in groups])

    def workload(self, context: CalibrationContext) -> Workload:
        """Every case group at sizes four times apart, from 4096 elements to the largest."""
        sizes = geometric_grid(4 * SMALLEST_ELEMENTS, context.options.level.largest_elements, 1,
                               2 * CHUNK_ALIGNMENT)[::2]
        cases = [(case, size) for case in self.cases(context).values() for size in sizes]
        return Workload(cases, lambda config: self.run_of(config, context.threads),
                        differs=self.differs(context.threads))


class CastCalibration(ElementwiseCalibration):
    """Cast's grains, measured on a conversion to FLOAT (from FLOAT: to INT64), the targets
    converters write most."""

    def fixed_attributes(self) -> dict[str, Any]:
        return {"to": CAST_TARGETS.get(self.element_type, FLOAT)}

    def _output_itemsize(self) -> int:
        return NUMPY_DTYPES[self.fixed_attributes()["to"]].itemsize


class RowsCalibration(ElementwiseCalibration):
    """An operator along axes: its grain on rows of ``ROW_ELEMENTS`` elements (a layer's
    width), along the last axis."""

    def fixed_attributes(self) -> dict[str, Any]:
        kind = KINDS[self.kernel.name]
        return {ARG: {"axis": -1, "keepdims": 0}, REDUCE: {"axes": (-1,), "keepdims": 0},
                NORMALIZE: {"norm": "L2"}}.get(kind, {})

    def _unary(self, context: CalibrationContext, n: int) -> tuple:
        rows = max(1, n // ROW_ELEMENTS)
        return (self._operand(context, (rows, ROW_ELEMENTS), 0),)

    def __call__(self, context: CalibrationContext) -> None:
        super().__call__(context)
        if COMPILED_MINIMUM in context.schema.parameters:
            self._compiled_minimum(context)

    def _compiled_minimum(self, context: CalibrationContext) -> None:
        """ArgMax's and ArgMin's crossover from numpy to the compiled kernel, on rows of
        ``SCORES`` scores, at the calibration's thread count and grain."""
        item = self._dtype().itemsize
        case = Case("scores", lambda n: (self._operand(context, (max(1, n // SCORES), SCORES),
                                                       0),),
                    lambda n: n * item + n // SCORES * 8, f"{ELEMENTS} (N/{SCORES} x {SCORES})")
        sizes = geometric_grid(*NUMPY_SIZES, context.options.level.steps_per_octave, SCORES)
        numpy = self.run_of(context.configure({COMPILED_MINIMUM: NEVER}), context.threads)
        compiled = self.run_of(context.configure({COMPILED_MINIMUM: 0}), context.threads)
        decide_crossover(context, Crossover(COMPILED_MINIMUM, case, sizes, ("numpy", numpy),
                                            ("compiled", compiled), lambda size: size,
                                            int(context.values[COMPILED_MINIMUM])))


class LayerNormalizationCalibration(RowsCalibration):
    """LayerNormalization's grain on rows of ``ROW_ELEMENTS`` elements, with a scale and a
    bias."""

    def fixed_attributes(self) -> dict[str, Any]:
        return {}

    def _unary(self, context: CalibrationContext, n: int) -> tuple:
        return (*super()._unary(context, n), self._operand(context, ROW_ELEMENTS, 1),
                self._operand(context, ROW_ELEMENTS, 2))


class ClipCalibration(ElementwiseCalibration):
    """Clip's grain between the bounds 0 and 1, which cut some of every type's inputs."""

    def _unary(self, context: CalibrationContext, n: int) -> tuple:
        dtype = self._dtype()
        return (*super()._unary(context, n), np.zeros((), dtype), np.ones((), dtype))
