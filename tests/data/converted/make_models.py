"""Write the converter corpus: scikit-learn estimators as skl2onnx writes them.

The models are committed beside this script, so the tests need neither scikit-learn nor
skl2onnx; run it again (with both installed) to refresh them:

    python tests/data/converted/make_models.py

Each estimator is trained on synthetic data from a fixed seed, on 8 float features.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import skl2onnx
import sklearn
from skl2onnx import to_onnx
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge, SGDClassifier
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Binarizer, StandardScaler

FEATURES = 8
HERE = Path(__file__).resolve().parent


def _data(classes: int | tuple[str, ...] | None) -> tuple[np.ndarray, np.ndarray]:
    """Features and targets: a regressor's values, or classes numbered 0, 1, ... or named
    (a tuple of names, which skl2onnx writes as string labels)."""
    rng = np.random.default_rng(20261203)
    x = rng.standard_normal((256, FEATURES)).astype(np.float32)
    y = x @ rng.standard_normal(FEATURES) + 0.1 * rng.standard_normal(256)
    if classes is None:
        return x, y
    names = classes if isinstance(classes, tuple) else None
    count = len(names) if names else classes
    y = np.digitize(y, np.quantile(y, np.linspace(0, 1, count + 1)[1:-1]))
    return x, (np.asarray(names)[y] if names else y)


def _mlp(kind, activation: str = "relu", **options):
    return kind(hidden_layer_sizes=(32, 16), activation=activation, max_iter=300,
                random_state=0, **options)


#: classes by name
NAMES = ("bird", "cat", "dog")
#: name -> (estimator, classes (a count or names; None: a regressor), converter options)
CORPUS = {
    "mlp_regressor_relu": (_mlp(MLPRegressor, "relu"), None, {}),
    "mlp_regressor_tanh": (_mlp(MLPRegressor, "tanh"), None, {}),
    "mlp_regressor_logistic": (_mlp(MLPRegressor, "logistic"), None, {}),
    "mlp_classifier_zipmap": (_mlp(MLPClassifier), 3, {}),
    "mlp_classifier_no_zipmap": (_mlp(MLPClassifier), 3, {"zipmap": False}),
    "mlp_classifier_tanh_no_zipmap": (_mlp(MLPClassifier, "tanh"), 2, {"zipmap": False}),
    "linear_regression": (LinearRegression(), None, {}),
    "ridge": (Ridge(alpha=0.5), None, {}),
    "logistic_regression_zipmap": (LogisticRegression(max_iter=500), 3, {}),
    "logistic_regression_no_zipmap": (LogisticRegression(max_iter=500), 3, {"zipmap": False}),
    "scaler_mlp_regressor": (make_pipeline(StandardScaler(), _mlp(MLPRegressor)), None, {}),
    "scaler_logistic_regression": (make_pipeline(StandardScaler(),
                                                 LogisticRegression(max_iter=500)), 2, {}),
    "logistic_regression_named_zipmap": (LogisticRegression(max_iter=500), NAMES, {}),
    "logistic_regression_named_no_zipmap": (LogisticRegression(max_iter=500), NAMES,
                                            {"zipmap": False}),
    "mlp_classifier_named_zipmap": (_mlp(MLPClassifier), NAMES, {}),
    "binarizer_linear_regression": (make_pipeline(Binarizer(threshold=0.25), LinearRegression()),
                                    None, {}),
    "sgd_classifier": (SGDClassifier(loss="log_loss", random_state=0), 3, {}),
}


def main() -> None:
    for name, (estimator, classes, options) in CORPUS.items():
        x, y = _data(classes)
        estimator.fit(x, y)
        final = estimator.steps[-1][1] if hasattr(estimator, "steps") else estimator
        model = to_onnx(estimator, x[:1], target_opset=17,
                        options={id(final): options} if options else None)
        model.doc_string = (f"{name}: scikit-learn {sklearn.__version__}, skl2onnx "
                            f"{skl2onnx.__version__}")
        (HERE / f"{name}.onnx").write_bytes(model.SerializeToString())
        print(f"{name}.onnx: {', '.join(sorted({n.op_type for n in model.graph.node}))}")


if __name__ == "__main__":
    main()
