"""ai.onnx.ml operators, each lowered to the steps that compute it.

skl2onnx writes these around linear models and MLPs. Each becomes steps of the default
domain's kernels, so its arithmetic is tuned and calibrated under those kernels' keys:

- LinearRegressor (LinearRegression, Ridge): ``X @ coefficients.T + intercepts``, a Gemm
  whose B and C are the node's coefficients, transposed once here so that no run packs
  them, and its intercepts, as constants;
- LinearClassifier (LogisticRegression): the same Gemm for the scores, the label of each
  row's largest score (ArgMax, then the labels' entry), and the scores through the
  ``post_transform`` (Sigmoid for LOGISTIC, Softmax for SOFTMAX);
- Normalizer: the rows kernel of that name; Scaler: ``(X - offset) * scale``, a Sub and a
  Mul; Binarizer: ``X > threshold`` (Greater) cast to FLOAT, 1 above and 0 elsewhere;
- ArrayFeatureExtractor and ZipMap move elements (:mod:`.selections`).

They compute FLOAT inputs; the others are refused by name, as are the attribute values
onnxruntime has and these steps do not (the PROBIT and SOFTMAX_ZERO
transforms, a classifier of one score column).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from . import selections

FLOAT, INT64, STRING, BOOL = (onnx.TensorProto.FLOAT, onnx.TensorProto.INT64,
                              onnx.TensorProto.STRING, onnx.TensorProto.BOOL)


@dataclass(frozen=True)
class Step:
    """One step of a lowered node: the kernel that computes it (by operator name) or the
    selection that moves its elements, its inputs, output and attributes."""

    operator: str
    inputs: tuple[str, ...]
    output: str
    attributes: Mapping[str, Any] = field(default_factory=dict)
    selection: Callable[..., Any] | None = None


@dataclass(frozen=True)
class Lowered:
    """A node as steps, the constants they add (by name) and the element type of each
    value they make (none for ZipMap's maps)."""

    steps: tuple[Step, ...]
    constants: Mapping[str, np.ndarray]
    types: Mapping[str, int]


def lower(node: onnx.NodeProto, input_types: list[int | None]
          ) -> tuple[Lowered | None, str | None]:
    """``node`` as the steps that compute it, or why it cannot be."""
    given = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    given = {name: value.decode() if isinstance(value, bytes) else value
             for name, value in given.items()}
    if node.op_type == "ArrayFeatureExtractor":
        step = Step(node.op_type, tuple(node.input), node.output[0],
                    selection=selections.array_feature_extractor)
        return Lowered((step,), {}, {node.output[0]: input_types[0]}), None
    if node.op_type == "ZipMap":
        return _zip_map(node, input_types, given)
    if input_types[0] != FLOAT:
        return None, f"a {node.op_type} of another input type than FLOAT: no kernel for it yet"
    return LOWERINGS[node.op_type](node, given)


def _zip_map(node, input_types, given) -> tuple[Lowered | None, str | None]:
    labels = given.get("classlabels_int64s", given.get("classlabels_strings"))
    if labels is None:
        return None, "no classlabels_int64s nor classlabels_strings"
    if input_types[0] != FLOAT:
        return None, "a ZipMap of another input type than FLOAT"
    step = Step(node.op_type, tuple(node.input), node.output[0],
                {"labels": tuple(_decoded(labels))}, selections.zip_map)
    return Lowered((step,), {}, {}), None


def _decoded(labels) -> list:
    """A list attribute's labels, its strings (bytes in the model) as str."""
    return [label.decode() if isinstance(label, bytes) else label for label in labels]


def _linear(node, given) -> tuple[dict[str, np.ndarray] | None, str | None]:
    """The coefficients (features x targets: B of the Gemm) and intercepts of a linear
    model, as constants named after the node's first output."""
    coefficients = np.asarray(given.get("coefficients", ()), np.float32)
    intercepts = np.asarray(given.get("intercepts", ()), np.float32)
    count = len(given.get("classlabels_ints", given.get("classlabels_strings", ())))
    targets = int(given.get("targets", 1)) if node.op_type == "LinearRegressor" else (
        intercepts.size or count)
    if targets < 1 or not coefficients.size or coefficients.size % targets:
        return None, (f"{coefficients.size} coefficients do not make {targets} rows of "
                      f"equal length")
    if node.op_type == "LinearRegressor" and not intercepts.size:
        intercepts = np.zeros(targets, np.float32)
    if intercepts.shape != (targets,):
        return None, f"{intercepts.size} intercepts for {targets} rows of coefficients"
    name = node.output[0]
    return {f"{name}/coefficients": np.ascontiguousarray(coefficients.reshape(targets, -1).T),
            f"{name}/intercepts": intercepts}, None


def _gemm(x: str, constants: Mapping[str, np.ndarray], output: str) -> Step:
    return Step("Gemm", (x, *constants), output,
                {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0})


def _linear_regressor(node, given) -> tuple[Lowered | None, str | None]:
    if given.get("post_transform", "NONE") != "NONE":
        return None, f"post_transform {given['post_transform']!r} is not supported (NONE is)"
    constants, problem = _linear(node, given)
    if problem:
        return None, problem
    output = node.output[0]
    return Lowered((_gemm(node.input[0], constants, output),), constants,
                   {output: FLOAT}), None


#: LinearClassifier's post_transform -> the kernel that computes it (None: the scores)
TRANSFORMS = {"NONE": None, "LOGISTIC": "Sigmoid", "SOFTMAX": "Softmax"}


def _linear_classifier(node, given) -> tuple[Lowered | None, str | None]:
    transform = given.get("post_transform", "NONE")
    if transform not in TRANSFORMS:
        return None, (f"post_transform {transform!r} is not supported "
                      f"({', '.join(TRANSFORMS)} are)")
    constants, problem = _linear(node, given)
    if problem:
        return None, problem
    labels, label_type = _class_labels(given)
    rows = constants[f"{node.output[0]}/coefficients"].shape[1]
    if rows < 2 or labels.size != rows:
        return None, (f"{rows} rows of coefficients for {labels.size} class labels: only a "
                      f"classifier with a row per label is supported")
    label, scores = node.output[0], node.output[1] if len(node.output) > 1 else ""
    raw = f"{label}/scores" if transform != "NONE" or not scores else scores
    index = f"{label}/index"
    steps = [_gemm(node.input[0], constants, raw),
             Step("ArgMax", (raw,), index, {"axis": 1, "keepdims": 0}),
             Step("Take", (f"{label}/labels", index), label, selection=selections.take)]
    if scores and TRANSFORMS[transform]:
        steps.append(Step(TRANSFORMS[transform], (raw,), scores,
                          {"axis": -1} if transform == "SOFTMAX" else {}))
    constants = {**constants, f"{label}/labels": labels}
    types = {raw: FLOAT, index: INT64, label: label_type}
    if scores:
        types[scores] = FLOAT
    return Lowered(tuple(steps), constants, types), None


def _class_labels(given) -> tuple[np.ndarray, int]:
    """A classifier's labels and their element type: INT64, or STRING (scikit-learn's
    classes when they are strings), held as onnxruntime returns them, str objects."""
    if "classlabels_strings" in given:
        return np.array(_decoded(given["classlabels_strings"]), dtype=object), STRING
    return np.asarray(given.get("classlabels_ints", ()), np.int64), INT64


def _normalizer(node, given) -> tuple[Lowered | None, str | None]:
    norm = given.get("norm", "MAX")
    if norm not in ("MAX", "L1", "L2"):
        return None, f"norm {norm!r} is none of MAX, L1, L2"
    step = Step("Normalizer", (node.input[0],), node.output[0], {"norm": norm})
    return Lowered((step,), {}, {node.output[0]: FLOAT}), None


def _scaler(node, given) -> tuple[Lowered | None, str | None]:
    name, output = node.output[0], node.output[0]
    offset = np.asarray(given.get("offset", (0.0,)), np.float32).reshape(-1)
    scale = np.asarray(given.get("scale", (1.0,)), np.float32).reshape(-1)
    if not offset.size or not scale.size:
        return None, "offset and scale must each have one value or one per column"
    constants = {f"{name}/offset": offset, f"{name}/scale": scale}
    steps = (Step("Sub", (node.input[0], f"{name}/offset"), f"{name}/shifted"),
             Step("Mul", (f"{name}/shifted", f"{name}/scale"), output))
    return Lowered(steps, constants, {f"{name}/shifted": FLOAT, output: FLOAT}), None


def _binarizer(node, given) -> tuple[Lowered | None, str | None]:
    name, output = node.output[0], node.output[0]
    threshold = np.asarray(given.get("threshold", 0.0), np.float32)
    above = f"{name}/above"
    steps = (Step("Greater", (node.input[0], f"{name}/threshold"), above),
             Step("Cast", (above,), output, {"to": FLOAT}))
    return Lowered(steps, {f"{name}/threshold": threshold}, {above: BOOL, output: FLOAT}), None


#: the ai.onnx.ml operators of FLOAT inputs that lower to kernels, each to its steps
LOWERINGS: Mapping[str, Callable] = {
    "LinearRegressor": _linear_regressor, "LinearClassifier": _linear_classifier,
    "Normalizer": _normalizer, "Scaler": _scaler, "Binarizer": _binarizer,
}
#: every ai.onnx.ml operator a session runs
OPERATORS = frozenset({*LOWERINGS, "ArrayFeatureExtractor", "ZipMap"})
