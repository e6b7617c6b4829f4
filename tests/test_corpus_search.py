"""The corpus parameter search: its analysis, its corpus, and real worker processes."""

from __future__ import annotations

import csv
import json
import math
import multiprocessing
import os
import tempfile
import warnings

import numpy as np
import pytest
from onnx import numpy_helper

from kerneltune import TuningValidationError, default_registry, set_kernel_tuning_parameters
from kerneltune.calibration.parameters import kernel_tuning_parameters
from kerneltune.corpus.analysis import (
    CRITERIA,
    CaseLatency,
    analyze_kernel_tuning_latencies,
)
from kerneltune.corpus.cases import Corpus, collect_corpus_cases
from kerneltune.corpus.search import (
    MAX_SETS,
    CaseResult,
    CorpusSearchReport,
    _confirmation,
    parameter_sets,
    search_corpus_parameters,
)

MINIMUM = "parallel.minimum_elements"


def rows(table):
    """CaseLatency rows from {set: [latency per case]}, cases named a, b, c, ..."""
    return [CaseLatency(index, "abcdefgh"[number], latency)
            for index, latencies in table.items() for number, latency in enumerate(latencies)]


# set 0 (the baseline), set 1 and set 2 on cases a, b, c
WORKED = {0: [1.0, 2.0, 4.0], 1: [0.5, 2.0, 8.0], 2: [2.0, 1.0, 2.0]}


def test_every_metric_of_a_worked_example():
    analysis = analyze_kernel_tuning_latencies(rows(WORKED), "sum")
    assert analysis.cases == ("a", "b", "c")
    baseline, first, second = analysis.sets
    assert (baseline.latency_sum, baseline.latency_average, baseline.latency_median,
            baseline.latency_max) == pytest.approx((7.0, 7 / 3, 2.0, 4.0))
    assert (baseline.speedup_average, baseline.speedup_median, baseline.speedup_max) == (1, 1, 1)
    # speedups per case: 1/0.5, 2/2, 4/8
    assert (first.latency_sum, first.latency_average, first.latency_median,
            first.latency_max) == pytest.approx((10.5, 3.5, 2.0, 8.0))
    assert (first.speedup_average, first.speedup_median,
            first.speedup_max) == pytest.approx((3.5 / 3, 1.0, 2.0))
    # speedups per case: 1/2, 2/1, 4/2
    assert (second.latency_sum, second.latency_average, second.latency_median,
            second.latency_max) == pytest.approx((5.0, 5 / 3, 2.0, 2.0))
    assert (second.speedup_average, second.speedup_median,
            second.speedup_max) == pytest.approx((1.5, 2.0, 2.0))
    assert all(metrics.complete for metrics in analysis.sets)
    assert analysis.baseline_complete
    json.dumps(analysis.to_dict())


@pytest.mark.parametrize(("criterion", "selected"), [
    ("sum", 2), ("average", 2), ("max-latency", 2), ("average-speedup", 2),
    ("median-speedup", 2),
    ("median", 0),       # 2.0 for every set: the first one wins the tie
    ("max-speedup", 1),  # 2.0 for sets 1 and 2
])
def test_every_criterion_on_the_worked_example(criterion, selected):
    analysis = analyze_kernel_tuning_latencies(rows(WORKED), criterion)
    assert analysis.selected == selected
    assert analysis.maximised == criterion.endswith("speedup")
    assert analysis.to_dict()["direction"] == ("maximise" if analysis.maximised
                                               else "minimise")


def test_the_criteria_are_the_seven_documented_ones():
    assert set(CRITERIA) == {"sum", "average", "median", "max-latency", "average-speedup",
                             "median-speedup", "max-speedup"}


def test_a_missing_latency_makes_its_set_incomplete_and_never_selected():
    table = {0: [1.0, 2.0], 1: [0.001, None], 2: [0.9, 1.9]}
    for criterion in CRITERIA:
        analysis = analyze_kernel_tuning_latencies(rows(table), criterion)
        incomplete = analysis.sets[1]
        assert not incomplete.complete
        assert all(incomplete.metric(c) is None for c in CRITERIA)
        assert analysis.selected == 2
    assert analysis.to_dict()["sets"][1]["latency_seconds"]["median"] is None


def test_an_incomplete_baseline_leaves_speedups_unavailable_while_latencies_select():
    table = {0: [1.0, None], 1: [2.0, 2.0], 2: [1.0, 1.5]}
    for criterion in ("sum", "average", "median", "max-latency"):
        analysis = analyze_kernel_tuning_latencies(rows(table), criterion)
        assert not analysis.baseline_complete
        assert analysis.selected == 2
        assert analysis.sets[2].latency_sum == pytest.approx(2.5)
        assert analysis.sets[2].speedup_median is None
    for criterion in ("average-speedup", "median-speedup", "max-speedup"):
        assert analyze_kernel_tuning_latencies(rows(table), criterion).selected is None


@pytest.mark.parametrize(("given", "message"), [
    ([], "no latencies"),
    (rows({0: [1.0, 2.0], 1: [1.0]}), "set 1 has other cases than set 0: missing"),
    (rows({0: [1.0], 2: [1.0]}), "without gaps"),
    (rows({1: [1.0], 2: [1.0]}), "without gaps"),
    (rows({0: [1.0], 1: [0.0]}), "above 0"),
    (rows({0: [1.0], 1: [-1.0]}), "above 0"),
    (rows({0: [math.nan], 1: [1.0]}), "above 0"),
    (rows({0: [math.inf], 1: [1.0]}), "above 0"),
    (rows({0: [True], 1: [1.0]}), "above 0"),
    ([CaseLatency(0, "a", 1.0), CaseLatency(0, "a", 2.0)], "given twice"),
    ([CaseLatency(-1, "a", 1.0)], "set index"),
    ([CaseLatency(0, "", 1.0)], "non-empty name"),
    ([(0, "a", 1.0)], "expected a CaseLatency"),
])
def test_invalid_latencies_are_rejected(given, message):
    with pytest.raises(TuningValidationError, match=message) as raised:
        analyze_kernel_tuning_latencies(given, "median")
    assert isinstance(raised.value, ValueError)


def test_an_unknown_criterion_is_rejected_with_the_choices():
    with pytest.raises(TuningValidationError, match="unknown criterion 'fastest'.*max-speedup"):
        analyze_kernel_tuning_latencies(rows(WORKED), "fastest")


# --- parameter sets ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def add_float():
    """The Add FLOAT key of this machine and its active values."""
    (row,) = kernel_tuning_parameters("Add", element_type="FLOAT").parameters
    return row.key, dict(row.active)


def test_the_active_values_come_first_and_once(add_float):
    key, active = add_float
    sets = parameter_sets(key, active, {MINIMUM: [4096, active[MINIMUM]]})
    assert sets == [active, {**active, MINIMUM: 4096}]


@pytest.mark.parametrize(("parameters", "message"), [
    ({}, "at least one parameter"),
    ({"parallel.no_such": [1]}, "no such parameter"),
    ({MINIMUM: []}, "non-empty sequence"),
    ({MINIMUM: "4096"}, "non-empty sequence"),
    ({MINIMUM: [4096, 0]}, "parameter set 2"),
])
def test_invalid_parameter_values_are_rejected(add_float, parameters, message):
    key, active = add_float
    with pytest.raises(TuningValidationError, match=message):
        parameter_sets(key, active, parameters)


def test_only_the_active_values_leave_nothing_to_compare(add_float):
    key, active = add_float
    with pytest.raises(TuningValidationError, match="nothing to compare"):
        parameter_sets(key, active, {MINIMUM: [active[MINIMUM]]})


def test_more_than_256_sets_are_rejected_before_anything_runs(add_float):
    key, active = add_float
    sixteen = list(range(1, 17))
    # 256 sets of the product, and the active values (not among them) make 257
    with pytest.raises(TuningValidationError, match=f"257 .*at most {MAX_SETS}"):
        parameter_sets(key, active, {MINIMUM: sixteen, "parallel.maximum_threads": sixteen})
    with pytest.raises(TuningValidationError, match="289 parameter sets"):
        search_corpus_parameters("^test_add$", {MINIMUM: range(1, 18),
                                                 "parallel.maximum_threads": range(1, 18)},
                                  "Add", "FLOAT")


@pytest.mark.parametrize(("options", "message"), [
    ({"repeat": 0}, "repeat"), ({"warmup": -1}, "warmup"), ({"timeout": 0}, "timeout"),
    ({"criterion": "fastest"}, "unknown criterion"),
])
def test_invalid_measurement_options_are_rejected(options, message):
    with pytest.raises(TuningValidationError, match=message):
        search_corpus_parameters("^test_add$", {MINIMUM: [1]}, "Add", "FLOAT", **options)


# --- the corpus -------------------------------------------------------------------------------


def onnx_case(name):
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return next(case for case in load_model_tests(kind="node") if case.name == name)


def write_case(folder, model, data_sets):
    """A case folder in onnx's layout."""
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    for number, (inputs, outputs) in enumerate(data_sets):
        data = folder / f"test_data_set_{number}"
        data.mkdir()
        for kind, arrays in (("input", inputs), ("output", outputs)):
            for index, array in enumerate(arrays):
                tensor = numpy_helper.from_array(np.asarray(array))
                (data / f"{kind}_{index}.pb").write_bytes(tensor.SerializeToString())
    return folder


def test_the_corpus_keeps_the_cases_that_run_the_kernel(tmp_path, add_float):
    abs_case = onnx_case("test_abs")
    write_case(tmp_path / "cases" / "my_abs", abs_case.model, abs_case.data_sets)
    (tmp_path / "cases" / "my_broken" / "test_data_set_0").mkdir(parents=True)
    (tmp_path / "cases" / "my_broken" / "model.onnx").write_bytes(b"not a model")
    (row,) = kernel_tuning_parameters("Abs", element_type="FLOAT").parameters
    corpus = collect_corpus_cases("^test_abs$|^test_add_bcast$|^my_", row.key,
                                   [tmp_path / "cases"])
    assert [(case.name, case.source) for case in corpus.cases] == [
        ("test_abs", "onnx"), ("my_abs", os.fspath(tmp_path / "cases" / "my_abs"))]
    mine = corpus.cases[1]
    np.testing.assert_array_equal(mine.data_sets[0][0][0], abs_case.data_sets[0][0][0])
    skipped = {s.name: s.reason for s in corpus.skipped}
    assert skipped["test_add_bcast"] == "no node runs Abs FLOAT"
    assert "my_broken" in skipped
    json.dumps(corpus.to_dict())


def test_the_corpus_rejects_a_bad_pattern_and_two_cases_of_one_name(tmp_path, add_float):
    key, _ = add_float
    with pytest.raises(ValueError, match="invalid case pattern"):
        collect_corpus_cases("(", key)
    add = onnx_case("test_add")
    write_case(tmp_path / "test_add", add.model, add.data_sets)
    with pytest.raises(ValueError, match="two cases are named 'test_add'"):
        collect_corpus_cases("^test_add$", key, [tmp_path / "test_add"])


# --- the search, in real worker processes ---------------------------------------------------


@pytest.fixture
def machine_cache(tmp_path, monkeypatch, add_float):
    """This process's cache, holding an Add FLOAT entry no worker may see; its bytes and mtime."""
    path = tmp_path / "machine" / "kernel_tuning.yaml"
    path.parent.mkdir()
    key, _ = add_float
    set_kernel_tuning_parameters("Add", "FLOAT", {"parallel.broadcast_minimum_elements": 12345},
                                 key.implementation, path=path, load=False)
    monkeypatch.setenv("KERNELTUNE_CACHE", os.fspath(path))
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    yield path
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


@pytest.fixture
def temporary_folder(tmp_path, monkeypatch):
    """Where the search puts its temporary caches; empty again when it is done."""
    folder = tmp_path / "temporary"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", os.fspath(folder))
    yield folder
    assert list(folder.iterdir()) == []


def test_each_set_runs_in_its_own_worker_with_its_own_values(machine_cache, temporary_folder,
                                                             add_float, tmp_path):
    key, active = add_float
    generation = default_registry.generation
    seen = []
    report = search_corpus_parameters("^test_add$|^test_add_bcast$", {MINIMUM: [1]}, "Add",
                                       "FLOAT", repeat=3, warmup=1, progress=seen.append)
    assert report.key == key
    assert report.sets == (active, {**active, MINIMUM: 1})
    assert [(r.set_index, r.case, r.status) for r in report.results] == [
        (0, "test_add", "ok"), (0, "test_add_bcast", "ok"),
        (1, "test_add", "ok"), (1, "test_add_bcast", "ok")]
    for result in report.results:
        assert result.resolved == report.sets[result.set_index]
        assert result.latency_seconds > 0
    # the worker's values are the set's, not the cache entry of this process
    assert active["parallel.broadcast_minimum_elements"] != 12345
    assert report.analysis.baseline_complete and report.selected in (0, 1)
    assert report.selected_values == report.sets[report.selected]
    assert all(len(result.samples) == 3 for result in report.results)
    if report.fastest == 1:  # set 1 and set 0 ran again, ABBA, to confirm it
        assert [r.set_index for r in report.confirming] == [1, 1, 0, 0, 0, 0, 1, 1]
        assert report.selected == (1 if report.confirmation.confirmed else 0)
    else:
        assert report.confirmation is None and report.confirming == ()
    assert report.failures == ()
    assert [(p.cases_done, p.cases_total, p.sets_done, p.sets_total) for p in seen] == [
        (1, 4, 0, 2), (2, 4, 1, 2), (3, 4, 1, 2), (4, 4, 2, 2)]
    # advisory: nothing was published in this process
    assert default_registry.generation == generation

    written = json.loads(report.write(tmp_path / "report.json").read_text())
    assert written["selected"] == report.selected
    assert written["results"][3]["resolved"][MINIMUM] == 1
    with open(report.write(tmp_path / "report.csv"), newline="") as stream:
        lines = list(csv.DictReader(stream))
    assert [(line["set"], line[MINIMUM], line["case"]) for line in lines] == [
        ("0", str(active[MINIMUM]), "test_add"), ("0", str(active[MINIMUM]), "test_add_bcast"),
        ("1", "1", "test_add"), ("1", "1", "test_add_bcast")]
    with pytest.raises(ValueError, match=r"\.json or \.csv"):
        report.write(tmp_path / "report.txt")


def test_a_timeout_makes_the_set_incomplete(machine_cache, temporary_folder):
    report = search_corpus_parameters("^test_abs$", {MINIMUM: [1]}, "Abs", "FLOAT",
                                       timeout=1e-9)
    assert [(r.set_index, r.status, r.latency_seconds) for r in report.results] == [
        (0, "timeout", None), (1, "timeout", None)]
    assert not any(metrics.complete for metrics in report.analysis.sets)
    assert report.selected is None
    assert multiprocessing.active_children() == []


def test_wrong_outputs_are_an_error_and_never_a_winner(machine_cache, temporary_folder,
                                                       tmp_path):
    case = onnx_case("test_abs")
    (inputs, _), = case.data_sets
    wrong = [(inputs, [np.asarray(inputs[0])])]  # the input itself, not its absolute value
    write_case(tmp_path / "cases" / "wrong_abs", case.model, wrong)
    report = search_corpus_parameters("^wrong_abs$", {MINIMUM: [1]}, "Abs", "FLOAT",
                                       cases_dirs=[tmp_path / "cases"], repeat=1, warmup=0)
    assert [r.status for r in report.results] == ["wrong_output", "wrong_output"]
    assert "data set 0, output 0" in report.failures[0].message
    assert report.selected is None


def test_a_corpus_without_the_kernel_is_an_error(add_float):
    with pytest.raises(ValueError, match="no case matching '\\^test_abs\\$' runs Add FLOAT"):
        search_corpus_parameters("^test_abs$", {MINIMUM: [1]}, "Add", "FLOAT")



def _report_of(latencies: dict[int, list[list[float]]], key) -> CorpusSearchReport:
    """A search report over cases a, b from per-set, per-case samples, confirmed as the
    search confirms (on samples drawn alike for its confirming runs)."""
    results = [CaseResult(index, "ab"[number], "ok", float(np.median(samples)), None, None,
                          tuple(samples))
               for index, cases in latencies.items() for number, samples in enumerate(cases)]
    analysis = analyze_kernel_tuning_latencies(
        CaseLatency(r.set_index, r.case, r.latency_seconds) for r in results)
    confirmation = (None if analysis.selected in (None, 0)
                    else _confirmation(results, analysis.selected, 0.05))
    return CorpusSearchReport(key, (MINIMUM,), ({MINIMUM: 1}, {MINIMUM: 2}),
                              Corpus("^test", key, (), ()), tuple(results), analysis, 20, 3,
                              60.0, confirmation)


def test_a_set_faster_by_noise_alone_is_not_advised(add_float):
    """Both sets drawn from one distribution: whichever median is lower, no set beats the
    values in use."""
    key, _ = add_float
    generator = np.random.default_rng(11)
    advised = 0
    for _ in range(50):
        draws = generator.lognormal(0.0, 0.2, (2, 2, 20))
        report = _report_of({0: list(draws[0]), 1: list(draws[1])}, key)
        advised += report.selected == 1
        if report.fastest == 1:
            assert not report.confirmation.confirmed
            assert report.to_dict()["selected"] == 0 and report.to_dict()["fastest"] == 1
    assert advised == 0


def test_a_set_that_really_wins_is_advised(add_float):
    key, _ = add_float
    generator = np.random.default_rng(12)
    draws = generator.lognormal(0.0, 0.05, (2, 2, 20))
    report = _report_of({0: list(draws[0] * 1.3), 1: list(draws[1])}, key)
    assert report.fastest == report.selected == 1 and report.confirmation.confirmed
