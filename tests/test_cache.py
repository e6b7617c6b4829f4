"""The user calibration cache with real files: round trips, merges, damage of every kind.

Process-based crash and concurrency tests are in test_cache_processes.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import filelock
import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import kerneltune
from conftest import ToyConfig, execution, toy_key
from kerneltune._support.documents import parse_text
from kerneltune.cache.kernel_tuning_cache import (
    FORMAT,
    inspect_kernel_tuning_cache,
    load_kernel_tuning_cache,
    remove_kernel_tuning_cache,
    update_kernel_tuning_cache,
)
from kerneltune.cache.location import default_kernel_tuning_cache_path
from kerneltune.errors import TuningValidationError
from kerneltune.kernels import library, register_library
from kerneltune.machine.detect import current_execution
from kerneltune.machine.selectors import CpuSelector, Tier
from kerneltune.runtime import RuntimeSession
from kerneltune.tuning.registry import KernelTuningProfile, KernelTuningRegistry
from kerneltune.tuning.schema import KernelTuningKey

ABS, NEG, ABS_DOUBLE = toy_key("Abs"), toy_key("Neg"), toy_key("Abs", "DOUBLE")
KEYS = (ABS, NEG, ABS_DOUBLE)
FAST = {"parallel.minimum_elements": 4096}


def fresh_registry(keys=KEYS) -> KernelTuningRegistry:
    registry = KernelTuningRegistry()
    registry.register_schemas((key, ToyConfig) for key in keys)
    return registry


@pytest.fixture
def registry() -> KernelTuningRegistry:
    return fresh_registry()


@pytest.fixture
def path(tmp_path) -> Path:
    return tmp_path / "cache" / "kernel_tuning.yaml"


def calibrated(key=ABS, threads=2, values=None, digest="report-1", **processor):
    return KernelTuningProfile(key, FAST if values is None else values,
                               execution=execution(threads, **processor), origin="calibration",
                               report_digest=digest)


def cached_profiles(registry: KernelTuningRegistry) -> dict:
    """(key, threads) -> values of every calibrated profile the registry publishes."""
    return {(p.key, p.execution.effective_threads): dict(p.values)
            for p in registry.snapshot().profiles() if p.execution is not None}


def test_round_trip(registry, path):
    report = update_kernel_tuning_cache([calibrated(), calibrated(NEG, values={
        "algorithm.layout": "column", "algorithm.expected_speedup": 2.5})], path,
        registry=registry)
    assert report.status == "updated" and len(report.added) == 2
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    assert yaml.safe_load(path.read_text())["format"] == FORMAT  # plain YAML to any reader

    fresh = fresh_registry()
    loaded = load_kernel_tuning_cache(path=path, execution=execution(2), registry=fresh)
    assert loaded.status == "loaded" and len(loaded.loaded) == 2
    assert loaded.generation == fresh.generation
    assert not (loaded.invalid or loaded.stale or loaded.duplicate or loaded.incompatible)
    assert loaded.missing == (ABS_DOUBLE,)
    resolution = fresh.resolve(ABS, execution(2))
    assert resolution.values["parallel.minimum_elements"] == 4096
    assert resolution.source.tier is Tier.CALIBRATED and resolution.source.origin == str(path)
    assert fresh.resolve(NEG, execution(2)).values["algorithm.layout"] == "column"
    (profile,) = fresh.snapshot().profiles(ABS)
    assert profile.report_digest == "report-1"
    entry = inspect_kernel_tuning_cache(path).entries[0]
    assert entry.source == "calibration"
    assert entry.versions == {"kerneltune": kerneltune.__version__}
    assert json.loads(json.dumps(loaded.to_dict()))["loaded"][0]["values"] == FAST


def test_merge_across_kernels_and_thread_counts(registry, path):
    update_kernel_tuning_cache([calibrated(ABS, 2)], path, registry=registry)
    report = update_kernel_tuning_cache(
        [calibrated(NEG, 2), calibrated(ABS, 4, {"parallel.minimum_elements": 8192})], path,
        registry=registry)
    assert report.status == "updated"
    assert [e.key for e in report.added] == [NEG, ABS] and len(report.preserved) == 1

    everything = fresh_registry()
    loaded = load_kernel_tuning_cache(path=path, execution=execution(2), registry=everything)
    assert len(loaded.loaded) == 3
    assert everything.resolve(ABS, execution(4)).values["parallel.minimum_elements"] == 8192
    assert everything.resolve(ABS, execution(2)).values["parallel.minimum_elements"] == 4096

    exact = fresh_registry()
    loaded = load_kernel_tuning_cache(path=path, execution=execution(2), all_thread_counts=False,
                                      registry=exact)
    assert {(e.key, e.execution.effective_threads) for e in loaded.loaded} == {(ABS, 2), (NEG, 2)}
    assert [(e.key, e.execution.effective_threads) for e in loaded.incompatible] == [(ABS, 4)]

    other_processor = fresh_registry()
    loaded = load_kernel_tuning_cache(path=path, execution=execution(2, model=97),
                                      registry=other_processor)
    assert not loaded.loaded and len(loaded.incompatible) == 3
    assert cached_profiles(other_processor) == {}


def test_selection_filters_what_is_loaded(registry, path):
    update_kernel_tuning_cache([calibrated(ABS), calibrated(NEG), calibrated(ABS_DOUBLE)], path,
                               registry=registry)
    fresh = fresh_registry()
    loaded = load_kernel_tuning_cache(kernels="Abs", element_types=["float32"], path=path,
                                      execution=execution(2), registry=fresh)
    assert [e.key for e in loaded.loaded] == [ABS] and loaded.missing == ()
    assert set(cached_profiles(fresh)) == {(ABS, 2)}


def test_replace_existing_and_unchanged(registry, path):
    update_kernel_tuning_cache([calibrated()], path, registry=registry)
    replaced = update_kernel_tuning_cache([calibrated(values={"parallel.minimum_elements": 512})],
                                          path, registry=registry)
    assert replaced.status == "updated" and len(replaced.replaced) == 1
    before = path.read_bytes()
    kept = update_kernel_tuning_cache([calibrated(values={"parallel.minimum_elements": 8})], path,
                                      replace_existing=False, registry=registry)
    assert kept.status == "unchanged" and len(kept.kept) == 1 and not kept.replaced
    assert path.read_bytes() == before
    assert inspect_kernel_tuning_cache(path).entries[0].values == {
        "parallel.minimum_elements": 512}


def test_read_only_reports_without_writing(registry, path):
    report = update_kernel_tuning_cache([calibrated()], path, read_only=True, registry=registry)
    assert report.status == "read_only" and len(report.added) == 1
    assert not path.exists()
    update_kernel_tuning_cache([calibrated()], path, registry=registry)
    before = path.read_bytes()
    report = update_kernel_tuning_cache([calibrated(NEG)], path, read_only=True,
                                        registry=registry)
    assert report.status == "read_only" and len(report.added) == 1 and len(report.preserved) == 1
    assert path.read_bytes() == before


def test_invalid_profiles_raise_and_write_nothing(registry, path):
    unregistered = toy_key("Exp")
    bad = [
        calibrated(values={"parallel.minimum_elements": 0}),
        KernelTuningProfile(NEG, FAST, selector=CpuSelector(vendor="amd")),
        calibrated(unregistered),
        calibrated(ABS_DOUBLE), calibrated(ABS_DOUBLE),
    ]
    with pytest.raises(TuningValidationError) as raised:
        update_kernel_tuning_cache(bad, path, registry=registry)
    message = str(raised.value)
    assert "profile 0" in message and "parallel.minimum_elements" in message
    assert "selector profiles" in message and "no tuning schema" in message
    assert "the same key and execution" in message
    assert not path.parent.exists()


def test_prune_stale_abis(path):
    old = fresh_registry([ABS, toy_key("Abs", implementation="x86_64_v3")])
    update_kernel_tuning_cache([calibrated(ABS), calibrated(toy_key("Abs",
                               implementation="x86_64_v3"))], path, registry=old)
    abi2 = toy_key("Abs", tuning_abi=2)
    new = fresh_registry([abi2, NEG])

    loaded = load_kernel_tuning_cache(path=path, execution=execution(2), registry=new)
    assert {e.key.implementation for e in loaded.stale} == {"baseline", "x86_64_v3"}
    reasons = " ".join(e.reason for e in loaded.stale)
    assert "tuning ABI 1; the registered schema has tuning ABI 2" in reasons
    assert "no tuning schema is registered" in reasons
    assert cached_profiles(new) == {}

    kept = update_kernel_tuning_cache([calibrated(NEG)], path, registry=new)
    assert not kept.pruned and len(kept.preserved) == 2
    pruned = update_kernel_tuning_cache([calibrated(abi2)], path, prune_stale_abis=True,
                                        registry=new)
    assert [e.key for e in pruned.pruned] == [ABS]
    # another implementation's entries are not this process's to judge
    assert {e.key for e in inspect_kernel_tuning_cache(path).entries} == {
        toy_key("Abs", implementation="x86_64_v3"), NEG, abi2}


def valid_document(registry, path) -> dict:
    update_kernel_tuning_cache([calibrated(ABS), calibrated(NEG)], path, registry=registry)
    return json.loads(path.read_text())


def assert_untouched_by_update(path, registry, status):
    before = path.read_bytes()
    report = update_kernel_tuning_cache([calibrated(ABS_DOUBLE)], path, registry=registry)
    assert report.status == status and report.problems
    assert path.read_bytes() == before


def test_malformed_file_is_reported_and_preserved_byte_for_byte(registry, path):
    path.parent.mkdir()
    path.write_bytes(b"format: kerneltune-kernel-tuning-cache\nentries: [1, 2\n")
    loaded = load_kernel_tuning_cache(path=path, execution=execution(2), registry=registry)
    assert loaded.status == "malformed" and str(path) in str(loaded.problems[0])
    assert_untouched_by_update(path, registry, "malformed")
    assert remove_kernel_tuning_cache(path).removed
    assert update_kernel_tuning_cache([calibrated()], path, registry=registry).status == "updated"


@pytest.mark.parametrize("damage, status, message", [
    ("truncated", "malformed", "not plain YAML"),
    ("empty", "malformed", "empty"),
    ("binary", "malformed", "not UTF-8"),
    ("wrong version", "unsupported_version", "reads version 1 only"),
    ("wrong format", "malformed", "format"),
    ("unknown top-level field", "malformed", "comment: unknown field"),
    ("yaml duplicate key", "malformed", "twice"),
    ("python tag", "malformed", "not plain YAML"),
    ("not a mapping", "malformed", "expected a mapping"),
    ("entries not a list", "malformed", "entries: expected a list"),
])
def test_damaged_files_publish_nothing(registry, path, damage, status, message):
    document = valid_document(registry, path)
    text = path.read_text()
    marker = path.parent / "marker"
    damaged = {
        "truncated": lambda: text[: len(text) // 2].encode(),
        "empty": lambda: b"",
        "binary": lambda: bytes(range(256)) * 4,
        "wrong version": lambda: json.dumps({**document, "schema_version": 2}).encode(),
        "wrong format": lambda: json.dumps({**document, "format": "other"}).encode(),
        "unknown top-level field": lambda: json.dumps({**document, "comment": 1}).encode(),
        "yaml duplicate key": lambda: yaml.safe_dump(document).replace(
            "schema_version: 1", "schema_version: 1\nschema_version: 1").encode(),
        "python tag": lambda: f"!!python/object/apply:os.system ['touch {marker}']\n".encode(),
        "not a mapping": lambda: b"- 1\n- 2\n",
        "entries not a list": lambda: json.dumps({**document, "entries": {}}).encode(),
    }[damage]()
    path.write_bytes(damaged)
    fresh = fresh_registry()
    loaded = load_kernel_tuning_cache(path=path, execution=execution(2), registry=fresh)
    assert loaded.status == status, loaded.problems
    assert message in str(loaded.problems[0]) and str(path) in str(loaded.problems[0])
    assert fresh.generation == 1 and cached_profiles(fresh) == {}
    assert not marker.exists()
    assert inspect_kernel_tuning_cache(path).status == status
    assert_untouched_by_update(path, registry, status)


def entry_damage(document: dict, damage: str) -> None:
    """Damage the first entry (Abs) of a valid document in place; Neg stays valid."""
    entry = document["entries"][0]
    if damage == "duplicate":
        document["entries"].append(dict(entry, values={"parallel.minimum_elements": 64}))
    elif damage == "wrong type":
        entry["values"]["parallel.minimum_elements"] = "many"
    elif damage == "structure":
        entry["values"]["parallel.minimum_elements"] = [1, 2]
    elif damage == "nan":
        entry["values"]["algorithm.expected_speedup"] = math.nan
    elif damage == "huge integer":
        entry["values"]["parallel.minimum_elements"] = 10**30
    elif damage == "unknown field":
        entry["comment"] = "hand edited"
    elif damage == "unknown parameter":
        entry["values"]["parallel.grain"] = 3
    elif damage == "inconsistent":
        entry["values"]["algorithm.tile_m"] = 100
    elif damage == "bad key":
        entry["key"]["element_type"] = "FLOAT128"
    elif damage == "dangling execution":
        entry["execution"] = "e9"
    elif damage == "bad execution":
        document["executions"]["e1"]["effective_threads"] = 0


@pytest.mark.parametrize("damage, field, bucket", [
    ("duplicate", "", "duplicate"),
    ("wrong type", "parallel.minimum_elements", "invalid"),
    ("structure", "values.parallel.minimum_elements", "invalid"),
    ("nan", "values.algorithm.expected_speedup", "invalid"),
    ("huge integer", "parallel.minimum_elements", "invalid"),
    ("unknown field", "comment", "invalid"),
    ("unknown parameter", "parallel.grain", "invalid"),
    ("inconsistent", "algorithm.tile_n", "invalid"),
    ("bad key", "key.element_type", "invalid"),
    ("dangling execution", "execution", "invalid"),
])
@pytest.mark.parametrize("syntax", ["json", "yaml"])
def test_a_bad_entry_leaves_its_defaults_and_the_others_load(registry, path, damage, field,
                                                              bucket, syntax):
    document = valid_document(registry, path)
    entry_damage(document, damage)
    text = (json.dumps(document) if syntax == "json"
            else yaml.safe_dump(document, sort_keys=False))
    path.write_text(text)
    fresh = fresh_registry()
    loaded = load_kernel_tuning_cache(path=path, execution=execution(2), registry=fresh)
    assert loaded.status == "loaded"
    assert [e.key for e in loaded.loaded] == [NEG]
    rejected = getattr(loaded, bucket)
    assert rejected and all(e.index == 0 or damage == "duplicate" for e in rejected)
    problem = rejected[0].problems[0]
    assert problem.field == field and problem.file == str(path)
    assert problem.entry.startswith("entry 0")
    assert fresh.resolve(ABS, execution(2)).source.tier is Tier.DEFAULTS
    assert set(cached_profiles(fresh)) == {(NEG, 2)}


def test_a_bad_execution_invalidates_its_entries_only(registry, path):
    update_kernel_tuning_cache([calibrated(ABS, 2), calibrated(NEG, 4)], path, registry=registry)
    document = json.loads(path.read_text())
    document["executions"]["e1"]["effective_threads"] = 0
    path.write_text(json.dumps(document))
    fresh = fresh_registry()
    loaded = load_kernel_tuning_cache(path=path, execution=execution(2), registry=fresh)
    assert [e.key for e in loaded.loaded] == [NEG]
    assert "effective_threads" in loaded.invalid[0].reason
    assert_untouched_by_update(path, registry, "malformed")


def test_schema_invalid_entries_are_preserved_by_updates(registry, path):
    document = valid_document(registry, path)
    entry_damage(document, "wrong type")
    path.write_text(json.dumps(document))
    report = update_kernel_tuning_cache([calibrated(ABS_DOUBLE)], path, registry=registry)
    assert report.status == "updated" and len(report.preserved) == 2
    loaded = load_kernel_tuning_cache(path=path, execution=execution(2), registry=fresh_registry())
    assert len(loaded.invalid) == 1 and len(loaded.loaded) == 2


def test_hand_written_yaml_loads(registry, path):
    path.parent.mkdir()
    document = {"format": FORMAT, "schema_version": 1,
                "executions": {"mine": execution(2).to_dict()},
                "entries": [{"key": ABS.to_dict(), "execution": "mine",
                             "values": {"parallel.minimum_elements": 2048},
                             "source": "manual", "versions": {}}]}
    path.write_text("# tuned by hand\n" + yaml.safe_dump(document, sort_keys=False))
    loaded = load_kernel_tuning_cache(path=path, execution=execution(2), registry=registry)
    assert loaded.status == "loaded" and loaded.loaded[0].report_digest is None
    assert registry.resolve(ABS, execution(2)).values["parallel.minimum_elements"] == 2048


def test_stray_temporary_is_ignored_then_cleaned(registry, path):
    update_kernel_tuning_cache([calibrated()], path, registry=registry)
    stray = path.with_name(path.name + ".0123abcd.tmp")
    stray.write_bytes(b"{\"format\": \"kerneltune-kernel-tun")
    other = path.with_name("unrelated.tmp")
    other.write_bytes(b"x")
    assert len(load_kernel_tuning_cache(path=path, execution=execution(2),
                                        registry=fresh_registry()).loaded) == 1
    report = update_kernel_tuning_cache([calibrated(NEG)], path, registry=registry)
    assert report.status == "updated" and report.removed_temporaries == 1
    assert not stray.exists() and other.exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="permissions do not apply to root")
def test_permission_denied_directory(registry, path):
    update_kernel_tuning_cache([calibrated()], path, registry=registry)
    path.parent.chmod(0o000)
    try:
        loaded = load_kernel_tuning_cache(path=path, execution=execution(2), registry=registry)
        assert loaded.status == "unreadable" and "ermission" in str(loaded.problems[0])
        report = update_kernel_tuning_cache([calibrated(NEG)], path, registry=registry)
        assert report.status in ("unreadable", "write_failed")
    finally:
        path.parent.chmod(0o755)
    path.parent.chmod(0o555)
    try:
        before = path.read_bytes()
        report = update_kernel_tuning_cache([calibrated(NEG)], path, registry=registry)
        assert report.status == "write_failed" and "ermission" in str(report.problems[0])
        assert path.read_bytes() == before
    finally:
        path.parent.chmod(0o755)


def test_a_file_in_place_of_the_directory(registry, tmp_path):
    """What root meets where permissions cannot stop it: the directory cannot exist."""
    (tmp_path / "file").write_text("x")
    path = tmp_path / "file" / "kernel_tuning.yaml"
    loaded = load_kernel_tuning_cache(path=path, execution=execution(2), registry=registry)
    assert loaded.status == "unreadable" and str(path) in str(loaded.problems[0])
    assert update_kernel_tuning_cache([calibrated()], path,
                                      registry=registry).status == "write_failed"
    directory = tmp_path / "directory.yaml"
    directory.mkdir()
    assert inspect_kernel_tuning_cache(directory).status == "unreadable"


def test_lock_timeout(registry, path):
    update_kernel_tuning_cache([calibrated()], path, registry=registry)
    before = path.read_bytes()
    with filelock.FileLock(str(path) + ".lock"):
        report = update_kernel_tuning_cache([calibrated(NEG)], path, lock_timeout=0.1,
                                            registry=registry)
        removal = remove_kernel_tuning_cache(path, lock_timeout=0.1)
    assert report.status == "lock_timeout" and removal.status == "lock_timeout"
    assert path.read_bytes() == before


def test_remove_keeps_published_profiles(registry, path):
    update_kernel_tuning_cache([calibrated()], path, registry=registry)
    load_kernel_tuning_cache(path=path, execution=execution(2), registry=registry)
    removal = remove_kernel_tuning_cache(path)
    assert removal.status == "removed" and removal.removed and not path.exists()
    again = remove_kernel_tuning_cache(path)
    assert again.status == "not_found" and not again.removed
    assert remove_kernel_tuning_cache(path.parent / "missing" / "x.yaml").status == "not_found"
    assert registry.resolve(ABS, execution(2)).source.tier is Tier.CALIBRATED
    assert load_kernel_tuning_cache(path=path, registry=registry).status == "not_found"


def test_default_path_and_off(registry, tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELTUNE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert default_kernel_tuning_cache_path() == (
            tmp_path / "xdg" / "kerneltune" / "kernel_tuning.yaml")
    chosen = tmp_path / "chosen.yaml"
    monkeypatch.setenv("KERNELTUNE_CACHE", str(chosen))
    assert default_kernel_tuning_cache_path() == chosen
    assert update_kernel_tuning_cache([calibrated()], registry=registry).status == "updated"
    assert chosen.exists()
    monkeypatch.setenv("KERNELTUNE_CACHE", "off")
    assert default_kernel_tuning_cache_path() is None
    assert load_kernel_tuning_cache(registry=registry).status == "disabled"
    assert inspect_kernel_tuning_cache().status == "disabled"
    assert update_kernel_tuning_cache([calibrated(NEG)], registry=registry).status == "disabled"
    assert remove_kernel_tuning_cache().status == "disabled"
    assert chosen.exists() and len(inspect_kernel_tuning_cache(chosen).entries) == 1


def import_report(cache: Path, code: str) -> str:
    environment = {**os.environ, "KERNELTUNE_CACHE": str(cache)}
    result = subprocess.run([sys.executable, "-c", "import kerneltune\n" + code],
                            env=environment, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_import_with_a_corrupt_cache_succeeds(tmp_path):
    corrupt = tmp_path / "kernel_tuning.yaml"
    corrupt.write_bytes(b"\x00\xff{{{ not a cache")
    output = import_report(corrupt, "r = kerneltune.startup_report()\n"
                                    "print(r.cache.status, r.schemas > 0)\n"
                                    "print(r.problems)")
    assert output.startswith("malformed True") and "not UTF-8" in output
    assert corrupt.read_bytes() == b"\x00\xff{{{ not a cache"


def library_key(kernel="Abs") -> KernelTuningKey:
    return library()[kernel].tuning_key("FLOAT")


def test_import_loads_the_default_cache(tmp_path):
    cache = tmp_path / "kernel_tuning.yaml"
    registry = KernelTuningRegistry()
    register_library(registry)
    profile = KernelTuningProfile(library_key(), {"parallel.minimum_elements": 1234},
                                  execution=current_execution(), origin="calibration")
    update_kernel_tuning_cache([profile], cache, registry=registry)
    output = import_report(cache, (
        "from kerneltune.tuning.schema import KernelTuningKey\n"
        "r = kerneltune.startup_report()\n"
        f"key = KernelTuningKey.from_dict({library_key().to_dict()!r})\n"
        "resolution = kerneltune.resolve_kernel_tuning(key, kerneltune.current_execution())\n"
        "print(r.cache.status, len(r.cache.loaded), r.problems,"
        " resolution.values['parallel.minimum_elements'])"))
    assert output.split() == ["loaded", "1", "()", "1234"]


# --- arbitrary damage -------------------------------------------------------------------------

SESSION_THREADS = (1, 2)


def abs_model():
    graph = helper.make_graph(
        [helper.make_node("Abs", ["X"], ["Y"], name="abs")], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def library_registry() -> KernelTuningRegistry:
    registry = KernelTuningRegistry()
    register_library(registry)
    return registry


@pytest.fixture(scope="module")
def library_cache() -> bytes:
    """A valid cache of real kernels' entries for this machine at 1 and 2 threads."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel_tuning.yaml"
        profiles = [
            KernelTuningProfile(library_key(kernel), {"parallel.minimum_elements": 8 * threads,
                                                      "parallel.maximum_threads": threads},
                                execution=current_execution(threads), origin="calibration",
                                report_digest=f"{kernel}-{threads}")
            for kernel in ("Abs", "Neg") for threads in SESSION_THREADS
        ]
        assert update_kernel_tuning_cache(profiles, path,
                                          registry=library_registry()).status == "updated"
        return path.read_bytes()


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6)


def mutate_structure(document: object, data: st.DataObject) -> object:
    """Replace, delete or add one node somewhere in the document."""
    node = document
    while True:
        children = (list(node) if isinstance(node, dict)
                    else list(range(len(node))) if isinstance(node, list) else [])
        if not children or data.draw(st.booleans(), label="stop here"):
            break
        child = data.draw(st.sampled_from(children), label="descend")
        if not isinstance(node[child], dict | list):
            action = data.draw(st.sampled_from(["replace", "delete"]), label="leaf")
            if action == "delete":
                del node[child]
            else:
                node[child] = data.draw(values, label="value")
            return document
        node = node[child]
    if isinstance(node, dict):
        node[data.draw(st.text(max_size=8), label="new field")] = data.draw(values)
    elif isinstance(node, list):
        node.append(data.draw(values, label="new item"))
    return document


def mutate_bytes(raw: bytes, data: st.DataObject) -> bytes:
    edited = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        position = data.draw(st.integers(0, len(edited)), label="position")
        kind = data.draw(st.sampled_from(["flip", "delete", "insert", "truncate"]))
        if kind == "truncate":
            del edited[position:]
        elif kind == "insert":
            edited[position:position] = data.draw(st.binary(min_size=1, max_size=4))
        elif position < len(edited):
            if kind == "delete":
                del edited[position]
            else:
                edited[position] ^= 1 << data.draw(st.integers(0, 7))
    return bytes(edited)


def raw_entries(text: bytes) -> list:
    """The entries as the cache's own reader sees them, to check published values against:
    JSON's first, then the C safe loader's YAML, which accepts texts PyYAML's pure-Python
    loader refuses (``["a",(? "b"]``)."""
    try:
        document, _ = parse_text(text.decode("utf-8"))
    except UnicodeDecodeError:  # nothing may be published
        return []
    entries = document.get("entries") if isinstance(document, dict) else None
    return entries if isinstance(entries, list) else []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_arbitrary_mutations_never_publish_a_partial_entry(library_cache, data):
    if data.draw(st.booleans(), label="mutate bytes"):
        damaged = mutate_bytes(library_cache, data)
    else:
        document = mutate_structure(json.loads(library_cache), data)
        dump = data.draw(st.sampled_from(["json", "yaml"]), label="syntax")
        damaged = (json.dumps(document) if dump == "json"
                   else yaml.safe_dump(document)).encode()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel_tuning.yaml"
        path.write_bytes(damaged)
        registry = library_registry()
        report = load_kernel_tuning_cache(path=path, registry=registry)
    assert report.status in ("loaded", "malformed", "unsupported_version")
    published = [p for p in registry.snapshot().profiles() if p.execution is not None]
    assert len(published) == len(report.loaded)
    written = raw_entries(damaged)
    for profile in published:
        registry.snapshot().schema(profile.key).configure(profile.values)
        assert any(isinstance(raw, dict) and raw.get("values") == dict(profile.values)
                   and raw.get("key", {}).get("kernel") == profile.key.kernel for raw in written)
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    for threads in SESSION_THREADS:
        (y,) = RuntimeSession(abs_model(), threads=threads, registry=registry).run(None, {"X": x})
        np.testing.assert_array_equal(y, np.abs(x))
