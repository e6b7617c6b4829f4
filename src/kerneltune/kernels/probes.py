"""The kernel library's machine probes: how fast the machine is now, between two keys.

A calibration batch runs them around each key (:mod:`kerneltune.calibration.steadiness`)
and measures again the keys measured while the machine was slower than its
reference state.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

from ..calibration import (
    EFFORTS,
    randn_tensor,
)
from ..calibration.measure import Deadline, measure
from ..machine.detect import get_cpu_descriptor
from ..tuning.dtypes import NUMPY_DTYPES
from .base import SHARED_CACHE as SHARED_CACHE  # the aspect shared_cache_probe watches
from .calibrate import PARALLEL_MINIMUM
from .calibrate_gemm import DEFAULT_L2
from .elementwise import FLOAT, BinaryKernel, ElementwiseKernel

#: the parallel probe's call: Add on FLOAT operands of this many elements per thread (the
#: portable grain), forced parallel
PROBE_ELEMENTS_PER_THREAD = 16384


def _medians(runs: Sequence[Callable[[], object]], repetitions: int) -> list[float]:
    """Seconds per call of each of ``runs``, measured interleaved as a search at normal
    effort measures."""
    return [m.median for m in measure(runs, repetitions, EFFORTS["normal"].minimum_sample_seconds,
                                      Deadline(math.inf, "none"))]


def machine_probe(kernel: ElementwiseKernel, element_type: int = FLOAT,
                  elements_per_thread: int = PROBE_ELEMENTS_PER_THREAD,
                  repetitions: int = EFFORTS["normal"].repetitions) -> Callable[[int], float]:
    """The parallel probe: serial time / parallel time of ``kernel``, forced parallel.

    The library's probe is Add on FLOAT operands, :data:`PROBE_ELEMENTS_PER_THREAD`
    per thread: a call near the crossovers, where the parallel run's fixed costs
    still weigh, so the probe moves when they do.
    """

    def probe(threads: int) -> float:
        # made here: registration is at import
        x = randn_tensor(element_type, (elements_per_thread * threads,), 0)
        inputs = (x, x) if isinstance(kernel, BinaryKernel) else (x,)
        config = kernel.configure(element_type, {PARALLEL_MINIMUM: 1})
        prepared = kernel.prepare(element_type, config, threads)
        serial, parallel = _medians([functools.partial(prepared.run_serial, *inputs),
                                     functools.partial(prepared.run, *inputs)], repetitions)
        return serial / parallel

    return probe


def shared_cache_probe(kernel: BinaryKernel, element_type: int = FLOAT,
                       l2_bytes: int | None = None,
                       repetitions: int = EFFORTS["normal"].repetitions
                       ) -> Callable[[int], float]:
    """The shared cache's probe: calls per second of binary ``kernel``, serial, on two
    operands of twice the core's L2 (``l2_bytes``, else the processor's) each.

    Operands the core's own L2 cannot hold are read from the cache it shares
    with its neighbours, and a neighbour's traffic there slows every such
    read, on any thread count, the probe's as much as a product's that
    streams its B from there (docs/calibration.md).
    """

    @functools.cache
    def operands() -> tuple[np.ndarray, np.ndarray]:
        # made at the first probe, and kept: registration is at import, and making 4 MB
        # of random operands costs more than the probe
        l2 = l2_bytes or get_cpu_descriptor().l2_bytes or DEFAULT_L2
        elements = 2 * l2 // NUMPY_DTYPES[element_type].itemsize
        return randn_tensor(element_type, (elements,), 0), randn_tensor(element_type,
                                                                        (elements,), 1)

    def probe(threads: int) -> float:
        prepared = kernel.prepare(element_type, kernel.configure(element_type, {}), 1)
        (seconds,) = _medians([functools.partial(prepared.run_serial, *operands())],
                              repetitions)
        return 1.0 / seconds

    return probe
