"""numpy dtypes of the ONNX element types that kerneltune computes on.

One table for the kernels, the runtime and calibration's inputs. It lives
apart from :mod:`kerneltune.schema`, which names element types without
importing numpy.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .schema import element_type_number

NUMPY_DTYPES: Mapping[int, np.dtype] = {
    element_type_number(name): np.dtype(name)
    for name in ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8",
                 "uint16", "uint32", "uint64", "bool")
}
