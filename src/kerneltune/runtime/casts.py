"""Casts the Cast kernel does not compute: from and to the narrow element types (the 8-, 6-
and 4-bit floats and the 4- and 2-bit integers, which numpy holds one element a byte as
ml_dtypes' dtypes), and between the integer types its compiled function does not take
(INT16, UINT16, UINT32, UINT64) and the others.

No kernel computes on the narrow types: a model keeps weights or activations in them and
casts them to a type the kernels take, or back. Their Casts are ONNX's reference
conversions (onnx's reference evaluator and its backend tests use the same): ml_dtypes'
``astype`` (round to nearest even; a float into an integer truncated and wrapped, as numpy
does), except that

- to an 8-bit float with ``saturate`` (opset 19, 1 by default) a value beyond the type's
  range, infinities included, becomes its largest finite value of that sign
  (``onnx.numpy_helper.saturate_cast``), where ``astype`` makes it NaN or infinite;
- to FLOAT8E8M0 (powers of two) the value is rounded as ``round_mode`` says (opset 24:
  ``"up"`` by default, ``"down"``, ``"nearest"``), and saturated likewise
  (``onnx.numpy_helper.to_float8e8m0``).

The other integer types convert as numpy's ``astype`` does, which is C's conversion, as the
compiled cast's: a float truncated toward zero, an integer wrapped around, anything but zero
true. Such a Cast is one numpy pass with nothing to tune: no kernel, no tuning key
(docs/kernels.md, Cast).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import numpy as np
from onnx import numpy_helper

from ..tuning.dtypes import held_dtype
from ..tuning.schema import element_type_name, element_type_number

#: the 8-bit floats whose Casts ``saturate``
SATURATING = frozenset(element_type_number(name) for name in (
    "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ"))
E8M0 = element_type_number("FLOAT8E8M0")
ROUND_MODES = ("up", "down", "nearest")

#: ``convert(x)``: ``x`` cast, a fresh array
Conversion = Callable[[np.ndarray], np.ndarray]


def involves(source: int, target: int, computed: Collection[int]) -> bool:
    """Whether a Cast from ``source`` to ``target`` is one of this module's: between types a
    session holds, not both among ``computed``, the Cast kernel's types."""
    return (not {source, target} <= set(computed)
            and held_dtype(source) is not None and held_dtype(target) is not None)


def conversion(source: int, target: int, saturate: int = 1,
               round_mode: str = "up") -> Conversion:
    """The Cast from ``source`` to ``target``, two types a session holds; a ValueError says
    why there is none (a pair ml_dtypes does not convert, or an unknown ``round_mode``)."""
    if round_mode not in ROUND_MODES:
        raise ValueError(f"round_mode {round_mode!r} is none of {', '.join(ROUND_MODES)}")
    dtype = held_dtype(target)
    if target in SATURATING and saturate:
        def cast(x: np.ndarray) -> np.ndarray:
            return numpy_helper.saturate_cast(x, dtype)
    elif target == E8M0:
        def cast(x: np.ndarray) -> np.ndarray:
            return numpy_helper.to_float8e8m0(x, bool(saturate), round_mode).astype(dtype)
    else:
        def cast(x: np.ndarray) -> np.ndarray:
            return x.astype(dtype)

    def convert(x: np.ndarray) -> np.ndarray:
        # values beyond the target's range are the conversion's to define, not warnings
        with np.errstate(all="ignore"):
            return cast(x)

    def widened(x: np.ndarray) -> np.ndarray:
        return convert(x.astype(np.float32))

    # ml_dtypes converts some pairs of its types only through float32, which holds every
    # value of theirs exactly: the same result as a direct conversion would be
    for function in (convert, widened):
        try:
            function(np.zeros(1, held_dtype(source)))
            return function
        except (TypeError, ValueError) as error:
            problem = error
    raise ValueError(f"no conversion from {element_type_name(source)} to "
                     f"{element_type_name(target)}: {problem}")

