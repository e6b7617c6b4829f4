"""One-line reprs for report objects: what a report holds at a glance, the whole in to_dict().

A dataclass repr spells out every nested value, so a report's runs to thousands of
characters (each processor descriptor with its whole feature set). :func:`brief_repr`
replaces it with a line: scalars as they are, collections by their size, nested
objects by their own short text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TypeVar

#: the longest a field's text gets before it is cut
_WIDTH = 60

T = TypeVar("T", bound=type)


def brief_repr(cls: T) -> T:
    """A class decorator (outside ``@dataclass(repr=False)``: a repr the dataclass made would
    be replaced, and making it costs as the module loads): its repr becomes one line."""
    cls.__repr__ = _brief
    return cls


def _brief(self: object) -> str:
    fields = (field for field in dataclasses.fields(self) if field.repr)
    parts = ", ".join(f"{field.name}={_short(getattr(self, field.name))}" for field in fields)
    return f"{type(self).__name__}({parts})"


def _short(value: object) -> str:
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return f"<{len(value)} items>" if value else repr(type(value)())
    if dataclasses.is_dataclass(value) and type(value).__str__ is object.__str__:
        return f"{type(value).__name__}(...)"
    text = repr(value) if isinstance(value, str | int | float | bool | None) else str(value)
    return text if len(text) <= _WIDTH else text[:_WIDTH - 3] + "..."
