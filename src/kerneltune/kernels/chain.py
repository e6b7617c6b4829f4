"""ElementwiseChain: elementwise steps of one tensor run as one kernel call.

A session fuses a chain of elementwise nodes (an activation written out as exporters write
GELU, ``x * Sigmoid(x)``) into one node of this kernel (:mod:`kerneltune.runtime.fusion`).
The compiled ``chain`` runs the steps block by block, each block in the L1 cache: one pass
over memory instead of one per node, and one call. Each step runs the unfused kernel's own
code over blocks that start on multiples of 64 elements as the unfused kernel's do, so each
element takes the same vector or scalar-tail path and the chain gives the unfused
session's bits.

A step is ``(operation, a, b, constant)``: an operation of ``CHAIN_OPERATIONS`` (a unary
operation is named after the compiled function the unfused kernel runs on this variant),
its operands as registers (0: the chain's input, ``s + 1``: step ``s``'s result) or
``CONSTANT`` for the step's constant. The chain has its own tuning key (its grain); its
portable default and its calibration run the GELU of tanh as exporters write it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .elementwise import FLOAT, UnaryKernel
from .unary_pythran import CHAIN_BINARY, CHAIN_OPERATIONS

#: the kernel's name, its tuning key's
CHAIN = "ElementwiseChain"
#: an operand that is the step's constant
CONSTANT = -1

#: operation name -> its code in the compiled ``chain``
CODES = {name: code for code, name in enumerate(CHAIN_OPERATIONS)}
#: the binary operations, by ONNX operator
BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}
#: Pow's exponents that run as products (the binary module's, as onnxruntime's)
POWERS = {2.0: "square", 3.0: "cube"}

#: x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))), as exporters write it
GELU_TANH = (("cube", 0, 0, 0.0), ("mul", 1, CONSTANT, 0.044715), ("add", 0, 2, 0.0),
             ("mul", 3, CONSTANT, 0.7978845608028654), ("tanhf_rational", 4, 4, 0.0),
             ("add", 5, CONSTANT, 1.0), ("mul", 0, 6, 0.0), ("mul", 7, CONSTANT, 0.5))


class ChainKernel(UnaryKernel):
    """FLOAT chains; the ``steps`` attribute is the chain (by default ``GELU_TANH``)."""

    def __init__(self, implementation: str, function: Callable,
                 grains: Mapping[int, int] | None = None):
        super().__init__(CHAIN, implementation, {FLOAT: function}, grains=grains)
        self._widened = ()  # a 16-bit product is rounded at each node: no chain of those

    def _chosen(self, attributes: Mapping[str, Any]) -> tuple[Mapping[int, Callable], tuple]:
        unknown = sorted(set(attributes) - {"steps"})
        if unknown:
            raise TypeError(f"{self.name} takes no attribute {unknown[0]}")
        steps = attributes.get("steps", GELU_TANH)
        if not steps:
            raise ValueError(f"{self.name}: a chain needs at least one step")
        code = np.empty((len(steps), 3), np.int64)
        for s, (operation, a, b, _) in enumerate(steps):
            if operation not in CODES:
                raise ValueError(f"{self.name}: step {s}: unknown operation {operation!r}")
            binary = CODES[operation] >= CHAIN_BINARY
            for operand in (a, b) if binary else (a,):
                if not CONSTANT <= operand <= s or (operand == CONSTANT and not binary):
                    raise ValueError(f"{self.name}: step {s}: operand {operand} is neither an "
                                     f"earlier register nor the step's constant")
            if binary and a == b == CONSTANT:
                raise ValueError(f"{self.name}: step {s}: both operands are constants")
            code[s] = CODES[operation], a, b if binary else 0
        constants = np.array([step[3] for step in steps], np.float32)
        return self._functions, ((code, constants),)
