"""Reading a calibration report back as crossover curves: series, the selected value, marks.

The marks and units are the ones the decisions recorded; the reasons are only shown.
"""

from __future__ import annotations

import json

import pytest

from conftest import execution, measurement_of, toy_key
from kerneltune.calibration import CalibrationReport, Candidate, Decision
from kerneltune.calibration.curves import (
    COMPARISON,
    CROSSOVER,
    THREADS,
    UNMEASURED,
    VERIFICATION,
    ReportFileError,
    read_report_curves,
    report_curves,
)
from kerneltune.calibration.report import MEASURED, PREVIOUS, SELECTED, Mark

GRAIN = "parallel.minimum_elements"


def _crossover(case: str, timings: list[tuple[int, float, float]],
               unit: str = "elements per call") -> tuple[Candidate, ...]:
    """Candidates of a serial/parallel race: (size, serial seconds, parallel seconds)."""
    return tuple(Candidate(case, size, {"serial": measurement_of(serial),
                                        "parallel": measurement_of(parallel)}, "measured", unit)
                 for size, serial, parallel in timings)


def _document(decisions, values=None, comparison=(), skipped=()) -> list[dict]:
    baseline = {d.parameter: d.baseline for d in decisions}
    report = CalibrationReport(
        toy_key("Add"), execution(2), {"threads": 2}, baseline,
        values or {d.parameter: d.value for d in decisions}, tuple(decisions), 1.5, {},
        comparison=tuple(comparison))
    return [{"execution": execution(2).to_dict(), "calibrated": [report.to_dict()],
             "skipped": list(skipped), "unsupported": []}]


def _only(document):
    (entry,) = report_curves(document, "r.json").keys
    return entry


def test_a_kept_crossover_has_a_series_per_path_sorted_by_size_with_the_selected_value_marked():
    # the search starts where the value in use switches (65536) and walks down
    candidates = _crossover("equal", [(65536, 16e-6, 11e-6), (32768, 9e-6, 8e-6),
                                      (16384, 6e-6, 7.5e-6), (32768, 9.2e-6, 8.1e-6)])
    decision = Decision(GRAIN, 32768, 32768, "kept: the value in use switches within 2 octaves "
                        "of the measured crossover; parallel beats serial on equal (margin 5%) "
                        "from size 32768 on", candidates, 16384,
                        marks=(Mark("equal", 65536, SELECTED), Mark("equal", 32768, MEASURED)))
    entry = _only(_document([decision]))
    assert (entry.threads, entry.status, entry.seconds) == (2, "calibrated", 1.5)
    (curves,) = entry.decisions
    assert curves.kind == CROSSOVER and curves.reference == "serial" and curves.candidates == 4
    serial, parallel = curves.series
    assert (serial.case, serial.label, parallel.label) == ("equal", "serial", "parallel")
    assert [p.size for p in serial.points] == [16384, 32768, 32768, 65536]  # repeats kept
    assert [p.seconds for p in parallel.points] == pytest.approx([7.5e-6, 8e-6, 8.1e-6, 11e-6])
    assert parallel.points[-1].relative == pytest.approx(11 / 16)
    assert all(p.relative == 1.0 for p in serial.points)
    assert (serial.points[0].q1, serial.points[0].q3) == measurement_of(6e-6).quartiles
    assert [(m.role, m.size) for m in curves.marks] == [(SELECTED, 65536), (MEASURED, 32768)]
    assert curves.marks[0].label == f"selected {GRAIN} = 32768 (kept)"
    assert curves.marks[1].label == "crossover measured on equal"
    assert curves.unit("equal") == "elements per call"


def test_a_moved_crossover_marks_the_selected_size_and_where_the_value_in_use_switched():
    candidates = _crossover("square", [(128, 1e-4, 1.1e-4), (256, 4e-4, 4.1e-4),
                                       (512, 1.7e-3, 1.5e-3)], "N (N x N by N x N)")
    marks = (Mark("square", 256, SELECTED), Mark("square", 128, PREVIOUS),
             Mark("square", 512, MEASURED))
    decision = Decision("algorithm.blas_minimum_fmas", 16777216, 2097152, "whatever it says",
                        candidates, 134217728, marks=marks)
    (curves,) = _only(_document([decision])).decisions
    assert curves.changed
    assert [(m.role, m.size) for m in curves.marks] == [
        (SELECTED, 256), (PREVIOUS, 128), (MEASURED, 512)]
    assert curves.marks[0].label == "selected algorithm.blas_minimum_fmas = 16777216"
    assert curves.marks[1].label == "value in use before, 2097152"
    assert curves.unit("square") == "N (N x N by N x N)"


def test_marks_at_one_size_on_every_case_are_shown_once_and_apart_once_per_case():
    candidates = (*_crossover("equal", [(65536, 1.0, 2.0)]),
                  *_crossover("scalar", [(65536, 1.0, 2.0)]),
                  *_crossover("2 x N x N", [(1024, 1.0, 2.0)], "N (2 x N by N x N)"),
                  *_crossover("4 x N x N", [(724, 1.0, 2.0)], "N (4 x N by N x N)"))
    shared = Decision(GRAIN, 32768, 32768, "kept", candidates[:2], marks=(
        Mark("equal", 65536, SELECTED), Mark("scalar", 65536, SELECTED),
        Mark("equal", 32768, MEASURED), Mark("scalar", 65536, MEASURED)))
    apart = Decision("algorithm.skinny_blas_minimum_fmas", 2097152, 2097152, "kept: budget",
                     candidates[2:], marks=(Mark("2 x N x N", 1024, SELECTED),
                                            Mark("4 x N x N", 724, SELECTED)))
    one, two = _only(_document([shared, apart])).decisions
    assert [(m.label, m.size) for m in one.marks] == [
        (f"selected {GRAIN} = 32768 (kept)", 65536), ("crossover measured on equal", 32768),
        ("crossover measured on scalar", 65536)]
    assert two.cases == ("2 x N x N", "4 x N x N")
    assert [(m.label.rpartition("(")[2], m.size) for m in two.marks] == [
        ("2 x N x N)", 1024), ("4 x N x N)", 724)]
    assert [two.unit(case) for case in two.cases] == ["N (2 x N by N x N)", "N (4 x N by N x N)"]


def test_a_report_without_marks_or_units_keeps_its_curves_on_an_axis_of_size():
    """Reports written before decisions recorded them: the reason's wording places nothing."""
    candidates = _crossover("equal", [(65536, 16e-6, 11e-6), (32768, 9e-6, 8e-6)])
    decision = Decision(GRAIN, 16384, 32768, "parallel beats serial on equal (margin 5%) from "
                        "size 32768 on; set 1 octave short of it (32768), toward the value in "
                        "use", candidates, 16384)
    document = _document([decision])
    recorded = document[0]["calibrated"][0]["decisions"][0]
    del recorded["marks"], recorded["units"]
    (curves,) = _only(document).decisions
    assert curves.kind == CROSSOVER and len(curves.series) == 2
    assert curves.marks == () and curves.unit("equal") == "size"


def test_a_thread_search_selects_the_label_of_the_count_the_value_runs():
    candidates = (Candidate("equal", 4194304, {"2 threads": measurement_of(1.6e-3),
                                               "1 threads": measurement_of(2.6e-3)}, "measured"),)
    decision = Decision("parallel.maximum_threads", 256, 256, "kept: no thread count beats 2",
                        candidates)
    (curves,) = _only(_document([decision])).decisions
    assert (curves.kind, curves.selected_label, curves.marks) == (THREADS, "2 threads", ())


def test_a_comparison_selects_the_setting_whose_values_were_chosen():
    labels = [f"{GRAIN}={v}" for v in (32768, 4096)]
    candidates = tuple(Candidate("equal", size, {labels[0]: measurement_of(2.0),
                                                 labels[1]: measurement_of(1.0)}, "measured")
                       for size in (4096, 65536))
    rows = [{"label": label, "values": {GRAIN: value}, "seconds": 1.0, "speedup": 1.0}
            for label, value in zip(labels, (32768, 4096), strict=True)]
    decision = Decision(GRAIN, 4096, 32768, "parallel.minimum_elements=4096 is 2.00x",
                        candidates)
    (curves,) = _only(_document([decision], comparison=rows)).decisions
    assert (curves.kind, curves.reference, curves.selected_label) == (
        COMPARISON, labels[0], labels[1])
    assert [p.relative for p in curves.series[1].points] == [0.5, 0.5]


def test_a_comparison_is_drawn_relative_to_the_value_in_use_whatever_was_measured_first():
    # the candidate measured first is not the value in use (as a Gemm tile comparison
    # measures them): the points are still relative to the value in use, as the axis says
    labels = [f"{GRAIN}={v}" for v in (32768, 4096, 8192)]
    candidates = tuple(Candidate("equal", size, {labels[1]: measurement_of(1.0),
                                                 labels[0]: measurement_of(2.0),
                                                 labels[2]: measurement_of(1.5)}, "measured")
                       for size in (4096, 65536))
    rows = [{"label": label, "values": {GRAIN: value}, "seconds": 1.0, "speedup": 1.0}
            for label, value in zip(labels, (32768, 4096, 8192), strict=True)]
    decision = Decision(GRAIN, 4096, 32768, "parallel.minimum_elements=4096 is 2.00x",
                        candidates)
    (curves,) = _only(_document([decision], comparison=rows)).decisions
    assert curves.reference == labels[0]
    relative = {series.label: [p.relative for p in series.points] for series in curves.series}
    assert relative == {labels[0]: [1.0, 1.0], labels[1]: [0.5, 0.5], labels[2]: [0.75, 0.75]}


def test_the_report_chooses_decisions_by_kernel_type_threads_and_change():
    decisions = [Decision(GRAIN, 4096, 32768, "lowered",
                          _crossover("equal", [(4096, 2.0, 1.0)])),
                 Decision("parallel.maximum_threads", 256, 256, "kept", ())]
    every = report_curves(_document(decisions), "r.json")
    (entry,) = every.keys
    changed = every.select(changed=True)
    assert [d.parameter for k in changed.keys for d in k.decisions] == [GRAIN]
    assert every.select(kernel="add", element_type="float", threads=2).keys == (entry,)
    assert every.select(kernel="Mul").keys == () and every.select(threads=1).keys == ()


def test_verification_and_unmeasured_decisions_are_told_apart():
    verified = (Candidate("equal", 65536, {"decided": measurement_of(2.0),
                                           "previous": measurement_of(1.0)}, "previous wins"),)
    decisions = [Decision(GRAIN, 32768, 32768, "reverted: the previous values beat", verified),
                 Decision("parallel.conversion_minimum_elements", 32768, 32768, "follows")]
    kinds = [d.kind for d in _only(_document(decisions)).decisions]
    assert kinds == [VERIFICATION, UNMEASURED]


def test_a_skipped_key_keeps_its_report_and_select_filters_keys_and_parameters():
    skipped_report = CalibrationReport(
        toy_key("Gemm"), execution(2), {}, {GRAIN: 1}, {GRAIN: 1},
        (Decision(GRAIN, 1, 1, "kept", _crossover("square", [(64, 1.0, 2.0)])),), 5.0, {})
    skipped = [{"key": toy_key("Gemm").to_dict(), "reason": "not published: budget",
                "report": skipped_report.to_dict()},
               {"key": toy_key("Mul").to_dict(), "reason": "unchanged", "report": None}]
    decisions = [Decision(GRAIN, 1, 1, "kept"), Decision("parallel.maximum_threads", 2, 2, "k")]
    curves = report_curves(_document(decisions, skipped=skipped)[0], "one-batch.json")
    assert [(str(k.key.kernel), k.status, len(k.decisions)) for k in curves.keys] == [
        ("Add", "calibrated", 2), ("Gemm", "skipped", 1), ("Mul", "skipped", 0)]
    assert curves.keys[1].reason == "not published: budget"
    assert [k.key.kernel for k in curves.select(key="gemm").keys] == ["Gemm"]
    chosen = curves.select(parameter="MINIMUM")
    assert [(k.key.kernel, [d.parameter for d in k.decisions]) for k in chosen.keys] == [
        ("Add", [GRAIN]), ("Gemm", [GRAIN])]
    document = json.loads(json.dumps(curves.to_dict()))
    assert document["file"] == "one-batch.json"
    assert document["keys"][0]["decisions"][0]["kind"] == UNMEASURED


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "not JSON"),
    ("[]", "an empty list"),
    ('{"profile": 1}', "batch 1: expected a batch report"),
    ('[{"calibrated": [], "skipped": [], "unsupported": []}]', "batch 1: no 'execution'"),
])
def test_a_file_that_is_not_a_report_names_the_file_and_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "x.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ReportFileError, match="x.json") as raised:
        read_report_curves(path)
    assert message in str(raised.value)


def test_a_malformed_entry_is_located(tmp_path):
    document = _document([Decision(GRAIN, 1, 1, "kept", _crossover("equal", [(64, 1.0, 2.0)]))])
    del document[0]["calibrated"][0]["decisions"][0]["candidates"][0]["measurements"]["serial"][
        "median"]
    with pytest.raises(ReportFileError, match=r"calibrated\[0\], decisions\[0\], "
                                              r"candidates\[0\], serial: no 'median'"):
        report_curves(document, "r.json")
    with pytest.raises(ReportFileError, match="cannot be read"):
        read_report_curves(tmp_path / "missing.json")


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(marks={"size": 1}), r"decisions\[0\]: 'marks' is dict"),
    (lambda d: d["marks"][0].update(size="64"), r"decisions\[0\], marks\[0\]: 'size' is str"),
    (lambda d: d["marks"][0].pop("case"), r"decisions\[0\], marks\[0\]: no 'case'"),
    (lambda d: d["marks"][0].update(role="start"),
     r"marks\[0\]: 'role' is 'start', not one of selected, previous, measured"),
    (lambda d: d.update(units={"equal": 3}), r"decisions\[0\], units: 'equal' is int"),
])
def test_a_malformed_mark_or_unit_is_located(change, message):
    decision = Decision(GRAIN, 1, 1, "kept", _crossover("equal", [(64, 1.0, 2.0)]),
                        marks=(Mark("equal", 64, SELECTED),))
    document = _document([decision])
    change(document[0]["calibrated"][0]["decisions"][0])
    with pytest.raises(ReportFileError, match="r.json: not a calibration report") as raised:
        report_curves(document, "r.json")
    assert raised.match(message)
