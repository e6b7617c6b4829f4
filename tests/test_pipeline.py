"""The build-farm pipeline: machines calibrate and leave profiles, a bake merges them, and a
preempted calibration resumes where it stopped.

The farm runs here: each of its machines is this host described as another processor
(``KERNELTUNE_CPU_DESCRIPTOR``), so the profiles are real calibrations said to come from
three processors. The preemption tests kill real calibration processes; this file is also
the script those processes run (see ``__main__`` at the end).
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, Scripted, ToyConfig, detect, expected_of, toy_key
from kerneltune import explain
from kerneltune.calibration import CalibrationOptions, register_kernel_calibration_function
from kerneltune.errors import ProfileError
from kerneltune.kernels import library, register_library
from kerneltune.machine import processor_selector
from kerneltune.machine.descriptor import CpuDescriptor
from kerneltune.machine.descriptor_files import write_cpu_descriptor
from kerneltune.machine.detect import get_cpu_descriptor
from kerneltune.machine.selector_files import NamedSelector, read_selector, write_selector
from kerneltune.machine.selectors import CpuSelector, Tier
from kerneltune.pipeline import bake, calibrate_machine, validate_deployment_files
from kerneltune.profiles.deployment import read_profiles
from kerneltune.profiles.files import read_deployment_profile, write_deployment_profile
from kerneltune.profiles.importer import import_deployment_profiles
from kerneltune.profiles.model import DeploymentProfile, ProfileEntry
from kerneltune.tuning.registry import KernelTuningRegistry

GRAIN = "parallel.minimum_elements"
QUICK = CalibrationOptions(effort="quick")
ZEN3, ZEN4 = (read_selector(name).selector for name in ("zen3", "zen4"))


def _library_registry() -> KernelTuningRegistry:
    registry = KernelTuningRegistry()
    register_library(registry)
    return registry


def _environment(**variables: str) -> dict[str, str]:
    """This process's environment for a child: no cache, this host's own processor."""
    inherited = {name: value for name, value in os.environ.items()
                 if name != "KERNELTUNE_CPU_DESCRIPTOR"}
    return {**inherited, "KERNELTUNE_CACHE": "off", **variables}


def _files(directory: Path) -> dict[str, tuple[bytes, int]] | None:
    """Every file of ``directory`` with its bytes and mode (None when there is no directory)."""
    if not directory.is_dir():
        return None
    return {path.name: (path.read_bytes(), stat.S_IMODE(path.stat().st_mode))
            for path in sorted(directory.iterdir())}


# --- the farm -------------------------------------------------------------------------------

#: the farm: each shipped family selector and the fixture processor its machine claims to be
FARM = {"zen2": "amd_zen2_epyc_7742", "zen3": "amd_zen3_epyc_7763", "zen4": "amd_zen4_epyc_9654"}
#: the first field of each farm selector an AMD fixture fails (None: it matches), by CPUID
#: family and model; the other fixtures fail on their architecture or vendor first
AMD_MISMATCHES = {(23, 49): {"zen2": None, "zen3": "family", "zen4": "family"},
                  (25, 1): {"zen2": "family", "zen3": None, "zen4": "models"},
                  (25, 17): {"zen2": "family", "zen3": "models", "zen4": None}}


def _first_mismatch(fixture: str, selector: str) -> str | None:
    facts = expected_of(fixture)
    if facts["architecture"] != "x86_64":
        return "architecture"
    if facts["vendor"] != "amd":
        return "vendor"
    return AMD_MISMATCHES[(facts["family"], facts["model"])][selector]


def _descriptor_file(tmp_path: Path, fixture: str) -> Path:
    path = tmp_path / f"{fixture}.cpu.yaml"
    if not path.exists():
        write_cpu_descriptor(detect(fixture), path)
    return path


def _calibrate_as(tmp_path: Path, selector: str, fixture: str, name: str | None = None) -> Path:
    """A farm machine's job: this host, described as ``fixture``, calibrates Abs for 1 and 2
    (a run named ``name``, else the profile takes the machine's name)."""
    output = tmp_path / f"{name or selector}.yaml"
    command = [sys.executable, "-m", "kerneltune", "calibrate", "--profile", "--selector",
               selector, "--effort", "quick", "--kernel", "Abs", "--element-type", "FLOAT",
               "--threads", "1", "--threads", "2", "--output", str(output),
               *(["--name", name] if name else [])]
    environment = _environment(KERNELTUNE_CPU_DESCRIPTOR=str(_descriptor_file(tmp_path, fixture)))
    done = subprocess.run(command, env=environment, cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return output


def _expected_rejections(fixture: str, threads: int, names: dict[str, str]) -> list[tuple]:
    """(profile, reason) of every farm entry (1 and 2 threads) ``fixture`` does not get."""
    rejected = []
    for selector, name in names.items():
        field = _first_mismatch(fixture, selector)
        rejected += [(name, f"selector:{field}" if field else "threads")
                     for calibrated in (1, 2) if field or calibrated != threads]
    return sorted(rejected)


def test_a_farm_of_described_machines_bakes_one_file_that_serves_each_processor_its_profile(
        tmp_path):
    profiles = {selector: _calibrate_as(tmp_path, selector, fixture)
                for selector, fixture in FARM.items()}
    key = library()["Abs"].tuning_key("FLOAT")
    names, values = {}, {}
    for selector, path in profiles.items():
        profile = read_deployment_profile(path)
        (machine,) = profile.provenance
        # measured on this host, said to come from the described processor
        assert CpuDescriptor.from_dict(machine["processor"]) == detect(FARM[selector])
        assert (profile.selector_name, profile.selector) == (selector,
                                                             read_selector(selector).selector)
        assert machine["thread_counts"] == [1, 2] and machine["effort"] == "quick"
        assert [(entry.key, entry.threads) for entry in profile.entries] == [(key, (1, 1)),
                                                                             (key, (2, 2))]
        names[selector] = profile.name
        values.update({(profile.name, e.threads[0]): dict(e.values) for e in profile.entries})
    assert len(set(names.values())) == 3

    deployment = tmp_path / "deployment.yaml"
    report = bake(profiles.values(), deployment, registry=_library_registry())
    assert report.written and report.problems == ()
    label = f"{key.library}/Abs/{key.implementation}/FLOAT"
    for name in names.values():
        assert report.coverage[name][label] == {"covered": ["1", "2"], "gaps": []}
    # the command line bakes the same bytes
    done = subprocess.run([sys.executable, "-m", "kerneltune", "profiles", "bake",
                           *map(str, profiles.values()), "--output", str(tmp_path / "cli.yaml")],
                          env=_environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"(sha256 {report.digest})" in done.stdout
    assert (tmp_path / "cli.yaml").read_bytes() == deployment.read_bytes()

    registry = _library_registry()
    (imported,) = import_deployment_profiles(deployment, registry=registry).files
    assert (imported.status, imported.imported, imported.problems) == ("imported", 6, ())
    by_name = {name: selector for selector, name in names.items()}
    for candidate in registry.snapshot().profiles(key):
        (machine,) = candidate.provenance["machines"]
        calibrated_on = FARM[by_name[candidate.name]]
        assert CpuDescriptor.from_dict(machine["processor"]) == detect(calibrated_on)

    for fixture in FIXTURES:
        served = [selector for selector in FARM if _first_mismatch(fixture, selector) is None]
        for threads in range(1, 9):
            explanation = explain(descriptor=_descriptor_file(tmp_path, fixture),
                                  threads=threads, registry=registry)
            assert explanation.execution.processor == detect(fixture)
            assert explanation.execution.effective_threads == threads
            rows = {row.key: row for row in explanation.keys}
            row = rows.pop(key)
            source = row.resolution.source
            where = f"{fixture}, {threads} threads"
            if served and threads <= 2:
                assert source.profile_name == names[served[0]], where
                assert source.tier is Tier.PROCESSOR_GROUP, where
                assert source.origin.startswith(str(deployment)), where
                assert source.origin.endswith(f"entry {threads - 1}"), where
                chosen = values[(source.profile_name, threads)]
                assert {name: row.resolution.values[name] for name in chosen} == chosen
            else:
                assert (source.tier, source.profile_name) == (Tier.DEFAULTS, None), where
                assert row.changed == (), where
            rejected = sorted((c.profile_name, c.reason) for c in row.resolution.rejected)
            assert rejected == _expected_rejections(fixture, threads, names), where
            for other in rows.values():  # every other key keeps its defaults
                assert other.resolution.source.tier is Tier.DEFAULTS, (where, other.key)
                assert {c.reason for c in other.resolution.rejected} <= {"element_type"}


def test_two_runs_of_one_machine_type_are_merged_baked_complete_imported_and_explained(
        tmp_path):
    runs = [_calibrate_as(tmp_path, "zen4", FARM["zen4"], name=f"zen4-{run}") for run in (1, 2)]
    assert all(path.with_suffix(".reports.json").is_file() for path in runs)
    key = library()["Abs"].tuning_key("FLOAT")
    # a registry of the one key calibrated, so that --require-complete has nothing else to ask
    only = KernelTuningRegistry()
    only.register_schemas([(key, _library_registry().snapshot().schema(key).config_type)])
    deployment = tmp_path / "deployment.yaml"
    report = bake(runs, deployment, require_complete=True, expected_selectors=["zen4"],
                  registry=only)
    assert report.written, report.problems
    (merge,) = report.merges
    assert (merge.name, merge.runs) == ("zen4", ("zen4-1", "zen4-2"))
    assert report.coverage["zen4"][f"{key.library}/Abs/{key.implementation}/FLOAT"] == {
        "covered": ["1", "2"], "gaps": []}
    (profile,) = read_profiles(deployment).profiles
    assert [p["profile"] for p in profile.provenance] == ["zen4-1", "zen4-2"]
    for entry in profile.entries:
        assert entry.evidence and set(entry.evidence) == set(entry.values)
        for name, evidence in entry.evidence.items():
            # every machine is accounted for: counted in, or out with its reason
            assert set(evidence.machines) | set(evidence.counted_out) == {"zen4-1", "zen4-2"}
            assert set(evidence.agreed) <= set(evidence.machines)
            published = entry.values[name]
            assert (published == evidence.in_use) or evidence.agreed, evidence

    registry = _library_registry()
    (imported,) = import_deployment_profiles(deployment, registry=registry).files
    assert (imported.status, imported.imported) == ("imported", 2)
    for threads in (1, 2):
        explanation = explain(descriptor=_descriptor_file(tmp_path, FARM["zen4"]),
                              threads=threads, registry=registry)
        row = next(row for row in explanation.keys if row.key == key)
        assert row.resolution.source.profile_name == "zen4"
        entry = next(e for e in profile.entries if e.threads == (threads, threads))
        assert row.evidence == tuple(f"{name}: {entry.evidence[name].describe()}"
                                     for name in sorted(entry.evidence))
        assert all(f"evidence: {line}" in explanation.table() for line in row.evidence)


# --- the bake's refusals --------------------------------------------------------------------

TOY_KEYS = tuple(toy_key(kernel, element_type) for kernel in ("Abs", "Add")
                 for element_type in ("FLOAT", "DOUBLE"))
RANGES = ((1, 1), (2, 3), (4, 4))


def _toy_registry() -> KernelTuningRegistry:
    registry = KernelTuningRegistry()
    registry.register_schemas((key, ToyConfig) for key in TOY_KEYS)
    return registry


def _entries(keys=TOY_KEYS, ranges=RANGES, **values) -> list[ProfileEntry]:
    return [ProfileEntry(key, threads, {GRAIN: 1000 * threads[0], **values})
            for key in keys for threads in ranges]


def _written(path: Path, selector: CpuSelector, entries=None, priority: int = 0) -> Path:
    """A profile file named after its stem: every toy key for 1, 2-3 and 4 threads by default."""
    profile = DeploymentProfile(path.stem, selector,
                                tuple(_entries() if entries is None else entries), priority,
                                None, {"kerneltune": "0.1.0"}, ({"thread_counts": [1, 2, 4]},))
    return write_deployment_profile(profile, path)


def _bake(profiles, output, **options):
    return bake(profiles, output, registry=_toy_registry(), **options)


OVERLAPPING = {
    "family groups": (ZEN4, CpuSelector(vendor="amd", family=25, models=[1, 17]),
                      "vendor amd family 25 model 17"),
    "instruction sets": (read_selector("x86_64_avx2_fma").selector,
                         read_selector("x86_64_avx512f").selector, "with avx2, avx512f, fma"),
}


@pytest.mark.parametrize("existing", [False, True], ids=["no output", "output kept"])
@pytest.mark.parametrize(("first", "second", "example"), OVERLAPPING.values(), ids=OVERLAPPING)
def test_two_profiles_that_can_serve_one_processor_at_one_tier_and_priority_fail_the_bake(
        tmp_path, first, second, example, existing):
    a = _written(tmp_path / "a.yaml", first)
    # one key and one thread count in common is enough to be ambiguous
    b = _written(tmp_path / "b.yaml", second, _entries(keys=[toy_key()], ranges=[(2, 2)]))
    output = tmp_path / "out" / "deployment.yaml"
    if existing:
        assert _bake([a], output).written
    before = _files(output.parent)
    report = _bake([a, b], output)
    assert not report.written and report.digest is None
    (problem,) = report.problems
    assert str(a) in problem and str(b) in problem, problem
    assert f"for example {example}" in problem and first.tier.label in problem, problem
    assert _files(output.parent) == before  # nothing written, not even a temporary file


def test_the_overlap_named_at_bake_is_the_one_import_would_refuse(tmp_path):
    from conftest import processor

    first, second, _ = OVERLAPPING["family groups"]
    assert first.matches(processor()) and second.matches(processor())  # amd 25/17
    a = _written(tmp_path / "a.yaml", first)
    b = _written(tmp_path / "b.yaml", second, _entries(keys=[toy_key()], ranges=[(2, 2)]))
    with pytest.raises(ProfileError):
        import_deployment_profiles([a, b], registry=_toy_registry(), strict=True)


APART = {
    "disjoint models": (CpuSelector(vendor="amd", family=25, models=[1, 2]), None, 0),
    "another priority": (CpuSelector(vendor="amd", family=25, models=[1, 17]), None, 1),
    "another tier": (CpuSelector(vendor="amd", family=25, models=[17]), None, 0),
    "other thread counts": (CpuSelector(vendor="amd", family=25, models=[1, 17]),
                            _entries(ranges=[(5, 8)]), 0),
    "another variant's keys": (CpuSelector(vendor="amd", family=25, models=[1, 17]),
                               _entries(keys=[toy_key(implementation="v3")]), 0),
}


@pytest.mark.parametrize(("selector", "entries", "priority"), APART.values(), ids=APART)
def test_profiles_that_never_compete_for_a_value_bake_together(tmp_path, selector, entries,
                                                                priority):
    profiles = [_written(tmp_path / "a.yaml", ZEN4),
                _written(tmp_path / "b.yaml", selector, entries, priority)]
    report = _bake(profiles, tmp_path / "deployment.yaml")
    assert report.written and report.problems == ()


def test_a_gap_is_listed_and_fails_require_complete_naming_each(tmp_path):
    entries = [*_entries(keys=[toy_key("Abs", "FLOAT"), toy_key("Add", "FLOAT")]),
               *_entries(keys=[toy_key("Abs", "DOUBLE")], ranges=[(1, 1), (4, 4)])]
    path = _written(tmp_path / "zen4-farm.yaml", ZEN4, entries)
    expected = ["zen4", "zen3"]  # zen4 has its profile; zen3 has none
    gaps = ["zen4-farm: test_library/Abs/baseline/DOUBLE: threads 2-3",
            "zen4-farm: test_library/Add/baseline/DOUBLE: no entry",
            "no profile for the expected selector zen3"]

    lenient = _bake([path], tmp_path / "lenient.yaml", expected_selectors=expected)
    assert lenient.written and sorted(lenient.gaps) == sorted(gaps)
    assert lenient.coverage["zen4-farm"]["test_library/Abs/baseline/DOUBLE"] == {
        "covered": ["1", "4"], "gaps": ["threads 2-3"]}
    assert lenient.coverage["zen4-farm"]["test_library/Abs/baseline/FLOAT"] == {
        "covered": ["1", "2-3", "4"], "gaps": []}
    assert "gaps: threads 2-3" in lenient.table()

    strict = _bake([path], tmp_path / "out" / "strict.yaml", require_complete=True,
                   expected_selectors=expected)
    assert not strict.written and _files(tmp_path / "out") is None
    # a line per profile and kernel, every element type and hole named
    assert sorted(strict.problems) == sorted([
        "incomplete: no profile for the expected selector zen3",
        "incomplete: zen4-farm: test_library/Abs/baseline: threads 2-3 for 1 element type "
        "(DOUBLE)",
        "incomplete: zen4-farm: test_library/Add/baseline: no entry for 1 element type "
        "(DOUBLE)"])

    complete = _bake([_written(tmp_path / "full.yaml", ZEN4)], tmp_path / "complete.yaml",
                     require_complete=True, expected_selectors=["zen4"])
    assert complete.written and complete.gaps == () and complete.problems == ()


ELSEWHERE = CpuSelector(vendor="amd", family=25, models=[2])


def _bad_value(path: Path) -> str:
    _written(path, ELSEWHERE, _entries(ranges=[(1, 1)]) + [
        ProfileEntry(toy_key("Add"), (2, 2), {GRAIN: -5})])
    return f"entry 4 ({toy_key('Add')}): {GRAIN}: must be a positive integer, got -5"


def _stale(path: Path) -> str:
    _written(path, ELSEWHERE, [ProfileEntry(toy_key(tuning_abi=2), (1, 1), {GRAIN: 1})])
    return "stale: tuning ABI 2; the registered schema has tuning ABI 1"


def _unknown_kernel(path: Path) -> str:
    _written(path, ELSEWHERE, [ProfileEntry(toy_key("Nope"), (1, 1), {GRAIN: 1})])
    return "no tuning schema is registered"


def _corrupt(path: Path) -> str:
    _written(path, ELSEWHERE)
    text = path.read_text()
    path.write_text(text[:len(text) // 2])
    return "not plain YAML"


def _damaged_entry(path: Path) -> str:
    _written(path, ELSEWHERE)
    path.write_text(path.read_text().replace('"threads": [2, 3]', '"threads": [3, 2]', 1))
    return "threads: expected [low, high]"


def _missing(path: Path) -> str:
    return "no such file"


BAD = {"invalid value": _bad_value, "stale tuning ABI": _stale, "unknown kernel": _unknown_kernel,
       "corrupt file": _corrupt, "damaged entry": _damaged_entry, "missing file": _missing}


@pytest.mark.parametrize("make", BAD.values(), ids=BAD)
def test_a_bad_profile_among_good_ones_fails_the_bake_and_nothing_is_written(tmp_path, make):
    good = [_written(tmp_path / "zen4-farm.yaml", ZEN4),
            _written(tmp_path / "zen3-farm.yaml", ZEN3)]
    bad = tmp_path / "bad.yaml"
    words = make(bad)
    output = tmp_path / "out" / "deployment.yaml"
    report = _bake([good[0], bad, good[1]], output)
    assert not report.written and report.problems
    assert all(str(bad) in problem for problem in report.problems), report.problems
    assert any(words in problem for problem in report.problems), report.problems
    assert _files(output.parent) is None
    assert _bake(good, output).written  # the good ones alone bake


def test_two_profiles_of_one_name_fail_the_bake_naming_both_files(tmp_path):
    # A profile's name keys the coverage table and names it in explain; two of one name
    # (the default name is the calibrating machine's) would share one coverage row and make
    # the file's bytes depend on the order of the inputs.
    a = _written(tmp_path / "a" / "farm.yaml", ZEN4)
    b = _written(tmp_path / "b" / "farm.yaml", ZEN3, _entries(keys=TOY_KEYS[:2]))
    forward = _bake([a, b], tmp_path / "out" / "forward.yaml")
    backward = _bake([b, a], tmp_path / "out" / "backward.yaml")
    assert not forward.written and not backward.written, (forward.coverage.keys(),
                                                          forward.digest == backward.digest)
    assert any(str(a) in p and str(b) in p and "farm" in p for p in forward.problems)
    assert _files(tmp_path / "out") is None


def _registered(registry: KernelTuningRegistry) -> list[tuple]:
    return sorted((p.digest, p.name, str(p.key), p.selector.minimum_threads,
                   p.selector.maximum_threads) for p in registry.snapshot().profiles())


def test_a_bake_is_deterministic_read_only_and_imports_as_its_profiles_do(tmp_path):
    profiles = [_written(tmp_path / "zen4-farm.yaml", ZEN4),
                _written(tmp_path / "zen3-farm.yaml", ZEN3, _entries(ranges=[(1, 1), (2, 8)]),
                         priority=3)]
    first = _bake(profiles, tmp_path / "one" / "deployment.yaml")
    baked = (tmp_path / "one" / "deployment.yaml").read_bytes()
    others = [_bake(profiles[::-1], tmp_path / "two" / "deployment.yaml"),
              _bake(profiles, tmp_path / "one" / "deployment.yaml"),  # over its read-only self
              _bake([tmp_path / "one" / "deployment.yaml"], tmp_path / "three" / "deployment.yaml")]
    # the digest is of the header, which holds every section's: the importer reads it alone
    header = baked[:baked.index(b' "profiles": [\n') + len(b' "profiles": [\n')]
    assert first.digest == hashlib.sha256(header).hexdigest()
    assert [report.digest for report in others] == [first.digest] * 3
    for folder in ("one", "two", "three"):
        output = tmp_path / folder / "deployment.yaml"
        assert output.read_bytes() == baked and stat.S_IMODE(output.stat().st_mode) == 0o444
        assert _files(tmp_path / folder).keys() == {"deployment.yaml", "deployment.yaml.lock"}

    from_profiles, from_bake = _toy_registry(), _toy_registry()
    assert [f.status for f in import_deployment_profiles(profiles, registry=from_profiles).files
            ] == ["imported", "imported"]
    (file,) = import_deployment_profiles(tmp_path / "one" / "deployment.yaml",
                                         registry=from_bake).files
    assert (file.status, file.imported) == ("imported", 20)
    assert _registered(from_bake) == _registered(from_profiles)
    assert len(_registered(from_bake)) == 20


def test_a_baked_file_is_read_only_before_it_appears_under_its_name(tmp_path, monkeypatch):
    profiles = [_written(tmp_path / "zen4-farm.yaml", ZEN4)]
    modes = []
    replace = os.replace

    def watched(source, target):
        modes.append(stat.S_IMODE(os.stat(source).st_mode))
        replace(source, target)

    monkeypatch.setattr(os, "replace", watched)
    assert _bake(profiles, tmp_path / "out" / "deployment.yaml").written
    assert modes == [0o444]


@pytest.mark.parametrize("writer", ["profile", "bake"])
def test_the_next_writer_removes_a_killed_writer_s_temporaries(tmp_path, writer):
    target = tmp_path / "out" / "target.yaml"
    target.parent.mkdir()
    leftovers = [target.with_name(f"target.yaml.{n:016x}.tmp") for n in (1, 2)]
    for leftover in leftovers:
        leftover.write_text("half a file")
    other = target.with_name("other.yaml.0000000000000003.tmp")
    other.write_text("another file's")
    if writer == "profile":
        _written(target, ZEN4)
    else:
        assert _bake([_written(tmp_path / "zen4-farm.yaml", ZEN4)], target).written
    assert not any(leftover.exists() for leftover in leftovers) and other.exists()
    assert target.is_file()


# --- a calibration preempted and resumed -----------------------------------------------------

STEPS = 10  # toy keys of a calibration process: Step0, Step1, ...
STEP_SECONDS = 0.3


def _steps(count: int = STEPS) -> list:
    return [toy_key(f"Step{n}") for n in range(count)]


def _step_registry(calibrate, count: int = STEPS) -> tuple[KernelTuningRegistry, list]:
    registry = KernelTuningRegistry()
    keys = _steps(count)
    registry.register_schemas((key, ToyConfig) for key in keys)
    for key in keys:
        register_kernel_calibration_function(key, calibrate, registry=registry)
    return registry, keys


def _host() -> NamedSelector:
    return processor_selector(get_cpu_descriptor())


def calibrate_slowly(output: str, log: str) -> None:
    """The calibration process the preemption tests kill: keys logged as they start, then slow."""

    def calibrate(context):
        with open(log, "a", encoding="utf-8") as stream:
            stream.write(f"{context.key}\n")
        time.sleep(STEP_SECONDS)
        return {GRAIN: 4096 + context.threads}

    registry, _ = _step_registry(calibrate)
    result = calibrate_machine(_host(), output=output, threads=[1], options=QUICK,
                               registry=registry)
    print(json.dumps({"resumed": [summary.resumed for summary in result.summaries],
                      "calibrated": [summary.calibrated for summary in result.summaries],
                      "notes": list(result.notes)}))


def _journal(output: Path) -> Path:
    return output.with_suffix(".checkpoint.jsonl")


def _journaled(output: Path) -> list[str]:
    """The keys of the journal's complete records (its header aside)."""
    try:
        text = _journal(output).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line)["key"] for line in text.split("\n")[1:-1]]


def _start(tmp_path: Path, output: Path, log: Path) -> subprocess.Popen:
    with (tmp_path / "stderr.txt").open("a") as stderr:
        return subprocess.Popen([sys.executable, __file__, str(output), str(log)],
                                env=_environment(), stdout=subprocess.PIPE, stderr=stderr,
                                text=True)


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_calibration_resumes_without_measuring_its_finished_keys_again(tmp_path, stop):
    output, log = tmp_path / "profiles" / "host.yaml", tmp_path / "measured.log"
    running = _start(tmp_path, output, log)
    deadline = time.monotonic() + 120
    while len(_journaled(output)) < 3:
        assert running.poll() is None, (tmp_path / "stderr.txt").read_text()
        assert time.monotonic() < deadline, "no key finished in time"
        time.sleep(0.02)
    running.send_signal(stop)
    running.communicate(timeout=60)
    assert running.returncode == -stop
    finished = _journaled(output)
    assert 3 <= len(finished) < STEPS and not output.exists()
    measured = log.read_text().splitlines()
    assert measured[:len(finished)] == finished and len(measured) - len(finished) <= 1

    again = _start(tmp_path, output, log)
    stdout, _ = again.communicate(timeout=120)
    assert again.returncode == 0, (tmp_path / "stderr.txt").read_text()
    summary = json.loads(stdout)
    assert summary == {"resumed": [len(finished)], "calibrated": [STEPS], "notes": []}
    assert f"threads 1: {STEPS} keys ({len(finished)} resumed)" in (
        tmp_path / "stderr.txt").read_text()
    counts = collections.Counter(log.read_text().splitlines())
    keys = _steps()
    assert set(counts) == {str(key) for key in keys}
    assert all(counts[key] == 1 for key in finished)
    twice = [key for key, count in counts.items() if count > 1]
    assert len(twice) <= 1 and counts.total() == STEPS + len(twice)  # the one in flight
    profile = read_deployment_profile(output)
    assert sorted((str(e.key), e.threads, dict(e.values)) for e in profile.entries) == sorted(
        (str(key), (1, 1), {GRAIN: 4097}) for key in keys)
    assert not _journal(output).exists() and output.with_suffix(".reports.json").exists()


class Preempted(Exception):
    """Raised by a toy calibration function to stop a run part-way, as a preemption would."""


class ToyMachine:
    """Toy keys calibrated in this process: each call recorded; a run can stop after n keys.

    Their interference is scripted quiet: a toy key lasts a millisecond, and on a busy host
    one tick of the CPUs' steal counter in it would withhold it."""

    def __init__(self, count: int = 6):
        self.calls: list[tuple[int, str]] = []
        self.stop_after: int | None = None
        self.registry, self.keys = _step_registry(self._calibrate, count)

    def _calibrate(self, context):
        if self.stop_after is not None and len(self.calls) >= self.stop_after:
            raise Preempted
        self.calls.append((context.threads, str(context.key)))
        return {GRAIN: 4096 + context.threads}

    def run(self, output: Path, stop_after: int | None = None, **arguments):
        self.calls, self.stop_after = [], stop_after
        arguments = {"threads": [1], "options": QUICK, "interference": Scripted(),
                     **arguments}
        if stop_after is None:
            return calibrate_machine(_host(), output=output, registry=self.registry,
                                     progress=io.StringIO(), **arguments)
        with pytest.raises(Preempted):
            calibrate_machine(_host(), output=output, registry=self.registry,
                              progress=io.StringIO(), **arguments)
        return None


def _damage_line(number: int):
    def damage(journal: Path) -> None:
        lines = journal.read_text().split("\n")
        lines[number - 1] = "#garbage{" + lines[number - 1][9:]
        journal.write_text("\n".join(lines))
    return damage


def _edit_header(edit):
    def damage(journal: Path) -> None:
        lines = journal.read_text().split("\n")
        header = json.loads(lines[0])
        edit(header)
        journal.write_text("\n".join([json.dumps(header), *lines[1:]]))
    return damage


def _older_kerneltune(header):
    header["identity"]["kerneltune"] = "0.0.1"


def _other_processor(header):
    header["identity"]["processor"]["model"] += 1


def _newer_format(header):
    header["schema_version"] = 2


FOREIGN = {
    "another effort": (None, {"options": CalibrationOptions(effort="normal")},
                       "from another calibration (different arguments); ignored"),
    "another key set": (None, {"kernels": ["Step0", "Step1", "Step2", "Step3", "Step4"]},
                        "from another calibration (different arguments); ignored"),
    "an older kerneltune": (_edit_header(_older_kerneltune), {},
                            "from another calibration (different kerneltune); ignored"),
    "another processor": (_edit_header(_other_processor), {},
                          "from another calibration (different processor); ignored"),
    "a newer checkpoint format": (_edit_header(_newer_format), {}, "checkpoint version 2; ignored"),
    "restart": (None, {"restart": True}, "discarded (--restart)"),
}


@pytest.mark.parametrize(("damage", "arguments", "why"), FOREIGN.values(), ids=FOREIGN)
def test_a_foreign_or_damaged_checkpoint_is_ignored_whole_with_a_reason(tmp_path, damage,
                                                                         arguments, why):
    machine, output = ToyMachine(), tmp_path / "host.yaml"
    machine.run(output, stop_after=4)
    assert len(_journaled(output)) == 4
    if damage is not None:
        damage(_journal(output))
    result = machine.run(output, **arguments)
    kernels = arguments.get("kernels")
    selected = {str(key) for key in machine.keys if kernels is None or key.kernel in kernels}
    assert result.notes == (f"{_journal(output)}: {why}",)
    assert [summary.resumed for summary in result.summaries] == [0]
    assert {key for _, key in machine.calls} == selected and len(machine.calls) == len(selected)
    assert {str(entry.key) for entry in read_deployment_profile(output).entries} == selected
    assert not _journal(output).exists()


def _edit_record(edit):
    """Line 3 of the journal (its second record) changed by ``edit(record)``."""
    def damage(journal: Path) -> None:
        lines = journal.read_text().split("\n")
        record = json.loads(lines[2])
        edit(record)
        lines[2] = json.dumps(record)
        journal.write_text("\n".join(lines))
    return damage


def _without(field):
    return _edit_record(lambda record: record["report"].pop(field))


def _relabelled(label):
    return _edit_record(lambda record: record.update(key=label))


def _refused_values(record):
    record["report"]["values"] = {GRAIN: -5}


def _other_threads(record):
    record["threads"] = 7


def _decision_of_no_value(record):
    record["report"]["decisions"] = [{"parameter": "no.such_parameter", "changed": True}]


def _environment_of_another_shape(record):
    record["report"]["environment"] = ["x"]


def _measured_on_other_threads(record):
    record["report"]["execution"]["effective_threads"] = 4


BAD_RECORDS = {
    "a damaged line": (_damage_line(3), "not a record (damaged)"),
    "a report without its key": (_without("key"), "not a calibration report"),
    "a report without its values": (_without("values"), "not a calibration report"),
    "a key this calibration does not measure": (
        _relabelled("test_library/Step99/baseline/FLOAT (cpu, abi 1)"),
        "Step99/baseline/FLOAT (cpu, abi 1) on 1 threads is not a key this calibration"),
    "another key's report": (_relabelled("test_library/Step0/baseline/FLOAT (cpu, abi 1)"),
                             "the report is of another key"),
    "values the schema refuses": (_edit_record(_refused_values), "the report's values"),
    "a thread count this calibration does not measure": (_edit_record(_other_threads),
                                                          "on 7 threads is not a key"),
    "a decision of no value": (_edit_record(_decision_of_no_value),
                               "a decision of the report names no parameter of its values"),
    "an environment of another shape": (_edit_record(_environment_of_another_shape),
                                        "not a calibration report"),
    "a report measured on other threads": (_edit_record(_measured_on_other_threads),
                                           "measured on 4 threads, not 1"),
}


@pytest.mark.parametrize(("damage", "why"), BAD_RECORDS.values(), ids=BAD_RECORDS)
def test_a_bad_record_is_reported_and_measured_again_and_the_others_resumed(tmp_path, damage,
                                                                          why):
    machine, output = ToyMachine(), tmp_path / "host.yaml"
    machine.run(output, stop_after=4)
    finished = _journaled(output)
    damage(_journal(output))
    result = machine.run(output)
    (note,) = result.notes
    assert note.startswith(f"{_journal(output)}: line 3: ") and why in note
    assert note.endswith("; measured again")
    assert [summary.resumed for summary in result.summaries] == [3]
    measured = [key for _, key in machine.calls]
    assert finished[1] in measured and not {finished[0], *finished[2:]} & set(measured)
    assert len(measured) == len(machine.keys) - 3
    assert validate_deployment_files([output], registry=machine.registry).ok
    assert {str(entry.key) for entry in read_deployment_profile(output).entries} == {
        str(key) for key in machine.keys}


def test_a_journal_with_a_bad_record_is_rewritten_before_the_next_is_appended(tmp_path):
    machine, output = ToyMachine(), tmp_path / "host.yaml"
    machine.run(output, stop_after=4)
    _damage_line(3)(_journal(output))
    machine.run(output, stop_after=2)  # three resumed, the bad one and one more measured
    lines = _journal(output).read_text().split("\n")
    assert all(json.loads(line) for line in lines[:-1]) and lines[-1] == ""
    assert len(_journaled(output)) == 5
    result = machine.run(output)
    assert result.notes == () and [s.resumed for s in result.summaries] == [5]


def test_a_record_cut_short_by_a_crash_loses_only_that_key(tmp_path):
    machine, output = ToyMachine(), tmp_path / "host.yaml"
    machine.run(output, stop_after=4)
    finished = _journaled(output)
    *complete, last, _ = _journal(output).read_text().split("\n")
    _journal(output).write_text("\n".join(complete) + "\n" + last[:len(last) // 2])
    result = machine.run(output)
    assert result.notes == () and [s.resumed for s in result.summaries] == [3]
    assert [key for _, key in machine.calls] == [str(k) for k in machine.keys
                                                 if str(k) not in finished[:3]]
    assert len(read_deployment_profile(output).entries) == len(machine.keys)


def test_a_run_resumed_from_a_cut_record_keeps_its_own_records_when_preempted_again(tmp_path):
    # The records a resumed run appends must not run on from the cut one: a second
    # preemption would leave a damaged middle line, and the whole journal ignored.
    machine, output = ToyMachine(), tmp_path / "host.yaml"
    machine.run(output, stop_after=3)
    text = _journal(output).read_text()
    _journal(output).write_text(text[:-40])  # the third record cut short
    machine.run(output, stop_after=2)  # resumes two records, finishes two more, is preempted
    result = machine.run(output)
    assert result.notes == () and [s.resumed for s in result.summaries] == [4]
    assert len(machine.calls) == len(machine.keys) - 4


def test_a_thread_count_finished_before_the_kill_is_not_measured_again(tmp_path):
    machine, output = ToyMachine(), tmp_path / "host.yaml"
    machine.run(output, stop_after=len(machine.keys) + 2, threads=[1, 2])
    result = machine.run(output, threads=[1, 2])
    assert [(s.threads, s.calibrated, s.resumed) for s in result.summaries] == [
        (1, 6, 6), (2, 6, 2)]
    assert {threads for threads, _ in machine.calls} == {2} and len(machine.calls) == 4
    assert {entry.threads for entry in read_deployment_profile(output).entries} == {(1, 1),
                                                                                   (2, 2)}


# --- a machine outside its selector ---------------------------------------------------------


def _elsewhere() -> NamedSelector:
    """A selector of this host's vendor that names another family and model."""
    host = get_cpu_descriptor()
    return NamedSelector("elsewhere", "a processor this machine is not",
                         CpuSelector(vendor=host.vendor, family=host.family + 1,
                                     models=[host.model + 1]))


def test_a_machine_outside_its_selector_refuses_before_measuring(tmp_path):
    selector = tmp_path / "elsewhere.yaml"
    write_selector(_elsewhere(), selector)
    done = subprocess.run([sys.executable, "-m", "kerneltune", "calibrate", "--profile",
                           "--selector", str(selector), "--effort", "quick", "--kernel", "Abs",
                           "--threads", "1"], env=_environment(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "selector.family" in done.stderr and "selector.models" in done.stderr, done.stderr
    assert "this machine does not match the selector 'elsewhere'" in done.stderr
    assert [path.name for path in tmp_path.iterdir()] == ["elsewhere.yaml"]  # nor profiles/

    machine = ToyMachine()
    with pytest.raises(ProfileError, match="selector.family"):
        calibrate_machine(_elsewhere(), output=tmp_path / "out" / "host.yaml", threads=[1],
                          options=QUICK, registry=machine.registry, progress=io.StringIO())
    assert machine.calls == [] and _files(tmp_path / "out") is None


if __name__ == "__main__":
    calibrate_slowly(*sys.argv[1:3])


def test_require_complete_scoped_to_what_the_farm_calibrates_and_gaps_a_line_per_kernel(
        tmp_path):
    from kerneltune.pipeline.baking import summarise_gaps
    from kerneltune.tuning.keyfilter import KeyFilter

    a = _written(tmp_path / "a.yaml", ZEN4, _entries(keys=TOY_KEYS[:2]))  # Abs, both types
    everything = _bake([a], tmp_path / "all.yaml", require_complete=True)
    assert not everything.written
    # one problem per profile and kernel, not one per key
    (problem,) = everything.problems
    assert problem == ("incomplete: a: test_library/Add/baseline: no entry for 2 element "
                       "types (FLOAT, DOUBLE)")
    assert len(everything.gaps) == 2 and summarise_gaps(everything.gaps) == [
        problem.removeprefix("incomplete: ")]
    scoped = _bake([a], tmp_path / "abs.yaml", require_complete=True,
                   scope=KeyFilter.of(kernels=["Abs"]))
    assert scoped.written and scoped.gaps == ()
    assert list(scoped.coverage["a"]) == ["test_library/Abs/baseline/FLOAT",
                                          "test_library/Abs/baseline/DOUBLE"]
