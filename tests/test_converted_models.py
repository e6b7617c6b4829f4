"""Models as a real converter writes them: skl2onnx over scikit-learn estimators.

The corpus is committed in tests/data/converted (``make_models.py`` there writes it
again), so these tests need neither scikit-learn nor skl2onnx. The multi-layer
perceptron regressors run, with onnxruntime's results; the models whose operators the
library does not have yet are refused at construction, every such node named with its
domain's opset.
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
RUNS = ("mlp_regressor_relu", "mlp_regressor_tanh", "mlp_regressor_logistic")
#: the nodes of each refused model that the library has no kernel for yet
REFUSED = {
    "mlp_classifier_zipmap": {"ArgMax", "ArrayFeatureExtractor", "Cast", "Softmax",
                              "ZipMap"},
    "mlp_classifier_no_zipmap": {"ArgMax", "ArrayFeatureExtractor", "Cast", "Softmax"},
    "mlp_classifier_tanh_no_zipmap": {"ArgMax", "ArrayFeatureExtractor", "Cast", "Concat"},
    "linear_regression": {"LinearRegressor"},
    "ridge": {"LinearRegressor"},
    "logistic_regression_zipmap": {"LinearClassifier", "Normalizer", "ZipMap"},
    "logistic_regression_no_zipmap": {"LinearClassifier", "Normalizer"},
    # the Cast after the Scaler: shape inference leaves its input's type unknown
    "scaler_mlp_regressor": {"Scaler", "Cast"},
    "scaler_logistic_regression": {"Scaler", "LinearClassifier", "ZipMap"},
}
ML_OPERATORS = {"ArrayFeatureExtractor", "LinearClassifier", "LinearRegressor", "Normalizer",
                "Scaler", "ZipMap"}


def _features(rows: int) -> np.ndarray:
    return np.random.default_rng(rows).standard_normal((rows, 8)).astype(np.float32)


def test_the_corpus_is_every_model_here():
    assert {path.stem for path in CORPUS.glob("*.onnx")} == {*RUNS, *REFUSED}


@pytest.mark.parametrize("name", RUNS)
@pytest.mark.parametrize("rows", [1, 64, 300])
def test_an_mlp_regressor_skl2onnx_wrote_runs_with_onnxruntime_s_results(name, rows):
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
