"""``kerneltune report`` as a user runs it, on reports of real calibrations.

The reports are recorded, never made here (a calibration beside the other tests
withholds what it cannot measure cleanly): quick calibrations of Add FLOAT on two
threads of the 2-vCPU EPYC machine. ``add-float-2-threads.json`` holds measured
crossovers and the marks its searches recorded; ``add-float-search.json`` the same
searches with the interference each key saw; ``add-float-comparison.json`` an
explicit comparison of two grains.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_kerneltune

REPORTS = Path(__file__).parent / "data" / "reports"
RECORDED = REPORTS / "add-float-2-threads.json"
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


@pytest.fixture
def report():
    """A recorded report: Add FLOAT's crossover searches on two threads, with interference."""
    return REPORTS / "add-float-search.json"


@pytest.fixture
def comparison():
    """A recorded report of an explicit comparison of values."""
    return REPORTS / "add-float-comparison.json"


def test_the_table_shows_each_decision_with_its_values_points_and_reason(report):
    done = run_kerneltune("report", report, COLUMNS="100")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("kerneltune_cpu/Add/")
    assert "/FLOAT (cpu, abi" in lines[0] and "2 threads: calibrated in" in lines[0]
    assert lines[1].startswith("interference: 13 measurements kept; over the key: other ")
    assert lines[2].startswith("  ")  # the interference, wrapped to the terminal
    assert lines[3].split() == ["parameter", "baseline", "->", "value", "points", "reason"]
    rows = {line.split()[0]: line for line in lines[5:] if line and not line[0].isspace()}
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


def test_a_published_change_shows_its_confirmation_and_a_withheld_key_its_reason(tmp_path,
                                                                                  report):
    document = json.loads(report.read_text(encoding="utf-8"))
    batch = document[0]
    (key,) = batch["calibrated"]
    grain = next(d for d in key["decisions"] if d["parameter"] == "parallel.minimum_elements")
    grain["value"], grain["changed"] = 16384, True
    grain["confirmation"] = {"ratio": 1.31, "low": 1.18, "high": 1.42, "points": 3,
                             "rounds": 8, "margin": 0.05, "confidence": 0.99, "confirmed": True}
    withheld = json.loads(json.dumps(key))
    withheld["interference"]["discarded"] = [0.48, 0.51]
    batch["withheld"] = [{"key": withheld["key"], "reason": "withheld: not measured cleanly",
                          "report": withheld}]
    path = tmp_path / "changed.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    done = run_kerneltune("report", path, COLUMNS="200")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert ("confirmed: 1.310x the values in use (99% interval 1.180 to 1.420) over 3 points, "
            "8 rounds: confirmed (margin 5%)") in text
    assert "2 threads: withheld: not measured cleanly" in text
    assert "2 discarded (other processes took 48% to 51% of their threads' time)" in text
    entries = json.loads(run_kerneltune("report", path, "--json").stdout)["keys"]
    assert [entry["status"] for entry in entries] == ["calibrated", "withheld"]
    assert entries[1]["interference"]["discarded"] == [0.48, 0.51]
    changed = next(d for d in entries[0]["decisions"] if d["changed"])
    assert changed["confirmation"]["confirmed"] is True
    broken = json.loads(path.read_text(encoding="utf-8"))
    broken[0]["calibrated"][0]["interference"]["kept"] = "many"
    path.write_text(json.dumps(broken), encoding="utf-8")
    done = run_kerneltune("report", path)
    assert done.returncode == 1 and "interference: 'kept' is str" in done.stderr


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
    kept = json.loads(run_kerneltune("report", RECORDED, "--json", "--kernel", "add",
                                     "--element-type", "FLOAT", "--threads", "2").stdout)
    assert len(kept["keys"]) == 1
    done = run_kerneltune("report", RECORDED, "--threads", "1", "--changed")
    assert done.returncode == 2 and "--threads 1 and --changed" in done.stderr


@pytest.mark.parametrize("fixture", ["report", "comparison", "recorded"])
def test_plot_writes_a_png(request, tmp_path, fixture):
    output = tmp_path / "crossover.png"
    source = RECORDED if fixture == "recorded" else request.getfixturevalue(fixture)
    done = run_kerneltune("report", source, "--plot", output)
    assert done.returncode == 0, done.stderr
    assert f"plot written to {output}" in done.stdout
    data = output.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000


def test_plot_creates_the_folder_it_is_written_to(tmp_path):
    output = tmp_path / "new" / "folder" / "crossover.png"
    done = run_kerneltune("report", RECORDED, "--plot", output, "--parameter", "minimum_elements")
    assert done.returncode == 0, done.stderr
    assert output.read_bytes().startswith(PNG_SIGNATURE)


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
