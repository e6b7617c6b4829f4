"""The kernel library "kerneltune_cpu": pythran kernels compiled per ISA variant.

:func:`library` builds the kernels of one variant (by default the best one the
processor can run); :func:`register_library` registers the schema and the
calibration function of every (kernel, element type), and the library's
machine probes, with a tuning registry. :func:`register` is the library's entry
point (group ``kerneltune.kernel_libraries``), through which ``import kerneltune``
registers it as it does any installed library. A kernel library of the core's: it may import
:mod:`kerneltune.calibration` and the layers below it, never the profiles, the
runtime or the command line.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterable, Mapping

import numpy as np

from .._support.version import __version__
from ..tuning.libraries import KernelLibraryInfo
from ..tuning.machine_probes import register_machine_probe
from ..tuning.registry import KernelTuningRegistry
from ..tuning.schema import element_type_number
from . import catalog, half
from .base import LIBRARY, SHARED_CACHE, TUNING_ABI, Kernel, Plan, PreparedKernel
from .cast import CastKernel
from .chain import CHAIN, ChainKernel
from .elementwise import BinaryKernel, ClipKernel, UnaryKernel
from .gemm import Gemm
from .layer_normalization import LayerNormalization
from .matmul import MatMul
from .outputs import output_pool_bytes, set_output_pool_limit
from .power import PowKernel
from .rows import RowsKernel
from .variants import load_module, possible_variants, selected_variant

__all__ = [
    "LIBRARY",
    "TUNING_ABI",
    "Kernel",
    "Plan",
    "PreparedKernel",
    "library",
    "output_pool_bytes",
    "register",
    "register_library",
    "set_output_pool_limit",
]

_BOOL = element_type_number("BOOL")


def _functions(module, table: Mapping[str, tuple[str, ...]]) -> dict[int, object]:
    """Compiled function per element type; one listed for a 16-bit float gets the bit patterns.

    A 16-bit float left out is widened to FLOAT by the kernel (see ``catalog``).
    """
    functions = {
        element_type_number(element_type): getattr(module, name)
        for name, element_types in table.items()
        for element_type in element_types
    }
    for element_type in half.FORMATS:
        if element_type in functions:
            functions[element_type] = _on_bits(functions[element_type])
    return functions


def _by_element_type(grains: Mapping[int, tuple[str, ...]]) -> dict[int, int]:
    """A catalog table's {grain: element types} as {element type number: grain}."""
    return {element_type_number(element_type): grain for grain, element_types in grains.items()
            for element_type in element_types}


def _grains(name: str) -> dict[int, int]:
    """Portable grain per element type where the operator's is not the catalog's default."""
    return {**{element_type_number(element_type): grain
               for element_type, grain in catalog.ELEMENT_GRAINS.items()},
            **_by_element_type(catalog.GRAINS.get(name, {}))}


def _on_bits(function):
    """A unary function of ``uint16`` arrays, applied to 16-bit float arrays' bit patterns."""
    def run(x, out, threads):
        return function(x.view(np.uint16), out.view(np.uint16), threads)
    return run


@functools.cache
def library(implementation: str | None = None) -> Mapping[str, Kernel]:
    """Every kernel of one ISA variant, by ONNX operator name, and the chain a session fuses
    elementwise nodes into (:mod:`.chain`) by its own."""
    implementation = implementation or selected_variant()
    unary, binary = load_module("unary", implementation), load_module("binary", implementation)
    # Clip takes its bounds with each call; Pow also takes exponents of other types than its
    # base's
    kinds = {"Clip": ClipKernel,
             "Pow": functools.partial(PowKernel, wide=_functions(binary, catalog.POW_WIDE))}
    kernels: dict[str, Kernel] = {
        name: kinds.get(name, UnaryKernel)(
            name, implementation, _functions(unary, catalog.UNARY[name]),
            grains=_grains(name), attributes=catalog.UNARY_ATTRIBUTES.get(name),
            choices={attribute: {value: _functions(unary, table)
                                 for value, table in options.items()}
                     for attribute, options in catalog.UNARY_CHOICES.get(name, {}).items()})
        for name in catalog.UNARY
    }
    kernels.update(
        (name, kinds.get(name, BinaryKernel)(
            name, implementation, _functions(binary, table),
            output=_BOOL if name in catalog.BOOLEAN_OUTPUT else None, grains=_grains(name),
            broadcast_grains=_by_element_type(catalog.BROADCAST_GRAINS.get(name, {}))))
        for name, table in catalog.BINARY.items()
    )
    rows = load_module("rows", implementation)
    kernels.update((name, RowsKernel(name, implementation, _functions(rows, table),
                                     grains=_grains(name)))
                   for name, table in catalog.ROWS.items())
    kernels["LayerNormalization"] = LayerNormalization(
        implementation, _functions(rows, catalog.LAYER_NORMALIZATION),
        grains=_grains("LayerNormalization"))
    kernels["Cast"] = CastKernel(implementation, unary.cast, grains=_grains("Cast"))
    kernels[CHAIN] = ChainKernel(implementation, unary.chain, _grains(CHAIN))
    kernels["Gemm"] = Gemm(implementation)
    kernels["MatMul"] = MatMul(implementation)
    return kernels


def register_library(registry: KernelTuningRegistry, implementation: str | None = None) -> int:
    """Register every (kernel, element type) schema of one variant in one generation.

    Each key also gets its calibration function, and the library its machine probes, in
    ``registry``, so the whole library is calibratable there.
    """
    items = [
        (kernel.tuning_key(element_type), kernel.config_type(element_type))
        for kernel in library(implementation).values()
        for element_type in kernel.element_types
    ]
    registry.register_schemas(items)
    registry.register_implementations(LIBRARY, possible_variants())
    _register_calibrations(library(implementation).values(), registry)
    return len(items)


def register(registry: KernelTuningRegistry) -> KernelLibraryInfo:
    """The library's entry point: the variant this processor runs, registered in ``registry``."""
    implementation = selected_variant()
    register_library(registry, implementation)
    return KernelLibraryInfo(LIBRARY, __version__, (implementation,))


def _register_calibrations(kernels: Iterable[Kernel], registry: KernelTuningRegistry) -> None:
    """Register with ``registry`` a calibration function for every (kernel, element type).

    Add also gives the machine probes that watch the library's calibrations: its
    parallel speed, and its shared cache (on one thread too). Each function and probe is
    made when first used, so that registration at import loads none of the calibration
    machinery.
    """
    for kernel in kernels:
        if kernel.name == "Add":
            register_machine_probe(LIBRARY, _Deferred("probes", "machine_probe", kernel),
                                   registry=registry)
            register_machine_probe(LIBRARY, _Deferred("probes", "shared_cache_probe", kernel),
                                   SHARED_CACHE, minimum_threads=1, registry=registry)
        module, kind = next(calibration for kind, calibration in _CALIBRATIONS
                            if isinstance(kernel, kind))
        for element_type in kernel.element_types:
            registry.register_calibration_function(
                kernel.tuning_key(element_type), _Deferred(module, kind, kernel, element_type))


#: each kind of kernel's calibration (module, class), the first that the kernel is an
#: instance of
_CALIBRATIONS = (
    (Gemm, ("calibrate_gemm", "GemmCalibration")),
    (LayerNormalization, ("calibrate", "LayerNormalizationCalibration")),
    (RowsKernel, ("calibrate", "RowsCalibration")),
    (CastKernel, ("calibrate", "CastCalibration")),
    (ClipKernel, ("calibrate", "ClipCalibration")),
    (Kernel, ("calibrate", "ElementwiseCalibration")),
)


class _Deferred:
    """``<module>.<factory>(*arguments)``, a calibration function or machine probe, made at
    its first call or attribute (a calibration's ``workload``, say)."""

    def __init__(self, module: str, factory: str, *arguments: object):
        self._module, self._factory, self._arguments = module, factory, arguments

    @functools.cached_property
    def made(self):
        module = importlib.import_module(f".{self._module}", __name__)
        return getattr(module, self._factory)(*self._arguments)

    def __call__(self, *arguments: object):
        return self.made(*arguments)

    def __getattr__(self, name: str):
        if name.startswith("_"):  # what made would not have either, copy and pickle ask
            raise AttributeError(name)
        return getattr(self.made, name)
