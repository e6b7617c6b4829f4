"""Cast between element types: one compiled function (``unary.cast``) for every pair of
``catalog.CAST``'s types, converting as C++ does (a float truncated toward zero into an
integer, anything but zero true as a bool), which is what onnxruntime and numpy do.

A Cast from or to FLOAT16 or BFLOAT16 goes through float32, as onnxruntime's does: the
16-bit float's bits widened exactly, or the source cast to float32; then rounded to the
nearest even 16-bit float, or cast from float32 to the target (:mod:`.half`'s compiled
conversions and ``unary.cast``). A DOUBLE is thus rounded twice on its way to a 16-bit
float, where numpy's ``astype`` rounds once; onnxruntime rounds twice too.

The key is the input's element type; the target is the node's ``to``. A Cast to the type
its input already has is no kernel: the model binds it to a view
(:mod:`kerneltune.runtime.views`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ..tuning.dtypes import NUMPY_DTYPES
from ..tuning.schema import element_type_name, element_type_number
from . import half
from .base import GrainedKernel, Kernel, Plan, PreparedKernel, operand
from .catalog import CAST, DEFAULT_GRAIN
from .elementwise import ElementwiseConfig, PreparedUnary, with_grain

#: the compiled function's types, then the 16-bit floats that go through float32
TYPES = tuple(element_type_number(name) for name in CAST) + tuple(half.FORMATS)
_FLOAT32 = np.dtype(np.float32)


class CastKernel(Kernel):
    """Cast from each of ``TYPES`` to each other one."""

    name = "Cast"

    def __init__(self, implementation: str, function: Callable,
                 grains: Mapping[int, int] | None = None):
        super().__init__(implementation)
        self._function = function
        self._grains = dict(grains or {})

    @property
    def element_types(self) -> tuple[int, ...]:
        return TYPES

    def config_type(self, element_type: int) -> type:
        return with_grain(ElementwiseConfig, self._grains.get(element_type, DEFAULT_GRAIN))

    def _prepare(self, element_type, config, threads, attributes) -> PreparedKernel:
        unknown = sorted(set(attributes) - {"to"})
        if unknown or "to" not in attributes:
            raise TypeError(f"Cast takes the attribute to, got {sorted(attributes)}")
        target = element_type_number(attributes["to"])
        if target not in TYPES or target == element_type:
            names = ", ".join(element_type_name(t) for t in TYPES if t != element_type)
            raise ValueError(f"Cast from {element_type_name(element_type)}: no kernel to "
                             f"{element_type_name(target)} (to: {names})")
        if element_type in half.FORMATS or target in half.FORMATS:
            return PreparedHalfCast(self.tuning_key(element_type), config, threads,
                                    self._function, element_type, target)
        return PreparedUnary(self.tuning_key(element_type), config, threads, self._function,
                             NUMPY_DTYPES[element_type], NUMPY_DTYPES[target])


class PreparedHalfCast(GrainedKernel):
    """A Cast from or to a 16-bit float, through float32: at most two compiled passes,
    each on as many threads as the key's grain gives it (the same bits on any count). A
    pass of the compiled cast (into float32 or out of it) is a :class:`PreparedUnary` of
    the same key."""

    def __init__(self, key, config, threads, cast: Callable, source: int, target: int):
        self.key, self.config, self.threads = key, config, threads
        self._grain = config.minimum_elements
        self._dtype, self.out_dtype = NUMPY_DTYPES[source], NUMPY_DTYPES[target]
        self._widen, self._narrow = half.FORMATS.get(source), half.FORMATS.get(target)
        # None where the side is a 16-bit float or float32 itself
        self._into = (PreparedUnary(key, config, threads, cast, self._dtype, _FLOAT32)
                      if self._widen is None and self._dtype != _FLOAT32 else None)
        self._out_of = (PreparedUnary(key, config, threads, cast, _FLOAT32, self.out_dtype)
                        if self._narrow is None and self.out_dtype != _FLOAT32 else None)
        self.thread_limit = min(config.maximum_threads, threads)

    def _run(self, x, serial: bool) -> np.ndarray:
        x = operand(x, self._dtype, "input")
        if not x.size:
            return np.empty(x.shape, self.out_dtype)
        threads = self._threads(x.size, serial)
        if self._widen is not None:
            wide = self._widen.to_float32(x, threads)
        else:
            wide = x if self._into is None else self._passed(self._into, x, serial)
        if self._narrow is not None:
            return self._narrow.from_float32(wide, threads)
        return wide if self._out_of is None else self._passed(self._out_of, wide, serial)

    @staticmethod
    def _passed(cast: PreparedUnary, x: np.ndarray, serial: bool) -> np.ndarray:
        return cast.run_serial(x) if serial else cast.run(x)

    def plan(self, x) -> Plan:
        size = int(np.size(x))
        threads = self._threads(size, False)
        return Plan("parallel" if threads > 1 else "serial", threads, size,
                    "unary, through float32")

    def run(self, x) -> np.ndarray:
        return self._run(x, False)

    def run_serial(self, x) -> np.ndarray:
        return self._run(x, True)
