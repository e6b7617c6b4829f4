"""Pow with an exponent of another element type than its base (ONNX's T1), as onnxruntime.

numpy would promote such a pair to a wider result; ONNX keeps the base's type, and
onnxruntime computes ``std::pow(base, exponent)`` with a 16-bit float read as float:
two float32 operands take float32's ``powf``, any other pair C++ promotes to float64's
``pow``, and the result is converted to the base's type (an integer truncated). A
one-element exponent of 2 or 3 is ``x * x`` or ``x * x * x`` in the base's type, for
every pair (``binary_pythran``).

The exponent is converted once per call to the type the compiled function reads:
float32 for a float32 computation with a 16- or 32-bit float exponent, float64 for
every other pair, which is exact for every exponent but a 64-bit integer beyond 2**53,
and C++'s promotion rounds that one the same way. The key stays the base's: a mixed
call runs on the Pow key of its base type, with its grains.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import UnknownKernelError
from ..tuning.dtypes import NUMPY_DTYPES
from ..tuning.schema import element_type_name, element_type_number
from . import half
from .base import Plan, PreparedKernel, operand
from .catalog import EXPONENTS
from .elementwise import BinaryKernel, PreparedBinary, PreparedHalf

FLOAT, DOUBLE = element_type_number("FLOAT"), element_type_number("DOUBLE")
#: exponent types a float32 computation reads as float32 (powf), as onnxruntime does
_SINGLE = frozenset({FLOAT, *half.FORMATS})
EXPONENT_TYPES = tuple(element_type_number(t) for t in EXPONENTS)


class PreparedExponent(PreparedKernel):
    """Pow of a base and an exponent of another type: the exponent converted, then computed."""

    def __init__(self, inner: PreparedBinary, exponent_dtype: np.dtype):
        self.inner = inner
        self.key, self.config, self.threads = inner.key, inner.config, inner.threads
        self.thread_limit, self.out_dtype = inner.thread_limit, inner.out_dtype
        self._exponent_dtype, self._read_dtype = exponent_dtype, inner.b_dtype

    def _exponent(self, value: object) -> np.ndarray:
        return operand(value, self._exponent_dtype, "B").astype(self._read_dtype, copy=False)

    def plan(self, a, b) -> Plan:
        return self.inner.plan(a, b)

    def run(self, a, b) -> np.ndarray:
        return self.inner.run(a, self._exponent(b))

    def run_serial(self, a, b) -> np.ndarray:
        return self.inner.run_serial(a, self._exponent(b))


class PowKernel(BinaryKernel):
    """Pow: a base and an exponent of one type as every binary kernel; of two types through
    ``wide``, the compiled functions of a base and a float64 exponent, per base type.

    ``prepare(..., exponent_type=...)`` names the exponent's type where it differs.
    """

    def __init__(self, *args: Any, wide: Mapping[int, Callable], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._wide = dict(wide)

    def run(self, inputs: Sequence[object], config: Any = None, threads: int | None = None,
            **attributes: Any) -> np.ndarray:
        """One call; the element types are the inputs' (base first, exponent second)."""
        attributes.setdefault("exponent_type", np.asarray(inputs[1]).dtype)
        return super().run(inputs, config, threads, **attributes)

    def _prepare(self, element_type, config, threads, attributes) -> PreparedKernel:
        attributes = dict(attributes)
        exponent = element_type_number(attributes.pop("exponent_type", element_type))
        if exponent == element_type:
            return super()._prepare(element_type, config, threads, attributes)
        if attributes:
            raise TypeError(f"Pow takes no attributes, got {sorted(attributes)}")
        if exponent not in EXPONENT_TYPES:
            raise UnknownKernelError(f"Pow has no {element_type_name(exponent)} exponents")
        compute = half.compute_type(element_type)
        if compute == DOUBLE or (compute == FLOAT and exponent in _SINGLE):
            function, read = self._functions[compute], compute
        else:
            function, read = self._wide[compute], DOUBLE
        dtype = NUMPY_DTYPES[compute]
        inner = PreparedExponent(
            PreparedBinary(self.tuning_key(element_type), config, threads, function, dtype,
                           dtype, NUMPY_DTYPES[read]),
            NUMPY_DTYPES[exponent])
        if compute == element_type:
            return inner
        return PreparedHalf(inner, half.FORMATS[element_type],
                            config.conversion_minimum_elements, widened=1)
