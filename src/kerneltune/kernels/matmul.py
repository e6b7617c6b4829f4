"""MatMul: ``numpy.matmul`` on the Gemm machinery, config and paths (:mod:`.gemm`).

MatMul follows ``numpy.matmul``: 1-D operands are promoted (and the added dimension
removed), batch dimensions broadcast. A batch of A against a single matrix B is one product
of ``batch * M`` rows. Otherwise all products of a batch have one shape, hence one path:
BLAS products go to one ``numpy.matmul`` over the whole batch; compiled products run one
after the other, each parallel over its own task grid (a batch of products too small for
threads runs serially).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import blas, half, outputs
from .base import Plan, PreparedKernel, operand
from .gemm import (
    BLAS,
    SESSION_ATTRIBUTES,
    Gemm,
    PreparedGemm,
    relu_attribute,
    session_attributes,
)
from .gemm_run import fast_run
from .half_gemm import PreparedHalfGemm


class MatMul(Gemm):
    """ONNX MatMul: ``numpy.matmul`` semantics on the Gemm machinery and config.

    ``bias=1`` prepares the MatMul of two matrices followed by the Add of a bias (Gemm's
    C, ``beta`` 1), which a session fuses (:mod:`kerneltune.runtime.fusion`), and with
    ``activation="Relu"`` followed by a Relu too; with ``batch=1`` too, A may have batch
    dimensions, whose rows are those of one product (a sequence through a Linear layer).
    ``pool`` and ``portable_defaults`` as Gemm's.
    """

    name = "MatMul"

    def _prepare(self, element_type, config, threads, attributes) -> PreparedKernel:
        session = session_attributes(attributes)
        attributes = {name: value for name, value in attributes.items()
                      if name not in SESSION_ATTRIBUTES}
        if (attributes.get("bias") == 1 and attributes.get("batch", 1) == 1
                and set(attributes) <= {"bias", "activation", "batch"}
                and element_type not in half.FORMATS):
            # MatMul then Add of a bias, fused (runtime.fusion): Gemm's C
            relu = relu_attribute(attributes.get("activation"), element_type)
            gemm = self._bind(element_type, config, threads, 1.0, 1.0, False, False, relu,
                              *session)
            return PreparedMatMul(gemm) if "batch" in attributes else gemm
        if attributes:
            raise TypeError(f"MatMul takes no attributes but bias=1, batch=1 and "
                            f"activation='Relu' (FLOAT and DOUBLE), pool and portable_defaults, "
                            f"got {attributes}")
        gemm = self._bind(element_type, config, threads, 1.0, 0.0, False, False, False,
                          *session)
        if element_type in half.FORMATS:
            return PreparedHalfGemm(PreparedMatMul(gemm.inner), gemm.format,
                                    gemm.conversion_minimum)
        return PreparedMatMul(gemm)


class PreparedMatMul(PreparedKernel):
    """``numpy.matmul`` over a prepared Gemm with alpha 1: without a bias, or with a fused
    one (C, ``beta`` 1) over a batch of A against one matrix B."""

    uses_blas = True

    def __init__(self, gemm: PreparedGemm):
        self.gemm = gemm
        self.key, self.config, self.threads = gemm.key, gemm.config, gemm.threads
        self.dtype = gemm.dtype
        # two matrices are a Gemm product: the same compiled entry, with MatMul's checks
        self._run = _rows_run(fast_run(gemm, self._checked))

    def _checked(self, a, b, c):
        return self._call(a, b, False, c)

    def _layout(self, a_shape: tuple, b_shape: tuple):
        """The batch shape and (M, K, N) of numpy.matmul on operands of these shapes."""
        if not a_shape or not b_shape:
            raise ValueError(f"MatMul: operands must have at least 1 dimension, got A of shape "
                             f"{a_shape} and B of shape {b_shape}")
        m, k = (1, a_shape[0]) if len(a_shape) == 1 else a_shape[-2:]
        kb, n = (b_shape[0], 1) if len(b_shape) == 1 else b_shape[-2:]
        if k != kb:
            raise ValueError(f"MatMul: A of shape {a_shape} and B of shape {b_shape}: the last "
                             f"dimension of A ({k}) differs from the "
                             f"{'only' if len(b_shape) == 1 else 'second-to-last'} one of B "
                             f"({kb})")
        try:
            batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
        except ValueError:
            raise ValueError(f"MatMul: the batch dimensions of A {a_shape[:-2]} and B "
                             f"{b_shape[:-2]} do not broadcast") from None
        return batch, m, k, n

    def plan(self, a, b, c=None) -> Plan:
        """The plan of a run of these operands (of the bound run where ``b`` is the constant
        B bound to panels, as :meth:`PreparedGemm.plan`)."""
        a_shape, b_shape = np.shape(a), np.shape(b)
        batch, m, k, n = self._layout(a_shape, b_shape)
        count = int(np.prod(batch, dtype=np.int64))
        gemm = self.gemm
        if batch and len(b_shape) <= 2:  # one product of count * M rows
            rows = count * m
            step = gemm.plan_product(rows, k, n, on_panels=gemm.on_panels(rows, b))
            return Plan(step.path, step.threads, count * m * n, f"batch {count} as rows")
        step = gemm.plan_product(m, k, n, on_panels=gemm.on_panels(m, b))
        return Plan(step.path, step.threads, count * m * n, f"batch {count}" if batch else "NN")

    def run(self, a, b, c=None) -> np.ndarray:
        return self._run(a, b, c)

    def for_constant(self, index: int, value) -> Callable | None:
        """``run`` for a matrix B that is always ``value``, as :meth:`PreparedGemm.for_constant`."""
        run = self.gemm.constant_run(index, value, self._checked)
        return None if run is None else _rows_run(run)

    def run_serial(self, a, b, c=None) -> np.ndarray:
        return self._call(a, b, True, c)

    def _call(self, a, b, serial: bool, c=None) -> np.ndarray:
        a = operand(a, self.dtype, "A")
        b = operand(b, self.dtype, "B")
        batch, m, k, n = self._layout(a.shape, b.shape)
        if c is not None:  # a fused bias: A's rows against one matrix B, as Gemm checks them
            if b.ndim != 2:
                raise ValueError(f"MatMul with a bias: B must be a matrix, got shape {b.shape}")
            out = self.gemm.run_checked(a.reshape(-1, k), b, c, serial)
            return out.reshape(a.shape[:-1] + (n,))
        # A batch of A against one matrix B is a single product of count * M rows (A is
        # C-contiguous): more tasks, one call. Each element is the same sum either way.
        rows = int(np.prod(batch, dtype=np.int64)) * m if batch and b.ndim <= 2 else m
        gemm = self.gemm
        path, threads = gemm.decide(rows, k, n, serial)
        if path == BLAS:
            # two vectors: a numpy scalar
            return np.asarray(blas.matmul(a, b, gemm.blas_threads(rows)))
        a2 = a.reshape(1, k) if a.ndim == 1 else a
        b2 = b.reshape(k, 1) if b.ndim == 1 else b
        out = outputs.empty(batch + (m, n), self.dtype)
        if out.size:
            if not k:
                out[...] = 0
            elif rows != m or not batch:
                gemm.run_compiled(a2.reshape(rows, k), b2, gemm.no_bias, out.reshape(rows, n),
                                   path, threads)
            else:
                for index in np.ndindex(batch):
                    gemm.run_compiled(a2[_batch_index(index, a2.shape)],
                                       b2[_batch_index(index, b2.shape)], gemm.no_bias,
                                       out[index], path, threads)
        if a.ndim == 1:
            out = out[..., 0, :]
        if b.ndim == 1:
            out = out[..., 0]
        return out


def _rows_run(fast):
    """:meth:`PreparedMatMul.run` over ``fast``, a :func:`fast_run` of its Gemm.

    A batch of A against one matrix B (a sequence through a layer, as exporters write it)
    is one product of all of A's rows: through the compiled call of two matrices, not the
    checked route, which cost a one-row product over half as much again.
    """

    def run(a, b, c=None):
        try:
            if a.ndim > 2 and b.ndim == 2 and a.shape[-1] == b.shape[0]:
                out = fast(a.reshape(-1, a.shape[-1]), b, c)
                return out.reshape(a.shape[:-1] + out.shape[-1:])
        except AttributeError:
            pass  # not arrays: the checked route says what is wrong
        return fast(a, b, c)

    return run


def _batch_index(index: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """The matrix of an operand of ``shape`` at ``index`` of the broadcast batch.

    The operand's batch dimensions are the last ones of ``index``; where it has size 1 it
    broadcasts, so index 0 serves every position.
    """
    batch = shape[:-2]
    tail = index[len(index) - len(batch):]
    return tuple(i if d != 1 else 0 for i, d in zip(tail, batch, strict=True))
