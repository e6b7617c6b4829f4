"""Argument checks shared by the value types: a bool is never a number here.

Python's ``True`` is an ``int``; a thread count, a grain or a model number
given as ``True`` is a mistake, so every check refuses bools.
"""

from __future__ import annotations

import math
import numbers


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
