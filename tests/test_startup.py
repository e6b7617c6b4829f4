"""``import kerneltune`` in a fresh process: problems never stop it, and one warning names them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kerneltune.kernels.variants import installed_variants

#: the category's name, as the warnings module prints it
CATEGORY = "KerneltuneStartupWarning"
#: prints the start-up report's problems and the warnings the import issued, as JSON
REPORT = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import kerneltune
report = kerneltune.startup_report()
print(json.dumps({
    "problems": list(report.problems), "implementations": report.implementations,
    "profiles": None if report.profiles is None else
                [[f.path, f.status] for f in report.profiles.files],
    "warnings": [[w.category.__name__, str(w.message), issubclass(
        w.category, kerneltune.KerneltuneStartupWarning)] for w in caught]}))
"""


def start(code: str = REPORT, *options: str, **variables: str) -> subprocess.CompletedProcess:
    """A fresh interpreter's import, with no profiles, no cache and this host's processor."""
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith("KERNELTUNE_")}
    environment.update({"KERNELTUNE_CACHE": "off", **variables})
    return subprocess.run([sys.executable, *options, "-c", code], env=environment,
                          capture_output=True, text=True, timeout=300, check=False)


def report_of(**variables: str) -> dict:
    done = start(**variables)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_clean_start_warns_of_nothing():
    done = start("import kerneltune; print(kerneltune.startup_report().problems)", "-W", "error")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "()" and CATEGORY not in done.stderr


def test_the_profile_importer_loads_only_when_the_variable_names_profiles(tmp_path):
    code = "import sys, kerneltune; print('kerneltune.profiles.importer' in sys.modules)"
    done = start(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    done = start(code, KERNELTUNE_DEPLOYMENT_PROFILES=str(tmp_path / "none.yaml"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


@pytest.mark.parametrize(("content", "loaded", "status"), [
    (None, False, "not_found"), ("", True, "malformed"), ("{format: [", True, "malformed")])
def test_the_cache_machinery_loads_only_when_there_is_a_cache_file(tmp_path, content, loaded,
                                                                    status):
    cache = tmp_path / "kernel_tuning.yaml"
    if content is not None:
        cache.write_text(content)
    done = start("import json, sys, kerneltune; report = kerneltune.startup_report().cache; "
                 "print(json.dumps(['kerneltune.cache.kernel_tuning_cache' in sys.modules, "
                 "report.status, report.path]))", KERNELTUNE_CACHE=str(cache))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [loaded, status, str(cache)]
    assert start("import kerneltune; print(kerneltune.startup_report().cache.status)",
                 KERNELTUNE_CACHE="off").stdout.strip() == "disabled"


def test_an_unknown_isa_variant_is_one_warning_naming_the_variable_and_the_installed_ones():
    done = start("import kerneltune", KERNELTUNE_ISA="no_such_variant")
    assert done.returncode == 0
    assert done.stderr.count(CATEGORY) == 1
    assert "KERNELTUNE_ISA=no_such_variant" in done.stderr
    assert all(variant in done.stderr for variant in installed_variants())
    report = report_of(KERNELTUNE_ISA="no_such_variant")
    assert report["implementations"] == {} and len(report["problems"]) == 1
    (category, message, subclass), = report["warnings"]
    assert category == CATEGORY and subclass and report["problems"][0] in message


def test_each_problem_is_named_once_in_one_warning_and_the_good_file_still_imports(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text('{"format": "kerneltune-deployment-profile", "schema_version": 1, '
                    '"name": "empty", "priority": 0, "selector_name": null, '
                    '"selector": {"architecture": "x86_64"}, "versions": {}, '
                    '"provenance": [], "entries": []}\n', encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: kerneltune-deployment-profile\nschema_version: 99\n",
                   encoding="utf-8")
    cache = tmp_path / "kernel_tuning.yaml"
    cache.write_bytes(b"\x00\xff{{{ not a cache")
    report = report_of(KERNELTUNE_DEPLOYMENT_PROFILES=os.pathsep.join(map(str, (good, bad))),
                       KERNELTUNE_CACHE=str(cache))
    assert [status for _, status in report["profiles"]] == ["imported", "unsupported_version"]
    (category, message, _), = report["warnings"]
    assert category == CATEGORY and len(report["problems"]) == 2
    assert all(message.count(problem) == 1 for problem in report["problems"])
    assert str(bad) in message and str(cache) in message and str(good) not in message


@pytest.mark.parametrize("option", ["ignore:::kerneltune", "ignore::UserWarning"])
def test_the_warning_can_be_silenced_and_the_report_keeps_the_problems(option):
    done = start("import kerneltune; print(len(kerneltune.startup_report().problems))",
                 "-W", option, KERNELTUNE_ISA="no_such_variant")
    assert done.returncode == 0 and done.stdout.strip() == "1"
    assert CATEGORY not in done.stderr
