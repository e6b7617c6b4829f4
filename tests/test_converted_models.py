"""Models as a real converter writes them: skl2onnx over scikit-learn estimators.

The corpus is committed in tests/data/converted (``make_models.py`` there writes it
again), so these tests need neither scikit-learn nor skl2onnx. Every model runs, with
onnxruntime's results: the regressors' values, the classifiers' labels and probabilities
(ZipMap's dicts too). The ai.onnx.ml operators run on the kernels they lower to.
"""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

from kerneltune.errors import UnsupportedModelError
from kerneltune.runtime import RuntimeSession, selections

CORPUS = Path(__file__).resolve().parent / "data" / "converted"
REGRESSORS = ("mlp_regressor_relu", "mlp_regressor_tanh", "mlp_regressor_logistic",
              "linear_regression", "ridge", "scaler_mlp_regressor", "binarizer_linear_regression")
CLASSIFIERS = ("mlp_classifier_zipmap", "mlp_classifier_no_zipmap",
               "mlp_classifier_tanh_no_zipmap", "logistic_regression_zipmap",
               "logistic_regression_no_zipmap", "scaler_logistic_regression", "sgd_classifier")
#: classifiers of classes named by strings, which skl2onnx writes as string labels
NAMED_CLASSIFIERS = ("logistic_regression_named_zipmap", "logistic_regression_named_no_zipmap",
                     "mlp_classifier_named_zipmap")


def _features(rows: int) -> np.ndarray:
    return np.random.default_rng(rows).standard_normal((rows, 8)).astype(np.float32)


def _onnxruntime(path: Path, x: np.ndarray) -> list:
    return onnxruntime.InferenceSession(
        str(path), providers=["CPUExecutionProvider"]).run(None, {"X": x})


def test_the_corpus_is_every_model_here():
    assert {path.stem for path in CORPUS.glob("*.onnx")} == {*REGRESSORS, *CLASSIFIERS,
                                                             *NAMED_CLASSIFIERS}


@pytest.mark.parametrize("name", REGRESSORS)
@pytest.mark.parametrize("rows", [1, 64, 300])
def test_a_regressor_skl2onnx_wrote_runs_with_onnxruntime_s_results(name, rows):
    path = CORPUS / f"{name}.onnx"
    x = _features(rows)
    (expected,) = _onnxruntime(path, x)
    results = {threads: RuntimeSession(path, threads=threads).run(None, {"X": x})[0]
               for threads in (1, 2)}
    assert results[1].shape == expected.shape == (rows, 1)
    assert results[1].dtype == expected.dtype
    np.testing.assert_allclose(results[1], expected, rtol=1e-5, atol=1e-5)
    # the same bits on any thread count
    assert results[1].tobytes() == results[2].tobytes()


@pytest.mark.parametrize("name", CLASSIFIERS + NAMED_CLASSIFIERS)
@pytest.mark.parametrize("rows", [1, 64, 3000])
def test_a_classifier_skl2onnx_wrote_gives_onnxruntime_s_labels_and_probabilities(name, rows):
    path = CORPUS / f"{name}.onnx"
    x = _features(rows)
    label, probabilities = _onnxruntime(path, x)
    session = RuntimeSession(path, threads=2)
    assert [s.type for s in session.get_outputs()] == [
        o.type for o in onnxruntime.InferenceSession(
            str(path), providers=["CPUExecutionProvider"]).get_outputs()]
    ours_label, ours_probabilities = session.run(None, {"X": x})
    # string labels come as onnxruntime gives them: an array of str objects
    assert ours_label.dtype == label.dtype == (object if name in NAMED_CLASSIFIERS else np.int64)
    assert ours_label.tolist() == label.tolist()
    if isinstance(probabilities, list):  # ZipMap: a {label: probability} dict per row
        assert isinstance(ours_probabilities, list) and len(ours_probabilities) == rows
        for ours, theirs in zip(ours_probabilities, probabilities, strict=True):
            assert ours.keys() == theirs.keys()
            np.testing.assert_allclose([ours[k] for k in theirs], list(theirs.values()),
                                       rtol=1e-5, atol=1e-6)
    else:
        assert ours_probabilities.shape == probabilities.shape
        np.testing.assert_allclose(ours_probabilities, probabilities, rtol=1e-5, atol=1e-6)


def _regressor(input_type=onnx.TensorProto.FLOAT, **attributes) -> onnx.ModelProto:
    node = onnx.helper.make_node("LinearRegressor", ["X"], ["Y"], domain="ai.onnx.ml",
                                 **attributes)
    graph = onnx.helper.make_graph(
        [node], "linear", [onnx.helper.make_tensor_value_info("X", input_type, ["N", 3])],
        [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, ["N", 2])])
    return onnx.helper.make_model(graph, opset_imports=[
        onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("ai.onnx.ml", 1)])


def test_a_linear_regressor_of_several_targets_runs_as_a_gemm_with_its_constants():
    model = _regressor(coefficients=[1.0, 2.0, 3.0, -1.0, 0.5, 0.0], intercepts=[0.25, -2.0],
                       targets=2)
    x = np.array([[1.0, 1.0, 1.0], [0.0, 2.0, -1.0]], np.float32)
    session = RuntimeSession(model)
    (y,) = session.run(None, {"X": x})
    (expected,) = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    (row,) = session.tuning_diagnostics
    assert row["op_type"] == "LinearRegressor" and row["key"]["kernel"] == "Gemm"


@pytest.mark.parametrize(("model", "words"), [
    (_regressor(coefficients=[1.0] * 6, targets=2, post_transform="SOFTMAX"),
     "post_transform"),
    (_regressor(onnx.TensorProto.DOUBLE, coefficients=[1.0] * 6, targets=2),
     "another input type than FLOAT"),
])
def test_a_linear_regressor_the_gemm_cannot_compute_is_refused_by_name(model, words):
    with pytest.raises(UnsupportedModelError, match=words):
        RuntimeSession(model)


def _ml_model(op_type: str, inputs: dict[str, tuple[int, list]],
              outputs: dict[str, tuple[int, list]], **attributes) -> onnx.ModelProto:
    node = onnx.helper.make_node(op_type, list(inputs), list(outputs), domain="ai.onnx.ml",
                                 **attributes)
    graph = onnx.helper.make_graph(
        [node], op_type,
        [onnx.helper.make_tensor_value_info(n, t, shape) for n, (t, shape) in inputs.items()],
        [onnx.helper.make_tensor_value_info(n, t, shape) for n, (t, shape) in outputs.items()])
    return onnx.helper.make_model(graph, opset_imports=[
        onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("ai.onnx.ml", 1)])


def _same_as_onnxruntime(model: onnx.ModelProto, feed: dict) -> list:
    ours = RuntimeSession(model, threads=2).run(None, feed)
    theirs = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    return ours


FLOAT, INT64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
@pytest.mark.parametrize("multi_class", [0, 1])
def test_a_linear_classifier_gives_onnxruntime_s_labels_and_scores(transform, multi_class):
    rng = np.random.default_rng(1)
    model = _ml_model("LinearClassifier", {"X": (FLOAT, ["N", 5])},
                      {"Y": (INT64, ["N"]), "Z": (FLOAT, ["N", 4])},
                      classlabels_ints=[3, 7, 11, 12],
                      coefficients=rng.standard_normal(20).tolist(),
                      intercepts=rng.standard_normal(4).tolist(),
                      post_transform=transform, multi_class=multi_class)
    x = rng.standard_normal((200, 5)).astype(np.float32)
    labels, _ = _same_as_onnxruntime(model, {"X": x})
    assert set(labels.tolist()) <= {3, 7, 11, 12}


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_a_normalizer_matches_onnxruntime_a_row_of_zeros_included(norm):
    x = np.random.default_rng(2).standard_normal((50, 6)).astype(np.float32)
    x[3] = 0
    model = _ml_model("Normalizer", {"X": (FLOAT, ["N", 6])}, {"Y": (FLOAT, ["N", 6])},
                      norm=norm)
    _same_as_onnxruntime(model, {"X": x})


@pytest.mark.parametrize(("offset", "scale"), [([0.5], [2.0]), ([0.1, 0.2, 0.3], [1, 2, 3])])
def test_a_scaler_matches_onnxruntime(offset, scale):
    x = np.random.default_rng(3).standard_normal((10, 3)).astype(np.float32)
    model = _ml_model("Scaler", {"X": (FLOAT, ["N", 3])}, {"Y": (FLOAT, ["N", 3])},
                      offset=offset, scale=[float(s) for s in scale])
    _same_as_onnxruntime(model, {"X": x})


@pytest.mark.parametrize("attributes", [{}, {"threshold": 0.5}, {"threshold": -1.0}])
def test_a_binarizer_matches_onnxruntime_and_gives_a_nan_0(attributes):
    x = np.random.default_rng(4).standard_normal((20, 3)).astype(np.float32)
    x[0] = [attributes.get("threshold", 0.0), np.inf, -np.inf]
    model = _ml_model("Binarizer", {"X": (FLOAT, ["N", 3])}, {"Y": (FLOAT, ["N", 3])},
                      **attributes)
    (y,) = _same_as_onnxruntime(model, {"X": x})
    assert y[0].tolist() == [0.0, 1.0, 0.0]  # the threshold itself is not above it
    # onnxruntime refuses a NaN; onnx's reference and scikit-learn give 0
    x[1, 1] = np.nan
    (y,) = RuntimeSession(model).run(None, {"X": x})
    assert y[1, 1] == 0


@pytest.mark.parametrize("shape", [(6,), (4, 6)])
def test_an_array_feature_extractor_matches_onnxruntime(shape):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    model = _ml_model("ArrayFeatureExtractor", {"X": (FLOAT, list(shape)),
                                                "I": (INT64, [3])},
                      {"Y": (FLOAT, [1 if len(shape) == 1 else 4, 3])})
    (y,) = _same_as_onnxruntime(model, {"X": x, "I": np.array([5, 0, 2], np.int64)})
    assert y.shape == (1, 3) if len(shape) == 1 else (4, 3)


def test_an_array_feature_extractor_index_out_of_range_is_an_error_naming_it():
    model = _ml_model("ArrayFeatureExtractor", {"X": (FLOAT, [2, 3]), "I": (INT64, [1])},
                      {"Y": (FLOAT, [2, 1])})
    with pytest.raises(ValueError, match="not all within the 3 columns"):
        RuntimeSession(model).run(None, {"X": np.zeros((2, 3), np.float32),
                                         "I": np.array([3], np.int64)})


@pytest.mark.parametrize(("attributes", "words"), [
    ({"classlabels_ints": [0, 1], "coefficients": [1.0] * 10, "intercepts": [0.0, 0.0],
      "post_transform": "PROBIT"}, "post_transform 'PROBIT'"),
    ({"classlabels_ints": [0, 1], "coefficients": [1.0] * 5, "intercepts": [0.0]},
     "1 rows of coefficients for 2 class labels"),
])
def test_a_linear_classifier_the_kernels_cannot_compute_is_refused_by_name(attributes, words):
    model = _ml_model("LinearClassifier", {"X": (FLOAT, ["N", 5])},
                      {"Y": (INT64, ["N"]), "Z": (FLOAT, ["N", 2])}, **attributes)
    with pytest.raises(UnsupportedModelError, match=words):
        RuntimeSession(model)


def test_an_array_feature_extractor_of_constant_indices_reads_them_once():
    node = onnx.helper.make_node("ArrayFeatureExtractor", ["X", "I"], ["Y"],
                                 domain="ai.onnx.ml")
    graph = onnx.helper.make_graph(
        [node], "extract", [onnx.helper.make_tensor_value_info("X", FLOAT, ["N", 6])],
        [onnx.helper.make_tensor_value_info("Y", FLOAT, ["N", 2])],
        initializer=[onnx.numpy_helper.from_array(np.array([5, 1], np.int64), "I")])
    model = onnx.helper.make_model(graph, opset_imports=[
        onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("ai.onnx.ml", 1)])
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    (y,) = _same_as_onnxruntime(model, {"X": x})
    np.testing.assert_array_equal(y, x[:, [5, 1]])
    session = RuntimeSession(model)
    ((extract, arguments, _, _),) = session._steps
    assert len(arguments) == 1
    with pytest.raises(ValueError, match=r"indices \[5, 1\] are not all within the 3 columns"):
        extract(np.zeros((2, 3), np.float32))


@pytest.mark.parametrize(("indices", "expected"), [([2, 0], [[9, 4]]), ([-1], None),
                                                   ([3], None), ([], None),
                                                   ([1] * 20 + [-1], None)])
def test_an_array_feature_extractor_of_constant_values_reads_them_once(indices, expected):
    """A classifier's classes indexed by its scores' ArgMax: the run gives the indices
    alone, each checked (a negative one too, which numpy would count from the end)."""
    node = onnx.helper.make_node("ArrayFeatureExtractor", ["C", "I"], ["Y"],
                                 domain="ai.onnx.ml")
    graph = onnx.helper.make_graph(
        [node], "labels", [onnx.helper.make_tensor_value_info("I", INT64, ["N"])],
        [onnx.helper.make_tensor_value_info("Y", INT64, [1, "N"])],
        initializer=[onnx.numpy_helper.from_array(np.array([4, 7, 9], np.int64), "C")])
    model = onnx.helper.make_model(graph, opset_imports=[
        onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("ai.onnx.ml", 1)])
    session = RuntimeSession(model)
    ((_, arguments, _, _),) = session._steps
    assert len(arguments) == 1
    feed = {"I": np.array(indices, np.int64)}
    if expected is None:
        with pytest.raises(ValueError, match="not all within the 3 columns"):
            session.run(None, feed)
    else:
        (y,) = _same_as_onnxruntime(model, feed)
        np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("classes", [[4, 7, 9], [4, 7]])
def test_an_array_feature_extractor_of_an_argmax_s_indices_skips_the_search_for_negatives(
        op, classes):
    """A classifier's label as skl2onnx writes it: its classes indexed by the ArgMax of its
    scores, which gives no negative index; one past the classes is still refused."""
    nodes = [onnx.helper.make_node(op, ["S"], ["I"], axis=1),
             onnx.helper.make_node("ArrayFeatureExtractor", ["C", "I"], ["Y"],
                                   domain="ai.onnx.ml")]
    graph = onnx.helper.make_graph(
        nodes, "labels", [onnx.helper.make_tensor_value_info("S", FLOAT, ["N", 3])],
        [onnx.helper.make_tensor_value_info("Y", INT64, [1, "N"])],
        initializer=[onnx.numpy_helper.from_array(np.array(classes, np.int64), "C")])
    model = onnx.helper.make_model(graph, opset_imports=[
        onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("ai.onnx.ml", 1)])
    session = RuntimeSession(model)
    extractor = session._model.nodes[-1].view
    assert extractor.keywords == {"nonnegative": True}
    scores = np.array([[0, 1, 0], [2, 0, 1], [0, 1, 3]], np.float32)
    if len(classes) == 3:
        (y,) = _same_as_onnxruntime(model, {"S": scores})
        chosen = (np.argmax if op == "ArgMax" else np.argmin)(scores, axis=1)
        np.testing.assert_array_equal(y, [np.array(classes)[chosen]])
    else:  # the third class's index is past the two labels
        with pytest.raises(ValueError, match="not all within the 2 columns"):
            session.run(None, {"S": scores * (1 if op == "ArgMax" else -1)})
    unfused = RuntimeSession(model, fusion=False)
    assert not getattr(unfused._model.nodes[-1].view, "keywords", None)


@pytest.mark.parametrize("labels", [(), (4,), (0, 1, 2), ("no", "yes"), tuple(range(300))])
@pytest.mark.parametrize("layout", ["rows", "columns", "every other column"])
def test_zip_map_makes_a_dict_of_python_floats_per_row(labels, layout):
    count = len(labels)
    x = np.random.default_rng(4).standard_normal((5, 2 * count)).astype(np.float32)
    x = {"rows": x[:, :count], "columns": np.asfortranarray(x[:, :count]),
         "every other column": x[:, ::2]}[layout]
    rows = selections.zip_map(x, labels)
    assert rows == [dict(zip(labels, row, strict=True)) for row in x.tolist()]
    assert all(type(value) is float for row in rows for value in row.values())
    assert all(list(row) == list(labels) for row in rows)
    with pytest.raises(ValueError, match=rf"expected \[N, {len(labels)}\]"):
        selections.zip_map(np.zeros((5, count + 1), np.float32), labels)


def test_zip_map_of_many_rows_leaves_the_garbage_collector_no_object_per_row_to_walk():
    x = np.random.default_rng(5).standard_normal((4096, 3)).astype(np.float32)
    young = []  # the objects each collection set off in the call walks, its own aside

    def walked(phase: str, info: dict) -> None:
        if phase == "start":
            young.append(sum(len(gc.get_objects(generation)) for generation in range(2)))

    thresholds, enabled = gc.get_threshold(), gc.isenabled()
    gc.collect()
    gc.set_threshold(700, 10, 10)  # CPython's defaults: a collection per 700 new objects
    gc.enable()
    gc.callbacks.append(walked)
    try:
        rows = selections.zip_map(x, (0, 1, 2))
    finally:
        gc.callbacks.remove(walked)
        gc.set_threshold(*thresholds)
        if not enabled:
            gc.disable()
    assert len(rows) == 4096 and not any(gc.is_tracked(row) for row in rows)
    assert young and max(young) < 100  # x.tolist() gave a tracked list per row
