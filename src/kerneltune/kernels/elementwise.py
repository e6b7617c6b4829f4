"""Unary and binary elementwise kernels: typed configs and prepared runs.

Each ONNX operator maps to one compiled function of ``unary`` or ``binary``
per element type (see :mod:`kerneltune.kernels.catalog`). The only decision
taken per call is how many threads the work is worth, from the config's grain
and thread cap; FLOAT16 and BFLOAT16 are widened to float32, computed and narrowed
back, with their own grain for the conversions.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..tuning.dtypes import NUMPY_DTYPES
from ..tuning.schema import element_type_number, tunable
from . import broadcast, half, outputs
from .base import (
    GrainedKernel,
    Kernel,
    Plan,
    PreparedKernel,
    chunked_threads,
    operand,
    parallel_threads,
    with_defaults,
)
from .catalog import DEFAULT_GRAIN

FLOAT = element_type_number("FLOAT")


@dataclass(frozen=True)
class ElementwiseConfig:
    """Portable defaults: a thread per 32768 elements, no thread cap.

    Keys whose elements cost more or less than an add's get their own (see :func:`with_grain`).
    """

    minimum_elements: int = tunable(
        "parallel.minimum_elements", DEFAULT_GRAIN, minimum=1,
        doc="elements per thread; a call with fewer than twice this many runs serially")
    maximum_threads: int = tunable(
        "parallel.maximum_threads", 256, minimum=1,
        doc="threads beyond which more stop helping")


@dataclass(frozen=True)
class BinaryConfig(ElementwiseConfig):
    broadcast_minimum_elements: int = tunable(
        "parallel.broadcast_minimum_elements", DEFAULT_GRAIN, minimum=1,
        doc="elements per thread when both operands are broadcast (row-wise split)")


@dataclass(frozen=True)
class HalfConversionConfig:
    conversion_minimum_elements: int = tunable(
        "conversion.parallel_minimum_elements", DEFAULT_GRAIN, minimum=1,
        doc="elements per thread when widening 16-bit float inputs and narrowing outputs; "
            "by default the computation's grain, since a call that computes on more threads "
            "than it converts on loses what the parallel computation won")


@dataclass(frozen=True)
class HalfUnaryConfig(ElementwiseConfig, HalfConversionConfig):
    pass


@dataclass(frozen=True)
class HalfBinaryConfig(BinaryConfig, HalfConversionConfig):
    pass


#: the config fields that are grains (elements per thread)
_GRAIN_FIELDS = ("minimum_elements", "broadcast_minimum_elements", "conversion_minimum_elements")


def with_grain(config_type: type, grain: int, broadcast_grain: int | None = None) -> type:
    """``config_type`` with every grain defaulting to ``grain`` instead of 32768, and the
    broadcasts' to ``broadcast_grain`` where given.

    The portable grain depends on the cost of an element (the catalog's
    ``GRAINS`` per operator, ``ELEMENT_GRAINS`` per element type, ``BROADCAST_GRAINS``
    where broadcasts cross over elsewhere), so it is a default of the key's own config
    type; names, constraints and documentation stay those of ``config_type``. A type
    without a broadcast grain is the same type whatever ``broadcast_grain`` says, made
    once (each costs the import a dataclass).
    """
    if "broadcast_minimum_elements" not in config_type.__dataclass_fields__:
        broadcast_grain = None
    return _with_grain(config_type, grain, broadcast_grain)


@functools.cache
def _with_grain(config_type: type, grain: int, broadcast_grain: int | None) -> type:
    grains = dict.fromkeys(_GRAIN_FIELDS, grain)
    if broadcast_grain is not None:
        grains["broadcast_minimum_elements"] = broadcast_grain
    changed = {field.name: grains[field.name] for field in dataclasses.fields(config_type)
               if grains.get(field.name, DEFAULT_GRAIN) != DEFAULT_GRAIN}
    if not changed:
        return config_type
    suffix, doc = f"{grain}", f"{config_type.__name__}, {grain} elements per thread"
    if broadcast_grain not in (None, grain):
        suffix, doc = f"{grain}_{broadcast_grain}", f"{doc}, {broadcast_grain} when broadcast"
    return with_defaults(config_type, suffix, changed, doc)


class PreparedUnary(GrainedKernel):
    """A unary kernel with its grain and thread limit as plain attributes."""

    def __init__(self, key, config, threads, function, dtype, out_dtype, parameters=()):
        self.key, self.config, self.threads = key, config, threads
        self._dtype, self.out_dtype = dtype, out_dtype
        # numbers in the element type; arrays (a chain's steps) as they are
        self._function = _with_parameters(function, tuple(
            p if isinstance(p, np.ndarray) else dtype.type(p) for p in parameters))
        self._grain = config.minimum_elements
        self.thread_limit = min(config.maximum_threads, threads)
        self._recycled_from = outputs.recycled_from(out_dtype)
        self.run = _fast_unary(self)

    def plan(self, x) -> Plan:
        size = int(np.size(x))
        threads = chunked_threads(size, self._threads(size))
        return Plan("parallel" if threads > 1 else "serial", threads, size, "unary")

    def run(self, x) -> np.ndarray:
        """A fresh output; every instance replaces this by :func:`_fast_unary`'s closure."""
        return self._call(x, None)

    def run_serial(self, x) -> np.ndarray:
        return self._call(x, 1)

    def in_place(self, index: int):
        """Each element's result written over it: the compiled loops read an element
        before they write its result, and nothing else (the bits are ``run``'s)."""
        return _in_place_unary(self) if index == 0 and self.out_dtype == self._dtype else None

    def _call(self, x, threads: int | None, bounds: tuple = ()) -> np.ndarray:
        x = operand(x, self._dtype, "input")
        out = outputs.empty(x.shape, self.out_dtype, like=x)
        if x.size:
            self._function(x.reshape(-1), out.reshape(-1), *bounds,
                           self._threads(x.size) if threads is None else threads)
        return out


class PreparedClip(PreparedUnary):
    """Clip: its bounds come with each call (ONNX's inputs ``min`` and ``max``, one value
    each, in the element type; the model binds an absent one to the type's extreme)."""

    def __init__(self, key, config, threads, function, dtype, out_dtype):
        super().__init__(key, config, threads, function, dtype, out_dtype)
        self.run = self._bounded

    def plan(self, x, low=None, high=None) -> Plan:
        return super().plan(x)

    def in_place(self, index: int):
        return None  # its bounds come with each call: not written for it

    def _bounded(self, x, low, high) -> np.ndarray:
        return self._call(x, None, (self._bounds(low, high),))

    def run_serial(self, x, low, high) -> np.ndarray:
        return self._call(x, 1, (self._bounds(low, high),))

    def _bounds(self, low, high) -> np.ndarray:
        return np.array([self._bound(low, "min"), self._bound(high, "max")], self._dtype)

    def _bound(self, value, name: str):
        bound = np.asarray(value)
        if bound.size != 1:
            raise ValueError(f"Clip: {name} must be one value, got shape {list(bound.shape)}")
        value = bound.reshape(-1)[0]
        with np.errstate(all="ignore"):
            converted = self._dtype.type(value)
        if converted != value and value == value:  # NaN is a float bound's own
            raise TypeError(f"Clip: {name} {value} is not a value of {self._dtype}")
        return converted


class PreparedBinary(PreparedKernel):
    """A binary kernel; shapes go through the cached broadcast layout."""

    def __init__(self, key, config, threads, function, dtype, out_dtype, b_dtype=None):
        self.key, self.config, self.threads = key, config, threads
        self._function, self._dtype, self.out_dtype = function, dtype, out_dtype
        #: B's element type where the compiled function takes another one than A's (Pow)
        self.b_dtype = dtype if b_dtype is None else b_dtype
        self._grain = config.minimum_elements
        self._broadcast_grain = getattr(config, "broadcast_minimum_elements", self._grain)
        self.thread_limit = min(config.maximum_threads, threads)
        self._recycled_from = outputs.recycled_from(out_dtype)
        self.run = _fast_binary(self)

    def _threads(self, layout: broadcast.Layout) -> int:
        grain = self._broadcast_grain if layout.form == broadcast.BROADCAST else self._grain
        return parallel_threads(layout.size, grain, self.thread_limit, self.thread_limit)

    def plan(self, a, b) -> Plan:
        layout = broadcast.layout(np.shape(a), np.shape(b))
        threads = self._threads(layout)
        rows = len(layout.a_offsets)
        if rows > 1:
            threads = chunked_threads(rows, threads, alignment=1)
        else:
            threads = chunked_threads(layout.inner, threads)
        return Plan("parallel" if threads > 1 else "serial", threads, layout.size, layout.form)

    def run(self, a, b) -> np.ndarray:
        """A fresh output; every instance replaces this by :func:`_fast_binary`'s closure."""
        return self._call(a, b, None)

    def run_serial(self, a, b) -> np.ndarray:
        return self._call(a, b, 1)

    def in_place(self, index: int):
        """The result written over A (``index`` 0) or B (1) where that operand has the
        result's shape: each output element is its own element's, read before written."""
        operand_dtype = (self._dtype, self.b_dtype)[index] if index in (0, 1) else None
        return _in_place_binary(self, index) if operand_dtype == self.out_dtype else None

    def _call(self, a, b, threads: int | None) -> np.ndarray:
        a = operand(a, self._dtype, "A")
        b = operand(b, self.b_dtype, "B")
        layout = broadcast.layout(a.shape, b.shape)
        out = outputs.empty(layout.shape, self.out_dtype, like=a)
        if layout.size:
            self._function(a.reshape(-1), b.reshape(-1), out.reshape(-1), layout.a_offsets,
                           layout.b_offsets, layout.inner, layout.a_step, layout.b_step,
                           self._threads(layout) if threads is None else threads)
        return out


def _with_parameters(function: Callable, parameters: tuple) -> Callable:
    """``function`` as ``f(x, out, [bounds...,] threads)`` with ``parameters`` (a LeakyRelu's
    alpha) passed after the output."""
    if not parameters:
        return function

    def run(x, out, *rest):
        return function(x, out, *parameters, *rest)

    return run


def _fast_unary(p: PreparedUnary):
    """``run`` for the common call: an array of the element type, an output not recycled.

    Small calls cost mostly their Python: this one skips the operand
    normalisation and the thread decision below twice the grain. ``ravel`` gives the
    compiled code a contiguous view (a copy of a strided array) in half the time
    ``reshape(-1)`` takes; anything else takes ``_call``.
    """
    function, dtype, out_dtype, ndarray, empty = (p._function, p._dtype, p.out_dtype,
                                                  np.ndarray, np.empty)
    recycled_from, serial_below, threads, call = (p._recycled_from, 2 * p._grain, p._threads,
                                                   p._call)

    def run(x):
        if type(x) is ndarray and x.dtype is dtype:
            n = x.size
            if 0 < n < recycled_from:
                out = empty(x.shape, out_dtype)
                function(x.ravel(), out.ravel(), 1 if n < serial_below else threads(n))
                return out
        return call(x, None)

    return run


def _in_place_unary(p: PreparedUnary):
    """``run`` over its operand, as :func:`_fast_unary` over a fresh output (and
    ``run`` itself for any other operand)."""
    function, dtype, ndarray, threads, run = p._function, p._dtype, np.ndarray, p._threads, p.run
    serial_below = 2 * p._grain

    def run_in_place(x):
        if type(x) is ndarray and x.dtype is dtype and x.size and _writable_in_place(x):
            n = x.size
            flat = x.ravel()  # a view: x is contiguous
            function(flat, flat, 1 if n < serial_below else threads(n))
            return x
        return run(x)

    return run_in_place


def _in_place_binary(p: PreparedBinary, index: int):
    """``run`` over operand ``index`` where it has the result's shape, through the cached
    layout (and ``run`` itself otherwise)."""
    function, dtype, b_dtype, ndarray, layout = (p._function, p._dtype, p.b_dtype, np.ndarray,
                                                 broadcast.layout)
    threads, run, serial_below = p._threads, p.run, 2 * min(p._grain, p._broadcast_grain)

    def run_in_place(a, b):
        if type(a) is ndarray and type(b) is ndarray and a.dtype is dtype and b.dtype is b_dtype:
            rows = layout(a.shape, b.shape)
            out = (a, b)[index]
            if rows.size and out.shape == rows.shape and _writable_in_place(out):
                function(a.ravel(), b.ravel(), out.ravel(), rows.a_offsets, rows.b_offsets,
                         rows.inner, rows.a_step, rows.b_step,
                         1 if rows.size < serial_below else threads(rows))
                return out
        return run(a, b)

    return run_in_place


def _writable_in_place(x: np.ndarray) -> bool:
    """Whether ``x`` can take a result in its own memory: contiguous (its ``ravel`` is a
    view) and writable."""
    flags = x.flags
    return flags.c_contiguous and flags.writeable


def _fast_binary(p: PreparedBinary):
    """``run`` for the common call, as :func:`_fast_unary`, through the cached layout."""
    function, dtype, b_dtype, out_dtype, ndarray, empty = (p._function, p._dtype, p.b_dtype,
                                                           p.out_dtype, np.ndarray, np.empty)
    recycled_from, threads, call, layout = (p._recycled_from, p._threads, p._call,
                                            broadcast.layout)
    serial_below = 2 * min(p._grain, p._broadcast_grain)

    def run(a, b):
        if (type(a) is ndarray and type(b) is ndarray and a.dtype is dtype
                and b.dtype is b_dtype):
            rows = layout(a.shape, b.shape)
            n = rows.size
            if 0 < n < recycled_from:
                out = empty(rows.shape, out_dtype)
                function(a.ravel(), b.ravel(), out.ravel(), rows.a_offsets, rows.b_offsets,
                         rows.inner, rows.a_step, rows.b_step,
                         1 if n < serial_below else threads(rows))
                return out
        return call(a, b, None)

    return run


class PreparedHalf(GrainedKernel):
    """A 16-bit float through the float32 kernel: widen the inputs, compute, narrow a float
    output.

    numpy computes float16 arithmetic the same way (in float32, rounded once
    to half), so results match numpy's bit for bit where numpy's float32 does;
    ml_dtypes computes bfloat16's so too. ``widened`` leading inputs are of the
    16-bit type (Pow's exponent may be of another, which ``inner`` converts).
    """

    def __init__(self, inner: PreparedKernel, half_format: half.HalfFormat,
                 conversion_grain: int, widened: int | None = None):
        self.inner, self.format = inner, half_format
        self.key, self.config, self.threads = inner.key, inner.config, inner.threads
        self._dtype = half_format.dtype
        self._grain = conversion_grain
        self._widened = widened
        self.thread_limit = inner.thread_limit
        self._narrow = inner.out_dtype == np.float32

    def _convert(self, inputs, serial: bool) -> list:
        count = len(inputs) if self._widened is None else self._widened
        widened = []
        for index, value in enumerate(inputs[:count]):
            x = operand(value, self._dtype, f"input {index}")
            widened.append(self.format.to_float32(x, self._threads(x.size, serial)))
        return widened + list(inputs[count:])

    def _finish(self, result, serial: bool):
        if not self._narrow:
            return result
        if isinstance(result, tuple):  # LayerNormalization's Y and its float32 statistics
            return (self._finish(result[0], serial), *result[1:])
        return self.format.from_float32(result, self._threads(result.size, serial))

    def plan(self, *inputs: Any) -> Plan:
        step = self.inner.plan(*inputs)
        count = len(inputs) if self._widened is None else self._widened
        sizes = [int(np.size(x)) for x in inputs[:count]] + [step.elements] * self._narrow
        threads = "/".join(str(self._threads(size, False)) for size in sizes)
        return dataclasses.replace(step, form=f"{step.form}, converted on {threads} threads")

    def run(self, *inputs: Any) -> np.ndarray:
        return self._finish(self.inner.run(*self._convert(inputs, False)), False)

    def run_serial(self, *inputs: Any) -> np.ndarray:
        return self._finish(self.inner.run_serial(*self._convert(inputs, True)), True)


class ElementwiseKernel(Kernel):
    """An operator over a table of compiled functions, one per element type.

    ``functions`` maps an ONNX element type to the compiled function; FLOAT16 and
    BFLOAT16, unless they have their own, are served by the FLOAT function through
    widening and narrowing. ``grains`` maps an element type to its portable grain where
    that is not 32768, ``broadcast_grains`` to its broadcasts' where that is not
    the element type's grain.
    """

    #: the config types for widened 16-bit floats and for every other element type
    _config_types: tuple[type, type]

    def __init__(self, name: str, implementation: str, functions: Mapping[int, Callable],
                 output: int | None = None, grains: Mapping[int, int] | None = None,
                 broadcast_grains: Mapping[int, int] | None = None):
        super().__init__(implementation)
        self.name = name
        self._functions = dict(functions)
        self._output = output
        #: the 16-bit float types computed by the FLOAT function
        self._widened = tuple(t for t in half.FORMATS
                              if FLOAT in functions and t not in functions)
        self._grains = dict(grains or {})
        self._broadcast_grains = dict(broadcast_grains or {})

    def config_type(self, element_type: int) -> type:
        half_config, config = self._config_types
        return with_grain(half_config if element_type in self._widened else config,
                          self._grains.get(element_type, DEFAULT_GRAIN),
                          self._broadcast_grains.get(element_type))

    @property
    def element_types(self) -> tuple[int, ...]:
        return tuple(self._functions) + self._widened

    def output_dtype(self, element_type: int) -> np.dtype:
        return NUMPY_DTYPES[self._output if self._output is not None else element_type]

    def _prepare(self, element_type, config, threads, attributes) -> PreparedKernel:
        functions, parameters = self._chosen(attributes)
        key = self.tuning_key(element_type)
        if element_type in self._widened:
            inner = self._prepared_type(key, config, threads, functions[FLOAT],
                                        NUMPY_DTYPES[FLOAT], self.output_dtype(FLOAT),
                                        *parameters)
            return PreparedHalf(inner, half.FORMATS[element_type],
                                config.conversion_minimum_elements, self._widened_inputs)
        return self._prepared_type(key, config, threads, functions[element_type],
                                   NUMPY_DTYPES[element_type], self.output_dtype(element_type),
                                   *parameters)

    def function_name(self, element_type: int, attributes: Mapping[str, Any]) -> str | None:
        """The compiled function a node of ``attributes`` runs on ``element_type`` (None for a
        widened type or a function that takes parameters), as a fused chain names it."""
        functions, parameters = self._chosen(attributes)
        function = functions.get(element_type)
        return None if parameters or function is None else function.__name__

    #: the leading inputs a widened 16-bit float call converts (None: every input)
    _widened_inputs: int | None = None

    def _chosen(self, attributes: Mapping[str, Any]) -> tuple[Mapping[int, Callable], tuple]:
        """The functions by element type and the prepared kernel's further arguments that
        the node's attributes give (none, unless a subclass takes attributes)."""
        if attributes:
            raise TypeError(f"{self.name} takes no attributes, got {sorted(attributes)}")
        return self._functions, ()


class UnaryKernel(ElementwiseKernel):
    """A unary operator; one with attributes (``catalog.UNARY_ATTRIBUTES``) takes its
    numbers as parameters of the compiled function and its strings as a choice of function
    (``choices``: attribute -> value -> functions by element type)."""

    _config_types = (HalfUnaryConfig, ElementwiseConfig)
    _prepared_type = PreparedUnary

    def __init__(self, name: str, implementation: str, functions: Mapping[int, Callable],
                 grains: Mapping[int, int] | None = None,
                 attributes: Mapping[str, Any] | None = None,
                 choices: Mapping[str, Mapping[str, Mapping[int, Callable]]] | None = None):
        super().__init__(name, implementation, functions, grains=grains)
        self._attributes = dict(attributes or {})
        self._choices = dict(choices or {})

    def _chosen(self, attributes: Mapping[str, Any]) -> tuple[Mapping[int, Callable], tuple]:
        unknown = sorted(set(attributes) - set(self._attributes))
        if unknown:
            raise TypeError(f"{self.name} takes no attribute {unknown[0]}")
        given = {**self._attributes, **attributes}
        functions, parameters = self._functions, []
        for name, default in self._attributes.items():
            value = given[name]
            if name not in self._choices:  # an ONNX float attribute: a float32
                parameters.append(float(np.float32(value)))
            elif value != default:
                options = self._choices[name]
                if value not in options:
                    raise ValueError(f"{self.name}: {name} {value!r} is none of "
                                     f"{', '.join([default, *options])}")
                functions = options[value]
        return functions, ((tuple(parameters),) if parameters else ())


class ClipKernel(UnaryKernel):
    """Clip, whose bounds are inputs of each call (:class:`PreparedClip`); a widened 16-bit
    float call converts the tensor, and the bounds as they are read."""

    _prepared_type = PreparedClip
    _widened_inputs = 1


class BinaryKernel(ElementwiseKernel):
    _config_types = (HalfBinaryConfig, BinaryConfig)
    _prepared_type = PreparedBinary
