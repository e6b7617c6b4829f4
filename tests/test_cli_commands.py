"""The console script as a user runs it: cpu, kernel, cache, profiles, and every usage error.

Exit statuses: 0 done, 1 the command failed (a file, machine or measurement
that cannot be used), 2 the arguments cannot be run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import CPUS, run_kerneltune
from kerneltune.machine.descriptor_files import read_cpu_descriptor
from kerneltune.machine.detect import get_cpu_descriptor
from kerneltune.machine.openmp import wait_policy
from kerneltune.machine.selector_files import NamedSelector, read_selector, write_selector
from kerneltune.machine.selectors import CpuSelector

#: one cheap calibratable key, tuned on one thread at quick effort
QUICK = ("kernel", "--kernel", "Abs", "--element-type", "FLOAT", "--threads", "1", "--effort",
         "quick")


def _json(done) -> object:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache.yaml"


# --- every command: help, version, usage --------------------------------------------------


@pytest.mark.parametrize("command", [
    ["cpu"], ["kernel"], ["calibrate"], ["cache", "path"], ["cache", "inspect"],
    ["cache", "load"], ["cache", "remove"], ["cache", "set"], ["profiles", "export"],
    ["profiles", "bake"], ["profiles", "import"], ["profiles", "validate"],
    ["profiles", "explain"], ["corpus"], ["report"]])
def test_every_command_has_help_with_examples(command):
    done = run_kerneltune(*command, "--help")
    assert done.returncode == 0, done.stderr
    assert f"usage: kerneltune {' '.join(command)}" in done.stdout
    assert "examples:\n  kerneltune" in done.stdout


def test_the_top_level_help_lists_every_command_and_the_version_prints():
    done = run_kerneltune("--help")
    for command in ("cpu", "kernel", "calibrate", "cache", "profiles", "corpus", "report"):
        assert f"\n    {command}" in done.stdout
    version = run_kerneltune("--version")
    assert version.returncode == 0 and version.stdout.startswith("kerneltune ")


@pytest.mark.parametrize("arguments, message", [
    ([], "the following arguments are required: COMMAND"),
    (["nonsense"], "invalid choice: 'nonsense'"),
    (["cache"], "the following arguments are required: ACTION"),
    (["kernel", "--effort", "forever"], "invalid choice: 'forever'"),
    (["kernel"], "give --list, or --kernel NAME"),
    (["kernel", "--list", "--tune"], "--list takes no --tune"),
    (["kernel", "--list", "--kernel", "Nope"], "no registered kernel matches --kernel Nope"),
    (["kernel", "--kernel", "Nope"], "no registered kernel matches --kernel Nope"),
    (["kernel", "--kernel", "Abs", "--element-type", "NOTATYPE"], "NOTATYPE"),
    (["kernel", "--kernel", "Abs", "--parameter", "parallel.minimum_elements=default,4096"],
     "--parameter compares values while tuning: add --tune"),
    (["kernel", "--kernel", "Abs", "--time-budget", "5"], "add --tune"),
    ([*QUICK, "--tune", "--parameter", "parallel.minimum_elements=default,4096.5"],
     "'4096.5': expected an integer"),
    ([*QUICK, "--tune", "--parameter", "parallel.minimum_elements=default,many"],
     "'many': expected an integer"),
    ([*QUICK, "--tune", "--parameter", "parallel.minimum_elements=0,4096"],
     "must be a positive integer"),
    ([*QUICK, "--tune", "--parameter", "parallel.minimum_elements=default"],
     "give at least two distinct values"),
    ([*QUICK, "--tune", "--parameter", "parallel.minimum_elements=default,32768,32768"],
     "give at least two distinct values"),
    ([*QUICK, "--tune", "--parameter",
      "parallel.minimum_elements=" + ",".join(str(v) for v in range(1, 65))],
     "65 distinct values; at most 64"),
    ([*QUICK, "--tune", "--parameter", "tile=default,3"], "has no parameter 'tile'"),
    ([*QUICK, "--tune", "--parameter", "parallel.minimum_elements"], "expected NAME=default"),
    (["cache", "set", "--kernel", "Abs", "--element-type", "FLOAT", "nothing"],
     "expected NAME=VALUE, got 'nothing'"),
    (["cache", "set", "--kernel", "Abs", "--element-type", "FLOAT", "parallel.minimum_elements=0"],
     "parallel.minimum_elements: must be a positive integer"),
    (["cache", "set", "--kernel", "Nope", "--element-type", "FLOAT", "a=1"],
     "no tuning schema is registered for kernel 'Nope'"),
    (["profiles", "export", "r.json", "--selector", "zen4", "--name", "x"],
     "the following arguments are required: --output"),
    (["calibrate", "--values", "1", "2"], "give parameter and values together"),
    (["calibrate", "--threads", "0"], "expected a whole number of 1 or more, got '0'"),
    (["kernel", "--kernel", "Abs", "--threads", "two"], "expected a whole number of 1 or more"),
    (["profiles", "explain", "--threads", "-1"], "expected a whole number of 1 or more"),
    (["calibrate", "--kernel", "Foo"], "no calibratable key matches --kernel Foo"),
    (["calibrate", "--kernel", "Foo", "--profile", "--output", "never.yaml"],
     "no calibratable key matches --kernel Foo"),
    (["calibrate", "--profile", "--save", "--report", "r.json"],
     "--report, --save cannot go with --profile"),
    (["calibrate", "--output", "x.yaml", "--restart"],
     "--output, --restart only go with --profile"),
    (["cpu", "--root", "/nonexistent", "--machine", "x86_64"],
     "--root /nonexistent: no proc/cpuinfo there"),
])
def test_a_usage_error_exits_2_naming_what_is_wrong(arguments, message, cache):
    done = run_kerneltune(*arguments, cache=cache)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not cache.exists()  # nothing measured, nothing persisted


# --- cpu --------------------------------------------------------------------------------------


def test_cpu_prints_a_descriptor_file_that_reads_back_and_names_variant_and_selectors(tmp_path):
    done = run_kerneltune("cpu")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "machine.yaml"
    path.write_text(done.stdout, encoding="utf-8")
    assert read_cpu_descriptor(path) == get_cpu_descriptor()
    assert "# ISA variant: " in done.stdout and "# shipped selectors matching: " in done.stdout
    document = _json(run_kerneltune("cpu", "--json"))
    assert document["isa_variant"] in document["installed_variants"]
    assert document["descriptor"]["vendor"] == get_cpu_descriptor().vendor
    assert f"# ISA variant: {document['isa_variant']} " in done.stdout
    for name in document["selectors"]:
        assert name in done.stdout
    assert document["wait_policy"] == wait_policy().as_dict()


def test_cpu_names_the_openmp_wait_policy_of_its_environment():
    done = run_kerneltune("cpu", OMP_WAIT_POLICY="passive", GOMP_SPINCOUNT="2k")
    assert done.returncode == 0, done.stderr
    assert ("# OpenMP wait policy: passive, spins 2,000 before sleeping (0 with more OpenMP "
            "threads than CPUs)\n") in done.stdout
    document = _json(run_kerneltune("cpu", "--json", GOMP_SPINCOUNT="infinite"))
    assert document["wait_policy"]["spin_count"] == "infinite"


def test_cpu_of_a_copied_machine_leaves_this_environments_wait_policy_out():
    root = CPUS / "amd_zen2_epyc_7742"
    done = run_kerneltune("cpu", "--root", root, "--machine", "x86_64")
    assert done.returncode == 0, done.stderr
    assert "# ISA variant: " in done.stdout and "wait policy" not in done.stdout
    document = _json(run_kerneltune("cpu", "--json", "--root", root, "--machine", "x86_64"))
    assert document["wait_policy"] is None


def test_cpu_selector_prints_a_selector_file_of_this_processor_that_reads_back(tmp_path):
    done = run_kerneltune("cpu", "--selector")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "my-machine.yaml"
    path.write_text(done.stdout, encoding="utf-8")
    named = read_selector(path)
    processor = get_cpu_descriptor()
    assert named.selector.matches_processor(processor) and named.selector.models == (
        processor.model,)
    copied = run_kerneltune("cpu", "--selector", "--root", CPUS / "amd_zen2_epyc_7742",
                            "--machine", "x86_64")
    assert "family: 23" in copied.stdout and "models: [49]" in copied.stdout
    refused = run_kerneltune("cpu", "--selector", "--json")
    assert refused.returncode == 2 and "not allowed with argument --selector" in refused.stderr


# --- kernel -----------------------------------------------------------------------------------


def test_kernel_list_names_every_registered_key():
    rows = _json(run_kerneltune("kernel", "--list", "--json"))["parameters"]
    kernels = {row["key"]["kernel"] for row in rows}
    assert {"Abs", "Add", "Gemm"} <= kernels
    text = run_kerneltune("kernel", "--list").stdout
    assert text.splitlines()[0].split() == ["kernel", "dtype", "implementation", "library", "abi",
                                            "parameters", "calibratable", "active", "changed"]
    # the header, its rule, a row per key and the summary
    assert len(text.splitlines()) == len(rows) + 3
    assert text.splitlines()[-1].startswith(f"{len(rows)} keys, ")


def test_kernel_shows_schema_defaults_cached_and_active_values(cache):
    done = run_kerneltune("cache", "set", "--kernel", "Add", "--element-type", "FLOAT",
                          "--threads", "1", "parallel.minimum_elements=65536", cache=cache)
    assert done.returncode == 0, done.stderr
    shown = _json(run_kerneltune("kernel", "--kernel", "Add", "--element-type", "FLOAT",
                                 "--threads", "1", "--json", cache=cache))
    (row,) = shown["parameters"]
    assert row["cached"]["parallel.minimum_elements"] == 65536
    assert row["cached_source"] == "manual"
    assert row["active"]["parallel.minimum_elements"] == 65536  # loaded at start-up
    assert row["active_source"]["tier"] == "calibrated"
    assert row["defaults"]["parallel.minimum_elements"] != 65536
    text = run_kerneltune("kernel", "--kernel", "Add", "--element-type", "FLOAT", "--threads", "1",
                          cache=cache).stdout
    assert "cached for this execution: manual" in text
    line = next(line for line in text.splitlines()
                if line.startswith("parallel.minimum_elements"))
    assert line.split()[-2:] == ["65536", "65536"]  # cached, active


def test_kernel_tune_persists_and_prints_before_and_after(cache):
    done = run_kerneltune(*QUICK, "--tune", "--json", cache=cache)
    document = _json(done)
    (report,) = document["calibration"]["calibrated"]
    assert document["cache"]["status"] == "updated"
    shown = _json(run_kerneltune(*QUICK[:7], "--json", cache=cache))["parameters"][0]
    assert shown["cached"] == report["values"] and shown["cached_source"] == "calibration"
    text = run_kerneltune(*QUICK, "--tune", cache=cache)
    assert text.returncode == 0, text.stderr
    assert "1 keys tuned for 1 threads in " in text.stdout
    assert "parallel.minimum_elements: " in text.stdout and " -> " in text.stdout
    assert f"cache {cache}: updated, 0 added, 1 replaced" in text.stdout


def test_kernel_parameter_compares_the_values_and_persists_the_selected_one(cache):
    done = run_kerneltune(*QUICK, "--tune", "--parameter",
                          "parallel.minimum_elements=default,1024,1048576", cache=cache)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("value "))
    rows = [line.split(maxsplit=3) for line in lines[header + 2:header + 5]]
    assert [row[0] for row in rows] == ["32768", "1024", "1048576"]
    assert rows[0][2] == "1.000" and rows[0][3].startswith("in use")
    (selected,) = [row for row in rows if row[-1].endswith("selected")]
    entries = yaml.safe_load(cache.read_text(encoding="utf-8"))["entries"]
    (entry,) = entries
    assert entry["values"]["parallel.minimum_elements"] == int(selected[0])


# --- cache ------------------------------------------------------------------------------------


def test_cache_path_follows_the_environment_and_the_option(tmp_path, cache):
    assert run_kerneltune("cache", "path", cache=cache).stdout.strip() == str(cache)
    other = tmp_path / "other.yaml"
    assert _json(run_kerneltune("cache", "path", "--path", other, "--json", cache=cache)) == {
        "path": str(other), "exists": False}
    assert "persistence is off" in run_kerneltune("cache", "path").stdout


def test_cache_set_inspect_load_remove(cache):
    done = run_kerneltune("cache", "set", "--kernel", "Abs", "--element-type", "FLOAT",
                          "parallel.minimum_elements=4096", "--json", cache=cache)
    assert _json(done)["status"] == "updated"
    inspection = _json(run_kerneltune("cache", "inspect", "--json", cache=cache))
    (entry,) = inspection["entries"]
    assert entry["values"]["parallel.minimum_elements"] == 4096 and entry["source"] == "manual"
    text = run_kerneltune("cache", "inspect", cache=cache).stdout
    assert f"{cache}: ok\n" in text and "parallel.minimum_elements=4096" in text
    assert text.splitlines()[-1].startswith("1 entries (1 with values other than the defaults)")
    loaded = _json(run_kerneltune("cache", "load", "--json", cache=cache))
    assert loaded["status"] == "loaded" and len(loaded["loaded"]) == 1
    removed = run_kerneltune("cache", "remove", cache=cache)
    assert removed.returncode == 0 and "removed" in removed.stdout and not cache.exists()
    again = run_kerneltune("cache", "remove", cache=cache)
    assert again.returncode == 0 and "not_found" in again.stdout


def test_cache_load_loads_the_file_its_path_names(tmp_path):
    other = tmp_path / "other.yaml"
    done = run_kerneltune("cache", "set", "--kernel", "Abs", "--element-type", "FLOAT",
                          "parallel.minimum_elements=4096", "--path", other)
    assert done.returncode == 0, done.stderr
    loaded = _json(run_kerneltune("cache", "load", "--path", other, "--json"))
    assert (loaded["status"], loaded["path"], len(loaded["loaded"])) == ("loaded", str(other), 1)


def test_cache_commands_fail_on_a_file_they_cannot_read_naming_it_on_stderr(cache):
    cache.write_text("entries: [1, 2\n", encoding="utf-8")
    before = cache.read_bytes()
    for action in ("inspect", "load"):
        done = run_kerneltune("cache", action, cache=cache)
        assert done.returncode == 1, (action, done.stdout, done.stderr)
        assert f"{cache}: malformed" in done.stdout
        assert f"kerneltune cache {action}: {cache}: not plain YAML" in done.stderr
    done = run_kerneltune("cache", "set", "--kernel", "Abs", "--element-type", "FLOAT",
                          "parallel.minimum_elements=4096", cache=cache)
    assert done.returncode == 1 and cache.read_bytes() == before  # nothing lost
    assert f"kerneltune cache set: {cache}" in done.stderr and "not plain YAML" not in done.stdout


# --- profiles ---------------------------------------------------------------------------------


@pytest.fixture
def calibration_report(tmp_path):
    report = tmp_path / "report.json"
    done = run_kerneltune("calibrate", "--kernel", "Abs", "--element-type", "FLOAT", "--threads",
                          "1", "--effort", "quick", "--report", report)
    assert done.returncode == 0, done.stderr
    return report


@pytest.fixture
def this_machine(tmp_path):
    host = get_cpu_descriptor()
    path = tmp_path / "here.yaml"
    write_selector(NamedSelector("here", "this test's machine", CpuSelector(
        vendor=host.vendor, family=host.family, models=[host.model])), path)
    return path


def test_profiles_export_validate_import_bake_explain(tmp_path, calibration_report,
                                                      this_machine):
    profile = tmp_path / "profiles" / "here.yaml"
    done = run_kerneltune("profiles", "export", calibration_report, "--selector", this_machine,
                          "--name", "here", "--output", profile)
    assert done.returncode == 0, done.stderr
    assert f"profile 'here' written to {profile} (1 entries)" in done.stdout
    validated = run_kerneltune("profiles", "validate", profile)
    assert validated.returncode == 0 and f"{profile}: ok, 1 profiles, 1 entries checked" in (
        validated.stdout)
    imported = run_kerneltune("profiles", "import", profile, "--threads", "1")
    assert imported.returncode == 0, imported.stderr
    assert "1 keys resolve from them here:" in imported.stdout
    assert "Abs/" in imported.stdout.split("resolve from them here:")[1]
    deployment = tmp_path / "kerneltune.yaml"
    baked = run_kerneltune("profiles", "bake", profile, "--output", deployment)
    assert baked.returncode == 0 and deployment.is_file(), baked.stderr
    descriptor = tmp_path / "machine.yaml"
    descriptor.write_text(run_kerneltune("cpu").stdout, encoding="utf-8")
    explained = _json(run_kerneltune("profiles", "explain", "--descriptor", descriptor,
                                     "--threads", "3", "--json"))
    assert explained["execution"]["effective_threads"] == 3


def test_profiles_commands_fail_on_files_they_cannot_use(tmp_path, this_machine):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    done = run_kerneltune("profiles", "export", broken, "--selector", this_machine, "--name",
                          "x", "--output", tmp_path / "x.yaml")
    assert done.returncode == 1 and str(broken) in done.stderr
    assert not (tmp_path / "x.yaml").exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: kerneltune-deployment-profile\nschema_version: 1\n", encoding="utf-8")
    for action in ("validate", "import"):
        done = run_kerneltune("profiles", action, bad)
        assert done.returncode == 1 and str(bad) in done.stderr, (action, done.stderr)
    missing = run_kerneltune("profiles", "explain", "--descriptor", tmp_path / "none.yaml")
    assert missing.returncode == 1 and "none.yaml" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """`kerneltune cpu | head -1`: no broken-pipe message, no traceback."""
    import subprocess

    from conftest import kerneltune_script

    child = subprocess.Popen([str(kerneltune_script()), "cpu"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    child.stdout.close()  # gone before the command writes a line
    stderr = child.stderr.read()
    assert child.wait(timeout=300) == 1
    assert stderr == ""


def test_every_option_of_every_command_says_what_it_does():
    import argparse

    from kerneltune.cli import build_parser

    silent = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, command in action.choices.items():
                    walk(command, [*path, name])
            elif action.option_strings and not action.help:
                silent.append(f"{' '.join(path)} {'/'.join(action.option_strings)}")

    walk(build_parser(), ["kerneltune"])
    assert silent == []


def test_a_broken_pipe_other_than_the_output_is_an_error_that_says_so(monkeypatch, capsys):
    from kerneltune.cli import cpu, main

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe: the worker's")

    monkeypatch.setattr(cpu, "_cpu", broken)
    assert main(["cpu"]) == 1
    assert "kerneltune cpu: [Errno 32] Broken pipe: the worker's" in capsys.readouterr().err


def test_one_spelling_per_option_and_the_former_ones_hidden():
    import argparse

    from kerneltune.cli import build_parser
    from kerneltune.cli.common import FORMER_SPELLINGS

    shown, hidden = set(), set()

    def walk(parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for command in action.choices.values():
                    walk(command)
            else:
                (hidden if action.help == argparse.SUPPRESS else shown).update(
                    action.option_strings)

    walk(build_parser())
    assert not set(FORMER_SPELLINGS) & shown
    assert set(FORMER_SPELLINGS) <= hidden


def test_a_former_spelling_still_works_and_the_list_takes_the_filters():
    former = run_kerneltune("kernel", "--list", "--kernel", "Abs", "--dtype", "FLOAT", "--json")
    current = run_kerneltune("kernel", "--list", "--kernel", "Abs", "--element-type", "FLOAT",
                             "--json")
    assert former.returncode == current.returncode == 0, former.stderr
    keys = [row["key"] for row in json.loads(current.stdout)["parameters"]]
    assert keys and {(key["kernel"], key["element_type"]) for key in keys} == {("Abs", "FLOAT")}
    assert json.loads(former.stdout) == json.loads(current.stdout)


def test_an_option_that_must_be_given_is_asked_for_by_its_current_name():
    done = run_kerneltune("cache", "set", "--kernel", "Abs", "parallel.minimum_elements=4096")
    assert done.returncode == 2
    assert "required: --element-type" in done.stderr


def test_profiles_import_reads_the_variable_the_processes_read_when_given_no_file():
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[1] / "profiles" / "amd-x86-64-v4-25-17.yaml"
    done = run_kerneltune("profiles", "import", "--json",
                          KERNELTUNE_DEPLOYMENT_PROFILES=str(shipped))
    assert done.returncode == 0, done.stderr
    (file,) = json.loads(done.stdout)["files"]
    assert file["path"] == str(shipped) and file["status"] == "imported"
    refused = run_kerneltune("profiles", "import")
    assert refused.returncode == 2 and "KERNELTUNE_DEPLOYMENT_PROFILES" in refused.stderr


SHIPPED = Path(__file__).resolve().parents[1] / "profiles" / "amd-x86-64-v4-25-17.yaml"


def test_changed_shows_only_values_other_than_the_defaults_and_each_listing_a_summary(cache):
    done = run_kerneltune("cache", "set", "--kernel", "Add", "--element-type", "FLOAT",
                          "--threads", "1", "parallel.maximum_threads=2", cache=cache)
    assert done.returncode == 0, done.stderr
    listing = run_kerneltune("kernel", "--list", "--changed", "--threads", "1", cache=cache)
    rows = [line for line in listing.stdout.splitlines() if "(default" in line]
    assert len(rows) == 1 and rows[0].startswith("Add ")
    assert "parallel.maximum_threads=2 (default 256)" in rows[0]
    assert "keys, 1 with values other than the defaults (1 values)" in \
        listing.stdout.splitlines()[-1]
    shown = run_kerneltune("kernel", "--kernel", "Add", "--changed", "--threads", "1",
                           cache=cache).stdout
    assert "parallel.maximum_threads" in shown and "parallel.minimum_elements" not in shown
    assert "1 with values other than the defaults" in shown.splitlines()[-1]
    inspected = run_kerneltune("cache", "inspect", "--changed", cache=cache).stdout
    assert "parallel.maximum_threads=2 (default 256)" in inspected
    assert inspected.splitlines()[-1].startswith("1 entries (1 with values other than")
    explained = run_kerneltune("profiles", "explain", "--changed", "--threads", "1",
                               cache=cache).stdout.splitlines()
    (key,) = [line for line in explained[1:-1] if not line.startswith(" ")]
    assert "/Add/" in key and "parallel.maximum_threads=2 (default 256)" in key
    assert explained[-1].endswith("warnings") and ", 1 with values other than" in explained[-1]


def test_profiles_import_changed_shows_what_the_file_changes(tmp_path):
    """The shipped profile, bound to this processor and its ISA variant, whatever they are."""
    from kerneltune.kernels.variants import selected_variant
    from kerneltune.machine.selector_files import processor_selector

    profile = json.loads(SHIPPED.read_text(encoding="utf-8"))
    profile["selector"] = processor_selector(get_cpu_descriptor()).selector.to_dict()
    for entry in profile["entries"]:
        entry["key"]["implementation"] = selected_variant()
    here = tmp_path / "here.yaml"
    here.write_text(json.dumps(profile), encoding="utf-8")
    done = run_kerneltune("profiles", "import", str(here), "--changed", "--threads", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    keys = [line for line in lines if line.startswith("kerneltune_cpu/")]
    assert keys and all("(default " in line for line in keys)
    assert lines[-1].endswith("warnings")


@pytest.mark.parametrize(("line", "offered", "not_offered"), [
    ("kerneltune profiles ba", {"bake"}, set()),
    ("kerneltune kernel --ele", {"--element-type"}, set()),
    ("kerneltune kernel --", {"--element-type", "--changed"}, {"--dtype", "--impl"}),
])
def test_the_shell_completes_commands_and_options_but_not_former_spellings(
        tmp_path, line, offered, not_offered):
    answer = tmp_path / "completions"
    done = run_kerneltune(_ARGCOMPLETE="1", _ARGCOMPLETE_IFS="\n", COMP_LINE=line,
                          COMP_POINT=str(len(line)), _ARGCOMPLETE_STDOUT_FILENAME=str(answer))
    assert done.returncode == 0, done.stderr
    words = {word.strip() for word in answer.read_text().split("\n") if word.strip()}
    assert offered <= words and not words & not_offered, words
