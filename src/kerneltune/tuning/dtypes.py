"""numpy dtypes of the ONNX element types that kerneltune computes on.

One table for the kernels, the runtime and calibration's inputs. It lives
apart from :mod:`kerneltune.tuning.schema`, which names element types without
importing numpy. BFLOAT16 is ml_dtypes' ``bfloat16``, imported on first use:
the import takes most of a second, which ``import kerneltune`` must not pay.
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
    """numpy's own dtypes, and BFLOAT16's looked up when it is first asked for."""

    def __init__(self, names: tuple[str, ...]):
        self._dtypes = {element_type_number(name): np.dtype(name) for name in names}
        self._order = (*self._dtypes, BFLOAT16)

    def __getitem__(self, element_type: int) -> np.dtype:
        dtype = self._dtypes.get(element_type)
        if dtype is None:
            if element_type != BFLOAT16:
                raise KeyError(element_type)
            dtype = self._dtypes[BFLOAT16] = np.dtype(
                importlib.import_module("ml_dtypes").bfloat16)
        return dtype

    def __iter__(self) -> Iterator[int]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, element_type: object) -> bool:
        return element_type in self._order


NUMPY_DTYPES: Mapping[int, np.dtype] = _Dtypes(
    ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "uint16",
     "uint32", "uint64", "bool"))
