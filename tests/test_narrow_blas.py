"""A BLAS behind the processor: where numpy's OpenBLAS runs kernels for fewer instructions
than the ISA variant's defaults assume (OPENBLAS_CORETYPE=Haswell on an AVX-512 processor,
Nehalem's SSE kernels under the baseline, whose defaults assume AVX kernels), a session
whose values are the portable defaults (and a kernel prepared without a config) keeps its
products of several rows on the compiled paths; values from a profile, a calibration or an
override keep their BLAS crossovers.

Each session runs in a fresh process: OpenBLAS reads OPENBLAS_CORETYPE once, when loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from kerneltune.machine.blas import narrower_than


@pytest.mark.parametrize(("name", "architecture", "variant", "narrower"), [
    ("openblas", "Haswell", "x86_64_v4", True),
    ("openblas", "Zen", "x86_64_v4", True),
    ("openblas", "Sandybridge", "x86_64_v3", True),
    ("openblas", "Haswell", "x86_64_v3", False),
    ("openblas", "SkylakeX", "x86_64_v4", False),
    ("openblas", "Cooperlake", "x86_64_v4", False),
    ("openblas", "SapphireRapids", "x86_64_v3", False),
    # the baseline's defaults assume AVX kernels, whatever the family's lineage
    ("openblas", "Nehalem", "baseline", True),
    ("openblas", "Core2", "baseline", True),
    ("openblas", "Sandybridge", "baseline", False),
    ("openblas", "Zen", "baseline", False),
    ("openblas", "Haswell", "baseline", False),
    # what cannot be told is not narrower: an unknown family, another library, no
    # architecture, a variant of no known target
    ("openblas", "Haswell", "riscv_v", False),
    ("openblas", "Neoversen1", "x86_64_v4", False),
    ("mkl", "Haswell", "x86_64_v4", False),
    ("openblas", None, "x86_64_v4", False),
])
def test_a_blas_is_narrower_where_its_kernel_family_lacks_the_variant_s_instructions(
        name, architecture, variant, narrower):
    assert narrower_than({"name": name, "version": "0.3.31", "architecture": architecture},
                         variant) is narrower


CHILD = """
import json, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import kerneltune
import kerneltune.kernels
from kerneltune.runtime import RuntimeSession
from kerneltune.runtime.contention import blas_used_here

n = 256
graph = helper.make_graph(
    [helper.make_node("Gemm", ["A", "B"], ["Y"])], "g",
    [helper.make_tensor_value_info(name, TensorProto.FLOAT, [n, n]) for name in "AB"],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, n])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
found = {}
for name, overrides in (("defaults", None),
                        ("override", {"Gemm": {"algorithm.tile_m": 64}})):
    session = RuntimeSession(model, threads=1, overrides=overrides)
    (prepared,) = session._prepared
    found[name] = {"path": prepared.plan(a, a).path,
                   "result": session.run(None, {"A": a, "B": a})[0].tolist(),
                   "blas_used": blas_used_here()}
found["numpy"] = (a @ a).tolist()
# the kernels called directly: no config is the portable defaults, a config the caller's
gemm = kerneltune.kernels.library()["Gemm"]
found["kernel"] = {"defaults": gemm.prepare("FLOAT", threads=1).plan(a, a).path,
                   "configured": gemm.prepare("FLOAT", gemm.configure("FLOAT", {}),
                                              1).plan(a, a).path}
found["explained"] = [warning for row in kerneltune.explain(keys=[prepared.key]).keys
                      for warning in row.warnings]
# two nodes and a weight of BLAS's pool: a product and its activation
graph = helper.make_graph(
    [helper.make_node("MatMul", ["A", "W"], ["P"]), helper.make_node("Tanh", ["P"], ["Y"])],
    "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, n])],
    [numpy_helper.from_array(a, "W")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
for name, overrides in (("defaults", None),
                        ("override", {"MatMul": {"algorithm.tile_m": 64}})):
    session = RuntimeSession(model, threads=2, overrides=overrides, contention=None)
    found[name]["pool"] = session._pool(2)
print(json.dumps(found))
"""


def _sessions(coretype: str, variant: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300,
        env={**os.environ, "OPENBLAS_CORETYPE": coretype, "KERNELTUNE_ISA": variant,
             "KERNELTUNE_CACHE": "off"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _openblas_with_avx512() -> str | None:
    """Why the processor or numpy's BLAS cannot run these sessions, else None."""
    from threadpoolctl import threadpool_info

    from kerneltune.kernels.variants import installed_variants
    from kerneltune.machine.detect import detect_cpu_descriptor

    if "x86_64_v4" not in installed_variants():
        return "no x86_64_v4 variant built"
    if not {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= set(
            detect_cpu_descriptor().features):
        return "the processor runs neither the x86_64_v4 variant nor OpenBLAS's SkylakeX kernels"
    if not any(pool.get("internal_api") == "openblas" for pool in threadpool_info()):
        return "numpy's BLAS is not OpenBLAS, whose OPENBLAS_CORETYPE these sessions set"
    return None


needs_avx512_openblas = pytest.mark.skipif(_openblas_with_avx512() is not None,
                                           reason=str(_openblas_with_avx512()))


@needs_avx512_openblas
@pytest.mark.parametrize(("coretype", "variant"), [("Haswell", "x86_64_v4"),
                                                    ("Nehalem", "baseline")])
def test_defaults_keep_products_off_a_blas_of_narrower_kernels(coretype, variant):
    found = _sessions(coretype, variant)
    # the product of several rows on the compiled path, and a model of a large weight on
    # the OpenMP pool, whose products all keep off BLAS
    assert (found["defaults"]["path"], found["defaults"]["pool"]) == ("blocked_packed",
                                                                      "openmp")
    # checking which kernels the BLAS runs is no product on it: its threads stay out of
    # the runs' contention readings
    assert found["defaults"]["blas_used"] is False
    # an override is the user's choice: the crossovers stay the values', BLAS above them
    assert (found["override"]["path"], found["override"]["pool"]) == ("blas", "blas")
    assert found["override"]["blas_used"] is True
    # a kernel prepared without a config runs the portable defaults; given one, its values
    assert found["kernel"] == {"defaults": "blocked_packed", "configured": "blas"}
    # and an explanation of the Gemm key says why
    (explained,) = found["explained"]
    assert explained.startswith("BLAS thresholds are the portable defaults, and openblas ")
    assert (f"({coretype}) runs kernels for fewer instructions than the defaults of "
            f"{variant} assume") in explained
    # the compiled path's sums are the BLAS path's, within rounding
    for name in ("defaults", "override"):
        np.testing.assert_allclose(found[name]["result"], found["numpy"], rtol=1e-4, atol=1e-3)


@needs_avx512_openblas
@pytest.mark.parametrize(("coretype", "variant"), [("SkylakeX", "x86_64_v4"),
                                                    ("Haswell", "x86_64_v3"),
                                                    ("Sandybridge", "baseline")])
def test_defaults_take_blas_where_its_kernels_use_the_variant_s_instructions(coretype,
                                                                             variant):
    found = _sessions(coretype, variant)
    assert (found["defaults"]["path"], found["defaults"]["pool"]) == ("blas", "blas")
    assert found["kernel"] == {"defaults": "blas", "configured": "blas"}
    assert found["explained"] == []
