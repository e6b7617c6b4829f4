"""Selector files: the shipped families, reading, writing, and every kind of bad input."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

import kerneltune
from conftest import FIXTURES, detect
from kerneltune.errors import ProfileError, TuningValidationError
from kerneltune.machine.selector_files import (
    NamedSelector,
    read_selector,
    shipped_selectors,
    write_selector,
)
from kerneltune.machine.selectors import CpuSelector

#: each processor fixture's family selector
FAMILY_OF_FIXTURE = {
    "intel_haswell_e5_2680v3": "haswell",
    "intel_skylake_sp_gold_6148": "skylake_sp",
    "intel_icelake_sp_8370c": "icelake_sp",
    "intel_sapphire_rapids_8480": "sapphire_rapids",
    "amd_zen2_epyc_7742": "zen2",
    "amd_zen3_epyc_7763": "zen3",
    "amd_zen4_epyc_9654": "zen4",
    # Genoa by CPUID (family 25 model 17) though archspec names only x86_64_v4: the reason the
    # family selectors list models instead of naming microarchitectures.
    "amd_epyc_vm_masked": "zen4",
    "arm_graviton2_neoverse_n1": "neoverse_n1",
    "arm_graviton3_neoverse_v1": "neoverse_v1",
}
#: families shipped without a fixture processor
FAMILIES_WITHOUT_FIXTURE = {"zen5", "emerald_rapids"}
#: the fixtures each instruction-set selector matches, as their processors' flags say
INSTRUCTION_SET_MATCHES = {
    "x86_64_avx2_fma": {name for name in FAMILY_OF_FIXTURE if not name.startswith("arm_")},
    "x86_64_avx512f": {"intel_skylake_sp_gold_6148", "intel_icelake_sp_8370c",
                       "intel_sapphire_rapids_8480", "amd_zen4_epyc_9654", "amd_epyc_vm_masked"},
    "aarch64_sve": {"arm_graviton3_neoverse_v1"},
}
FAMILIES = set(FAMILY_OF_FIXTURE.values()) | FAMILIES_WITHOUT_FIXTURE

SHIPPED = {named.name: named for named in shipped_selectors()}

GOOD = """\
format: kerneltune-selector
schema_version: 1
name: lab_zen4
description: the lab's Genoa machines
selector: {vendor: amd, family: 25, models: [17]}
"""


def test_the_shipped_set_is_the_families_and_instruction_sets():
    assert set(SHIPPED) == FAMILIES | set(INSTRUCTION_SET_MATCHES)
    assert list(SHIPPED) == sorted(SHIPPED)


def test_the_package_carries_the_source_trees_selector_files():
    installed = Path(kerneltune.__file__).parent / "data" / "selectors"
    for named in SHIPPED.values():
        assert Path(named.path) == installed / f"{named.name}.yaml"
    source = sorted((Path(__file__).parents[1] / "selectors").glob("*.yaml"))
    assert [path.stem for path in source] == list(SHIPPED)
    assert all((installed / path.name).read_bytes() == path.read_bytes() for path in source)


@pytest.mark.parametrize("name", sorted(FAMILIES | set(INSTRUCTION_SET_MATCHES)))
def test_each_shipped_file_is_canonical_and_round_trips(name, tmp_path):
    named = read_selector(name)
    assert named == SHIPPED[name] and read_selector(named.path) == named
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    write_selector(named, first)
    write_selector(read_selector(first), second)
    assert read_selector(first) == named and first.read_bytes() == second.read_bytes()
    # the shipped bytes are the writer's: canonical spellings, sorted lists, no hand layout
    assert first.read_bytes() == Path(named.path).read_bytes()


@pytest.mark.parametrize("fixture", FIXTURES)
def test_each_fixture_matches_its_family_only(fixture):
    processor = detect(fixture)
    matched = {name for name, named in SHIPPED.items() if named.selector.matches(processor)}
    assert matched & FAMILIES == {FAMILY_OF_FIXTURE[fixture]}
    assert matched - FAMILIES == {name for name, fixtures in INSTRUCTION_SET_MATCHES.items()
                                  if fixture in fixtures}


def test_every_fixture_has_a_family():
    assert set(FIXTURES) == set(FAMILY_OF_FIXTURE)


@pytest.mark.parametrize(("fixture", "changes", "family"), [
    # a cloud Sapphire Rapids whose hypervisor hides waitpkg: archspec says icelake
    ("intel_sapphire_rapids_8480", {"microarchitecture": "icelake"}, "sapphire_rapids"),
    # Emerald Rapids, which archspec names icelake too where waitpkg is hidden
    ("intel_sapphire_rapids_8480", {"model": 207, "microarchitecture": "icelake"},
     "emerald_rapids"),
    # Cascade Lake shares Skylake-SP's model and differs in stepping only
    ("intel_skylake_sp_gold_6148", {"stepping": 7, "microarchitecture": "cascadelake"},
     "skylake_sp"),
    # EPYC 9005 Turin and Turin dense
    ("amd_zen4_epyc_9654", {"family": 26, "model": 2, "microarchitecture": "zen5"}, "zen5"),
    ("amd_zen4_epyc_9654", {"family": 26, "model": 17, "microarchitecture": "zen5"}, "zen5"),
    # Bergamo
    ("amd_zen4_epyc_9654", {"model": 160}, "zen4"),
    # Ryzen 3000 Matisse
    ("amd_zen2_epyc_7742", {"model": 113}, "zen2"),
])
def test_processors_without_a_fixture_match_their_family(fixture, changes, family):
    processor = dataclasses.replace(detect(fixture), **changes)
    assert {name for name in FAMILIES if SHIPPED[name].selector.matches(processor)} == {family}


def test_the_family_selectors_never_overlap():
    for a, b in itertools.combinations(sorted(FAMILIES), 2):
        assert not SHIPPED[a].selector.can_overlap(SHIPPED[b].selector), (a, b)


def test_the_instruction_set_selectors_are_broad():
    # every AVX-512F processor has AVX2 and FMA: profiles for both need different priorities
    avx2, avx512 = SHIPPED["x86_64_avx2_fma"].selector, SHIPPED["x86_64_avx512f"].selector
    assert avx2.can_overlap(avx512)
    assert all(SHIPPED[name].selector.tier < SHIPPED["zen4"].selector.tier
               for name in INSTRUCTION_SET_MATCHES)


def test_a_file_round_trips_with_its_path(tmp_path):
    source = tmp_path / "lab.yaml"
    source.write_text(GOOD, encoding="utf-8")
    named = read_selector(source)
    assert named == NamedSelector("lab_zen4", "the lab's Genoa machines",
                                  CpuSelector(vendor="amd", family=25, models=[17]))
    assert named.path == str(source)
    assert named.to_dict() == {"name": "lab_zen4", "description": "the lab's Genoa machines",
                               "selector": {"vendor": "amd", "family": 25, "models": [17]},
                               "path": str(source)}
    assert read_selector(str(source)) == named


def test_a_relative_file_name_is_a_path_not_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "zen4.yaml").write_text(GOOD, encoding="utf-8")
    assert read_selector("zen4.yaml").name == "lab_zen4"
    assert read_selector("zen4").name == "zen4"


def test_the_public_names():
    assert kerneltune.read_selector is read_selector
    assert kerneltune.shipped_selectors is shipped_selectors
    assert kerneltune.NamedSelector is NamedSelector and kerneltune.ProfileError is ProfileError
    assert issubclass(ProfileError, TuningValidationError)


def test_an_unknown_shipped_name_lists_the_known_ones():
    with pytest.raises(ProfileError) as error:
        read_selector("zen9")
    (problem,) = error.value.problems
    assert problem.field == "name" and "'zen9'" in problem.message
    assert all(name in problem.message for name in SHIPPED)


def _header(**fields):
    lines = {"format": "kerneltune-selector", "schema_version": "1", "name": "lab",
             "description": "a test selector", "selector": "{vendor: amd}", **fields}
    return "".join(f"{key}: {value}\n" for key, value in lines.items() if value is not None)


@pytest.mark.parametrize(("text", "field", "message"), [
    (_header(description=None), "description", "missing"),
    (_header(format="kerneltune-profile"), "format", "expected 'kerneltune-selector'"),
    (_header(schema_version="2"), "schema_version", "version 2"),
    (_header(name="!!python/object/apply:os.system [echo]"), "", "python/object"),
    ("- vendor: amd\n", "", "expected a mapping"),
    (_header(name="5"), "name", "expected a string, got int"),
    (_header(selector="{vendor: amd, colour: red}"), "selector.colour", "unknown selector field"),
    (_header(selector="{vendor: amd, models: [17]}"), "selector.models", "vendor and a family"),
    (_header(selector="{vendor: 5}"), "selector.vendor", "expected a string, got int"),
    (_header(selector="{}"), "selector", "empty selector"),
    (_header(selector="[amd]"), "selector", "expected a mapping, got list"),
    (_header(name="Zen 4"), "name", "file stem"),
    (_header(description="''"), "description", "one non-empty line"),
    (_header(extra="1"), "extra", "unknown field"),
    ("", "", "empty"),
])
def test_each_bad_input_names_the_file_and_the_field(tmp_path, text, field, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ProfileError) as error:
        read_selector(path)
    assert any(p.file == str(path) and p.field == field and message in p.message
               for p in error.value.problems), str(error.value)
    assert str(path) in str(error.value)


def test_every_problem_of_a_file_is_listed(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(_header(name="Bad Name", selector="{vendor: z80, required_features: [nope]}"),
                    encoding="utf-8")
    with pytest.raises(ProfileError) as error:
        read_selector(path)
    assert {p.field for p in error.value.problems} == {
        "name", "selector.vendor", "selector.required_features"}


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ProfileError, match="no such selector file") as error:
        read_selector(tmp_path / "absent.yaml")
    assert error.value.problems[0].file == str(tmp_path / "absent.yaml")


@pytest.mark.parametrize(("fields", "field"), [
    ({"name": "a/b"}, "name"), ({"description": "two\nlines"}, "description"),
    ({"selector": {"vendor": "amd"}}, "selector"),
])
def test_a_named_selector_is_checked_when_built(fields, field):
    values = {"name": "lab", "description": "one line", "selector": CpuSelector(vendor="amd"),
              **fields}
    with pytest.raises(ProfileError) as error:
        NamedSelector(**values)
    assert [p.field for p in error.value.problems] == [field]
