"""The bake merges several runs of one selector by the evidence of their calibration reports.

The reports are synthetic: each machine's comparisons are samples drawn here from
distributions the test controls (a value's speedup over the value in use, and the
noise), so which value the evidence confirms is known in advance. The merge test is the
one calibration uses (:func:`kerneltune.calibration.confirmation.confirm`).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import ToyConfig, execution, toy_key
from kerneltune.calibration.confirmation import Confirmation, confirm
from kerneltune.cli import main
from kerneltune.errors import ProfileError
from kerneltune.machine.selector_files import read_selector
from kerneltune.machine.selectors import CpuSelector
from kerneltune.pipeline import bake, validate_deployment_files
from kerneltune.profiles.deployment import read_profiles
from kerneltune.profiles.export import export_deployment_profile, report_digest
from kerneltune.profiles.files import read_deployment_profile, write_deployment_profile
from kerneltune.profiles.importer import import_deployment_profiles
from kerneltune.profiles.model import AGREE, BEATEN, CONFIRMED, COUNTED_OUT, DISAGREE
from kerneltune.tuning.explanation import explain
from kerneltune.tuning.registry import KernelTuningRegistry, default_registry

GRAIN = "parallel.minimum_elements"
IN_USE = 32768  # ToyConfig's default
ZEN4 = read_selector("zen4").selector  # a group of models: the tier others overlap at
KEYS = (toy_key("Abs"), toy_key("Add"))
MARGIN = 0.05


def _registry() -> KernelTuningRegistry:
    registry = KernelTuningRegistry()
    registry.register_schemas((key, ToyConfig) for key in KEYS)
    return registry


def _confirmation(speedup: float, noise: float, seed: int, points: int = 4, rounds: int = 12):
    """A comparison of a value ``speedup`` times faster than the value in use, each sample
    off by up to ``noise`` (lognormal)."""
    generator = np.random.default_rng(seed)
    in_use = [1e-4 * np.exp(generator.normal(0, noise, rounds)) for _ in range(points)]
    candidate = [1e-4 / speedup * np.exp(generator.normal(0, noise, rounds))
                 for _ in range(points)]
    return confirm(in_use, candidate, MARGIN)


def _decisions(value: int, speedup: float | None, noise: float, seed: int) -> list[dict]:
    """What a machine decided for the grain: ``value`` proposed and compared (``speedup``
    None: its search kept the value in use without a comparison)."""
    if speedup is None:
        return [{"parameter": GRAIN, "value": IN_USE, "baseline": IN_USE, "changed": False,
                 "confirmation": None}]
    compared = _confirmation(speedup, noise, seed)
    proposed = {"parameter": GRAIN, "value": value, "baseline": IN_USE, "changed": True,
                "confirmation": None}
    if compared.confirmed:
        return [{**proposed, "confirmation": compared.to_dict()}]
    return [proposed, {"parameter": GRAIN, "value": IN_USE, "baseline": IN_USE,
                       "changed": False, "confirmation": compared.to_dict()}]


def _run(directory: Path, name: str, value: int = 65536, speedup: float | None = 1.3,
         noise: float = 0.02, seed: int = 0, interference: dict | None = None,
         probe: float = 1.8, keys=KEYS, threads=(1, 2)) -> Path:
    """One machine's run: its reports (one batch per thread count) and the profile exported
    from them, written as ``calibrate --profile`` writes them."""
    batches = []
    for count in threads:
        calibrated, published = [], []
        for index, key in enumerate(keys):
            decisions = _decisions(value, speedup, noise, seed + 100 * count + index)
            report = {"key": key.to_dict(), "values": {GRAIN: decisions[-1]["value"]},
                      "baseline": {GRAIN: IN_USE}, "decisions": decisions,
                      "options": {"effort": "quick"}, "environment": {}, "versions": {},
                      "interference": interference,
                      "machine_probe": {"parallel": [probe, probe * 1.01]} if count > 1
                      else {}}
            calibrated.append(report)
            published.append({"key": key.to_dict(), "values": report["values"],
                              "report_digest": report_digest(report)})
        batches.append({"execution": execution(count).to_dict(), "calibrated": calibrated,
                        "successful_profiles": published})
    profile = export_deployment_profile(batches, ZEN4, name)
    path = write_deployment_profile(profile, directory / f"{name}.yaml")
    (directory / f"{name}.reports.json").write_text(json.dumps(batches, indent=1) + "\n")
    return path


def _merged(tmp_path: Path, paths, **options):
    report = bake(paths, tmp_path / "deployment.yaml", registry=_registry(), **options)
    assert report.written, report.problems
    (profile,) = read_profiles(tmp_path / "deployment.yaml").profiles
    return report, profile


def _evidence(profile, key=KEYS[0], threads=(2, 2)):
    (entry,) = [e for e in profile.entries if e.key == key and e.threads == threads]
    return entry.values[GRAIN], entry.evidence[GRAIN]


def test_three_machines_that_agree_publish_their_value(tmp_path):
    paths = [_run(tmp_path, f"zen4-{i}", seed=i) for i in range(3)]
    report, profile = _merged(tmp_path, paths)
    value, evidence = _evidence(profile)
    assert value == 65536
    assert evidence.reason == AGREE and evidence.agreed == ("zen4-0", "zen4-1", "zen4-2")
    assert evidence.compared == 65536 and evidence.low <= 1.3 <= evidence.high * 1.05
    assert profile.name == "zen4" and len(profile.provenance) == 3
    (merge,) = report.merges
    assert merge.runs == ("zen4-0", "zen4-1", "zen4-2") and merge.reasons[AGREE] == 4


def test_two_against_one_publish_the_value_the_pooled_samples_confirm(tmp_path):
    paths = [_run(tmp_path, "zen4-a", seed=1), _run(tmp_path, "zen4-b", seed=2),
             # the third proposed the same value and its own comparison turned it down
             _run(tmp_path, "zen4-c", speedup=1.02, seed=3)]
    _, profile = _merged(tmp_path, paths)
    value, evidence = _evidence(profile)
    assert value == 65536
    assert evidence.reason == CONFIRMED and evidence.agreed == ("zen4-a", "zen4-b")
    assert evidence.machines == ("zen4-a", "zen4-b", "zen4-c")
    assert evidence.low >= 1 + MARGIN and evidence.ratio < 1.3  # the third pulls it down


def test_a_disagreement_within_noise_keeps_the_value_in_use(tmp_path):
    # one machine confirmed a small win; two measured the same value and saw none
    paths = [_run(tmp_path, "zen4-a", speedup=1.12, noise=0.01, seed=4),
             _run(tmp_path, "zen4-b", speedup=1.0, seed=5),
             _run(tmp_path, "zen4-c", speedup=0.99, seed=6)]
    (alone,) = read_profiles(paths[0]).profiles
    assert {entry.values[GRAIN] for entry in alone.entries} == {65536}
    _, profile = _merged(tmp_path, paths)
    value, evidence = _evidence(profile)
    assert value == IN_USE
    assert evidence.reason == DISAGREE and evidence.agreed == ("zen4-b", "zen4-c")
    assert evidence.compared == 65536 and evidence.low < 1 + MARGIN
    assert "machines disagree" in evidence.describe()


def test_one_run_against_two_whose_searches_found_no_win_keeps_the_value_in_use(tmp_path):
    # the two left no comparison to pool: the one run's confirmation alone does not decide
    paths = [_run(tmp_path, "zen4-a", speedup=1.3, seed=15),
             _run(tmp_path, "zen4-b", speedup=None), _run(tmp_path, "zen4-c", speedup=None)]
    _, profile = _merged(tmp_path, paths)
    value, evidence = _evidence(profile)
    assert (value, evidence.reason, evidence.agreed) == (IN_USE, DISAGREE, ("zen4-b", "zen4-c"))
    assert evidence.compared == 65536 and evidence.low >= 1 + MARGIN  # confirmed, outvoted


def test_every_run_raising_a_threshold_its_own_way_publishes_the_nearest_raise(tmp_path):
    # no run measured 65536 against 131072, but each found the value in use slower
    paths = [_run(tmp_path, "zen4-a", value=65536, seed=7),
             _run(tmp_path, "zen4-b", value=131072, seed=8)]
    _, profile = _merged(tmp_path, paths)
    value, evidence = _evidence(profile)
    assert (value, evidence.reason, evidence.agreed) == (65536, BEATEN, ("zen4-a",))
    assert evidence.compared == 65536 and evidence.ratio > 1


def test_runs_moving_a_threshold_both_ways_keep_the_value_in_use(tmp_path):
    paths = [_run(tmp_path, "zen4-a", value=65536, seed=7),
             _run(tmp_path, "zen4-b", value=8192, seed=8)]
    _, profile = _merged(tmp_path, paths)
    value, evidence = _evidence(profile)
    assert (value, evidence.reason, evidence.agreed) == (IN_USE, DISAGREE, ())


INTERFERED = {"kept": 40, "discarded": [0.6], "worst_kept": 0.45, "whole": None}
#: every measurement kept under the limit, and yet over the whole key others took 40%
TAKEN = {"kept": 40, "discarded": [], "worst_kept": 0.1,
         "whole": {"seconds": 2.0, "threads": 2, "waited": 1.6, "ran": 2.4, "stolen": None,
                   "cpus": 2, "load": 3.0}}
QUIET = {"kept": 40, "discarded": [], "worst_kept": 0.02,
         "whole": {"seconds": 2.0, "threads": 2, "waited": 0.04, "ran": 3.96, "stolen": 0.0,
                   "cpus": 2, "load": 1.0}}


@pytest.mark.parametrize("record", [INTERFERED, TAKEN], ids=["a measurement", "the whole key"])
def test_a_machine_measured_under_interference_is_counted_out_with_the_reason(tmp_path, record):
    paths = [_run(tmp_path, "zen4-a", seed=9, interference=QUIET),
             _run(tmp_path, "zen4-b", seed=10),
             _run(tmp_path, "zen4-c", value=8192, speedup=2.0, seed=11, interference=record)]
    _, profile = _merged(tmp_path, paths)
    value, evidence = _evidence(profile)
    assert value == 65536 and evidence.reason == AGREE
    assert evidence.machines == ("zen4-a", "zen4-b")
    assert set(evidence.counted_out) == {"zen4-c"}
    assert "interference" in evidence.counted_out["zen4-c"]


def test_a_machine_whose_probes_read_a_slower_state_is_counted_out(tmp_path):
    paths = [_run(tmp_path, "zen4-a", seed=12), _run(tmp_path, "zen4-b", seed=13),
             _run(tmp_path, "zen4-c", value=8192, speedup=2.0, seed=14, probe=1.1)]
    _, profile = _merged(tmp_path, paths)
    value, evidence = _evidence(profile)
    assert value == 65536 and set(evidence.counted_out) == {"zen4-c"}
    assert "parallel probe read 1.10" in evidence.counted_out["zen4-c"]
    # one thread runs no parallel probe: there, the third machine counts (and disagrees)
    assert _evidence(profile, threads=(1, 1))[1].machines == ("zen4-a", "zen4-b", "zen4-c")


def test_every_machine_counted_out_keeps_the_value_in_use(tmp_path):
    paths = [_run(tmp_path, f"zen4-{i}", seed=20 + i, interference=INTERFERED)
             for i in range(2)]
    _, profile = _merged(tmp_path, paths)
    value, evidence = _evidence(profile)
    assert (value, evidence.reason, evidence.machines) == (IN_USE, COUNTED_OUT, ())


def test_the_merged_file_is_the_same_bytes_whatever_the_order_of_the_profiles(tmp_path):
    paths = [_run(tmp_path, "zen4-a", seed=1), _run(tmp_path, "zen4-b", seed=2),
             _run(tmp_path, "zen4-c", speedup=1.02, seed=3)]
    written = set()
    for index, order in enumerate(itertools.permutations(paths)):
        output = tmp_path / f"deployment-{index}.yaml"
        assert bake(order, output, registry=_registry()).written
        written.add(output.read_bytes())
    assert len(written) == 1


def test_reports_given_apart_from_the_profiles_merge_them_too(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    paths = [_run(runs, f"zen4-{i}", seed=i) for i in range(2)]
    elsewhere = tmp_path / "reports"
    elsewhere.mkdir()
    for path in paths:
        moved = path.with_suffix(".reports.json")
        moved.rename(elsewhere / moved.name)
    refused = bake(paths, tmp_path / "deployment.yaml", registry=_registry())
    assert not refused.written
    assert any("no calibration report" in p and "--reports" in p for p in refused.problems)
    report, _ = _merged(tmp_path, paths, reports=sorted(elsewhere.iterdir()))
    assert report.merges


def test_runs_of_one_selector_with_other_thread_ranges_are_refused_naming_both(tmp_path):
    a = _run(tmp_path, "zen4-a")
    b = _run(tmp_path, "zen4-b", threads=(1, 4))
    report = bake([a, b], tmp_path / "deployment.yaml", registry=_registry())
    assert not report.written
    merge, *_ = [p for p in report.problems if "not merged" in p]
    assert str(a) in merge and str(b) in merge and "thread ranges differ" in merge
    assert not (tmp_path / "deployment.yaml").exists()


def test_overlapping_selectors_that_are_not_the_same_are_still_refused(tmp_path):
    a = _run(tmp_path, "zen4-a")
    other = CpuSelector(vendor="amd", family=25, models=[1, 17])
    profile = read_profiles(_run(tmp_path, "zen4-b")).profiles[0]
    b = write_deployment_profile(
        profile.__class__(profile.name, other, profile.entries, 0, None, profile.versions,
                          profile.provenance), tmp_path / "family.yaml")
    report = bake([a, b], tmp_path / "deployment.yaml", registry=_registry())
    (problem,) = report.problems
    assert str(a) in problem and str(b) in problem and "can match the same processor" in problem
    assert not report.merges


def test_a_report_file_that_is_a_fifo_is_a_problem_naming_it_and_no_hang(tmp_path):
    paths = [_run(tmp_path, f"zen4-{i}", seed=i) for i in range(2)]
    fifo = paths[1].with_suffix(".reports.json")
    fifo.unlink()
    os.mkfifo(fifo)
    report = bake(paths, tmp_path / "deployment.yaml", registry=_registry())
    assert not report.written
    assert any(str(fifo) in problem for problem in report.problems)


def test_a_merged_profile_imports_and_explain_shows_its_evidence(tmp_path, capsys):
    paths = [_run(tmp_path, "zen4-a", seed=1), _run(tmp_path, "zen4-b", seed=2),
             _run(tmp_path, "zen4-c", speedup=1.02, seed=3)]
    _merged(tmp_path, paths)
    registry = _registry()
    import_deployment_profiles([tmp_path / "deployment.yaml"], registry=registry, strict=True)
    row = next(r for r in explain(execution(2), registry=registry).keys if r.key == KEYS[0])
    assert row.resolution.values[GRAIN] == 65536
    (line,) = row.evidence
    assert line.startswith(f"{GRAIN}: {CONFIRMED}: 2 of 3 machines (zen4-a, zen4-b)")
    table = explain(execution(2), registry=registry).table()
    assert "confirmed on the pooled samples" in table
    assert validate_deployment_files(paths, registry=_registry()).ok


def test_the_cli_bake_says_what_it_merged_and_report_shows_the_evidence(tmp_path, capsys):
    # the command line bakes against the kernel library's schemas: one of its keys
    registered = default_registry.snapshot().keys()
    key = next(key for key in registered
               if (key.kernel, key.element_type) == ("Abs", toy_key().element_type))
    paths = [_run(tmp_path, f"zen4-{name}", seed=seed, keys=(key,))
             for name, seed in (("a", 1), ("b", 2))]
    output = tmp_path / "deployment.yaml"
    assert main(["profiles", "bake", *map(str, paths), "--output", str(output)]) == 0
    out = capsys.readouterr().out
    assert "zen4: merged from zen4-a, zen4-b" in out
    assert main(["report", str(output)]) == 0
    out = capsys.readouterr().out
    assert "machines agree: 2 of 2 machines (zen4-a, zen4-b)" in out
    # complete over what these runs calibrated; over everything, a line per kernel
    scoped = tmp_path / "scoped.yaml"
    assert main(["profiles", "bake", *map(str, paths), "--output", str(scoped),
                 "--require-complete", "--kernel", "Abs", "--element-type", "FLOAT"]) == 0
    assert main(["profiles", "bake", *map(str, paths), "--output", str(tmp_path / "x.yaml"),
                 "--require-complete"]) == 1
    errors = capsys.readouterr().err.splitlines()
    kernels = {key.kernel for key in registered}
    assert len([line for line in errors if "incomplete" in line]) <= len(kernels)


def test_a_comparison_keeps_its_samples_through_its_report(tmp_path):
    compared = _confirmation(1.3, 0.02, seed=30)
    assert len(compared.samples) == 4 and all(len(a) == len(b) == 12 for a, b in
                                               compared.samples)
    assert Confirmation.from_dict(json.loads(json.dumps(compared.to_dict()))) == compared
    with pytest.raises(ValueError, match="samples"):
        Confirmation.from_dict({**compared.to_dict(), "samples": [[[1e-4], [-1.0]]]})


def test_a_merged_profile_round_trips_and_damaged_evidence_names_entry_and_field(tmp_path):
    paths = [_run(tmp_path, f"zen4-{i}", seed=i) for i in range(2)]
    _, merged = _merged(tmp_path, paths)
    written = write_deployment_profile(merged, tmp_path / "merged.yaml")
    assert read_deployment_profile(written).entries == merged.entries
    document = json.loads(written.read_text())
    document["entries"][1]["evidence"][GRAIN]["reason"] = "because"
    written.write_text(json.dumps(document))
    with pytest.raises(ProfileError) as raised:
        read_deployment_profile(written)
    (problem,) = raised.value.problems
    assert (problem.file, problem.field) == (str(written), f"evidence.{GRAIN}")
    assert "entry 1" in problem.entry and "reason" in problem.message


def test_a_run_whose_report_of_a_key_is_damaged_is_counted_out_of_it_by_name(tmp_path):
    paths = [_run(tmp_path, f"zen4-{i}", seed=i) for i in range(3)]
    reports = paths[2].with_suffix(".reports.json")
    batches = json.loads(reports.read_text())
    batches[1]["calibrated"][0]["machine_probe"] = ["not", "an", "object"]
    reports.write_text(json.dumps(batches))
    # the profile names its reports by digest: the damaged batch is no longer its report
    refused = bake(paths, tmp_path / "deployment.yaml", registry=_registry())
    assert not refused.written
    assert any(f"{paths[2]} has no calibration report of its thread counts 2" in p
               for p in refused.problems)


def test_merge_runs_counts_out_a_run_whose_report_does_not_read_as_calibration_writes(tmp_path):
    from kerneltune.profiles.files import read_deployment_profile
    from kerneltune.profiles.merge import MachineRun, merge_runs

    runs = []
    for index in range(3):
        path = _run(tmp_path, f"zen4-{index}", seed=index)
        batches = json.loads(path.with_suffix(".reports.json").read_text())
        if index == 2:
            for report in batches[1]["calibrated"]:
                report["decisions"] = "none"
        runs.append(MachineRun(read_deployment_profile(path), tuple(batches)))
    merged = merge_runs(runs)
    value, evidence = _evidence(merged)
    assert value == 65536 and evidence.machines == ("zen4-0", "zen4-1")
    assert "cannot be read ('decisions' is not a list" in evidence.counted_out["zen4-2"]
