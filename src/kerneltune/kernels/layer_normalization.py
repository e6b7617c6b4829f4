"""LayerNormalization: each row of the axes from ``axis`` on, less its mean, over its
standard deviation (``epsilon`` added to the variance), times a scale plus a bias.

The compiled function (``rows_pythran.layer_norm``) works along the rows of a C-contiguous
matrix. The axes a node normalises are its input's last ones, so that matrix is the input
itself, reshaped; Scale and B broadcast to those axes. The threads take contiguous runs of
rows with the grain and thread cap of the other row kernels (:mod:`.rows`), so a row is
computed the same way whatever the thread count.

A node that names its Mean and InvStdDev outputs (a training graph's) is prepared with
``statistics``: its calls return the three as a tuple, the statistics of each row in
float32 (``stash_type`` 1, the only one onnxruntime computes in).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..tuning.dtypes import NUMPY_DTYPES
from . import outputs
from .base import GrainedKernel, Plan, PreparedKernel, chunked_threads, operand
from .rows import RowsKernel, normal_axes

#: the node attributes, with ONNX's defaults
NODE_ATTRIBUTES: Mapping[str, Any] = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}
#: the attributes a kernel takes: the node's, and ``statistics`` (its three outputs)
ATTRIBUTES: Mapping[str, Any] = {**NODE_ATTRIBUTES, "statistics": False}
#: ``stash_type``: ONNX's FLOAT, the type of the statistics
STASH_FLOAT = 1


class PreparedLayerNormalization(GrainedKernel):
    """LayerNormalization with its grain, thread limit and attributes bound."""

    def __init__(self, key, config, threads, function: Callable, dtype: np.dtype,
                 attributes: Mapping[str, Any]):
        self.key, self.config, self.threads = key, config, threads
        self._function, self._dtype, self.out_dtype = function, dtype, dtype
        self._axis, self._epsilon = int(attributes["axis"]), float(attributes["epsilon"])
        self._statistics = bool(attributes["statistics"])
        self._grain = config.minimum_elements
        self.thread_limit = min(config.maximum_threads, threads)
        #: the zero bias of a node without B, per row length
        self._zeros: dict[int, np.ndarray] = {}
        self.run = _fast_run(self)

    def _split(self, shape: tuple[int, ...]) -> int:
        """The first normalised axis of an input of ``shape``."""
        (axis,) = normal_axes([self._axis], len(shape), "LayerNormalization")
        return axis

    def plan(self, x, scale=None, bias=None) -> Plan:
        shape = np.shape(x)
        rows = math.prod(shape[:self._split(shape)])
        size = math.prod(shape)
        threads = chunked_threads(rows, self._threads(size), alignment=1)
        return Plan("parallel" if threads > 1 else "serial", threads, size, "rows")

    def run(self, x, scale, bias=None):
        """Y, or (Y, Mean, InvStdDev) when prepared with ``statistics``.

        Every instance replaces this method by the equivalent closure :func:`_fast_run`
        builds.
        """
        return self._call(x, scale, bias, None)

    def run_serial(self, x, scale, bias=None):
        return self._call(x, scale, bias, 1)

    def _row(self, value, normalised: tuple[int, ...], name: str) -> np.ndarray:
        """Scale or B as one row of the normalised axes' length."""
        value = operand(value, self._dtype, name)
        if value.shape == normalised:
            return value.reshape(-1)
        try:
            return np.ascontiguousarray(np.broadcast_to(value, normalised)).reshape(-1)
        except ValueError:
            raise ValueError(f"LayerNormalization: {name} of shape {list(value.shape)} does not "
                             f"broadcast to the normalised shape {list(normalised)}") from None

    def _zero_bias(self, n: int) -> np.ndarray:
        bias = self._zeros.get(n)
        if bias is None:
            bias = self._zeros[n] = np.zeros(n, self._dtype)
        return bias

    def _call(self, x, scale, bias, threads: int | None):
        x = operand(x, self._dtype, "X")
        axis = self._split(x.shape)
        normalised = x.shape[axis:]
        rows, n = math.prod(x.shape[:axis]), math.prod(normalised)
        scale = self._row(scale, normalised, "Scale")
        bias = self._zero_bias(n) if bias is None else self._row(bias, normalised, "B")
        out = outputs.empty(x.shape, self._dtype, like=x)
        mean, inv_std = np.empty(rows, self._dtype), np.empty(rows, self._dtype)
        if rows and n:
            self._function(x.reshape(rows, n), out.reshape(rows, n), scale, bias, mean, inv_std,
                           self._epsilon, self._threads(x.size) if threads is None else threads)
        elif rows:  # no element to normalise: a mean of nothing
            mean[:], inv_std[:] = np.nan, np.nan
        if not self._statistics:
            return out
        kept = x.shape[:axis] + (1,) * len(normalised)
        stash = NUMPY_DTYPES[STASH_FLOAT]
        return out, mean.astype(stash).reshape(kept), inv_std.astype(stash).reshape(kept)


def _fast_run(p: PreparedLayerNormalization):
    """``run`` for the common call: Y of a C-contiguous input of the element type, not
    empty, normalised along its last axis alone by a Scale and B (or none) of that axis's
    length, the output not recycled. A small call costs mostly the Python around it
    (docs/kernels.md, "Small-call overhead"); this one goes straight to the compiled
    function. Anything else takes ``_call``."""
    function, dtype, epsilon, threads = p._function, p._dtype, p._epsilon, p._threads
    ndarray, empty, zero_bias = np.ndarray, np.empty, p._zero_bias
    serial_below, recycled_from = 2 * p._grain, outputs.recycled_from(dtype)
    # the last axis: -1, or 1 of a matrix
    axis = p._axis if not p._statistics and p._axis in (-1, 1) else None

    def run(x, scale, bias=None):
        if (axis is not None and type(x) is ndarray and type(scale) is ndarray
                and x.dtype is dtype and scale.dtype is dtype and 0 < x.size < recycled_from
                and x.flags.c_contiguous):
            shape = x.shape
            n = shape[-1]
            if (axis == -1 or len(shape) == 2) and scale.shape == (n,) and (
                    bias is None or type(bias) is ndarray and bias.dtype is dtype
                    and bias.shape == (n,)):
                rows = x.size // n
                out = empty(shape, dtype)
                matrix = x if len(shape) == 2 else x.reshape(rows, n)
                function(matrix, out if matrix is x else out.reshape(rows, n), scale,
                         zero_bias(n) if bias is None else bias, empty(rows, dtype),
                         empty(rows, dtype), epsilon,
                         1 if x.size < serial_below else threads(x.size))
                return out
        return p._call(x, scale, bias, None)

    return run


class LayerNormalization(RowsKernel):
    """LayerNormalization over its compiled function per element type (FLOAT, DOUBLE; FLOAT16
    and BFLOAT16 widened to FLOAT: X, Scale and B, Y rounded once, the statistics float32)."""

    def __init__(self, implementation: str, functions: Mapping[int, Callable],
                 grains: Mapping[int, int] | None = None):
        super().__init__("LayerNormalization", implementation, functions, grains)

    def output_dtype(self, element_type: int) -> np.dtype:
        return NUMPY_DTYPES[element_type]

    def _prepare(self, element_type, config, threads, attributes) -> PreparedKernel:
        unknown = sorted(set(attributes) - set(ATTRIBUTES))
        if unknown:
            raise TypeError(f"LayerNormalization takes no attribute {unknown[0]}")
        given = {**ATTRIBUTES, **attributes}
        if given["stash_type"] != STASH_FLOAT:
            raise ValueError(f"LayerNormalization: stash_type {given['stash_type']} is not "
                             f"supported; the statistics are computed in FLOAT "
                             f"(stash_type {STASH_FLOAT}), as onnxruntime computes them")
        computed = self._computed(element_type)
        return self._widening(element_type, config, PreparedLayerNormalization(
            self.tuning_key(element_type), config, threads, self._functions[computed],
            NUMPY_DTYPES[computed], given))
