"""``kerneltune report`` as a user runs it, on reports of real calibrations.

Reports made here by the fixtures hold whatever this machine decides while the
other tests load it (Add may even run faster on one thread, and its grains go
unmeasured); the recorded one, a quick calibration of Add FLOAT on two threads
of the 2-vCPU EPYC machine, holds measured crossovers and the marks its searches
recorded to check.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_kerneltune

RECORDED = Path(__file__).parent / "data" / "reports" / "add-float-2-threads.json"

#: one cheap key, calibrated on two threads at quick effort (about a second)
ADD = ("--kernel", "Add", "--element-type", "FLOAT", "--threads", "2", "--effort", "quick")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: makes ``import matplotlib`` fail in a child whose PYTHONPATH holds it, as where the
#: plot extra is not installed
NO_MATPLOTLIB = '''
import sys

class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, _Absent())
'''


def _calibrated(directory, *arguments: str):
    path = directory / "report.json"
    done = run_kerneltune("calibrate", *ADD, *arguments, "--report", path)
    assert done.returncode == 0, done.stderr
    return path


@pytest.fixture(scope="session")
def report(tmp_path_factory):
    """A real report: Add FLOAT's crossover searches on two threads."""
    return _calibrated(tmp_path_factory.mktemp("search"))


@pytest.fixture(scope="session")
def comparison(tmp_path_factory):
    """A real report of an explicit comparison of values."""
    return _calibrated(tmp_path_factory.mktemp("comparison"), "--parameter",
                       "parallel.minimum_elements", "--values", "4096", "65536")


def test_the_table_shows_each_decision_with_its_values_points_and_reason(report):
    done = run_kerneltune("report", report, COLUMNS="100")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("kerneltune_cpu/Add/")
    assert "/FLOAT (cpu, abi" in lines[0] and "2 threads: calibrated in" in lines[0]
    assert lines[1].split() == ["parameter", "baseline", "->", "value", "points", "reason"]
    rows = {line.split()[0]: line for line in lines[3:] if line and not line[0].isspace()}
    assert {"parallel.minimum_elements", "parallel.maximum_threads",
            "parallel.broadcast_minimum_elements"} <= set(rows)
    grain = rows["parallel.minimum_elements"].split()
    assert grain[2] in ("(kept)", "->")
    assert int(grain[3 if grain[2] == "(kept)" else 4]) >= 0  # points measured
    assert max(map(len, lines)) <= 110  # reasons wrapped to the terminal, not one long line


def test_json_holds_every_decision_with_its_series(report):
    done = run_kerneltune("report", report, "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["file"] == str(report)
    (entry,) = document["keys"]
    assert (entry["key"]["kernel"], entry["threads"], entry["status"]) == ("Add", 2, "calibrated")
    decisions = {d["parameter"]: d for d in entry["decisions"]}
    # whatever this machine decided: the thread search always measures, and on a
    # machine that runs Add faster on one thread the grains are kept unmeasured
    threads = decisions["parallel.maximum_threads"]
    assert threads["kind"] == "threads" and threads["candidates"] > 0
    assert threads["selected_label"] == f"{min(threads['value'], 2)} threads"
    for grain in decisions.values():
        if grain["kind"] != "crossover":
            continue
        assert grain["reference"] == "serial"
        assert {s["label"] for s in grain["series"]} == {"serial", "parallel"}
        assert sum(len(s["points"]) for s in grain["series"]) == 2 * grain["candidates"]
        assert all(p["seconds"] > 0 for s in grain["series"] for p in s["points"])
        selected = [m for m in grain["marks"] if m["role"] == "selected"]
        assert selected and all(m["size"] > 0 for m in selected)
        assert set(grain["units"].values()) <= {"elements per call",
                                                "elements per call (N/256 x 1 by 1 x 256)"}


def test_the_recorded_crossover_marks_the_kept_grain_where_the_value_in_use_switches():
    """The marks are the ones the search recorded: the grain 32768 switches at 65536 on both
    cases, and equal's crossover was measured there (scalar had no clear winner)."""
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
    (written,) = [d for d in recorded[0]["calibrated"][0]["decisions"]
                  if d["parameter"] == "parallel.minimum_elements"]
    assert [(m["case"], m["size"], m["role"]) for m in written["marks"]] == [
        ("equal", 65536, "selected"), ("scalar", 65536, "selected"),
        ("equal", 65536, "measured")]
    done = run_kerneltune("report", RECORDED, "--json", "--parameter", "parallel.minimum")
    assert done.returncode == 0, done.stderr
    ((grain,),) = [entry["decisions"] for entry in json.loads(done.stdout)["keys"]]
    assert (grain["value"], grain["changed"], grain["candidates"]) == (32768, False, 5)
    assert [(s["case"], s["label"]) for s in grain["series"]] == [
        ("equal", "serial"), ("equal", "parallel"), ("scalar", "serial"), ("scalar", "parallel")]
    assert [p["size"] for p in grain["series"][0]["points"]] == [16384, 32768, 65536, 131072]
    assert [(m["role"], m["size"], m["label"]) for m in grain["marks"]] == [
        ("selected", 65536, "selected parallel.minimum_elements = 32768 (kept)"),
        ("measured", 65536, "crossover measured on equal")]
    assert grain["units"] == {"equal": "elements per call", "scalar": "elements per call"}


def test_the_filters_choose_keys_and_parameters():
    done = run_kerneltune("report", RECORDED, "--json", "--parameter", "broadcast")
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(done.stdout)["keys"]
    assert [d["parameter"] for d in entry["decisions"]] == ["parallel.broadcast_minimum_elements"]
    done = run_kerneltune("report", RECORDED, "--key", "Gemm")
    assert done.returncode == 2
    assert "nothing in" in done.stderr and "--key 'Gemm'" in done.stderr


@pytest.mark.parametrize("fixture", ["report", "comparison", "recorded"])
def test_plot_writes_a_png(request, tmp_path, fixture):
    output = tmp_path / "crossover.png"
    source = RECORDED if fixture == "recorded" else request.getfixturevalue(fixture)
    done = run_kerneltune("report", source, "--plot", output)
    assert done.returncode == 0, done.stderr
    assert f"plot written to {output}" in done.stdout
    data = output.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000


def test_plot_beside_json_keeps_stdout_a_document(tmp_path):
    output = tmp_path / "crossover.png"
    done = run_kerneltune("report", RECORDED, "--plot", output, "--json", "--parameter",
                          "minimum_elements")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["keys"] and "plot written to" in done.stderr
    assert output.read_bytes().startswith(PNG_SIGNATURE)


def test_plot_without_matplotlib_exits_1_naming_the_extra(report, tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(NO_MATPLOTLIB, encoding="utf-8")
    output = tmp_path / "crossover.png"
    done = run_kerneltune("report", report, "--plot", output, PYTHONPATH=str(shim))
    assert done.returncode == 1
    assert "matplotlib" in done.stderr and "pip install 'kerneltune[plot]'" in done.stderr
    assert "Traceback" not in done.stderr and not output.exists()


@pytest.mark.parametrize(("content", "message"), [
    ("kernels: [Add]\n", "not JSON"),
    ('{"entries": []}', "expected a batch report"),
    ('[{"execution": {"effective_threads": 2}, "calibrated": [{"key": 3}], "skipped": [], '
     '"unsupported": []}]', "calibrated[0]: 'key' is int"),
])
def test_a_file_that_is_not_a_report_exits_1_naming_it(tmp_path, content, message):
    path = tmp_path / "profile.yaml"
    path.write_text(content, encoding="utf-8")
    done = run_kerneltune("report", path)
    assert done.returncode == 1
    assert done.stderr.startswith(f"kerneltune report: {path}: not a calibration report")
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_missing_file_exits_1_naming_it(tmp_path):
    done = run_kerneltune("report", tmp_path / "absent.json")
    assert done.returncode == 1
    assert "absent.json: cannot be read: no such file" in done.stderr


def test_help_ends_with_examples():
    done = run_kerneltune("report", "--help")
    assert done.returncode == 0, done.stderr
    assert "--plot PNG" in done.stdout and "kerneltune[plot]" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].strip().startswith("kerneltune report ")
