"""onnx's official backend test runner over ``kerneltune.runtime.backend``.

As onnxruntime's own backend test series does: ``onnx.backend.test.BackendTest`` turns
each of onnx's node test cases into a test that prepares the model with the backend, runs
it on the case's inputs and compares the outputs with onnx's (shapes, element types, and
values within the case's tolerances). Only the node tests of the operators the kernel
library implements are kept; the cases among them that kerneltune does not run are
listed in ``EXCLUDED`` with the reason, and a test checks that the list is exactly what
the backend's ``is_compatible`` refuses, so that no case is skipped without one.
"""

from __future__ import annotations

import re
import unittest

import numpy as np
import onnx
import onnx.backend.test
import pytest
from onnx.backend.test.loader import load_model_tests

from kerneltune.kernels import library
from kerneltune.kernels.chain import CHAIN
from kerneltune.kernels.rows import PROBABILITY_NORMALIZATION
from kerneltune.runtime import backend, selections, views

#: operators whose node tests are not named after their snake_case
TEST_PREFIXES = {"GreaterOrEqual": "greater_equal", "LessOrEqual": "less_equal",
                 "MatMul": "matmul", "ArgMax": "argmax", "ArgMin": "argmin",
                 "LogSoftmax": "logsoftmax", "CastLike": "castlike", "LeakyRelu": "leakyrelu"}
#: ai.onnx.ml operators with node tests (Normalizer has none, nor the kernels of fusions,
#: which are no operators), named after the domain
ML_TESTS = ("ai_onnx_ml_array_feature_extractor",)
PREFIXES = sorted([TEST_PREFIXES.get(name) or re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
                   for name in (*library(), *views.FUNCTIONS, *selections.FUNCTIONS)
                   if name not in ("Normalizer", CHAIN, PROBABILITY_NORMALIZATION)]
                  + list(ML_TESTS))
#: every operator's test prefix: a test belongs to the longest that begins its name
#: (test_reduce_sum_square_* are ReduceSumSquare's, not ReduceSum's)
ALL_PREFIXES = sorted({re.sub(r"(?<!^)(?=[A-Z])", "_", schema.name).lower()
                       for schema in onnx.defs.get_all_schemas()} | set(PREFIXES),
                      key=len, reverse=True)
#: a node test of one of the library's operators, on the CPU (its CUDA twin is not ours)
_NAMED = re.compile(rf"^test_({'|'.join(ALL_PREFIXES)})(_.*)?_cpu$")


def included(name: str) -> bool:
    named = _NAMED.match(name)
    return bool(named) and named.group(1) in PREFIXES

#: the included cases kerneltune does not run, by a pattern of their names, and why (each
#: is a skip with this reason)
EXCLUDED_PATTERNS = {
    # Equal-19 compares STRING tensors; the kernels compute on numbers and booleans
    r"test_equal_string(_broadcast)?_cpu":
        "STRING tensors: the kernels compute on numbers and booleans",
    # Identity of an optional or a sequence: the session runs tensors
    r"test_identity_opt_cpu": "an optional, not a tensor: the session runs tensors",
    r"test_identity_sequence_cpu": "a sequence, not a tensor: the session runs tensors",
    # the expanded cases run the operator's function body, node by node
    r"test_gelu_.*_expanded_cpu": "Gelu's function body: Sum has no kernel",
    r"test_layer_normalization_.*_expanded(_ver18)?_cpu":
        "LayerNormalization's function body: Shape, Size, Slice and ConstantOfShape have no "
        "kernels",
}


def _excluded(name: str) -> str | None:
    return next((reason for pattern, reason in EXCLUDED_PATTERNS.items()
                 if re.fullmatch(pattern, name)), None)


_runner = onnx.backend.test.BackendTest(backend, __name__)
OnnxBackendNodeModelTest = _runner.test_cases["OnnxBackendNodeModelTest"]
EXCLUDED = {}
for _name in [n for n in vars(OnnxBackendNodeModelTest) if n.startswith("test_")]:
    if not included(_name):
        delattr(OnnxBackendNodeModelTest, _name)
    elif _excluded(_name):
        EXCLUDED[_name] = _excluded(_name)
        setattr(OnnxBackendNodeModelTest, _name,
                unittest.skip(EXCLUDED[_name])(getattr(OnnxBackendNodeModelTest, _name)))


def test_the_exclusions_are_what_the_backend_refuses():
    """Every included case the backend refuses is excluded with a reason, and every excluded
    case is one it refuses: the runner's own "Not compatible with backend" never fires."""
    refused = set()
    for case in load_model_tests(kind="node"):
        name = f"{case.name}_cpu"
        if not included(name):
            continue
        model = case.model if case.model is not None else onnx.load(
            f"{case.model_dir}/model.onnx")
        if not backend.is_compatible(model):
            refused.add(name)
    assert refused == set(EXCLUDED)


def test_every_operator_of_the_library_has_node_tests():
    cases = [n for n in vars(OnnxBackendNodeModelTest) if n.startswith("test_")]
    for prefix in PREFIXES:
        assert any(re.match(rf"test_{prefix}(_|$)", name) for name in cases), prefix
    assert len(cases) >= 195 + len(EXCLUDED)


def test_run_node_runs_one_node_of_the_newest_opset():
    node = onnx.helper.make_node("GreaterOrEqual", ["a", "b"], ["c"])
    a, b = np.array([1, 2, 3], np.int16), np.array([2, 2, 2], np.int16)
    (c,) = backend.run_node(node, [a, b])
    assert c.dtype == np.bool_ and c.tolist() == [False, True, True]


def test_a_device_other_than_the_cpu_is_refused_as_onnxruntime_refuses_it():
    node = onnx.helper.make_node("Abs", ["x"], ["y"])
    x = np.array([-1.0, 2.0], np.float32)
    for device in ("CUDA", "CUDA:1", "GPU"):
        assert not backend.supports_device(device)
        with pytest.raises(RuntimeError, match=f"not on '{device}'"):
            backend.run_node(node, [x], device=device)
    (y,) = backend.run_node(node, [x], device="cpu")
    assert y.tolist() == [1.0, 2.0]
