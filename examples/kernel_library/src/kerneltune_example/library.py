"""The library's entry point: what ``import kerneltune`` calls to register it.

The entry point names this module, not the package: ``import kerneltune_example``
imports kerneltune, which loads every library while the package's own
``__init__`` is still running, so ``register`` lives where it needs none of it.
"""

from __future__ import annotations

from kerneltune import KernelLibraryInfo, KernelTuningRegistry
from kerneltune.calibration import register_kernel_calibration_function

from .calibration import ScaleCalibration, SumOfSquaresCalibration
from .kernels import ELEMENT_TYPES, IMPLEMENTATION, KERNELS, LIBRARY, key_of

VERSION = "1.0.0"

_CALIBRATIONS = {"SumOfSquares": SumOfSquaresCalibration, "Scale": ScaleCalibration}


def register(registry: KernelTuningRegistry) -> KernelLibraryInfo:
    """Register every (kernel, element type) schema and calibration function in ``registry``.

    kerneltune gives a registry of this library's own, checks what landed there and
    publishes it whole; an exception here leaves nothing of the library behind.
    """
    registry.register_schemas([(key_of(name, element_type), config)
                               for name, (_, config) in KERNELS.items()
                               for element_type in ELEMENT_TYPES])
    registry.register_implementations(LIBRARY, [IMPLEMENTATION])
    for name in KERNELS:
        for element_type in ELEMENT_TYPES:
            register_kernel_calibration_function(
                key_of(name, element_type), _CALIBRATIONS[name](name, element_type),
                registry=registry)
    return KernelLibraryInfo(LIBRARY, VERSION, (IMPLEMENTATION,))
