"""Argument checks shared by the value types: a bool is never a number here.

Python's ``True`` is an ``int``; a thread count, a grain or a model number
given as ``True`` is a mistake, so every check refuses bools.
"""

from __future__ import annotations

import math
import numbers
import typing
from collections.abc import Mapping
from typing import Any


def is_int(value: object) -> bool:
    """An integer (a Python int or a numpy integer), not a bool."""
    # a plain int first: the ABC's check is slow, and runs for every value a file holds
    return type(value) is int or (isinstance(value, numbers.Integral)
                                  and not isinstance(value, bool))


def is_count(value: object, minimum: int = 0) -> bool:
    """An integer of at least ``minimum``, not a bool."""
    return is_int(value) and bool(value >= minimum)  # type: ignore[operator]


def is_positive_number(value: object) -> bool:
    """A finite real number above 0, not a bool."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value) and bool(value > 0))


def is_non_negative_number(value: object) -> bool:
    """A finite real number of at least 0, not a bool."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value) and bool(value >= 0))


def fields_of(data: object, kinds: Mapping[str, Any]) -> dict[str, Any]:
    """``data``'s fields named in ``kinds``, each of its kind (``float`` takes an int, never
    a bool; ``X | None`` takes None), floats as floats; a ValueError names the first that
    is missing or of another kind."""
    if not isinstance(data, Mapping):
        raise ValueError(f"expected an object, got {type(data).__name__}")
    fields = {}
    for name, kind in kinds.items():
        if name not in data:
            raise ValueError(f"no {name!r}")
        value, allowed = data[name], typing.get_args(kind) or (kind,)
        if value is None and type(None) in allowed:
            fields[name] = None
        elif float in allowed and isinstance(value, numbers.Real) and not isinstance(value,
                                                                                      bool):
            try:
                fields[name] = float(value)
            except OverflowError:
                raise ValueError(f"{name!r} is too large a number") from None
        elif any(k not in (float, type(None)) and isinstance(value, k)
                 and not (isinstance(value, bool) and k is not bool) for k in allowed):
            fields[name] = value
        else:
            raise ValueError(f"{name!r} is {type(value).__name__}")
    return fields
