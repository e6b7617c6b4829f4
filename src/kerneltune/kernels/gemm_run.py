"""A prepared Gemm's run as a closure: the Python around every product call.

Small products cost mostly the Python around the compiled call, so :func:`fast_run` reads
the prepared kernel's state once and keeps the common call to one compiled entry; the
kernel itself (:mod:`.gemm`) decides, computes and checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import outputs
from .gemm_pythran import BLAS_PATH, STRIP_ROWS

if TYPE_CHECKING:
    from .gemm import PreparedGemm
    from .panels import Panels
    from .strips import Strips


def fast_run(p: PreparedGemm, checked, strips: Strips | None = None,
             panels: Panels | None = None):
    """:meth:`PreparedGemm.run` as a closure: one compiled call for the common case.

    Arrays of the element type (C of at most 2 dimensions and used, or absent) go straight
    to the compiled ``gemm``, which refuses other layouts with a TypeError, checks the
    shapes and says which products are the BLAS path's; those go straight to BLAS. Empty
    or mismatched products, and everything else, take ``checked(a, b, c)``, whose errors
    name the operand. Through ``checked``, the BLAS path cost as much Python a call as BLAS
    takes for a small product, enough to hide a faster BLAS from calibration. A large
    output comes from the output pool (:mod:`.outputs`): made in compiled code, its pages
    were mapped and faulted afresh at every run. Its product runs through the path's own
    export, the path decided here: inlined into a compiled entry that decided and computed, gcc
    compiled the panel path's loop up to twice as slow (docs/kernels.md, The panel path),
    and beside such a product the Python of the decision costs little. With ``strips``,
    a product of B ``strips.b`` and at most ``STRIP_ROWS`` rows goes to its entry first,
    which runs it on B's strips where it takes the skinny path. With ``panels``, a product
    of B ``panels.b`` and more rows than the skinny path takes is decided here, against
    BLAS at ``algorithm.packed_blas_minimum_fmas``, and runs on B's panels where it takes
    the packed path.
    """
    dtype, compiled, decide = p.dtype, p._gemm, p._decide_compiled
    one_thread, one_thread_below = p._gemm_one_thread, p._one_thread_below
    no_bias, alpha, beta = p.no_bias, p._alpha, p._beta
    thresholds, packed_thresholds = p._thresholds, p._packed_thresholds
    use_bias, trans_a, trans_b = p._use_bias, p.trans_a, p.trans_b
    empty, pooled_from = outputs.empty, outputs.recycled_from(dtype)
    tile_m, tile_n, skinny_rows = p.config.tile_m, p.config.tile_n, p.config.skinny_m_limit
    constant = (strips or panels).b if strips or panels else None
    run_decided = p.run_decided
    # the products whose grid may have enough tasks for the workers skip the compiled entry
    # (a product below ``one_thread_below`` runs on one thread, never on the workers)
    no_workers, worker_tasks = p._workers is None, p.worker_tasks

    def run(a, b, c=None):
        try:
            if a.dtype is dtype and b.dtype is dtype and (
                    c is None or use_bias and c.dtype is dtype):
                if c is None:
                    bias = no_bias
                elif c.ndim == 2:
                    bias = c
                else:  # a model's bias is mostly [N]: the compiled entry takes it as [1, N]
                    bias = c.reshape((1,) * (2 - c.ndim) + c.shape)
                a_shape, b_shape = a.shape, b.shape
                rows = a_shape[-1] if trans_a else a_shape[0]
                columns = b_shape[0] if trans_b else b_shape[-1]
                depth = a_shape[0] if trans_a else a_shape[-1]
                single = rows * columns * depth < one_thread_below
                out = (strips.run(a, bias, single)
                       if b is constant and strips and rows <= STRIP_ROWS else None)
                on_panels = b is constant and panels is not None and rows > skinny_rows
                if out is None and not on_panels and rows * columns < pooled_from and (
                        single or no_workers or (
                            (rows + tile_m - 1) // tile_m * ((columns + tile_n - 1) // tile_n)
                            < worker_tasks)):
                    out = (one_thread if single else compiled)(a, b, bias, alpha, beta,
                                                              thresholds)
                if out is not None:
                    if out.size:
                        return out
                    blas = out.shape[1] != 0
                else:
                    blas = False
                    if (a.ndim == 2 and b.ndim == 2 and depth and _fits(bias, rows, columns)
                            and (b_shape[1] if trans_b else b_shape[0]) == depth):
                        code, threads = decide(rows, depth, columns, False,
                                               packed_thresholds if on_panels else thresholds)
                        blas = code == BLAS_PATH
                        if not blas:
                            out = empty((rows, columns), dtype)
                            run_decided(a, b, bias, out, code, threads,
                                        panels if on_panels else None)
                            return out
                # BLAS's product; numpy.matmul keeps a subclass (np.matrix), the checked
                # run does not
                if blas and type(a) is np.ndarray and type(b) is np.ndarray:
                    if p.blas_unchecked and p.check_blas():
                        return run(a, b, c)  # the thresholds took the compiled paths
                    return p._blas(a, b, bias)
        except (AttributeError, TypeError, IndexError):
            pass  # not arrays, or not ones the compiled code takes: the checked run says which
        return checked(a, b, c)

    return run


def _fits(bias: np.ndarray, rows: int, columns: int) -> bool:
    """Whether C is absent (0 x 0) or 2-D and broadcasts to the output, as gemm's entry
    checks; any other C takes the checked run, which names the problem."""
    if bias.ndim != 2:
        return False
    c_rows, c_columns = bias.shape
    return (c_rows == c_columns == 0) or (c_rows in (1, rows) and c_columns in (1, columns))
