"""numpy's BLAS under a thread budget: the products of the BLAS path, and what they run on.

threadpoolctl finds the library numpy is linked with once (it inspects every loaded
library); a product lowers the library's thread count around its call when that count is
higher than the caller's budget.
"""

from __future__ import annotations

import functools

import numpy as np

from ..machine.blas import blas_label, blas_of
from ..machine.blas import narrower_than as blas_narrower_than


@functools.cache
def _controller():
    """threadpoolctl's view of the BLAS numpy uses (found once: it inspects every library)."""
    from threadpoolctl import ThreadpoolController

    controllers = ThreadpoolController().select(user_api="blas").lib_controllers
    return controllers[0] if controllers else None


@functools.cache
def _product() -> None:
    """Called by every product (cached: its cache says whether one ran, see :func:`used`)."""


def used() -> bool:
    """Whether a product has run on numpy's BLAS in this process: its threads are the
    run's from then on (a check of which kernels the BLAS runs uses none)."""
    return _product.cache_info().currsize > 0


def library_threads() -> int:
    """Threads numpy's BLAS runs a product on (its own setting, read for plans only)."""
    controller = _controller()
    return max(1, controller.num_threads if controller is not None else 1)


def matmul(a, b, threads: int):
    """``numpy.matmul(a, b)`` on at most ``threads`` of the BLAS library's threads.

    The library's count is process-wide: it is lowered for the call and put back after
    (two sessions calling at once may each run with the other's count: a matter of speed,
    never of results, which do not depend on BLAS's thread count here).
    """
    _product()
    controller = _controller()
    if controller is None:
        return np.matmul(a, b)
    before = controller.get_num_threads()
    if before is None or before <= threads:
        return np.matmul(a, b)
    controller.set_num_threads(threads)
    try:
        return np.matmul(a, b)
    finally:
        controller.set_num_threads(before)


@functools.cache
def narrower_than(variant: str) -> str | None:
    """numpy's BLAS (:func:`~kerneltune.machine.blas.blas_label`) where it runs kernels for
    fewer instructions than ISA variant ``variant``'s defaults assume, else None."""
    controller = _controller()
    if controller is None:
        return None
    (record,) = blas_of([controller.info()])
    return blas_label(record) if blas_narrower_than(record, variant) else None
