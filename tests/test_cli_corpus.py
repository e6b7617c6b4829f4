"""``kerneltune corpus`` as a user runs it: the console script, its spawned workers, its
outputs, every usage error (exit 2) and the failures (exit 1)."""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import run_kerneltune
from kerneltune import set_kernel_tuning_parameters
from kerneltune.calibration.parameters import kernel_tuning_parameters
from kerneltune.cli import corpus
from kerneltune.corpus.analysis import CaseLatency, analyze_kernel_tuning_latencies
from kerneltune.corpus.cases import Corpus
from kerneltune.corpus.search import CaseResult, CorpusSearchReport
from test_corpus_search import onnx_case, write_case

MINIMUM = "parallel.minimum_elements"
#: two onnx node cases that run Add FLOAT, measured quickly
ADD = ("corpus", "^test_add$|^test_add_bcast$", "--kernel", "Add", "--element-type", "FLOAT")
QUICK = ("--repeat", "2", "--warmup", "0")
#: a progress line on stderr: "set 1 (2/2), case 3/4: test_add ok"
PROGRESS = re.compile(r"^set (\d+) \((\d+)/(\d+)\), case (\d+)/(\d+): (\S+) (\S+)$", re.M)


@pytest.fixture
def machine_cache(tmp_path):
    """The user cache, holding an Add FLOAT entry; its bytes must not change."""
    path = tmp_path / "machine" / "kernel_tuning.yaml"
    path.parent.mkdir()
    set_kernel_tuning_parameters("Add", "FLOAT", {"parallel.broadcast_minimum_elements": 12345},
                                 path=path, load=False)
    before = path.read_bytes()
    yield path
    assert path.read_bytes() == before


@pytest.fixture
def temporary(tmp_path):
    """TMPDIR of the command, where the search puts its caches: empty again afterwards."""
    folder = tmp_path / "temporary"
    folder.mkdir()
    yield folder
    assert list(folder.iterdir()) == []


def test_each_set_runs_in_its_own_worker_and_the_report_is_json_and_csv(
        tmp_path, machine_cache, temporary):
    done = run_kerneltune(*ADD, "--parameter", f"{MINIMUM}=1", *QUICK, "--json",
                          "--output", tmp_path / "report.csv", cache=machine_cache,
                          TMPDIR=str(temporary))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # stdout holds the JSON alone
    assert report["parameters"] == [MINIMUM]
    active, tried = (entry["values"] for entry in report["sets"])
    # set 0 holds the values active for the command, the user cache's entry included
    assert active["parallel.broadcast_minimum_elements"] == 12345
    assert tried == {**active, MINIMUM: 1}
    assert [(r["set"], r["case"], r["status"]) for r in report["results"]] == [
        (0, "test_add", "ok"), (0, "test_add_bcast", "ok"),
        (1, "test_add", "ok"), (1, "test_add_bcast", "ok")]
    for result in report["results"]:  # what each worker's session resolved: its set's values
        assert result["resolved"] == report["sets"][result["set"]]["values"]
        assert result["latency_seconds"] > 0
    assert report["measurement"] == {"repeat": 2, "warmup": 0, "timeout_seconds": 60.0}
    assert report["analysis"]["criterion"] == "median"
    assert report["selected"] in (0, 1)
    assert report["selected_values"] == report["sets"][report["selected"]]["values"]
    assert [c["name"] for c in report["corpus"]["cases"]] == ["test_add", "test_add_bcast"]

    progress = PROGRESS.findall(done.stderr)
    assert progress == [("0", "1", "2", "1", "4", "test_add", "ok"),
                        ("0", "1", "2", "2", "4", "test_add_bcast", "ok"),
                        ("1", "2", "2", "3", "4", "test_add", "ok"),
                        ("1", "2", "2", "4", "4", "test_add_bcast", "ok")]
    assert f"report written to {tmp_path / 'report.csv'}" in done.stderr
    with open(tmp_path / "report.csv", newline="") as stream:
        lines = list(csv.DictReader(stream))
    assert [(line["set"], line[MINIMUM], line["case"], line["status"]) for line in lines] == [
        ("0", str(active[MINIMUM]), "test_add", "ok"),
        ("0", str(active[MINIMUM]), "test_add_bcast", "ok"),
        ("1", "1", "test_add", "ok"), ("1", "1", "test_add_bcast", "ok")]


def test_the_table_marks_the_selected_set_and_the_json_file_is_the_report(
        tmp_path, machine_cache, temporary):
    done = run_kerneltune(*ADD, "--parameter", f"{MINIMUM}=1", *QUICK,
                          "--criterion", "median-speedup", "--output", tmp_path / "report.json",
                          cache=machine_cache, TMPDIR=str(temporary))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["analysis"]["criterion"] == "median-speedup"
    lines = done.stdout.splitlines()
    assert "criterion: median-speedup (maximised; ties go to the lower set)" in lines
    header = next(line for line in lines if line.startswith("set "))
    assert header.split()[:3] == ["set", MINIMUM, "complete"] and "median speedup" in header
    rows = {line.split()[0]: line for line in lines if re.match(r"^[01] ", line)}
    assert rows["0"].split()[1:3] == [str(report["sets"][0]["values"][MINIMUM]), "yes"]
    assert rows["1"].split()[1:3] == ["1", "yes"]
    assert "active, baseline" in rows["0"]
    assert [index for index, row in rows.items() if row.endswith("selected")] == [
        str(report["selected"])]
    if report["selected"] == report["fastest"] == 0:
        assert "selected: set 0, the active values; nothing to change" in lines
    elif report["selected"] == 0:  # set 1 ran faster, and was not confirmed run again
        assert not report["confirmation"]["confirmed"]
        assert "selected: set 0: no set beats the values in use; nothing to change" in lines
    else:
        assert f"  kerneltune cache set --kernel Add --element-type FLOAT {MINIMUM}=1" in lines
    assert f"report written to {tmp_path / 'report.json'}" in lines
    assert len(PROGRESS.findall(done.stderr)) == 4


def test_wrong_outputs_print_the_table_then_the_failures_and_exit_1(tmp_path, temporary):
    case = onnx_case("test_abs")
    (inputs, _), = case.data_sets
    # the input itself as the expected output, not its absolute value
    write_case(tmp_path / "cases" / "wrong_abs", case.model, [(inputs, [np.asarray(inputs[0])])])
    done = run_kerneltune("corpus", "^wrong_abs$", "--cases", tmp_path / "cases",
                          "--kernel", "Abs", "--element-type", "FLOAT", "--parameter",
                          f"{MINIMUM}=1", "--repeat", "1", "--warmup", "0",
                          TMPDIR=str(temporary))
    assert done.returncode == 1, done.stderr
    assert re.search(r"^0 +\d+ +no \(1 wrong_output\) +- ", done.stdout, re.M), done.stdout
    assert "selected:" not in done.stdout
    assert ("kerneltune corpus: set 0, wrong_abs: wrong_output: data set 0, output 0"
            in done.stderr)
    assert "nothing selected: no parameter set has a latency for every case" in done.stderr


def test_no_case_matching_is_a_failure():
    done = run_kerneltune("corpus", "^test_abs$", "--kernel", "Add", "--element-type", "FLOAT",
                          "--parameter", f"{MINIMUM}=1")
    assert done.returncode == 1
    assert "no case matching '^test_abs$' runs Add FLOAT" in done.stderr
    assert "test_abs: no node runs Add FLOAT" in done.stderr


@pytest.mark.parametrize(("arguments", "message"), [
    ((), "the following arguments are required: --parameter"),
    (("--parameter", MINIMUM), f"argument --parameter: expected NAME=VALUE, got '{MINIMUM}'"),
    (("--parameter", "=1"), "expected NAME=VALUE, got '=1'"),
    (("--parameter", f"{MINIMUM}=1,,2"), f"expected NAME=V1,V2,..., got '{MINIMUM}=1,,2'"),
    (("--parameter", f"{MINIMUM}=1", "--parameter", f"{MINIMUM}=2"),
     f"--parameter {MINIMUM} is given twice"),
    (("--parameter", "parallel.no_such=1"), "parallel.no_such: Add FLOAT has no such parameter"),
    (("--parameter", f"{MINIMUM}=0"), f"parameter set 1: {MINIMUM}: must be a positive integer"),
    (("--parameter", f"{MINIMUM}=many"), f"{MINIMUM}: expected an integer"),
    (("--parameter", f"{MINIMUM}={','.join(map(str, range(1, 18)))}",
      "--parameter", f"parallel.maximum_threads={','.join(map(str, range(1, 18)))}"),
     "289 parameter sets; at most 256"),
    (("--parameter", f"{MINIMUM}=1", "--criterion", "fastest"),
     "argument --criterion: invalid choice: 'fastest'"),
    (("--parameter", f"{MINIMUM}=1", "--output", "report.txt"),
     "--output report.txt: the report is written as .json or .csv"),
    (("--parameter", f"{MINIMUM}=1", "--output", "report"), "--output report: the report"),
    (("--parameter", f"{MINIMUM}=1", "--repeat", "0"), "repeat: must be an int >= 1, got 0"),
    (("--parameter", f"{MINIMUM}=1", "--repeat", "two"), "argument --repeat: invalid int"),
    (("--parameter", f"{MINIMUM}=1", "--warmup", "-1"), "warmup: must be an int >= 0"),
    (("--parameter", f"{MINIMUM}=1", "--timeout", "0"), "timeout: must be a number of seconds"),
    (("--parameter", f"{MINIMUM}=1", "--timeout", "-5"), "timeout: must be a number of seconds"),
    (("--parameter", f"{MINIMUM}=1", "--kernel", "Nope"), "no tuning schema is registered for "
                                                          "kernel 'Nope'"),
    (("--parameter", f"{MINIMUM}=1", "--element-type", "NOTATYPE"),
     "unknown element type 'NOTATYPE'"),
])
def test_every_usage_error_exits_2_before_measuring(tmp_path, arguments, message):
    # a valid --output first: the one given in ``arguments`` comes last and counts
    done = run_kerneltune(*ADD, "--output", tmp_path / "report.json", *arguments, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert not PROGRESS.search(done.stderr) and done.stdout == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["corpus", "backend"])
def test_a_bad_case_pattern_is_a_usage_error_under_the_name_and_its_former_one(command):
    done = run_kerneltune(command, "(", "--kernel", "Add", "--element-type", "FLOAT",
                          "--parameter", f"{MINIMUM}=1")
    assert done.returncode == 2
    assert "kerneltune corpus: error: invalid case pattern '(': missing )" in done.stderr


def test_the_former_name_backend_is_left_out_of_the_help():
    listing = run_kerneltune("--help")
    assert listing.returncode == 0 and "  corpus " in listing.stdout
    assert "backend" not in listing.stdout


def test_help_quotes_the_api_defaults_and_ends_with_examples():
    from kerneltune.corpus.search import DEFAULT_REPEAT, DEFAULT_TIMEOUT, DEFAULT_WARMUP, MAX_SETS

    done = run_kerneltune("corpus", "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for expected in (f"(default: {DEFAULT_REPEAT})", f"(default: {DEFAULT_WARMUP})",
                     f"(default: {DEFAULT_TIMEOUT:g})", "default: median",
                     f"at most {MAX_SETS}", "max-latency", "median-speedup"):
        assert expected in text
    examples = done.stdout.split("examples:\n")[1].splitlines()
    assert examples and all(line.startswith("  kerneltune corpus ") for line in examples)


# --- the table, for a report whose outcome is fixed ------------------------------------------


def _report(criterion: str) -> CorpusSearchReport:
    """Set 1 fastest, set 2 incomplete: one case timed out."""
    (row,) = kernel_tuning_parameters("Add", element_type="FLOAT").parameters
    sets = tuple({**row.active, MINIMUM: value} for value in (row.active[MINIMUM], 1, 4096))
    latencies = {0: (2e-3, 4e-3), 1: (1e-3, 2e-3), 2: (5e-4, None)}
    results = tuple(
        CaseResult(index, case, "ok" if latency else "timeout", latency, sets[index])
        for index, pair in latencies.items() for case, latency in zip("ab", pair, strict=True))
    analysis = analyze_kernel_tuning_latencies(
        [CaseLatency(r.set_index, r.case, r.latency_seconds) for r in results], criterion)
    return CorpusSearchReport(row.key, (MINIMUM,), sets, Corpus("^x", row.key, (), ()),
                               results, analysis, 2, 0, 60.0)


def test_the_table_shows_incomplete_sets_and_the_command_that_keeps_the_selected_one(capsys):
    args = argparse.Namespace(implementation="x86_64_v4", threads=2)
    report = _report("sum")
    corpus._print_report(args, report)
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in lines if re.match(r"^\d ", line)}
    assert rows["1"][:7] == ["1", "1", "yes", "3.0000", "1.5000", "1.5000", "2.0000"]
    assert rows["1"][7:] == ["2.000", "2.000", "2.000", "selected"]
    assert rows["2"] == ["2", "4096", "no", "(1", "timeout)", *["-"] * 7]
    assert f"selected: set 1: {MINIMUM}=1" in lines
    assert (f"  kerneltune cache set --kernel Add --element-type FLOAT --implementation "
            f"{report.key.implementation} --threads 2 {MINIMUM}=1") in lines


def test_the_command_line_and_the_search_module_load_without_onnx():
    code = ("import sys, kerneltune.cli, kerneltune.corpus.search\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'onnx'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
