"""Kernel libraries as plugins: found through entry points, each registered whole or not at all.

The failure cases install small distributions (a module and its ``.dist-info``) into a
folder a fresh interpreter finds on ``PYTHONPATH``; the farm's end to end installs
``examples/kernel_library`` with pip and runs the commands on it, then runs the same
deployment file without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_kerneltune, variant_environment
from kerneltune.errors import KernelTuningError
from kerneltune.tuning.libraries import (
    FAILED,
    LOADED,
    NOT_SELECTED,
    KernelLibraryInfo,
    load_kernel_libraries,
    selected_libraries,
)
from kerneltune.tuning.registry import KernelTuningRegistry
from kerneltune.tuning.schema import KernelTuningKey, tunable

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kernel_library"

#: a library module: ``register`` registers ``good`` keys, then does what BODY says
LIBRARY = """
from dataclasses import dataclass
from kerneltune import KernelLibraryInfo, KernelTuningKey, tunable

@dataclass(frozen=True)
class Config:
    grain: int = tunable("parallel.minimum_elements", {default}, minimum=1)

def key(kernel, library="{name}"):
    return KernelTuningKey(library, kernel, "plain", "FLOAT")

def register(registry):
    registry.register_schemas([(key("First"), Config), (key("Second"), Config)])
{body}
    return KernelLibraryInfo("{name}", "2.5", ("plain",))
"""

#: what each broken library does after registering its first keys
BROKEN = {
    "raises": "    raise RuntimeError('the compiled part is missing')",
    "twice": "    registry.register_schemas([(key('First'), Config)])",
    "foreign": "    registry.register_schemas([(key('Abs', 'kerneltune_cpu'), Config)])",
}


def install(root: Path, name: str, body: str = "", default: int = 4096) -> None:
    """A distribution ``<name>-lib`` whose entry point registers library ``name``."""
    module = f"library_{name}"
    (root / f"{module}.py").write_text(
        LIBRARY.format(name=name, body=body, default=default), encoding="utf-8")
    info = root / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}-lib\nVersion: 1.0\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(
        f"[kerneltune.kernel_libraries]\n{name} = {module}:register\n", encoding="utf-8")


def python_path(*folders: Path) -> str:
    """``folders`` before what this process's children see already."""
    return os.pathsep.join([*map(str, folders), *filter(None, [os.environ.get("PYTHONPATH")])])


#: prints what ``import kerneltune`` loaded, as JSON
STARTUP = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import kerneltune
report = kerneltune.startup_report()
keys = kerneltune.snapshot().keys()
print(json.dumps({
    "libraries": {load.name: [load.status, load.distribution, load.keys]
                  for load in report.libraries},
    "problems": list(report.problems),
    "keys": sorted({key.library for key in keys}),
    "registered": sorted(kerneltune.default_registry.libraries()),
    "warnings": [str(w.message) for w in caught
                 if issubclass(w.category, kerneltune.KerneltuneStartupWarning)]}))
"""


def start(folder: Path, **variables: str) -> dict:
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith("KERNELTUNE_")}
    environment.update(KERNELTUNE_CACHE="off", PYTHONPATH=python_path(folder), **variables)
    done = subprocess.run([sys.executable, "-c", STARTUP], env=environment,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> Path:
    """A folder with a good library and one of each broken kind."""
    root = tmp_path_factory.mktemp("libraries")
    install(root, "good")
    for name, body in BROKEN.items():
        install(root, name, body)
    install(root, "bad_default", default=-1)
    return root


def test_a_library_that_fails_leaves_nothing_and_the_others_still_load(broken):
    report = start(broken)
    failed = ("raises", "twice", "foreign", "bad_default")
    assert {name: report["libraries"][name][0] for name in failed} == dict.fromkeys(
        failed, FAILED)
    assert report["libraries"]["good"] == [LOADED, "good-lib", 2]
    assert report["libraries"]["kerneltune_cpu"][:2] == [LOADED, "kerneltune"]
    # nothing of a failed library is published, not even the keys it registered before failing
    assert report["keys"] == ["good", "kerneltune_cpu"]
    assert report["registered"] == ["good", "kerneltune_cpu"]
    (warning,) = report["warnings"]
    for name in failed:
        problem = next(p for p in report["problems"] if f"library {name} " in p)
        assert f"distribution {name}-lib" in problem and problem in warning
    assert "the compiled part is missing" in warning
    assert "already registered" in warning and "parallel.minimum_elements" in warning
    assert "another library: kerneltune_cpu" in warning


@pytest.mark.parametrize(("selection", "loaded"), [
    ("good", ["good"]), ("none", []), ("good, kerneltune_cpu", ["good", "kerneltune_cpu"]),
])
def test_the_variable_restricts_which_libraries_load(broken, selection, loaded):
    report = start(broken, KERNELTUNE_KERNEL_LIBRARIES=selection)
    assert report["keys"] == loaded and report["problems"] == [] and report["warnings"] == []
    assert sorted(name for name, (status, _, _) in report["libraries"].items()
                  if status == LOADED) == loaded
    assert {status for name, (status, _, _) in report["libraries"].items()
            if name not in loaded} == {NOT_SELECTED}


def test_a_selected_name_no_library_has_is_a_problem_naming_the_installed_ones(broken):
    report = start(broken, KERNELTUNE_KERNEL_LIBRARIES="good,godo")
    assert report["keys"] == ["good"]
    (problem,) = report["problems"]
    assert "KERNELTUNE_KERNEL_LIBRARIES names godo" in problem
    assert "(installed: bad_default, foreign, good, kerneltune_cpu, raises, twice)" in problem
    (warning,) = report["warnings"]
    assert problem in warning


def test_the_libraries_command_lists_each_with_its_status(broken):
    done = run_kerneltune("libraries", "--json", PYTHONPATH=python_path(broken))
    assert done.returncode == 1, done.stderr  # one failed to load
    rows = {row["name"]: row for row in json.loads(done.stdout)["libraries"]}
    assert rows["good"] == {
        "name": "good", "distribution": "good-lib", "status": LOADED, "version": "2.5",
        "implementations": ["plain"], "keys": 2, "calibratable": 0, "probes": [],
        "problem": None}
    assert rows["raises"]["status"] == FAILED and "RuntimeError" in rows["raises"]["problem"]
    assert "kerneltune libraries: raises (distribution raises-lib)" in done.stderr
    text = run_kerneltune("libraries", PYTHONPATH=python_path(broken),
                          KERNELTUNE_KERNEL_LIBRARIES="good,kerneltune_cpu")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["library", "version", "distribution", "status",
                                "implementations", "keys", "calibratable"]
    assert any(line.split()[:4] == ["good", "2.5", "good-lib", "loaded"] for line in lines)
    assert any(line.split()[:2] == ["raises", "-"] and "not selected" in line
               for line in lines)


# --- the registry's side, in process --------------------------------------------------------


def _library(name: str, *keys: KernelTuningKey) -> tuple[KernelLibraryInfo, KernelTuningRegistry]:
    from conftest import ToyConfig

    staging = KernelTuningRegistry()
    staging.register_schemas([(key, ToyConfig) for key in keys])
    staging.register_calibration_function(keys[0], lambda context: None)
    staging.register_machine_probe(name, "parallel", lambda threads: 1.0)
    return KernelLibraryInfo(name, "1.0", ("plain",)), staging


def test_a_library_is_published_whole_in_one_generation():
    registry = KernelTuningRegistry()
    first, second = (KernelTuningKey("lib", kernel, "plain", "FLOAT") for kernel in "AB")
    info, staging = _library("lib", first, second)
    before = registry.generation
    registry.add_library(info, staging)
    assert registry.generation == before + 1
    assert set(registry.snapshot().keys()) == {first, second}
    assert registry.calibration_function(first) is not None
    assert list(registry.machine_probes("lib")) == ["parallel"]
    assert registry.libraries() == {"lib": info} and registry.library_version("lib") == "1.0"
    assert registry.library_version("other") is None


@pytest.mark.parametrize("conflict", ["same library", "same key", "foreign key"])
def test_a_library_that_conflicts_is_refused_and_changes_nothing(conflict):
    registry = KernelTuningRegistry()
    key = KernelTuningKey("lib", "A", "plain", "FLOAT")
    registry.add_library(*_library("lib", key))
    generation, keys = registry.generation, set(registry.snapshot().keys())
    if conflict == "same library":
        info, staging = _library("lib", KernelTuningKey("lib", "B", "plain", "FLOAT"))
    elif conflict == "same key":
        info, staging = _library("lib", key)
        info = KernelLibraryInfo("lib2", "1.0")
    else:
        info, staging = _library("lib2", key)
    with pytest.raises(KernelTuningError):
        registry.add_library(info, staging)
    assert registry.generation == generation and set(registry.snapshot().keys()) == keys
    assert list(registry.libraries()) == ["lib"]


def test_a_cache_entry_records_its_library_version(tmp_path):
    from conftest import execution
    from kerneltune import __version__
    from kerneltune.cache import inspect_kernel_tuning_cache, update_kernel_tuning_cache
    from kerneltune.tuning.resolution import KernelTuningProfile

    key = KernelTuningKey("lib", "A", "plain", "FLOAT")
    registry = KernelTuningRegistry()
    registry.add_library(*_library("lib", key))
    profile = KernelTuningProfile(key, {"parallel.minimum_elements": 4096},
                                  execution=execution())
    update_kernel_tuning_cache([profile], tmp_path / "cache.yaml", registry=registry)
    (entry,) = inspect_kernel_tuning_cache(tmp_path / "cache.yaml").entries
    assert dict(entry.versions) == {"kerneltune": __version__, "library": "1.0"}


def test_an_entry_point_that_returns_no_info_or_another_name_fails_alone():
    from importlib.metadata import EntryPoint

    registry = KernelTuningRegistry()
    points = [EntryPoint("nothing", "builtins:len", "kerneltune.kernel_libraries"),
              EntryPoint("missing", "no_such_module_here:register",
                         "kerneltune.kernel_libraries")]
    loads = load_kernel_libraries(registry, "", points)
    assert [load.status for load in loads] == [FAILED, FAILED]
    assert "TypeError" in loads[0].problem and "ModuleNotFoundError" in loads[1].problem
    assert registry.snapshot().keys() == ()


def test_library_info_and_selection_are_checked():
    with pytest.raises(TypeError, match="version"):
        KernelLibraryInfo("lib", "")
    assert selected_libraries(None) is None and selected_libraries(" ") is None
    assert selected_libraries("none") == frozenset()
    assert selected_libraries("a, b,,") == {"a", "b"}


def test_a_bad_default_is_refused_with_its_field():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Bad:
        grain: int = tunable("parallel.minimum_elements", 0, minimum=1)

    staging = KernelTuningRegistry()
    with pytest.raises(KernelTuningError, match="parallel.minimum_elements"):
        staging.register_schema(KernelTuningKey("lib", "A", "plain", "FLOAT"), Bad)


# --- the farm, end to end, on examples/kernel_library ----------------------------------------


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Path:
    """examples/kernel_library installed with pip into a folder of its own."""
    target = tmp_path_factory.mktemp("example-library")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--quiet", "--target", str(target), str(EXAMPLE)],
        capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return target


@pytest.fixture(scope="module")
def farm(example, tmp_path_factory) -> Path:
    """The example calibrated for 1 and 2 threads, kerneltune's Abs for 1, both baked."""
    work = tmp_path_factory.mktemp("farm")
    with_example = {"PYTHONPATH": python_path(example)}
    # quick effort, with a per-key budget no run reaches: a busy machine measures slowly, and
    # what is asserted is what the farm writes, not how soon
    quick = ("--effort", "quick", "--time-budget-per-key", "3600", "--threads", "1")
    done = run_kerneltune("calibrate", "--profile", "--library", "example", *quick,
                          "--threads", "2", "--output", work / "example.yaml",
                          "--name", "example-run", cwd=work, **with_example)
    assert done.returncode == 0, done.stdout + done.stderr
    done = run_kerneltune("calibrate", "--profile", "--library", "kerneltune_cpu", "--kernel",
                          "Abs", "--element-type", "FLOAT", *quick, "--output",
                          work / "cpu.yaml", "--name", "cpu-run", cwd=work, **with_example)
    assert done.returncode == 0, done.stdout + done.stderr
    done = run_kerneltune("profiles", "bake", work / "example.yaml", work / "cpu.yaml",
                          "--output", work / "deployment.yaml", "--require-complete",
                          "--library", "example", cwd=work, **with_example)
    assert done.returncode == 0, done.stdout + done.stderr
    return work


def test_calibration_writes_the_library_entries_with_its_version(farm):
    profile = json.loads((farm / "example.yaml").read_text(encoding="utf-8"))
    keys = {(entry["key"]["kernel"], entry["key"]["element_type"])
            for entry in profile["entries"]}
    assert keys == {(kernel, element_type) for kernel in ("SumOfSquares", "Scale")
                    for element_type in ("FLOAT", "DOUBLE")}
    assert {entry["key"]["library"] for entry in profile["entries"]} == {"example"}
    assert {entry["library_version"] for entry in profile["entries"]} == {"1.0.0"}
    assert profile["versions"]["kernel_libraries"] == {"example": "1.0.0"}
    reports = json.loads((farm / "example.reports.json").read_text(encoding="utf-8"))
    assert {report["versions"]["library_version"] for batch in reports
            for report in batch["calibrated"]} == {"1.0.0"}


#: resolves the example's kernel on two threads and runs it, in a fresh process
RESOLVE = """
import json, numpy as np, kerneltune, kerneltune_example
run, resolution = kerneltune_example.prepare("SumOfSquares", np.float64, threads=2)
x = np.linspace(-1, 1, 300001)
print(json.dumps({"profile": resolution.source.profile_name, "values": dict(resolution.values),
                  "exact": bool(np.isclose(run(x), np.dot(x, x), rtol=1e-12)),
                  "abs": kerneltune.explain(threads=1, keys=[
                      k for k in kerneltune.snapshot().keys() if k.kernel == "Abs"
                      and k.element_type_name == "FLOAT"]).keys[0].resolution.source.profile_name,
                  "problems": list(kerneltune.startup_report().problems)}))
"""


def test_a_fresh_process_resolves_the_library_kernels_from_the_baked_file(farm, example):
    environment = variant_environment()  # the farm baked this process's keys
    environment.update(KERNELTUNE_CACHE="off", PYTHONPATH=python_path(example),
                       KERNELTUNE_DEPLOYMENT_PROFILES=str(farm / "deployment.yaml"))
    done = subprocess.run([sys.executable, "-c", RESOLVE], env=environment,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == {**result, "profile": "example-run", "exact": True, "abs": "cpu-run",
                      "problems": []}
    assert set(result["values"]) == {"block.elements", "parallel.minimum_elements"}


def test_explain_and_verify_cover_the_library(farm, example):
    variables = {"PYTHONPATH": python_path(example),
                 "KERNELTUNE_DEPLOYMENT_PROFILES": str(farm / "deployment.yaml")}
    done = run_kerneltune("profiles", "explain", "--library", "example", "--threads", "2",
                          "--json", **variables)
    assert done.returncode == 0, done.stderr
    keys = json.loads(done.stdout)["keys"]
    assert len(keys) == 4 and {row["key"]["library"] for row in keys} == {"example"}
    assert {row["source"]["profile_name"] for row in keys} == {"example-run"}
    assert {row["library_version"] for row in keys} == {"1.0.0"}
    # a budget no run reaches: what is asserted is that every key was measured
    done = run_kerneltune("profiles", "verify", farm / "deployment.yaml", "--threads", "2",
                          "--time-budget", "3600", "--json", cache=farm / "verify-cache.yaml",
                          **variables)
    assert done.returncode in (0, 1), done.stderr
    rows = [row for row in json.loads(done.stdout)["keys"]
            if row["key"]["library"] == "example"]
    assert len(rows) == 4 and {row["library_version"] for row in rows} == {"1.0.0"}
    # every key whose shipped values are not the defaults was measured here
    assert all(row["measured"] for row in rows if row["outcome"] != "defaults"), rows


def test_without_the_library_its_entries_wait_and_the_rest_is_published(farm):
    deployment = farm / "deployment.yaml"
    done = run_kerneltune("profiles", "import", deployment, "--json")
    assert done.returncode == 0, done.stderr
    (file,) = json.loads(done.stdout)["files"]
    assert file["status"] == "imported" and file["imported"] == 1  # kerneltune's Abs
    assert file["not_installed"] == {"example": 8}
    text = run_kerneltune("profiles", "import", deployment)
    assert "8 entries of kernel library example for this machine: library not installed" in (
        text.stdout)
    explained = run_kerneltune("profiles", "explain", "--library", "example",
                               KERNELTUNE_DEPLOYMENT_PROFILES=str(deployment))
    assert explained.returncode == 0, explained.stderr
    assert "8 entries of kernel library example for this machine: library not installed" in (
        explained.stdout)
    report = start(farm, KERNELTUNE_DEPLOYMENT_PROFILES=str(deployment))
    assert report["problems"] == [] and "example" not in report["keys"]


def test_a_library_version_change_keeps_the_values_and_says_so(farm, example, tmp_path):
    """The tuning ABI, not the version, decides: the values apply, explain notes the version."""
    text = (farm / "example.yaml").read_text(encoding="utf-8")
    older = tmp_path / "older.yaml"
    older.write_text(text.replace('"library_version": "1.0.0"', '"library_version": "0.9.0"'),
                     encoding="utf-8")
    done = run_kerneltune("profiles", "explain", "--library", "example", "--threads", "2",
                          "--json", PYTHONPATH=python_path(example),
                          KERNELTUNE_DEPLOYMENT_PROFILES=str(older))
    assert done.returncode == 0, done.stderr
    keys = json.loads(done.stdout)["keys"]
    assert {row["source"]["profile_name"] for row in keys} == {"example-run"}
    assert all(any("calibrated with example 0.9.0, 1.0.0 installed" in warning
                   for warning in row["warnings"]) for row in keys)


def test_the_example_readme_names_the_entry_point_it_declares():
    pyproject = (EXAMPLE / "pyproject.toml").read_text(encoding="utf-8")
    readme = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    declared = textwrap.dedent(pyproject.split('[project.entry-points."kerneltune.'
                                               'kernel_libraries"]')[1]).strip()
    assert declared in readme
