"""Shape-only operators: each output is a view of its input, computed without a kernel.

Reshape, Flatten, Squeeze, Unsqueeze and Identity move no element (converters put them
around every model: a Reshape of the output, an Identity of a name), and a Cast to the
type its input already has is an Identity (a Cast to another type is the Cast kernel).
They have no tuning key: nothing about them depends on the processor. A view is only as
fresh as the array it views, so the session copies a graph output that views one of its
inputs or constants (see :class:`~kerneltune.runtime.session.RuntimeSession`).

Their shapes come at run time from their inputs (Reshape's ``shape``, the ``axes`` of
Squeeze and Unsqueeze from opset 13 on) or from attributes (``axes`` before opset 13,
Flatten's ``axis``), as each operator's schema in the model's opset says.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..kernels.rows import normal_axes

#: ``view(*inputs)``: the output, a view of the first input
View = Callable[..., np.ndarray]


def identity(x: np.ndarray) -> np.ndarray:
    return x


def cast_like(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    """CastLike to the type ``x`` already has."""
    return x


def reshape(x: np.ndarray, shape: np.ndarray, allowzero: int = 0) -> np.ndarray:
    """Reshape: a 0 keeps the input's dimension there (unless ``allowzero``), one -1 is
    inferred."""
    wanted = _sizes(shape)
    if not allowzero:
        if any(size == 0 and index >= x.ndim for index, size in enumerate(wanted)):
            raise ValueError(f"Reshape: shape {wanted} keeps dimensions (0) the input of "
                             f"shape {list(x.shape)} does not have")
        wanted = [x.shape[index] if size == 0 else size for index, size in enumerate(wanted)]
    return x.reshape(wanted)


def flatten(x: np.ndarray, axis: int = 1) -> np.ndarray:
    """Flatten: the dimensions before ``axis`` into rows, the others into columns."""
    rank = x.ndim
    if not -rank <= axis <= rank:
        raise ValueError(f"Flatten: axis {axis} is outside [{-rank}, {rank}]")
    axis = axis + rank if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def squeeze(x: np.ndarray, axes: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """Squeeze: the given axes (each of size 1), or every axis of size 1."""
    if axes is None:
        return x.reshape([size for size in x.shape if size != 1])
    chosen = normal_axes(axes, x.ndim, "Squeeze")
    wrong = [axis for axis in chosen if x.shape[axis] != 1]
    if wrong:
        raise ValueError(f"Squeeze: axes {wrong} of shape {list(x.shape)} are not of size 1")
    return x.reshape([size for axis, size in enumerate(x.shape) if axis not in chosen])


def unsqueeze(x: np.ndarray, axes: Sequence[int] | np.ndarray) -> np.ndarray:
    """Unsqueeze: an axis of size 1 inserted at each of ``axes`` of the output."""
    rank = x.ndim + len(np.asarray(axes).reshape(-1))
    chosen = set(normal_axes(axes, rank, "Unsqueeze"))
    sizes = iter(x.shape)
    return x.reshape([1 if axis in chosen else next(sizes) for axis in range(rank)])


#: attributes each operator takes, with their defaults; those named in ``_INPUT_ATTRIBUTES``
#: became inputs in the opset given
ATTRIBUTES: Mapping[str, Mapping[str, Any]] = {
    "Identity": {}, "Reshape": {"allowzero": 0}, "Flatten": {"axis": 1},
    "Squeeze": {"axes": None}, "Unsqueeze": {"axes": None},
    "Cast": {"to": None, "saturate": None, "round_mode": None},
    "CastLike": {"saturate": None, "round_mode": None},
}
#: the operators whose output is a view of their first input, by name
FUNCTIONS: Mapping[str, View] = {"Identity": identity, "Reshape": reshape, "Flatten": flatten,
                                 "Squeeze": squeeze, "Unsqueeze": unsqueeze, "Cast": identity,
                                 "CastLike": cast_like}


def view_of(op_type: str, element_type: int, attributes: Mapping[str, Any]
            ) -> tuple[View | None, str | None]:
    """The view computing ``op_type`` with ``attributes``, or why it is not one."""
    function = FUNCTIONS[op_type]
    if op_type in ("Cast", "CastLike"):
        return function, None  # to its own type: one to another is the Cast kernel's
    given = {name: value for name, value in attributes.items() if value is not None}
    if op_type == "Unsqueeze" and "axes" not in given:
        return function, None  # from opset 13 on, the axes are an input
    return (functools.partial(function, **given) if given else function), None


def _reshape_to(shape: np.ndarray, allowzero: int = 0) -> View | None:
    """Reshape to a constant ``shape``, read once; None where a 0 keeps a dimension of the
    input (the sizes then depend on it)."""
    wanted = _sizes(shape)
    if not allowzero and 0 in wanted:
        return None
    return lambda x: x.reshape(wanted)


def _sizes(shape: np.ndarray) -> list[int]:
    """Reshape's ``shape`` input as Python ints."""
    return [int(size) for size in np.asarray(shape, dtype=np.int64).reshape(-1)]


#: for a view whose inputs after the first are constants (and its attributes), the function
#: of the first input alone that a session's run calls instead (None: none is simpler)
BINDERS: Mapping[View, Callable[..., View | None]] = {reshape: _reshape_to}
