"""FLOAT16 and BFLOAT16 Gemm and MatMul: the float32 product between a widening and a narrowing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import half
from .base import Plan, PreparedKernel, operand

if TYPE_CHECKING:
    from .gemm import PreparedGemm
    from .matmul import PreparedMatMul


class PreparedHalfGemm(PreparedKernel):
    """A 16-bit float through a float32 Gemm or MatMul: widen the inputs, compute, narrow the
    result.

    The result is the float32 result rounded once to the 16-bit type.
    """

    uses_blas = True

    def __init__(self, inner: PreparedGemm | PreparedMatMul, half_format: half.HalfFormat,
                 conversion_minimum: int):
        self.inner, self.format = inner, half_format
        self.key, self.config, self.threads = inner.key, inner.config, inner.threads
        self._dtype = half_format.dtype
        self.conversion_minimum = conversion_minimum

    def _widen(self, value, name: str, serial: bool) -> np.ndarray:
        x = operand(value, self._dtype, name)
        threads = self.threads if not serial and x.size >= self.conversion_minimum else 1
        # the float32 product reads its operands in place, at a speed that depends on
        # their placement as much as on the thresholds calibrated for it
        return self.format.to_float32(x, threads, aligned=True)

    def _narrow(self, result: np.ndarray, serial: bool) -> np.ndarray:
        threads = self.threads if not serial and result.size >= self.conversion_minimum else 1
        return self.format.from_float32(np.ascontiguousarray(result), threads)

    def _inputs(self, inputs, serial: bool) -> list:
        return [None if value is None else self._widen(value, name, serial)
                for value, name in zip(inputs, "ABC", strict=False)]

    def plan(self, *inputs) -> Plan:
        step = self.inner.plan(*inputs)
        threads = "/".join(str(self.threads if size >= self.conversion_minimum else 1)
                           for size in [*(int(np.size(x)) for x in inputs if x is not None),
                                        step.elements])
        return Plan(step.path, step.threads, step.elements,
                    f"{self._dtype.name} {step.form}, converted on {threads} threads")

    def run(self, *inputs) -> np.ndarray:
        return self._narrow(self.inner.run(*self._inputs(inputs, False)), False)

    def run_serial(self, *inputs) -> np.ndarray:
        return self._narrow(self.inner.run_serial(*self._inputs(inputs, True)), True)
