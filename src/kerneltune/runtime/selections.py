"""Operators that move elements without computing on them: Concat, Where, and the ai.onnx.ml
ArrayFeatureExtractor and ZipMap that skl2onnx writes around a classifier.

Each output is a fresh value, made by numpy (a copy costs what memory costs, on any
processor: there is no threshold to tune, so no tuning key). ArrayFeatureExtractor and
ZipMap give the shapes and types onnxruntime gives: a feature extractor of a 1-D input
returns one row, and ZipMap a list with one ``{label: probability}`` dict per row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

#: ``select(*inputs)``: the output, a fresh value
Selection = Callable[..., Any]


def concat(*inputs: np.ndarray, axis: int) -> np.ndarray:
    rank = inputs[0].ndim
    if not -rank <= axis < rank:
        raise _outside(axis, rank)
    return np.concatenate(inputs, axis=axis)


def _outside(axis: int, rank: int) -> ValueError:
    return ValueError(f"Concat: axis {axis} is outside [{-rank}, {rank - 1}]")


def complement_pair(x: np.ndarray, total: np.ndarray, axis: int,
                    complement_first: bool) -> np.ndarray:
    """Concat of ``total - x`` and ``x`` along ``axis`` (``x`` first unless
    ``complement_first``): a binary classifier's probabilities from its positive class's,
    as skl2onnx writes them, in one step (``total``: one element, of ``x``'s type)."""
    return _complement_pair_of(total, axis, complement_first)(x)


def _complement_pair_of(total: np.ndarray, axis: int, complement_first: bool
                        ) -> Callable[[np.ndarray], np.ndarray]:
    """:func:`complement_pair` of a constant ``total``, read once. The subtraction is
    numpy's, rounded once as the Sub kernel's is: the same bits."""
    rank = max(-axis, axis + 1)  # the least rank that has the axis

    def run(x: np.ndarray) -> np.ndarray:
        if x.ndim < rank:
            raise _outside(axis, x.ndim)
        complement = np.subtract(total, x)
        return np.concatenate((complement, x) if complement_first else (x, complement),
                              axis=axis)

    return run


def where(condition: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each element of ``x`` where ``condition`` holds, else of ``y``, the three broadcast."""
    return np.where(condition, x, y)


def array_feature_extractor(x: np.ndarray, indices: np.ndarray,
                            nonnegative: bool = False) -> np.ndarray:
    """The columns ``indices`` of the last axis; a 1-D ``x`` is one row. ``nonnegative``:
    the indices are an ArgMax's or ArgMin's, so none is negative (a session knows it from
    the graph and skips the search)."""
    return _extract(x, _chosen(indices), nonnegative)


def _chosen(indices: np.ndarray) -> np.ndarray:
    return np.asarray(indices, np.int64).reshape(-1)


def _extract(x: np.ndarray, chosen: np.ndarray, nonnegative: bool = False) -> np.ndarray:
    # ``take`` refuses an index past the end itself; a negative one it would count from
    # the end, so those are looked for first
    columns = x.shape[-1] if x.ndim else 0
    try:
        if chosen.size == 0 or columns == 0 or not nonnegative and _negative(chosen):
            raise IndexError
        taken = x.take(chosen, axis=-1)
    except IndexError:
        raise _out_of_range(chosen, columns) from None
    return taken.reshape(1, -1) if x.ndim == 1 else taken


def _out_of_range(chosen: np.ndarray, columns: int) -> ValueError:
    return ValueError(f"ArrayFeatureExtractor: indices {chosen.tolist()[:8]} are not all "
                      f"within the {columns} columns of the input")


def _negative(chosen: np.ndarray) -> bool:
    """Whether an index is negative; a few are compared in Python, where numpy's reduction
    costs a microsecond (a batch of one has one index)."""
    return min(chosen.tolist()) < 0 if chosen.size <= 16 else bool(chosen.min() < 0)


def _extractor_of(indices: np.ndarray, nonnegative: bool = False
                  ) -> Callable[[np.ndarray], np.ndarray]:
    """ArrayFeatureExtractor of ``indices``, read once (a session's constant indices)."""
    chosen = _chosen(indices)
    checked = nonnegative or not _negative(chosen)  # constant indices: searched once
    return lambda x: _extract(x, chosen, checked)


def _taker_of(x: np.ndarray, nonnegative: bool = False) -> Callable[[np.ndarray], np.ndarray]:
    """ArrayFeatureExtractor of a constant ``x`` (the labels of a classifier's classes,
    indexed by its scores' ArgMax), the indices computed by the run.

    Labels in one row indexed by an ArgMax's indices take one call of ``take``, which
    gives the output the shape of its indices (a row of them): a classifier's run pays
    for no conversion, search or reshape.
    """
    x = np.asarray(x)
    if x.ndim != 1 or not nonnegative:
        return lambda indices: _extract(x, _chosen(indices), nonnegative)

    def take(indices: np.ndarray) -> np.ndarray:
        try:
            if not indices.size:
                raise IndexError
            return x.take(indices.reshape(1, -1))
        except IndexError:
            raise _out_of_range(_chosen(indices), x.size) from None

    return take


def take(values: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``values[indices]``: a classifier's label of each row from the index of its class."""
    return np.take(values, indices)


def zip_map(x: np.ndarray, labels: Sequence[Any]) -> list[dict[Any, float]]:
    """One ``{label: value}`` dict per row of ``x`` (of as many columns as labels)."""
    return _zip_map_of(labels)(x)


def _zip_map_of(labels: Sequence[Any]) -> Callable[[np.ndarray], list[dict[Any, float]]]:
    """ZipMap of ``labels``, its dicts made by a comprehension written for them: a dict
    display builds a row's dict in about half the time of ``dict(zip(labels, row))``. The
    labels are the comprehension's globals, never its text.

    The values come as one flat list, a row's at a time: a list per row (``tolist``'s) is
    an object the cyclic garbage collector tracks, and thousands of them set it off again
    and again, while a dict of numbers and strings is not tracked (docs/kernels.md,
    "ai.onnx.ml operators")."""
    count = len(labels)
    names = {f"label{i}": label for i, label in enumerate(labels)}
    display = ", ".join(f"label{i}: value{i}" for i in range(count))
    values = "".join(f"value{i}, " for i in range(count)) or "_ "
    rows_as_dicts = eval(f"lambda rows: [{{{display}}} for {values}in rows]", names)

    def run(x: np.ndarray) -> list[dict[Any, float]]:
        if x.ndim != 2 or x.shape[1] != count:
            raise ValueError(f"ZipMap: expected [N, {count}] for {count} labels, got "
                             f"shape {list(x.shape)}")
        if not count:
            return rows_as_dicts(range(x.shape[0]))
        flat = iter(x.ravel().tolist())
        return rows_as_dicts(zip(*[flat] * count, strict=True))

    return run


#: the selections of the default domain and their attributes (the checker has made sure a
#: node has those its schema requires)
ATTRIBUTES: Mapping[str, Mapping[str, Any]] = {"Concat": {"axis": None}, "Where": {}}
FUNCTIONS: Mapping[str, Selection] = {"Concat": concat, "Where": where}
#: the input whose element type a selection's output has, where it is not the first (the
#: first of Where is its BOOL condition)
TYPED_BY: Mapping[str, int] = {"Where": 1}
#: for a selection whose inputs after the first are constants (and its attributes), the
#: function of the first input alone that a session's run calls instead
BINDERS: Mapping[Selection, Callable[..., Callable[[np.ndarray], Any]]] = {
    array_feature_extractor: _extractor_of, zip_map: _zip_map_of,
    complement_pair: _complement_pair_of}
#: for a selection whose first input is a constant and whose second is not, the function of
#: the second input alone that a session's run calls instead
CONSTANT_FIRST_BINDERS: Mapping[Selection, Callable[[np.ndarray], Callable[[Any], Any]]] = {
    array_feature_extractor: _taker_of, take: lambda values: np.asarray(values).take}
