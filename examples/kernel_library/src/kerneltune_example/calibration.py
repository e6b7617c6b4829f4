"""Calibration callbacks: which of kerneltune's shared searches settle which parameter.

kerneltune calls a callback with a :class:`~kerneltune.calibration.CalibrationContext`
for one key and thread count; the callback runs the real kernel through the
shared searches, which measure, check outputs, apply the statistics and record
each decision with its evidence. ``workload`` gives ``profiles verify`` and the
explicit comparisons the cases to time a configuration on.
"""

from __future__ import annotations

import functools

import numpy as np

from kerneltune.calibration import (
    Case,
    Comparison,
    Crossover,
    Setting,
    Tolerance,
    Workload,
    compare_settings,
    decide_crossover,
    geometric_grid,
)

from .kernels import KERNELS

#: a grain no call reaches: the serial path whatever the size
NEVER = 1 << 62
#: the block sizes raced, around the L1 and L2 caches of common processors
BLOCKS = (1024, 4096, 16384, 65536)
PARALLEL_MINIMUM = "parallel.minimum_elements"
BLOCK = "block.elements"
SMALLEST = 1 << 12


class KernelCalibration:
    """A callback bound to one kernel and element type."""

    def __init__(self, name: str, element_type: str):
        self.name, self.element_type = name, element_type
        self.function = KERNELS[name][0]

    def run_of(self, config: object, threads: int):
        return functools.partial(self._call, config=config, threads=threads)

    def _call(self, *inputs, config, threads):
        return self.function(*inputs, config=config, threads=threads)

    def case(self, context) -> Case:
        def inputs(n: int) -> tuple:
            return (context.randn(self.element_type, n), *self.extra)

        itemsize = np.dtype("float32" if self.element_type == "FLOAT" else "float64").itemsize
        return Case(self.name, inputs, lambda n: 2 * n * itemsize, "elements per call")

    #: the further inputs of a call after the array
    extra: tuple = ()
    #: how far two configurations' outputs may differ (None: bit for bit)
    tolerance: Tolerance | None = None

    def sizes(self, context) -> list[int]:
        level = context.options.level
        return geometric_grid(SMALLEST, level.largest_elements, level.steps_per_octave)

    def grain(self, context) -> None:
        """The serial/parallel crossover, as a grain of half the first parallel size."""
        if context.threads == 1:
            context.keep(PARALLEL_MINIMUM, "kept: one thread, so no parallel path to tune")
            return
        serial = self.run_of(context.configure({PARALLEL_MINIMUM: NEVER}), context.threads)
        parallel = self.run_of(context.configure({PARALLEL_MINIMUM: 1}), context.threads)
        decide_crossover(context, Crossover(
            PARALLEL_MINIMUM, self.case(context), self.sizes(context), ("serial", serial),
            ("parallel", parallel), lambda size: max(1, size // 2),
            2 * int(context.values[PARALLEL_MINIMUM]), self.tolerance, parallel_above=True))

    def workload(self, context) -> Workload:
        sizes = geometric_grid(4 * SMALLEST, context.options.level.largest_elements, 1)[::2]
        case = self.case(context)
        return Workload([(case, size) for size in sizes],
                        lambda config: self.run_of(config, context.threads), self.tolerance)


class ScaleCalibration(KernelCalibration):
    extra = (1.5, -0.25)

    def __call__(self, context) -> None:
        self.grain(context)


class SumOfSquaresCalibration(KernelCalibration):
    #: blocks and chunks sum in another order: the same sum to rounding
    tolerance = Tolerance(rtol=1e-3, atol=0.0)

    def __call__(self, context) -> None:
        """The block size on one thread, on the largest sizes; then the grain with it."""
        sizes = [s for s in self.sizes(context) if context.fits(2 * s * 8)][-2:]
        case = self.case(context)
        settings = [Setting(f"{BLOCK}={block}", {BLOCK: block},
                            self.run_of(context.configure({BLOCK: block}), 1))
                    for block in sorted({int(context.values[BLOCK]), *BLOCKS},
                                        key=lambda b: b != context.values[BLOCK])]
        result = compare_settings(context, Comparison([(case, s) for s in sizes], settings,
                                                      self.tolerance))
        context.decide(BLOCK, result.chosen.values[BLOCK], result.reason, result.candidates)
        self.grain(context)
