"""What every kernel of the library offers the runtime.

A :class:`Kernel` names its tuning key per element type and turns tuning
values into a frozen typed config once. :meth:`Kernel.prepare` then binds the
element type, the config and the thread budget into a :class:`PreparedKernel`
whose ``run`` does no lookup of any kind: the thresholds are plain attributes
and the compiled function is already chosen.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import KernelTuningError, UnknownKernelError
from ..machine.threads import thread_count
from ..tuning.schema import (
    KernelTuningKey,
    KernelTuningSchema,
    element_type_name,
    element_type_number,
)

LIBRARY = "kerneltune_cpu"
#: Bumped when a parameter changes meaning, so cached values of the old meaning go stale.
#: 2: algorithm.blas_minimum_fmas no longer applies to skinny products.
#: 3: nor algorithm.skinny_blas_minimum_fmas to one-row products.
#: 4: the one-byte and boolean kernels, integer Div and Log became much faster, so grains
#:    measured on them before would send calls to two threads that one thread finishes sooner;
#:    FLOAT16 Abs and Neg convert nothing any more and lose their conversion grain; the skinny
#:    Gemm path has its own parallel grain, which moves the one-row BLAS crossover.
TUNING_ABI = 4
#: the aspect of the machine the library's shared-cache probe watches (besides the parallel
#: speed, calibration's own aspect)
SHARED_CACHE = "shared cache"


@dataclass(frozen=True)
class Plan:
    """How one call executes: the path a threshold chose and the threads it runs on."""

    path: str
    threads: int
    elements: int
    form: str = ""


def parallel_threads(elements: int, grain: int, maximum_threads: int, threads: int) -> int:
    """Threads for ``elements`` independent elements: one per ``grain``, within both limits.

    ``grain`` is the smallest share of work worth a thread, so fewer than two
    grains run serially and the thread count grows with the work.
    """
    if elements < 2 * grain:
        return 1
    return max(1, min(elements // grain, maximum_threads, threads))


#: chunk starts of the compiled elementwise loops are multiples of this (see unary_pythran)
CHUNK_ALIGNMENT = 64


def chunked_threads(elements: int, threads: int, alignment: int = CHUNK_ALIGNMENT) -> int:
    """Threads the compiled loops really run for ``threads`` requested over ``elements``.

    They cut ``elements`` (or rows, with ``alignment`` 1) into chunks of
    ``ceil(elements / threads)`` rounded up to ``alignment``, one thread per chunk.
    """
    if elements <= 0:
        return 1
    threads = max(1, min(threads, elements))
    chunk = _ceil_div(_ceil_div(elements, threads), alignment) * alignment
    return _ceil_div(elements, chunk)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def operand(value: object, dtype: np.dtype, name: str) -> np.ndarray:
    """``value`` as a C-contiguous, native-order array of ``dtype``, ready for compiled code.

    Python scalars are converted; arrays of another element type are an error
    (a silent cast would change results); byte order and layout are fixed by
    copying, since the compiled loops read memory linearly.
    """
    if type(value) is np.ndarray and value.dtype is dtype and value.flags.c_contiguous:
        return value
    if isinstance(value, bool | int | float) and not isinstance(value, np.generic):
        try:
            return np.asarray(value, dtype=dtype)
        except OverflowError:
            raise TypeError(f"{name}: {value!r} does not fit {dtype}") from None
    array = np.asarray(value)
    if array.dtype.newbyteorder("=") != dtype:
        raise TypeError(f"{name}: expected element type {dtype}, got {array.dtype}")
    return np.asarray(array, dtype=dtype, order="C")  # keeps 0-d, unlike ascontiguousarray


class PreparedKernel(abc.ABC):
    """A kernel bound to one element type, one frozen config and one thread budget."""

    key: KernelTuningKey
    config: Any
    threads: int
    #: whether some calls run on the BLAS library's threads (whose waits contention reads)
    uses_blas: bool = False

    @abc.abstractmethod
    def run(self, *inputs: object) -> np.ndarray:
        """Compute into a fresh array the caller owns."""

    @abc.abstractmethod
    def run_serial(self, *inputs: object) -> np.ndarray:
        """The same result on the portable serial path: the reference calibration checks against."""

    @abc.abstractmethod
    def plan(self, *inputs: object) -> Plan:
        """The path ``run`` takes for these inputs, without computing anything."""

    def in_place(self, index: int) -> Callable[..., np.ndarray] | None:
        """``run`` writing its result over input ``index`` where that input is a contiguous
        array of the result's type and shape (and into a fresh array where it is not), for a
        caller that gives the input up and whose other inputs do not share its memory: a
        session's intermediate that nothing else reads. None where this kernel cannot (its
        result's type differs, or its code reads elements it has written)."""
        return None

    def for_constant(self, index: int, value: object) -> Callable[..., np.ndarray] | None:
        """``run`` for a caller whose input ``index`` is always ``value``, the same array at
        every call (a model's constant, which nothing writes): a kernel that prepares such
        an input once (a product packs a constant B for its path once) returns such a run,
        which takes any other input as ``run`` does. None where it prepares nothing."""
        return None


class GrainedKernel(PreparedKernel):
    """A kernel whose threads grow with the elements of a pass: one per ``_grain`` (the
    smallest share worth a thread), up to ``thread_limit``."""

    _grain: int
    thread_limit: int

    def _threads(self, elements: int, serial: bool = False) -> int:
        """Threads for a pass over ``elements``; one where ``serial`` (``run_serial``'s)."""
        if serial:
            return 1
        return parallel_threads(elements, self._grain, self.thread_limit, self.thread_limit)


class Kernel(abc.ABC):
    """One operator of the library for one ISA variant (the key's ``implementation``)."""

    name: str
    #: whether its products may run on the BLAS library's threads (it takes ``pool``)
    uses_blas: bool = False

    def __init__(self, implementation: str):
        self.implementation = implementation

    @property
    @abc.abstractmethod
    def element_types(self) -> tuple[int, ...]:
        """ONNX numbers of the element types this kernel computes."""

    @abc.abstractmethod
    def config_type(self, element_type: int) -> type:
        """The frozen dataclass of tunables for one element type."""

    @abc.abstractmethod
    def _prepare(self, element_type: int, config: Any, threads: int,
                 attributes: Mapping[str, Any]) -> PreparedKernel:
        """Bind a validated config; ``element_type`` is supported and ``threads`` >= 1."""

    def supported(self, element_type: object) -> int:
        number = element_type_number(element_type)
        if number not in self.element_types:
            names = ", ".join(element_type_name(t) for t in self.element_types)
            raise UnknownKernelError(f"{self.name} has no {element_type_name(number)} kernel "
                                     f"(element types: {names})")
        return number

    def tuning_key(self, element_type: object) -> KernelTuningKey:
        return _key(LIBRARY, self.name, self.implementation, self.supported(element_type))

    def schema(self, element_type: object) -> KernelTuningSchema:
        number = self.supported(element_type)
        return _schema(self.tuning_key(number), self.config_type(number))

    def configure(self, element_type: object, values: Mapping[str, object] | None = None) -> Any:
        """The frozen typed config for ``values`` (defaults fill the rest), validated once."""
        return self.schema(element_type).configure(values)

    def prepare(self, element_type: object, config: Any = None, threads: int | None = None,
                **attributes: Any) -> PreparedKernel:
        number = self.supported(element_type)
        expected = self.config_type(number)
        if config is None:
            config = self.schema(number).defaults
        elif type(config) is not expected:
            raise KernelTuningError(f"{self.name}: expected a {expected.__name__} config, got "
                                    f"{type(config).__name__}")
        return self._prepare(number, config, thread_count(threads), attributes)

    def run(self, inputs: Sequence[object], config: Any = None, threads: int | None = None,
            **attributes: Any) -> np.ndarray:
        """One call without keeping the prepared kernel; the element type is the first input's."""
        element_type = np.asarray(inputs[0]).dtype
        return self.prepare(element_type, config, threads, **attributes).run(*inputs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} ({self.implementation})>"


def with_defaults(config_type: type, suffix: str, defaults: Mapping[str, object],
                  doc: str) -> type:
    """``config_type`` (a frozen config dataclass) with other defaults for the fields
    ``defaults`` names: the portable defaults of the keys that need them, whose names,
    constraints and documentation stay ``config_type``'s."""
    hints = typing.get_type_hints(config_type)
    fields = [(field.name, hints[field.name],
               dataclasses.field(default=defaults[field.name], metadata=field.metadata))
              for field in dataclasses.fields(config_type) if field.name in defaults]
    # the fields are config_type's, so its equality, hash and repr serve: generating them
    # again would only lengthen every import
    return dataclasses.make_dataclass(f"{config_type.__name__}{suffix}", fields,
                                      bases=(config_type,), frozen=True, eq=False, repr=False,
                                      namespace={"__doc__": doc})


@functools.cache
def _key(library: str, kernel: str, implementation: str, element_type: int) -> KernelTuningKey:
    return KernelTuningKey(library, kernel, implementation, element_type, "cpu", TUNING_ABI)


@functools.cache
def _schema(key: KernelTuningKey, config_type: type) -> KernelTuningSchema:
    return KernelTuningSchema.from_config(key, config_type)
