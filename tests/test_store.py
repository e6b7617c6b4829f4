"""The calibration profile store in one process: keys, precedence, reasons, the file, failures."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kerneltune._support.files import file_lock
from kerneltune.cache.location import default_kernel_tuning_cache_path
from kerneltune.errors import TuningValidationError
from kerneltune.store import (
    CalibrationMeasurement,
    CalibrationProfile,
    CalibrationProfileKey,
    CalibrationProfileStore,
    default_calibration_profile_path,
)
from kerneltune.store.file import read_profiles, serialise

ROOT = Path(__file__).resolve().parent.parent
STRUCTURE = {"dtype": "float16", "shape": "m,n,4096"}
#: every character a string in the file must survive
SPECIAL = 'quote " backslash \\ newline \n tab \t return \r NUL \0 é 漢字 \U0001f680 \ud800 end'


def exact_key(**fields) -> CalibrationProfileKey:
    values = {"backend": "example_gpu", "operator_name": "MatMul", "implementation_version": "3",
              "model_digest": "d1", "processor": "gpu0", "thread_count": 8, **fields}
    return CalibrationProfileKey(**values)


KEY = exact_key()
PORTABLE = KEY.portable(STRUCTURE)


def policy(text: str):
    return lambda: text


def refuse(word: str):
    """A validator refusing every policy that contains ``word``."""
    return lambda payload: f"{word} is not supported" if word in payload else None


@pytest.fixture
def path(tmp_path) -> Path:
    return tmp_path / "calibration_profiles.json"


def full_store(path: Path) -> CalibrationProfileStore:
    """One profile of every tier for KEY and PORTABLE."""
    store = CalibrationProfileStore(path)
    assert store.store(KEY, [("median_latency", 2.5, "us")], policy("exact-cal")).status == "stored"
    assert store.store(PORTABLE, [("median_latency", 3.0, "us")],
                       policy("portable-cal")).status == "stored"
    assert store.install_override(KEY, policy("exact-ovr")).status == "installed"
    assert store.install_override(PORTABLE, policy("portable-ovr")).status == "installed"
    return store


# --- keys and measurements ---------------------------------------------------------------------


def test_a_key_is_exact_or_portable():
    assert KEY.exact and KEY.kind == "exact" and not PORTABLE.exact
    assert PORTABLE.structural_properties == (("dtype", "float16"), ("shape", "m,n,4096"))
    # two spellings of one structure are one key
    assert KEY.portable([("shape", "m,n,4096"), ("dtype", "float16")]) == PORTABLE
    assert hash(PORTABLE) == hash(KEY.portable(dict(reversed(STRUCTURE.items()))))
    assert exact_key(structural_properties=None) == exact_key(structural_properties={}) == KEY
    assert PORTABLE.to_dict() == {"backend": "example_gpu", "operator_name": "MatMul",
                                  "implementation_version": "3", "structural_properties": STRUCTURE}


@pytest.mark.parametrize("fields, named", [
    ({"structural_properties": STRUCTURE}, {"model_digest", "processor", "thread_count"}),
    ({"backend": ""}, {"backend"}),
    ({"operator_name": "  "}, {"operator_name"}),
    ({"implementation_version": 3}, {"implementation_version"}),
    ({"processor": ""}, {"processor"}),
    ({"model_digest": None}, {"model_digest"}),
    ({"thread_count": 0}, {"thread_count"}),
    ({"thread_count": -2}, {"thread_count"}),
    ({"thread_count": True}, {"thread_count"}),
    ({"thread_count": 2.0}, {"thread_count"}),
    ({"model_digest": None, "processor": None, "thread_count": None}, {"structural_properties"}),
])
def test_a_bad_key_raises_naming_its_fields(fields, named):
    with pytest.raises(TuningValidationError) as raised:
        exact_key(**fields)
    assert {problem.field for problem in raised.value.problems} == named


@pytest.mark.parametrize("properties, named", [
    ({"": "float16"}, "structural_properties[0]"),
    ({"dtype": 16}, "structural_properties.dtype"),
    ([("dtype", "a"), ("dtype", "b")], "structural_properties.dtype"),
    (["dtype"], "structural_properties[0]"),
    ("dtype=float16", "structural_properties"),
])
def test_bad_structural_properties_raise(properties, named):
    with pytest.raises(TuningValidationError) as raised:
        KEY.portable(properties)
    assert [problem.field for problem in raised.value.problems] == [named]


@pytest.mark.parametrize("measurements, named", [
    ([("latency", math.nan, "us")], "measurements[0].value"),
    ([("latency", math.inf, "us")], "measurements[0].value"),
    ([("latency", 10**400, "us")], "measurements[0].value"),
    ([("latency", True, "us")], "measurements[0].value"),
    ([("latency", "2.5", "us")], "measurements[0].value"),
    ([("latency", 2.5, None)], "measurements[0].unit"),
    ([("latency", 2.5, 1)], "measurements[0].unit"),
    ([("", 2.5, "us")], "measurements[0].name"),
    ([("latency", 2.5)], "measurements[0]"),
    ([("latency", 1.0, "us"), ("latency", 2.0, "us")], "measurements[1].name"),
    ("latency", "measurements"),
])
def test_bad_measurements_raise_and_store_nothing(path, measurements, named):
    store = CalibrationProfileStore(path)
    with pytest.raises(TuningValidationError) as raised:
        store.store(KEY, measurements, policy("p"))
    assert [problem.field for problem in raised.value.problems] == [named]
    assert store.profiles() == () and not path.exists()


def test_measurements_are_floats_and_accept_values_and_lists(path):
    store = CalibrationProfileStore(path)
    store.store(KEY, [CalibrationMeasurement("latency", 3, "us"), ["speedup", 1.5, ""]],
                policy("p"))
    measurements = store.profiles()[0].measurements
    assert measurements == (CalibrationMeasurement("latency", 3.0, "us"),
                            CalibrationMeasurement("speedup", 1.5, ""))
    assert type(measurements[0].value) is float


def test_bad_store_arguments_raise(path):
    store = CalibrationProfileStore(path)
    with pytest.raises(TuningValidationError, match="key: expected a CalibrationProfileKey"):
        store.store({"backend": "x"}, [], policy("p"))
    with pytest.raises(TuningValidationError, match="serialize: returned bytes"):
        store.store(KEY, [], lambda: b"p")
    with pytest.raises(TuningValidationError, match="validate: returned bool"):
        store.store(KEY, [], policy("p"), lambda payload: True)
    with pytest.raises(TuningValidationError, match="backend: empty"):
        store.invalidate("")
    assert store.profiles() == () and not path.exists()


# --- storing -----------------------------------------------------------------------------------


def test_round_trip_across_instances(path):
    store = full_store(path)
    again = CalibrationProfileStore(path)
    assert again.load_report.status == "loaded" and again.load_report.profiles == 4
    assert again.profiles() == store.profiles()
    assert [(p.source, p.key) for p in again.profiles()] == [
        ("calibrated", KEY), ("calibrated", PORTABLE), ("override", KEY), ("override", PORTABLE)]
    assert again.lookup(KEY, STRUCTURE) == store.lookup(KEY, STRUCTURE)


def test_serialize_is_called_once(path):
    calls = []

    def serialize():
        calls.append(1)
        return "p"

    CalibrationProfileStore(path).store(KEY, [], serialize)
    assert calls == [1]


def test_storing_a_key_again_replaces_it_in_place(path):
    store = full_store(path)
    report = store.store(KEY, [("median_latency", 2.0, "us")], policy("exact-cal-2"))
    assert report.status == "stored" and report.written
    assert [p.policy for p in report.removed] == ["exact-cal"]
    assert [p.policy for p in CalibrationProfileStore(path).profiles()] == [
        "exact-cal-2", "portable-cal", "exact-ovr", "portable-ovr"]


def test_each_mutation_merges_with_what_another_instance_wrote(path):
    first, second = CalibrationProfileStore(path), CalibrationProfileStore(path)
    first.store(KEY, [], policy("from first"))
    second.store(PORTABLE, [], policy("from second"))
    assert [p.policy for p in second.profiles()] == ["from first", "from second"]
    assert [p.policy for p in first.profiles()] == ["from first"]  # until it re-reads
    assert first.reload().profiles == 2
    assert first.profiles() == second.profiles()


def test_an_empty_policy_stores_nothing(path):
    store = CalibrationProfileStore(path)
    report = store.store(KEY, [], policy(""))
    assert report.status == "empty_policy" and not report.written
    assert "empty policy" in str(report.problems[0])
    assert store.install_override(KEY, policy("")).status == "empty_policy"
    assert store.profiles() == () and not path.exists()


@pytest.mark.parametrize("validate, message", [
    (refuse("tile"), "tile is not supported"),
    (lambda payload: json.loads(payload), "Expecting value"),  # a ValueError refuses too
    (lambda payload: "", "refused by the backend's validator"),
])
def test_a_refused_policy_stores_nothing(path, validate, message):
    store = full_store(path)
    before = path.read_bytes()
    report = store.store(KEY, [], policy("tile 96"), validate)
    assert report.status == "policy_rejected" and message in report.problems[0].message
    assert store.install_override(KEY, policy("tile 96"), validate).status == "policy_rejected"
    assert path.read_bytes() == before
    assert store.lookup(KEY).selected.policy == "exact-ovr"


def test_clear_override(path):
    store = full_store(path)
    report = store.clear_override(KEY)
    assert report.status == "cleared" and [p.policy for p in report.removed] == ["exact-ovr"]
    assert store.clear_override(KEY).status == "unchanged"
    assert CalibrationProfileStore(path).lookup(KEY).selected.policy == "exact-cal"


def test_invalidate_by_backend_and_by_version(path):
    store = full_store(path)
    other_version = exact_key(implementation_version="2")
    other_backend = exact_key(backend="other_npu")
    store.store(other_version, [], policy("v2"))
    store.store(other_backend, [], policy("npu"))
    report = store.invalidate("example_gpu", "2")
    assert report.status == "invalidated" and [p.policy for p in report.removed] == ["v2"]
    assert len(store.profiles()) == 5
    report = store.invalidate("example_gpu")
    assert report.status == "invalidated" and len(report.removed) == 4
    assert [p.policy for p in CalibrationProfileStore(path).profiles()] == ["npu"]
    assert store.invalidate("example_gpu").status == "unchanged"
    assert store.invalidate("example_gpu", "9").status == "unchanged"


# --- lookup ------------------------------------------------------------------------------------


def test_precedence_of_the_four_sources(path):
    store = full_store(path)
    assert store.lookup(KEY, STRUCTURE).selected.policy == "exact-ovr"
    store.clear_override(KEY)
    assert store.lookup(KEY, STRUCTURE).selected.policy == "portable-ovr"
    store.clear_override(PORTABLE)
    assert store.lookup(KEY, STRUCTURE).selected.policy == "exact-cal"
    store.invalidate("example_gpu")
    assert store.lookup(KEY, STRUCTURE).selected is None


def test_force_portable_skips_both_exact_sources(path):
    store = full_store(path)
    found = store.lookup(KEY, STRUCTURE, force_portable=True)
    assert found.selected.policy == "portable-ovr"
    reasons = {(r.profile.tier, r.reason) for r in found.rejected}
    assert reasons == {("exact override", "force_portable"), ("exact calibrated", "force_portable"),
                       ("portable calibrated", "lower_precedence")}
    store.clear_override(PORTABLE)
    assert store.lookup(KEY, STRUCTURE, force_portable=True).selected.policy == "portable-cal"
    assert store.lookup(KEY, force_portable=True).selected is None


def test_without_structure_only_exact_profiles_apply(path):
    found = full_store(path).lookup(KEY)
    assert found.selected.policy == "exact-ovr"
    assert {r.reason for r in found.rejected if not r.profile.key.exact} == {"structure"}
    assert "gave no structural properties" in found.rejected[0].message


def test_a_policy_the_lookup_refuses_falls_to_the_next_source(path):
    store = full_store(path)
    found = store.lookup(KEY, STRUCTURE, validate=refuse("ovr"))
    assert found.selected.policy == "exact-cal"
    assert [(r.profile.tier, r.reason) for r in found.refused] == [
        ("exact override", "policy_rejected"), ("portable override", "policy_rejected")]
    assert [(r.profile.tier, r.reason) for r in found.rejected] == [
        ("exact override", "policy_rejected"), ("portable override", "policy_rejected"),
        ("portable calibrated", "lower_precedence")]
    assert "ovr is not supported" in found.rejected[0].message
    nothing = store.lookup(KEY, STRUCTURE, validate=refuse("-"))
    assert nothing.selected is None and len(nothing.refused) == len(nothing.rejected) == 4


@pytest.mark.parametrize("stored, reason, words", [
    (exact_key(backend="other_npu"), "backend", "backend 'other_npu'"),
    (exact_key(operator_name="Conv"), "operator", "operator 'Conv'"),
    (exact_key(implementation_version="2"), "implementation_version", "'2'; the lookup is for '3'"),
    (exact_key(model_digest="d2"), "model", "model digest 'd2'"),
    (exact_key(processor="gpu1"), "processor", "processor 'gpu1'"),
    (exact_key(thread_count=4), "thread_count", "thread count 4; the lookup's is 8"),
    (KEY.portable({"dtype": "float32", "shape": "m,n,4096"}), "structure", "dtype='float32'"),
    (exact_key(implementation_version="2").portable(STRUCTURE), "implementation_version", "'2'"),
])
def test_every_other_profile_is_rejected_with_its_reason(path, stored, reason, words):
    store = CalibrationProfileStore(path)
    store.store(stored, [], policy("other"))
    store.store(KEY, [], policy("mine"))
    found = store.lookup(KEY, STRUCTURE)
    assert found.selected.policy == "mine"
    [rejection] = found.rejected
    assert rejection.profile.key == stored and rejection.reason == reason
    assert words in rejection.message
    assert found.to_dict()["rejected"][0]["reason"] == reason


def test_rejections_follow_precedence_then_file_order(path):
    store = CalibrationProfileStore(path)
    for n in range(3):
        store.store(exact_key(thread_count=n + 1), [], policy(f"cal{n}"))
        store.install_override(exact_key(thread_count=n + 1), policy(f"ovr{n}"))
    found = store.lookup(exact_key(thread_count=99))
    assert found.selected is None
    assert [r.profile.policy for r in found.rejected] == [
        "ovr0", "ovr1", "ovr2", "cal0", "cal1", "cal2"]
    assert found.rejected is found.rejected  # worked out once


@pytest.mark.parametrize("arguments, field, message", [
    ({}, "exact_key", "missing"),
    ({"exact_key": PORTABLE}, "exact_key", "a portable key"),
    ({"exact_key": "example_gpu"}, "exact_key", "got str"),
    ({"exact_key": KEY, "structural_properties": {}}, "structural_properties", "empty"),
    ({"exact_key": KEY, "structural_properties": {"dtype": 1}}, "structural_properties.dtype",
     "expected a string"),
])
def test_bad_lookup_arguments_raise(path, arguments, field, message):
    with pytest.raises(TuningValidationError) as raised:
        CalibrationProfileStore(path).lookup(**arguments)
    [problem] = raised.value.problems
    assert problem.field == field and message in problem.message


# --- the file ----------------------------------------------------------------------------------


def test_the_file_is_versioned_and_one_profile_a_line(path):
    full_store(path)
    text = path.read_text(encoding="ascii")
    lines = text.splitlines()
    assert lines[0] == '{"format": "kerneltune-calibration-profiles", "schema_version": 1,'
    assert len(lines) == 3 + 4 and lines[-1] == " ]}"
    assert json.loads(lines[2].rstrip(","))["key"]["backend"] == "example_gpu"


def test_an_empty_store_file_reads_back():
    assert json.loads(serialise(())) == {"format": "kerneltune-calibration-profiles",
                                         "schema_version": 1, "profiles": []}


def test_strings_with_every_special_character_survive(path):
    key = exact_key(backend=SPECIAL, operator_name=SPECIAL, implementation_version=SPECIAL,
                    model_digest=SPECIAL, processor=SPECIAL)
    portable = key.portable({SPECIAL: SPECIAL, "shape": ""})
    store = CalibrationProfileStore(path)
    store.store(key, [(SPECIAL, 0.1 + 0.2, SPECIAL), ("tiny", 5e-324, "")], policy(SPECIAL))
    store.install_override(portable, policy(SPECIAL * 3))
    path.read_text(encoding="ascii")  # escaped: no encoding can spoil it
    again = CalibrationProfileStore(path)
    assert again.profiles() == store.profiles()
    assert again.lookup(key, {SPECIAL: SPECIAL, "shape": ""}).selected.policy == SPECIAL * 3
    assert again.profiles()[0].measurements[0].value == 0.30000000000000004


finite = st.floats(allow_nan=False, allow_infinity=False)
names = st.text(min_size=1).filter(str.strip)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(backend=names, processor=names, policy_text=st.text(min_size=1),
       unit=st.text(), value=finite, properties=st.dictionaries(names, st.text(), min_size=1))
def test_any_string_and_finite_number_round_trip(tmp_path, backend, processor, policy_text, unit,
                                                 value, properties):
    key = exact_key(backend=backend, processor=processor)
    profiles = (CalibrationProfile(key, policy_text, ((backend, value, unit),)),
                CalibrationProfile(key.portable(properties), policy_text, source="override"))
    target = tmp_path / "round_trip.json"
    target.write_text(serialise(profiles), encoding="ascii")
    status, read, problems = read_profiles(target)
    assert (status, problems) == ("ok", ())
    assert read == profiles
    assert math.copysign(1, read[0].measurements[0].value) == math.copysign(1, value)


@pytest.mark.parametrize("damage, status", [
    (b"", "malformed"),
    (b"{\"format\": \"kerneltune-calibration-profiles\", \"schema_version\": 1,", "malformed"),
    (b"\xff\xfe garbage", "malformed"),
    (b"[1, 2, 3]", "malformed"),
    (b'{"format": "kerneltune-kernel-tuning-cache", "schema_version": 1, "profiles": []}',
     "malformed"),
    (b'{"format": "kerneltune-calibration-profiles", "schema_version": 2, "profiles": []}',
     "unsupported_version"),
])
def test_a_corrupt_or_newer_file_is_reported_never_adopted_never_overwritten(path, damage, status):
    store = full_store(path)
    before = store.profiles()
    path.write_bytes(damage)
    assert store.reload().status == status
    assert store.profiles() == before
    fresh = CalibrationProfileStore(path)
    assert fresh.load_report.status == status and fresh.profiles() == ()
    for mutation in (lambda s: s.store(KEY, [], policy("new")),
                     lambda s: s.install_override(PORTABLE, policy("new")),
                     lambda s: s.clear_override(KEY),
                     lambda s: s.invalidate("example_gpu")):
        for instance in (store, fresh):
            report = mutation(instance)
            assert report.status == status and not report.written and report.problems
    assert path.read_bytes() == damage
    assert store.profiles() == before and fresh.profiles() == ()


def entry_with(**changes) -> dict:
    entry = {"source": "calibrated", "key": KEY.to_dict(),
             "measurements": [{"name": "latency", "value": 2.5, "unit": "us"}], "policy": "p"}
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        target = entry
        for parent in parents:
            target = target[parent]
        if value is None:
            del target[last]
        else:
            target[last] = value
    return entry


@pytest.mark.parametrize("entry, field", [
    (entry_with(key__thread_count=0), "key.thread_count"),
    (entry_with(key__structural_properties={"dtype": "float16"}), "key.model_digest"),
    (entry_with(key__backend=None), "key.backend"),
    (entry_with(key__colour="red"), "key.colour"),
    (entry_with(measurements=[{"name": "latency", "value": "NaN", "unit": "us"}]),
     "measurements[0].value"),
    (entry_with(measurements=[{"name": "latency", "unit": "us"}]), "measurements[0].value"),
    (entry_with(measurements={"latency": 1}), "measurements"),
    (entry_with(policy=""), "policy"),
    (entry_with(policy=None), "policy"),
    (entry_with(source="measured"), "source"),
    (entry_with(extra=1), "extra"),
    ("a profile", ""),
])
def test_a_bad_profile_makes_the_file_malformed(path, entry, field):
    text = json.dumps({"format": "kerneltune-calibration-profiles", "schema_version": 1,
                       "profiles": [entry_with(), entry]}).replace('"NaN"', "NaN")
    path.write_text(text, encoding="utf-8")
    store = CalibrationProfileStore(path)
    assert store.load_report.status == "malformed" and store.profiles() == ()
    assert field in {problem.field for problem in store.load_report.problems}
    assert {problem.entry for problem in store.load_report.problems} == {"profile 1"}
    assert all(problem.file == str(path) for problem in store.load_report.problems)
    assert store.store(PORTABLE, [], policy("p")).status == "malformed"
    assert path.read_text(encoding="utf-8") == text


def test_two_profiles_in_one_slot_make_the_file_malformed(path):
    path.write_text(json.dumps({"format": "kerneltune-calibration-profiles", "schema_version": 1,
                                "profiles": [entry_with(), entry_with(policy="q")]}),
                    encoding="utf-8")
    report = CalibrationProfileStore(path).load_report
    assert report.status == "malformed"
    assert "profile 0 has the same key and source" in str(report.problems[0])


def test_a_hand_written_yaml_file_loads(path):
    path.write_text("format: kerneltune-calibration-profiles\nschema_version: 1\nprofiles:\n"
                    "- source: override\n  key: {backend: example_gpu, operator_name: MatMul,\n"
                    "        implementation_version: '3', structural_properties: {dtype: float16,"
                    " shape: 'm,n,4096'}}\n  measurements: []\n  policy: by hand\n",
                    encoding="utf-8")
    store = CalibrationProfileStore(path)
    assert store.load_report.status == "loaded"
    assert store.lookup(KEY, STRUCTURE).selected.policy == "by hand"


def test_a_stray_temporary_file_is_ignored_then_cleaned(path):
    full_store(path)
    stray = path.with_name(path.name + ".0123456789abcdef.tmp")
    stray.write_text('{"format": "kerneltune-calibration-profiles", "schema_version": 1, "prof',
                     encoding="utf-8")
    store = CalibrationProfileStore(path)
    assert store.load_report.status == "loaded" and len(store.profiles()) == 4
    report = store.store(exact_key(thread_count=2), [], policy("p"))
    assert report.status == "stored" and report.removed_temporaries == 1
    assert not stray.exists()
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".lock"]


def test_persistence_disabled_writes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "calibration_profiles.json"
    store = CalibrationProfileStore(path, persistence_enabled=False)
    assert store.path is None and not store.persistence_enabled
    assert store.load_report.status == "disabled"
    report = store.store(KEY, [("median_latency", 2.5, "us")], policy("exact-cal"))
    assert (report.status, report.path, report.written) == ("stored", None, False)
    assert store.install_override(PORTABLE, policy("portable-ovr")).status == "installed"
    assert store.lookup(KEY, STRUCTURE).selected.policy == "portable-ovr"
    assert store.clear_override(PORTABLE).status == "cleared"
    assert store.reload().status == "disabled" and store.reload().profiles == 1
    assert store.invalidate("example_gpu").status == "invalidated"
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("KERNELTUNE_CALIBRATION_PROFILES", "OFF")
    assert default_calibration_profile_path() is None
    assert CalibrationProfileStore().path is None
    assert CalibrationProfileStore(path).path == path  # an explicit path wins


def test_the_default_path_is_beside_the_kernel_tuning_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELTUNE_CACHE", raising=False)
    monkeypatch.delenv("KERNELTUNE_CALIBRATION_PROFILES", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    default = default_calibration_profile_path()
    assert default == default_kernel_tuning_cache_path().with_name("calibration_profiles.json")
    assert default.parent == tmp_path / "cache" / "kerneltune"
    CalibrationProfileStore().store(KEY, [], policy("p"))
    assert default.is_file()
    monkeypatch.setenv("KERNELTUNE_CALIBRATION_PROFILES", str(tmp_path / "elsewhere.json"))
    assert CalibrationProfileStore().path == tmp_path / "elsewhere.json"


def test_lock_timeout_leaves_everything(path):
    store = full_store(path)
    before = path.read_bytes()
    with file_lock(path, 5):
        report = CalibrationProfileStore(path, lock_timeout=0.05).store(KEY, [], policy("new"))
    assert report.status == "lock_timeout" and "held the lock" in str(report.problems[0])
    assert path.read_bytes() == before and store.lookup(KEY).selected.policy == "exact-ovr"


def test_an_unwritable_place_is_reported(tmp_path):
    (tmp_path / "a_file").write_text("not a directory", encoding="utf-8")
    store = CalibrationProfileStore(tmp_path / "a_file" / "calibration_profiles.json")
    assert store.load_report.status in ("not_found", "unreadable")
    report = store.store(KEY, [], policy("p"))
    assert report.status == "write_failed" and store.profiles() == ()


def test_reports_are_plain_data(path):
    store = full_store(path)
    data = json.loads(json.dumps(store.store(KEY, [("l", 1.0, "us")], policy("p")).to_dict()))
    assert data["status"] == "stored" and data["stored"]["key"]["thread_count"] == 8
    assert data["removed"][0]["policy"] == "exact-cal"
    assert json.loads(json.dumps(store.reload().to_dict()))["profiles"] == 4
    assert json.loads(json.dumps(store.lookup(KEY).to_dict()))["tier"] == "exact override"


# --- the example -------------------------------------------------------------------------------


def test_the_example_backend_runs(tmp_path):
    target = tmp_path / "profiles.json"
    script = ROOT / "examples" / "calibration_profile_backend.py"
    done = subprocess.run([sys.executable, str(script), str(target)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("calibrated: exact stored, portable stored, tile 96: "
                               "policy_rejected")
    assert "next run: loaded, 2 profiles" in lines
    assert any(line.startswith("this machine: exact calibrated, tiles 128x64") for line in lines)
    assert any(line.startswith("4 threads: portable calibrated") for line in lines)
    assert "    not exact calibrated: thread_count: thread count 8; the lookup's is 4" in lines
    assert any(line.startswith("this machine: portable override, tiles 32x32") for line in lines)
    assert any(line.startswith("forced portable: portable calibrated") for line in lines)
    assert "implementation 4: no profile" in lines
    assert lines[-1] == "invalidated implementation 3: invalidated, 2 removed, 0 left"
    assert read_profiles(target)[:2] == ("ok", ())
