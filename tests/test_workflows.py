"""The CI workflows' contract: lint and tests on both Linux platforms, and the farm's calibrate
matrix whose profiles one bake merges with every selector of the matrix expected.

The workflows run only on GitHub's runners; these tests read them as data.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

import kerneltune

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
PLATFORMS = {"ubuntu-latest", "ubuntu-24.04-arm"}  # Linux x86_64 and Linux aarch64


def _workflow(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))


def _triggers(workflow: dict) -> dict:
    # YAML 1.1, which PyYAML reads, takes the bare key `on` for the boolean true.
    return workflow[True]


def _runs(job: dict) -> str:
    return "\n".join(step["run"] for step in job["steps"] if "run" in step)


def _uses(job: dict, action: str) -> list[dict]:
    return [step.get("with", {}) for step in job["steps"]
            if step.get("uses", "").partition("@")[0] == action]


@pytest.fixture(scope="module")
def tests_workflow() -> dict:
    return _workflow("tests.yml")


@pytest.fixture(scope="module")
def calibrate_workflow() -> dict:
    return _workflow("calibrate.yml")


@pytest.fixture(scope="module")
def farm(calibrate_workflow) -> list[dict]:
    return calibrate_workflow["jobs"]["calibrate"]["strategy"]["matrix"]["include"]


@pytest.mark.parametrize("name", ["tests.yml", "calibrate.yml"])
def test_every_workflow_reads_only_and_no_expression_reaches_a_script(name):
    workflow = _workflow(name)
    assert workflow["permissions"] == {"contents": "read"}
    for job_name, job in workflow["jobs"].items():
        assert job["timeout-minutes"] > 0, job_name
        # expressions go through env:, so no value is ever spliced into shell text
        assert "${{" not in _runs(job), job_name
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"actions/[a-z-]+@v\d+", step["uses"]), step["uses"]


def test_tests_runs_lint_once_and_the_tests_on_both_linux_platforms(tests_workflow):
    assert {"push", "pull_request"} <= set(_triggers(tests_workflow))
    assert tests_workflow["concurrency"]["cancel-in-progress"] is True
    lint, tests = tests_workflow["jobs"]["lint"], tests_workflow["jobs"]["tests"]
    assert lint["runs-on"] == "ubuntu-latest"
    assert "nox -s lint" in _runs(lint)
    assert set(tests["strategy"]["matrix"]["runner"]) == PLATFORMS
    assert tests["runs-on"] == "${{ matrix.runner }}"
    assert "nox -s tests" in _runs(tests)
    for job in (lint, tests):
        assert [w["python-version"] for w in _uses(job, "actions/setup-python")] == ["3.11"]


def test_calibrate_runs_by_hand_with_an_effort_and_every_week(calibrate_workflow):
    triggers = _triggers(calibrate_workflow)
    effort = triggers["workflow_dispatch"]["inputs"]["effort"]
    assert effort["type"] == "choice"
    assert effort["options"] == ["quick", "normal", "thorough"]
    assert effort["default"] == "normal"
    assert triggers["schedule"][0]["cron"]
    # a newer run must not cancel a calibration half-done
    assert calibrate_workflow["concurrency"]["cancel-in-progress"] is False


def test_each_farm_machine_has_a_runner_a_shipped_selector_and_its_own_name(farm):
    assert farm
    machines = [entry["machine"] for entry in farm]
    assert len(set(machines)) == len(machines)
    for entry in farm:
        assert entry["runner"]
        path = ROOT / entry["selector"]
        assert path.parent == ROOT / "selectors" and path.is_file(), entry
        assert kerneltune.read_selector(path).name == path.stem


def test_the_farm_selectors_can_be_baked_together(farm):
    # the bake rejects two profiles at one tier whose selectors can match one processor
    selectors = [kerneltune.read_selector(ROOT / entry["selector"]).selector for entry in farm]
    for a, b in itertools.combinations(selectors, 2):
        assert a.tier != b.tier or not a.can_overlap(b), (a, b)


def test_each_farm_job_calibrates_for_its_selector_and_uploads_its_profile(calibrate_workflow):
    job = calibrate_workflow["jobs"]["calibrate"]
    assert job["strategy"]["fail-fast"] is False
    assert job["runs-on"] == "${{ matrix.runner }}"
    step = next(step for step in job["steps"] if "nox -s calibrate" in step.get("run", ""))
    assert step["env"] == {"SELECTOR": "${{ matrix.selector }}",
                           "RUN_NAME": "${{ matrix.machine }}-${{ matrix.run }}",
                           "EFFORT": "${{ inputs.effort || 'normal' }}"}
    command = step["run"].split("nox -s calibrate -- ", 1)[1].splitlines()[0]
    # each run its own name, so that the bake can tell the runs it merges apart
    assert command == ('--selector "$SELECTOR" --effort "$EFFORT" --name "$RUN_NAME" '
                       '--output "profiles/$RUN_NAME.yaml"')
    [upload] = _uses(job, "actions/upload-artifact")
    assert upload["name"] == "profile-${{ matrix.machine }}-${{ matrix.run }}"
    assert upload["path"].splitlines() == [
        "profiles/${{ matrix.machine }}-${{ matrix.run }}.yaml",
        "profiles/${{ matrix.machine }}-${{ matrix.run }}.reports.json"]
    assert upload["if-no-files-found"] == "error"


def test_each_machine_type_runs_as_often_as_repeats_says(calibrate_workflow, farm):
    repeats = _triggers(calibrate_workflow)["workflow_dispatch"]["inputs"]["repeats"]
    assert (repeats["type"], repeats["default"]) == ("number", 2)
    matrix = calibrate_workflow["jobs"]["calibrate"]["strategy"]["matrix"]
    # machine is a dimension of its own: an include adding a machine to every run would be
    # overwritten by the next
    assert matrix["machine"] == [entry["machine"] for entry in farm]
    assert matrix["run"] == "${{ fromJSON(needs.runs.outputs.numbers) }}"
    assert calibrate_workflow["jobs"]["calibrate"]["needs"] == "runs"


@pytest.mark.parametrize(("repeats", "numbers"), [("2", "[1,2]"), ("", "[1,2]"), ("1", "[1]"),
                                                  ("12", "[" + ",".join(map(str, range(1, 13)))
                                                   + "]"),
                                                  ("0", None), ("21", None), ("two", None),
                                                  ("1; echo", None)])
def test_the_runs_job_numbers_the_runs_or_refuses_a_bad_count(calibrate_workflow, tmp_path,
                                                               repeats, numbers):
    job = calibrate_workflow["jobs"]["runs"]
    output = tmp_path / "output"
    # as GitHub evaluates `inputs.repeats || 2`: an empty input is the default
    env = {**os.environ, "REPEATS": repeats or "2", "GITHUB_OUTPUT": str(output)}
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                           _runs(job)], env=env, capture_output=True, text=True, timeout=60)
    if numbers is None:
        assert done.returncode == 1 and "::error::repeats must be" in done.stdout
        assert not output.exists()
    else:
        assert done.returncode == 0, done.stderr
        assert output.read_text() == f"numbers={numbers}\n"


def test_the_bake_merges_every_machine_and_expects_every_selector(calibrate_workflow, farm):
    job = calibrate_workflow["jobs"]["bake"]
    assert job["needs"] == "calibrate"
    assert job["if"] == "${{ !cancelled() }}"  # also when some machines failed
    [download] = _uses(job, "actions/download-artifact")
    assert download["pattern"] == "profile-*"
    assert download["merge-multiple"] is True
    assert download["path"] == "${{ env.FARM_PROFILES }}"
    # away from the repository's own example profiles
    assert not job["env"]["FARM_PROFILES"].startswith("profiles")
    assert job["env"]["EXPECTED_SELECTORS"].split() == [entry["selector"] for entry in farm]
    [upload] = _uses(job, "actions/upload-artifact")
    assert upload == {"name": "deployment", "path": "build/deployment.yaml",
                      "if-no-files-found": "error"}


def _bake_script_run(calibrate_workflow, tmp_path, profiles):
    """Run the bake job's script over `profiles` with `python` and `nox` stubbed.

    Returns the finished process, the arguments nox was given (None if it was not run) and
    the folder of the profiles.
    """
    job = calibrate_workflow["jobs"]["bake"]
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, body in {"python": "exit 0", "nox": 'printf "%s\\n" "$@" > "$NOX_ARGS"'}.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    farm_profiles = tmp_path / "farm"
    farm_profiles.mkdir()
    for name in profiles:
        (farm_profiles / name).write_text("{}\n")
    arguments = tmp_path / "nox-arguments"
    env = {**os.environ, **job["env"], "FARM_PROFILES": str(farm_profiles),
           "NOX_ARGS": str(arguments), "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}"}
    # the shell GitHub runs a step's script with on Linux
    shell = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"]
    done = subprocess.run([*shell, _runs(job)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    nox = arguments.read_text().splitlines() if arguments.exists() else None
    return done, nox, farm_profiles


def test_the_bake_script_passes_every_profile_and_every_expected_selector(
        calibrate_workflow, farm, tmp_path):
    names = ["x-1.yaml", "x-1.reports.json", "x-2.yaml", "x-2.reports.json", "y-1.yaml",
             "y-1.reports.json"]
    done, nox, farm_profiles = _bake_script_run(calibrate_workflow, tmp_path, names)
    assert done.returncode == 0, done.stderr
    expect = [word for entry in farm for word in ("--expect", entry["selector"])]
    # the reports stay beside their profiles, where the bake finds them to merge the runs
    assert nox == ["-s", "bake", "--", *(str(farm_profiles / name) for name in
                                        ("x-1.yaml", "x-2.yaml", "y-1.yaml")),
                   "--output", "build/deployment.yaml", "--require-complete", *expect]


def test_the_bake_script_fails_before_baking_when_no_machine_left_a_profile(
        calibrate_workflow, tmp_path):
    done, nox, _ = _bake_script_run(calibrate_workflow, tmp_path, [])
    assert done.returncode == 1
    assert "::error::no machine of the calibrate matrix uploaded a profile" in done.stdout
    assert nox is None
