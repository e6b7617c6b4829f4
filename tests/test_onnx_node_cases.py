"""onnx's own node test cases, run through kerneltune's onnx backend.

Every case whose graph uses only operators of the kernel library is collected;
a case with an element type or attribute we do not support is skipped with
the session's own explanation, and any other failure is a failure.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper
from onnx.backend.test.case.node import collect_testcases

from kerneltune.errors import UnsupportedModelError
from kerneltune.kernels import library
from kerneltune.runtime import backend

SUPPORTED = set(library()) | {"Constant"}


def _cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    return sorted(
        (case for case in cases
         if case.kind == "node" and case.model is not None
         and {node.op_type for node in case.model.graph.node} <= SUPPORTED),
        key=lambda case: case.name,
    )


CASES = _cases()


def test_there_are_cases_for_every_elementwise_family():
    names = {case.name for case in CASES}
    for expected in ("test_abs", "test_add_bcast", "test_gemm_all_attributes", "test_matmul_2d",
                     "test_sigmoid", "test_bitwise_and_i32_2d", "test_not_2d", "test_pow"):
        assert expected in names


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_node_case(case):
    assert backend.supports_device("CPU")
    try:
        prepared = backend.prepare(case.model, "CPU")
    except UnsupportedModelError as error:
        pytest.skip(f"unsupported: {error}")
    for inputs, expected in case.data_sets:
        # some generators keep their tensors as TensorProtos (Cast's, of every type)
        inputs, expected = ([numpy_helper.to_array(v) if isinstance(v, TensorProto) else v
                             for v in values] for values in (inputs, expected))
        outputs = prepared.run(inputs)
        assert len(outputs) == len(expected)
        for output, reference in zip(outputs, expected, strict=True):
            reference = np.asarray(reference)
            assert output.dtype == reference.dtype
            assert output.shape == reference.shape
            np.testing.assert_allclose(output, reference, rtol=case.rtol, atol=case.atol)
