"""Cast between element types: one compiled function (``unary.cast``) for every pair of
``catalog.CAST``'s types, converting as C++ does (a float truncated toward zero into an
integer, anything but zero true as a bool), which is what onnxruntime and numpy do.

The key is the input's element type; the target is the node's ``to``. A Cast to the type
its input already has is no kernel: the model binds it to a view
(:mod:`kerneltune.runtime.views`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..tuning.dtypes import NUMPY_DTYPES
from ..tuning.schema import element_type_name, element_type_number
from .base import Kernel, PreparedKernel
from .catalog import CAST, DEFAULT_GRAIN
from .elementwise import ElementwiseConfig, PreparedUnary, with_grain

TYPES = tuple(element_type_number(name) for name in CAST)


class CastKernel(Kernel):
    """Cast from each of ``catalog.CAST``'s types to each other one."""

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
        return PreparedUnary(self.tuning_key(element_type), config, threads, self._function,
                             NUMPY_DTYPES[element_type], NUMPY_DTYPES[target])
