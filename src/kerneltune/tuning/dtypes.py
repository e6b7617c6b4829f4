"""numpy dtypes of the ONNX element types that kerneltune holds.

One table for the kernels, the runtime and calibration's inputs of the types the kernels
compute on, and one of the narrow types a session holds and casts but no kernel computes
on (:data:`NARROW_DTYPES`). They live apart from :mod:`kerneltune.tuning.schema`, which
names element types without importing numpy. BFLOAT16 and the narrow types are ml_dtypes'
dtypes, imported on first use: the import takes most of a second, which ``import
kerneltune`` must not pay.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

import numpy as np

from .schema import element_type_number

BFLOAT16 = element_type_number("BFLOAT16")
#: the element types of floating-point numbers (bfloat16's numpy kind is "V", not "f")
FLOATING = frozenset(element_type_number(name) for name in ("FLOAT", "DOUBLE", "FLOAT16",
                                                            "BFLOAT16"))


class _Dtypes(Mapping[int, np.dtype]):
    """numpy's own dtypes (by name), and ml_dtypes' (by their names in ml_dtypes), looked up
    when first asked for."""

    def __init__(self, names: tuple[str, ...], ml_names: Mapping[str, str]):
        self._dtypes = {element_type_number(name): np.dtype(name) for name in names}
        self._ml_names = {element_type_number(name): ml for name, ml in ml_names.items()}
        self._order = (*self._dtypes, *self._ml_names)

    def __getitem__(self, element_type: int) -> np.dtype:
        dtype = self._dtypes.get(element_type)
        if dtype is None:
            ml_name = self._ml_names[element_type]
            dtype = self._dtypes[element_type] = np.dtype(
                getattr(importlib.import_module("ml_dtypes"), ml_name))
        return dtype

    def __iter__(self) -> Iterator[int]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, element_type: object) -> bool:
        return element_type in self._order


NUMPY_DTYPES: Mapping[int, np.dtype] = _Dtypes(
    ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "uint16",
     "uint32", "uint64", "bool"), {"BFLOAT16": "bfloat16"})

#: the 8-, 6-, 4- and 2-bit types: a session holds them (one byte an element, as ml_dtypes
#: has them) and casts them to and from the others (:mod:`kerneltune.runtime.casts`)
NARROW_DTYPES: Mapping[int, np.dtype] = _Dtypes((), {
    "FLOAT8E4M3FN": "float8_e4m3fn", "FLOAT8E4M3FNUZ": "float8_e4m3fnuz",
    "FLOAT8E5M2": "float8_e5m2", "FLOAT8E5M2FNUZ": "float8_e5m2fnuz",
    "FLOAT8E8M0": "float8_e8m0fnu", "FLOAT6E2M3": "float6_e2m3fn",
    "FLOAT6E3M2": "float6_e3m2fn", "FLOAT4E2M1": "float4_e2m1fn", "UINT4": "uint4",
    "INT4": "int4", "UINT2": "uint2", "INT2": "int2"})


def held_dtype(element_type: int) -> np.dtype | None:
    """The dtype a session holds ``element_type`` in, a kernel's or a narrow type's; None for
    the others (STRING, the complex types)."""
    for table in (NUMPY_DTYPES, NARROW_DTYPES):
        if element_type in table:
            return table[element_type]
    return None
