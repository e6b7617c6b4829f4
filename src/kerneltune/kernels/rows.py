"""Kernels that work along axes: Softmax, LogSoftmax, ArgMax, ArgMin, the reductions, the
ai.onnx.ml Normalizer, and the normalisation of a classifier's probabilities that skl2onnx
writes in eight nodes, which a session runs as one (ProbabilityNormalization,
:mod:`kerneltune.runtime.fusion`).

The compiled functions (``rows_pythran``) work along each row of a C-contiguous matrix.
A prepared kernel moves the axes its node works along to the end (a copy only when they
are not there already, which converters rarely write), runs the function over the rows
and gives the result the node's shape. The thread count follows the elementwise rule: one
thread per ``parallel.minimum_elements`` elements of the input, within
``parallel.maximum_threads``, and no more threads than rows.

Each operator's node attributes arrive with the defaults of its schema in the model's
opset (:mod:`kerneltune.runtime.model` fills them in), so this module does not know opset
versions except Softmax's: before opset 13 it works on the input coerced to a matrix at
``axis`` (``coerced``), from 13 on along the one ``axis``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..tuning.dtypes import NUMPY_DTYPES
from ..tuning.schema import element_type_number, tunable
from . import half, outputs
from .base import GrainedKernel, Kernel, Plan, PreparedKernel, chunked_threads, operand
from .catalog import DEFAULT_GRAIN
from .elementwise import (
    ElementwiseConfig,
    HalfConversionConfig,
    HalfUnaryConfig,
    PreparedHalf,
    with_grain,
)

INT64 = element_type_number("INT64")
FLOAT = element_type_number("FLOAT")

#: Normalizer's ``norm`` as the compiled function numbers it
NORMS = {"MAX": 0, "L1": 1, "L2": 2}
#: the fused kernel of a classifier's probabilities normalised as skl2onnx writes it
PROBABILITY_NORMALIZATION = "ProbabilityNormalization"
#: what each kind of operator does, by operator
SOFTMAX, ARG, REDUCE, NORMALIZE, PROBABILITIES = (
    "softmax", "arg", "reduce", "normalize", "probabilities")
KINDS = {"Softmax": SOFTMAX, "LogSoftmax": SOFTMAX, "ArgMax": ARG, "ArgMin": ARG,
         "ReduceSum": REDUCE, "ReduceMean": REDUCE, "ReduceMax": REDUCE,
         "Normalizer": NORMALIZE, PROBABILITY_NORMALIZATION: PROBABILITIES}
#: the kinds whose output has the input's shape
SAME_SHAPE = (SOFTMAX, NORMALIZE, PROBABILITIES)
#: the operators along axes ONNX defines on FLOAT16 and BFLOAT16 (not the ai.onnx.ml
#: Normalizer, nor the fused FLOAT and DOUBLE nodes), which compute them in float32
WIDENED = (frozenset(KINDS) - {"Normalizer", PROBABILITY_NORMALIZATION}) | {"LayerNormalization"}
#: the longest rows ArgMax and ArgMin sweep column by column (``rows_pythran._best_rows``),
#: by ISA variant, SWEEP_LENGTH for the others: the baseline's sweep, without vector
#: selections, lost to the row-by-row loop from 8 columns on (docs/kernels.md)
SWEEP_LENGTHS: Mapping[str, int] = {"baseline": 4}
SWEEP_LENGTH = 64
#: the numpy methods that compute ArgMax and ArgMin on small inputs (ArgConfig)
NUMPY_ARGS: Mapping[str, Callable] = {"ArgMax": np.ndarray.argmax, "ArgMin": np.ndarray.argmin}
#: the attributes of each kind, with the defaults of the newest opset (a model's node gets
#: its own opset's from the schema)
ATTRIBUTES: Mapping[str, Mapping[str, Any]] = {
    SOFTMAX: {"axis": -1, "coerced": False},
    ARG: {"axis": 0, "keepdims": 1, "select_last_index": 0},
    REDUCE: {"axes": None, "keepdims": 1, "noop_with_empty_axes": 0},
    NORMALIZE: {"norm": "MAX"},
    # the constant skl2onnx adds to a zero sum: the number of classes
    PROBABILITIES: {"count": 1.0},
}


@dataclass(frozen=True)
class ArgConfig(ElementwiseConfig):
    """ArgMax's and ArgMin's: numpy's argmax and argmin compute small inputs in one C call,
    where the compiled kernel's call costs more than the work (a classifier's scores, a few
    columns a row); the compiled kernel's sweep wins on many rows."""

    compiled_minimum_elements: int = tunable(
        "algorithm.compiled_minimum_elements", 1024, minimum=0,
        doc="elements from which the compiled kernel computes the node; below, numpy's "
            "argmax or argmin, which give the same indices (a node that selects the last "
            "index takes the compiled kernel at every size)")


@dataclass(frozen=True)
class HalfArgConfig(ArgConfig, HalfConversionConfig):
    """ArgMax's and ArgMin's on a 16-bit float, whose input is widened to float32."""


def normal_axes(values: Sequence[int] | np.ndarray, rank: int, operator: str) -> list[int]:
    """Axes counted from the end when negative, each once, within ``rank``, sorted (the
    axes of these kernels and of the shape-only Squeeze and Unsqueeze)."""
    axes = [int(axis) for axis in np.asarray(values, dtype=np.int64).reshape(-1)]
    normal = [axis + rank if axis < 0 else axis for axis in axes]
    if any(not 0 <= axis < rank for axis in normal) or len(set(normal)) != len(normal):
        raise ValueError(f"{operator}: axes {axes} are not distinct axes of a rank {rank} "
                         f"tensor")
    return sorted(normal)


def _to_rows(x: np.ndarray, axes: list[int]) -> np.ndarray:
    """``x`` as a C-contiguous matrix whose rows run along ``axes``, the other axes in
    order as its rows."""
    kept = [axis for axis in range(x.ndim) if axis not in axes]
    shape = (math.prod(x.shape[axis] for axis in kept), math.prod(x.shape[axis] for axis in axes))
    if axes != list(range(x.ndim - len(axes), x.ndim)):
        x = x.transpose(kept + axes)
    return np.ascontiguousarray(x).reshape(shape)


class PreparedRows(GrainedKernel):
    """One operator along axes, with its grain, thread limit and attributes bound."""

    def __init__(self, key, config, threads, name: str, function: Callable, dtype, out_dtype,
                 attributes: Mapping[str, Any], sweep: int = SWEEP_LENGTH):
        self.key, self.config, self.threads = key, config, threads
        self.name, self._function, self._dtype, self.out_dtype = name, function, dtype, out_dtype
        self.kind = KINDS[name]
        self._attributes = {**ATTRIBUTES[self.kind], **attributes}
        #: the compiled function's argument after the output: ArgMax's and ArgMin's
        #: ``(select_last_index, sweep)``, Normalizer's norm, ProbabilityNormalization's
        #: count, None for the rest
        self._argument = _argument(self.kind, self._attributes, sweep)
        #: ArgMax's or ArgMin's numpy method and the input size from which the compiled
        #: kernel computes instead (0: the compiled kernel at every size)
        self._numpy_arg = NUMPY_ARGS.get(name)
        self._compiled_from = (config.compiled_minimum_elements if self.kind == ARG
                               and not self._attributes["select_last_index"] else 0)
        self._grain = config.minimum_elements
        self.thread_limit = min(config.maximum_threads, threads)
        self.run = _fast_rows(self)

    def _axes(self, x: np.ndarray, axes_input: object = None) -> list[int] | None:
        """The axes the node works along (None: it returns its input, a reduction's
        ``noop_with_empty_axes``)."""
        given = self._attributes
        if self.kind == NORMALIZE:
            if x.ndim not in (1, 2):
                raise ValueError(f"Normalizer: expected a 1-D or 2-D input, got shape "
                                 f"{list(x.shape)}")
            return [x.ndim - 1]
        if self.kind == PROBABILITIES:
            if not x.ndim:
                raise ValueError(f"{self.name}: expected rows, got a scalar")
            return [x.ndim - 1]
        if self.kind != REDUCE:
            return normal_axes([given["axis"]], x.ndim, self.name)
        axes = given["axes"] if axes_input is None else axes_input
        if axes is None or not np.size(axes):
            return None if given["noop_with_empty_axes"] else list(range(x.ndim))
        return normal_axes(axes, x.ndim, self.name)

    def plan(self, x, axes=None) -> Plan:
        x = np.asarray(x)
        chosen = self._axes(x, axes)
        if self._numpy_below(x.size):
            return Plan("numpy", 1, int(x.size), "rows")
        if self.kind == SOFTMAX and self._attributes["coerced"]:
            rows = math.prod(x.shape[:chosen[0]])  # the matrix's rows, as _call makes them
        else:
            rows = x.size // max(1, math.prod(x.shape[a] for a in chosen or ())) if x.size else 0
        threads = chunked_threads(rows, self._threads(x.size), alignment=1)
        return Plan("parallel" if threads > 1 else "serial", threads, int(x.size), "rows")

    def _numpy_below(self, elements: int) -> bool:
        """Whether numpy's argmax or argmin computes an input of ``elements`` elements."""
        return 0 < elements < self._compiled_from

    def for_constant(self, index: int, value: object) -> Callable[..., np.ndarray] | None:
        """``run`` for a reduction whose ``axes`` input is always ``value`` (opset 13's
        ReduceSum and opset 18's others take their axes so, and converters write them as a
        constant): the fast path an ``axes`` attribute has."""
        if index != 1 or self.kind != REDUCE:
            return None
        return _fast_rows(self, np.asarray(value))

    def run(self, x, axes=None) -> np.ndarray:
        """A fresh output; every instance replaces this by :func:`_fast_rows`'s closure."""
        return self._call(x, axes, None)

    def run_serial(self, x, axes=None) -> np.ndarray:
        return self._call(x, axes, 1)

    def _call(self, x, axes_input, threads: int | None) -> np.ndarray:
        x = operand(x, self._dtype, "input")
        axes = self._axes(x, axes_input)
        if axes is None:
            return x.copy()
        if self.kind == SOFTMAX and self._attributes["coerced"]:
            # before opset 13: the input as a matrix, its rows the axes from ``axis`` on
            first = axes[0]
            matrix = x.reshape(math.prod(x.shape[:first]), -1)
            return self._along(matrix, threads).reshape(x.shape)
        if self.kind in SAME_SHAPE:
            moved = np.moveaxis(x, axes[0], -1)
            out = self._along(_to_rows(x, axes), threads).reshape(moved.shape)
            return np.ascontiguousarray(np.moveaxis(out, -1, axes[0]))
        values = self._reduced(_to_rows(x, axes), threads)
        keepdims = self._attributes["keepdims"]
        shape = [1 if axis in axes else size for axis, size in enumerate(x.shape)
                 if keepdims or axis not in axes]
        return values.reshape(shape)

    def _along(self, matrix: np.ndarray, threads: int | None) -> np.ndarray:
        """Each row of ``matrix`` computed into a row of the same length."""
        out = np.empty(matrix.shape, self.out_dtype)
        if matrix.size:
            self._compute(matrix, out, self._threads(matrix.size) if threads is None else threads)
        return out

    def _compute(self, matrix: np.ndarray, out: np.ndarray, count: int) -> None:
        """The compiled function over ``matrix`` on ``count`` threads, with its argument."""
        if self._argument is None:
            self._function(matrix, out, count)
        else:
            self._function(matrix, out, self._argument, count)

    def _reduced(self, matrix: np.ndarray, threads: int | None) -> np.ndarray:
        """One value per row of ``matrix``: its arg, sum, mean or largest value."""
        if self._numpy_below(matrix.size):  # not empty, so neither are its rows
            return self._numpy_arg(matrix, axis=1)
        rows, n = matrix.shape
        out = np.empty(rows, self.out_dtype)
        if not rows:
            return out
        if not n:
            return self._of_nothing(out)
        self._compute(matrix, out, self._threads(matrix.size) if threads is None else threads)
        return out

    def _of_nothing(self, out: np.ndarray) -> np.ndarray:
        """A reduction over no element, as ONNX defines it (ArgMax and ArgMin have none)."""
        if self.kind == ARG:
            raise ValueError(f"{self.name}: the axis is empty, so it has no {self.name}")
        if self.name == "ReduceSum":
            out[:] = 0
        elif self.name == "ReduceMean":
            out[:] = np.nan
        elif out.dtype.kind == "f":
            out[:] = -np.inf
        elif out.dtype.kind == "b":
            out[:] = False
        else:
            out[:] = np.iinfo(out.dtype).min
        return out


def _argument(kind: str, attributes: Mapping[str, Any], sweep: int) -> object:
    """The compiled function's argument after the output, for a kernel of ``kind``."""
    if kind == ARG:
        return bool(attributes["select_last_index"]), sweep
    if kind == NORMALIZE:
        return NORMS[attributes["norm"]]
    if kind == PROBABILITIES:
        return float(attributes["count"])
    return None


def _fast_rows(p: PreparedRows, constant_axes: np.ndarray | None = None):
    """``run`` for the common call: an array of the element type, C-contiguous and not
    empty, the node working along its last axis alone, the output not recycled.

    A small call costs mostly its Python; this one goes straight to the compiled function.
    Anything else (other axes, ``axes`` given as an input, empty arrays) takes ``_call``.
    ``constant_axes``: a reduction's ``axes`` input, always the same (the input a call
    passes is then that one).
    """
    function, dtype, out_dtype, ndarray, empty = (p._function, p._dtype, p.out_dtype,
                                                  np.ndarray, np.empty)
    kind, given, threads, call = p.kind, p._attributes, p._threads, p._call
    serial_below, recycled_from = 2 * p._grain, outputs.recycled_from(out_dtype)
    last_axis = {SOFTMAX: given.get("axis"), ARG: given.get("axis"), NORMALIZE: -1,
                 PROBABILITIES: -1, REDUCE: given.get("axes")}[kind]
    fixed = constant_axes is not None
    if fixed:
        last_axis = constant_axes.reshape(-1)
    if kind == REDUCE:
        last_axis = (int(last_axis[0]) if last_axis is not None and np.size(last_axis) == 1
                     else None)
    argument = p._argument
    keep = bool(given.get("keepdims", 1))

    def run(x, axes=None):
        if fixed:
            axes = None
        if (axes is None and last_axis is not None and type(x) is ndarray and x.dtype is dtype
                and 0 < x.size < recycled_from and x.flags.c_contiguous
                and x.ndim and last_axis in (-1, x.ndim - 1) and x.shape[-1]):
            shape = x.shape
            # a matrix as it is: reshaping one to itself costs a step's function call
            matrix = x if len(shape) == 2 else x.reshape(-1, shape[-1])
            count = 1 if x.size < serial_below else threads(x.size)
            if kind in SAME_SHAPE:
                out = empty(shape, out_dtype)
                rows = out if matrix is x else out.reshape(matrix.shape)
                if argument is None:
                    function(matrix, rows, count)
                else:
                    function(matrix, rows, argument, count)
                return out
            out = empty(shape[:-1] + (1,) if keep else shape[:-1], out_dtype)
            if argument is None:
                function(matrix, out.ravel(), count)
            else:
                function(matrix, out.ravel(), argument, count)
            return out
        return call(x, constant_axes if fixed else axes, None)

    return run if not p._compiled_from else _small_on_numpy(p, run)


def _small_on_numpy(p: PreparedRows, run: Callable) -> Callable:
    """ArgMax's or ArgMin's ``run`` that leaves an input below the compiled kernel's size to
    numpy, along the node's axis and in any layout (``run`` takes the rest)."""
    numpy_arg, compiled_from, dtype, ndarray = p._numpy_arg, p._compiled_from, p._dtype, np.ndarray
    axis, keep = p._attributes["axis"], bool(p._attributes["keepdims"])

    def run_small(x, axes=None):
        if (axes is None and type(x) is ndarray and x.dtype is dtype
                and 0 < x.size < compiled_from and -x.ndim <= axis < x.ndim
                and (keep or x.ndim > 1)):  # one axis reduced away: numpy gives a scalar
            return numpy_arg(x, axis, keepdims=keep)
        return run(x, axes)

    return run_small


class RowsKernel(Kernel):
    """An operator along axes over a table of compiled functions, one per element type."""

    def __init__(self, name: str, implementation: str, functions: Mapping[int, Callable],
                 grains: Mapping[int, int] | None = None):
        super().__init__(implementation)
        self.name = name
        self._functions = dict(functions)
        self._grains = dict(grains or {})
        #: the 16-bit float types computed by the FLOAT function, where ONNX has them
        self._widened = (tuple(half.FORMATS)
                         if name in WIDENED and FLOAT in functions else ())

    @property
    def element_types(self) -> tuple[int, ...]:
        return tuple(self._functions) + self._widened

    def config_type(self, element_type: int) -> type:
        arg = self.name in NUMPY_ARGS
        if element_type in self._widened:
            config_type = HalfArgConfig if arg else HalfUnaryConfig
        else:
            config_type = ArgConfig if arg else ElementwiseConfig
        return with_grain(config_type, self._grains.get(element_type, DEFAULT_GRAIN))

    def output_dtype(self, element_type: int) -> np.dtype:
        return NUMPY_DTYPES[INT64 if KINDS[self.name] == ARG else element_type]

    def _prepare(self, element_type, config, threads, attributes) -> PreparedKernel:
        kind = KINDS[self.name]
        unknown = sorted(set(attributes) - set(ATTRIBUTES[kind]))
        if unknown:
            raise TypeError(f"{self.name} takes no attribute {unknown[0]}")
        given = {**ATTRIBUTES[kind], **attributes}
        if kind == NORMALIZE and given["norm"] not in NORMS:
            raise ValueError(f"Normalizer: norm {given['norm']!r} is none of "
                             f"{', '.join(NORMS)}")
        if kind == PROBABILITIES and not math.isfinite(given["count"]):
            # a row that does not sum to zero is divided by its sum alone, as the unfused
            # nodes do where zero times the count is zero
            raise ValueError(f"{self.name}: count {given['count']} is not finite")
        computed = self._computed(element_type)
        return self._widening(element_type, config, PreparedRows(
            self.tuning_key(element_type), config, threads, self.name,
            self._functions[computed], NUMPY_DTYPES[computed], self.output_dtype(computed),
            attributes, SWEEP_LENGTHS.get(self.implementation, SWEEP_LENGTH)), widened=1)

    def _computed(self, element_type: int) -> int:
        """The element type the compiled function computes ``element_type`` in."""
        return FLOAT if element_type in self._widened else element_type

    def _widening(self, element_type: int, config: Any, prepared: PreparedKernel,
                  widened: int | None = None) -> PreparedKernel:
        """``prepared`` (of the computed type) for ``element_type``: a 16-bit float's
        ``widened`` leading inputs (None: all) widened, a float result rounded once."""
        if element_type not in self._widened:
            return prepared
        return PreparedHalf(prepared, half.FORMATS[element_type],
                            config.conversion_minimum_elements, widened)
