"""Models as a real converter writes them: skl2onnx over scikit-learn estimators.

The corpus is committed in tests/data/converted (``make_models.py`` there writes it
again), so these tests need neither scikit-learn nor skl2onnx. The multi-layer
perceptron regressors run, with onnxruntime's results; the models whose operators the
library does not have yet are refused at construction, every such node named with its
domain's opset. A LinearRegressor runs on the Gemm kernel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

from kerneltune.errors import UnsupportedModelError
from kerneltune.runtime import RuntimeSession

CORPUS = Path(__file__).resolve().parent / "data" / "converted"
RUNS = ("mlp_regressor_relu", "mlp_regressor_tanh", "mlp_regressor_logistic",
        "linear_regression", "ridge")
#: the nodes of each refused model that the library has no kernel for yet
REFUSED = {
    "mlp_classifier_zipmap": {"ArgMax", "ArrayFeatureExtractor", "Cast", "Softmax",
                              "ZipMap"},
    "mlp_classifier_no_zipmap": {"ArgMax", "ArrayFeatureExtractor", "Cast", "Softmax"},
    "mlp_classifier_tanh_no_zipmap": {"ArgMax", "ArrayFeatureExtractor", "Cast", "Concat"},
    "logistic_regression_zipmap": {"LinearClassifier", "Normalizer", "ZipMap"},
    "logistic_regression_no_zipmap": {"LinearClassifier", "Normalizer"},
    # the Cast after the Scaler: shape inference leaves its input's type unknown
    "scaler_mlp_regressor": {"Scaler", "Cast"},
    "scaler_logistic_regression": {"Scaler", "LinearClassifier", "ZipMap"},
}
ML_OPERATORS = {"ArrayFeatureExtractor", "LinearClassifier", "Normalizer", "Scaler", "ZipMap"}


def _features(rows: int) -> np.ndarray:
    return np.random.default_rng(rows).standard_normal((rows, 8)).astype(np.float32)


def test_the_corpus_is_every_model_here():
    assert {path.stem for path in CORPUS.glob("*.onnx")} == {*RUNS, *REFUSED}


@pytest.mark.parametrize("name", RUNS)
@pytest.mark.parametrize("rows", [1, 64, 300])
def test_a_regressor_skl2onnx_wrote_runs_with_onnxruntime_s_results(name, rows):
    path = CORPUS / f"{name}.onnx"
    x = _features(rows)
    (expected,) = onnxruntime.InferenceSession(
        str(path), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    results = {threads: RuntimeSession(path, threads=threads).run(None, {"X": x})[0]
               for threads in (1, 2)}
    assert results[1].shape == expected.shape == (rows, 1)
    assert results[1].dtype == expected.dtype
    np.testing.assert_allclose(results[1], expected, rtol=1e-5, atol=1e-5)
    # the same bits on any thread count
    assert results[1].tobytes() == results[2].tobytes()


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_model_with_operators_the_library_lacks_is_refused_naming_each_node(name):
    model = onnx.load(CORPUS / f"{name}.onnx")
    with pytest.raises(UnsupportedModelError) as refused:
        RuntimeSession(model)
    lines = str(refused.value).splitlines()[1:]
    named = {line.split(": op ")[1].split(",")[0] for line in lines}
    assert named == REFUSED[name]
    ml = {o.domain: o.version for o in model.opset_import}["ai.onnx.ml"]
    for line in lines:
        domain = "ai.onnx.ml" if line.split(": op ")[1].split(",")[0] in ML_OPERATORS \
            else "ai.onnx"
        assert f"domain {domain}, opset {ml if domain == 'ai.onnx.ml' else 17}," in line


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
