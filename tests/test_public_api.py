"""The top-level surface: lazy names, the version, the shared checks and thread policy."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import kerneltune
from kerneltune._support.checks import is_count, is_int, is_positive_number
from kerneltune.machine.threads import available_threads, thread_count


@pytest.mark.parametrize(("name", "home", "heavy"), [
    ("RuntimeSession", "kerneltune.runtime.session", "kerneltune.runtime.session"),
    ("search_corpus_parameters", "kerneltune.corpus.search", "kerneltune.corpus.search"),
])
def test_heavy_names_load_on_first_use_only(name, home, heavy):
    code = ("import json, sys, kerneltune\n"
            f"before = {heavy!r} in sys.modules\n"
            f"value = kerneltune.{name}\n"
            f"print(json.dumps([before, {heavy!r} in sys.modules,\n"
            f"                  value.__module__, {name!r} in dir(kerneltune)]))\n")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout
    assert json.loads(output) == [False, True, home, True]


#: what running a model never needs: the calibration package (the kernel library registers
#: its machine probes all the same), the profile merge and verification, the profile store,
#: the kernels' calibration functions and probes, (without a cache file) the cache's
#: machinery, (without an ai.onnx.ml node) the ML operators' lowering, explanations,
#: selector files, (without a descriptor file) the documents' machinery and (without a YAML
#: file to read or a file to write) yaml and filelock
NOT_FOR_A_SESSION = ("kerneltune.calibration", "kerneltune.tuning.explanation",
                     "kerneltune.tuning.keyfilter", "kerneltune.machine.selector_files",
                     "kerneltune.machine.descriptor_files",
                     "kerneltune._support.documents", "kerneltune.profiles.merge",
                     "kerneltune.profiles.verification", "kerneltune.profiles.export",
                     "kerneltune.store", "kerneltune.kernels.calibrate",
                     "kerneltune.kernels.calibrate_gemm", "kerneltune.kernels.probes",
                     "kerneltune.cache.kernel_tuning_cache", "kerneltune.cache.entries",
                     "kerneltune.runtime.ml", "yaml", "filelock")


def test_a_first_session_imports_nothing_it_does_not_need(tmp_path):
    """Cold start: ``import kerneltune``, a session and its first run load none of the
    calibration machinery, which a calibration loads when it first asks for it."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Tanh", ["X"], ["Y"])], "tanh",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])])
    path = tmp_path / "tanh.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    code = ("import json, sys\n"
            "import numpy as np\n"
            "import kerneltune\n"
            "from kerneltune.runtime import RuntimeSession\n"
            f"RuntimeSession({str(path)!r}).run(None, {{'X': np.ones((2, 4), np.float32)}})\n"
            "first = sorted(m for m in sys.modules if m.startswith("
            f"{NOT_FOR_A_SESSION!r}))\n"
            "report = kerneltune.startup_report().libraries[0]\n"
            "from kerneltune.calibration import calibration_function\n"
            "key = next(iter(kerneltune.snapshot().keys()))\n"
            "workload = callable(calibration_function(key).workload)\n"
            "print(json.dumps([first, report.calibratable == report.keys, sorted(report.probes),"
            " workload, 'kerneltune.kernels.calibrate' in sys.modules]))\n")
    environment = {**os.environ, "KERNELTUNE_CACHE": str(tmp_path / "no_cache.yaml")}
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, env=environment).stdout
    first, all_calibratable, probes, workload, loaded = json.loads(output)
    assert first == []
    # registered all the same, each made when a calibration first asks for it
    assert all_calibratable and probes == ["parallel", "shared cache"]
    assert workload and loaded


@pytest.mark.parametrize(("name", "home"), [
    ("RuntimeSession", "runtime"), ("calibrate_registered_kernels", "calibration"),
    ("CalibrationOptions", "calibration"), ("randn_tensor", "calibration"),
    ("search_corpus_parameters", "corpus"),
    ("analyze_kernel_tuning_latencies", "corpus"),
    ("load_kernel_tuning_cache", "cache.kernel_tuning_cache"), ("CacheLoadReport", "cache.reports"),
    ("default_kernel_tuning_cache_path", "cache.location"), ("CacheEntry", "cache.entries"),
])
def test_lazy_names_are_the_modules_own_objects(name, home):
    module = importlib.import_module(f"kerneltune.{home}")
    assert getattr(kerneltune, name) is getattr(module, name) and name in kerneltune.__all__


def test_an_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = kerneltune.no_such_name


def test_the_version_is_the_one_in_the_version_file():
    from importlib import metadata, resources

    text = resources.files("kerneltune").joinpath("VERSION").read_text().strip()
    assert kerneltune.__version__ == text and kerneltune._support.version.__version__ == text
    # meson.build gives the wheel's metadata the same file's version
    assert metadata.version("kerneltune") == text


@pytest.mark.parametrize(("value", "integer", "count1", "positive"), [
    (3, True, True, True), (np.int64(3), True, True, True), (0, True, False, False),
    (True, False, False, False), (2.5, False, False, True), (float("nan"), False, False, False),
    (float("inf"), False, False, False), ("3", False, False, False), (-1.0, False, False, False),
])
def test_checks_refuse_bools_and_non_finite_numbers(value, integer, count1, positive):
    assert is_int(value) is integer
    assert is_count(value, minimum=1) is count1
    assert is_positive_number(value) is positive


def test_the_default_thread_count_is_the_affinity_mask():
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    assert thread_count(None) == available_threads() and (expected in (None,
                                                                        available_threads()))
    assert thread_count(np.int32(2)) == 2 and type(thread_count(np.int32(2))) is int


@pytest.mark.parametrize("bad", [0, -1, True, 1.0, "2"])
def test_a_bad_thread_count_is_refused_the_same_way_everywhere(bad):
    from kerneltune.machine.detect import current_execution
    from kerneltune.runtime import RuntimeSession

    for call in (thread_count, current_execution):
        with pytest.raises(ValueError, match="threads must be an int >= 1"):
            call(bad)
    with pytest.raises(ValueError, match="threads must be an int >= 1"):
        RuntimeSession(b"", threads=bad)


def test_a_report_s_repr_is_one_short_line_and_to_dict_has_the_whole():
    import kerneltune
    from kerneltune.tuning.explanation import explain

    reports = [kerneltune.startup_report(), explain(threads=1),
               kerneltune.inspect_kernel_tuning_cache()]
    for report in reports:
        text = repr(report)
        assert "\n" not in text and len(text) < 300, text
        assert text.startswith(type(report).__name__ + "(")
    assert len(reports[1].to_dict()["keys"]) == len(reports[1].keys)
