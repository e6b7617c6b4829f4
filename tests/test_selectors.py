"""Processor selectors: canonical form, validation, matching, tiers and overlap."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import execution, processor
from kerneltune.errors import TuningValidationError
from kerneltune.machine.selectors import CpuSelector, Tier, overlapping_pairs


def test_spellings_are_canonicalised():
    selector = CpuSelector(architecture="AMD64", vendor="AuthenticAMD", family=25, models=[17],
                           microarchitecture="Zen 4", required_features=["AVX2", "SSE4.1"])
    assert selector == CpuSelector(architecture="x86_64", vendor="amd", family=25, models=(17,),
                                   microarchitecture="zen4",
                                   required_features=frozenset({"avx2", "sse4_1"}))
    assert CpuSelector(vendor="0x41").vendor == "arm"
    assert CpuSelector(architecture="arm64").architecture == "aarch64"
    assert CpuSelector(microarchitecture="Neoverse-V1").microarchitecture == "neoverse_v1"


def test_file_form_round_trips_and_lists_only_set_fields():
    selector = CpuSelector(vendor="intel", family=6, models=[143, 106], minimum_threads=2)
    data = selector.to_dict()
    assert data == {"vendor": "intel", "family": 6, "models": [106, 143], "minimum_threads": 2}
    assert CpuSelector.from_dict(data) == selector


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({}, "", "empty selector"),
        ({"required_features": ["avx512"]}, "required_features", "unknown feature"),
        ({"required_features": ["avx2"], "excluded_features": ["AVX2"]}, "excluded_features",
         "both required and excluded"),
        ({"minimum_threads": 0}, "minimum_threads", ">= 1"),
        ({"minimum_threads": 8, "maximum_threads": 4}, "maximum_threads", "below"),
        ({"vendor": "amd", "family": 25, "models": [17, 17]}, "models", "duplicate"),
        ({"models": [17]}, "models", "vendor and a family"),
        ({"family": 6}, "family", "needs a vendor"),
        ({"family": True, "vendor": "intel"}, "family", "integer"),
        ({"vendor": "Cyrix-ish"}, "vendor", "unknown vendor"),
        ({"architecture": "z80"}, "architecture", "unknown architecture"),
        ({"microarchitecture": "zen99"}, "microarchitecture", "unknown microarchitecture"),
        ({"microarchitecture": "zen4", "vendor": "intel"}, "microarchitecture", "made by amd"),
        ({"microarchitecture": "zen4", "architecture": "aarch64"}, "microarchitecture",
         "x86_64"),
        ({"microarchitecture": "zen4", "excluded_features": ["avx2"]}, "excluded_features",
         "always has"),
        ({"required_features": "avx2"}, "required_features", "list"),
        ({"vendor": "amd", "family": 25, "models": ["17"]}, "models", "not model numbers"),
    ],
)
def test_each_validation_error(fields, field, message):
    with pytest.raises(TuningValidationError) as error:
        CpuSelector(**fields)
    assert any(p.field == field and message in p.message for p in error.value.problems), str(
        error.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(TuningValidationError) as error:
        CpuSelector(required_features=["avx2", "nope"], excluded_features=["avx2"],
                    minimum_threads=4, maximum_threads=2)
    assert len(error.value.problems) == 3


def test_unknown_file_field_is_named():
    with pytest.raises(TuningValidationError, match="colour: unknown selector field"):
        CpuSelector.from_dict({"vendor": "amd", "colour": "red"})


@pytest.mark.parametrize(
    ("fields", "tier"),
    [
        ({"vendor": "amd", "family": 25, "models": [17]}, Tier.EXACT_PROCESSOR),
        ({"vendor": "amd", "family": 25, "models": [17, 97]}, Tier.PROCESSOR_GROUP),
        ({"microarchitecture": "zen4"}, Tier.PROCESSOR_GROUP),
        ({"vendor": "amd", "family": 25}, Tier.PROCESSOR_GROUP),
        ({"required_features": ["avx512f"]}, Tier.INSTRUCTION_SET),
        ({"architecture": "x86_64", "excluded_features": ["avx512f"]}, Tier.INSTRUCTION_SET),
        ({"architecture": "x86_64"}, Tier.PORTABLE),
        ({"maximum_threads": 1}, Tier.PORTABLE),
    ],
)
def test_tiers(fields, tier):
    assert CpuSelector(**fields).tier is tier


def test_rank_orders_inside_a_tier():
    assert CpuSelector(microarchitecture="zen4").rank > CpuSelector(microarchitecture="zen").rank
    two = CpuSelector(vendor="amd", family=25, models=[1, 17])
    three = CpuSelector(vendor="amd", family=25, models=[1, 17, 97])
    assert two.rank > three.rank


def test_matching_each_field():
    run = execution(threads=4)
    assert CpuSelector(vendor="amd", family=25, models=[1, 17], microarchitecture="zen4",
                       required_features=["avx512f"], excluded_features=["amx_tile"],
                       minimum_threads=2, maximum_threads=8).matches(run)
    cases = {
        "architecture": CpuSelector(architecture="aarch64"),
        "vendor": CpuSelector(vendor="intel"),
        "family": CpuSelector(vendor="amd", family=23),
        "models": CpuSelector(vendor="amd", family=25, models=[1]),
        "microarchitecture": CpuSelector(microarchitecture="zen3"),
        "required_features": CpuSelector(required_features=["amx_tile"]),
        "excluded_features": CpuSelector(excluded_features=["avx512f"]),
        "threads": CpuSelector(maximum_threads=2),
    }
    for field, selector in cases.items():
        assert selector.mismatches(run) == (field,)
        assert not selector.matches(run)


def test_microarchitecture_matches_by_name_not_by_descent():
    # A profile measured on zen4 says nothing about zen5, and a VM that only
    # reports x86_64_v4 is not a zen4.
    assert not CpuSelector(microarchitecture="zen4").matches(
        execution(microarchitecture="zen5"))
    assert not CpuSelector(microarchitecture="zen4").matches(
        execution(microarchitecture="x86_64_v4"))


def test_bare_processor_ignores_thread_bounds():
    assert CpuSelector(vendor="amd", maximum_threads=1).matches(processor())


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({"vendor": "amd"}, {"vendor": "intel"}),
        ({"architecture": "aarch64"}, {"microarchitecture": "zen4"}),
        ({"microarchitecture": "zen4"}, {"vendor": "intel"}),
        ({"microarchitecture": "zen4"}, {"microarchitecture": "zen3"}),
        ({"microarchitecture": "zen4"}, {"excluded_features": ["avx512f"]}),
        ({"vendor": "amd", "family": 25, "models": [1]}, {"vendor": "amd", "family": 25,
                                                          "models": [17]}),
        ({"vendor": "amd", "family": 25}, {"vendor": "amd", "family": 23}),
        ({"required_features": ["avx2"]}, {"excluded_features": ["avx2"]}),
        ({"maximum_threads": 2, "vendor": "amd"}, {"minimum_threads": 3, "vendor": "amd"}),
    ],
)
def test_disjoint_selectors_cannot_overlap(a, b):
    assert not CpuSelector(**a).can_overlap(CpuSelector(**b))
    assert not CpuSelector(**b).can_overlap(CpuSelector(**a))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({"vendor": "amd"}, {"required_features": ["avx2"]}),
        ({"microarchitecture": "zen4"}, {"vendor": "amd", "family": 25, "models": [17]}),
        ({"vendor": "amd", "family": 25, "models": [1, 17]}, {"vendor": "amd", "family": 25,
                                                              "models": [17, 97]}),
        ({"maximum_threads": 4, "vendor": "amd"}, {"minimum_threads": 4, "vendor": "amd"}),
        ({"required_features": ["avx2"]}, {"required_features": ["avx512f"]}),
    ],
)
def test_possibly_shared_processors_overlap(a, b):
    assert CpuSelector(**a).can_overlap(CpuSelector(**b))
    assert CpuSelector(**b).can_overlap(CpuSelector(**a))


# --- pairs that can overlap, found without comparing every pair ------------------------------

_FIELDS = st.fixed_dictionaries({}, optional={
    "vendor": st.sampled_from(["amd", "intel"]),
    "family": st.sampled_from([6, 25, 26]),
    "models": st.lists(st.sampled_from([1, 17, 85, 143]), min_size=1, max_size=2, unique=True),
    "microarchitecture": st.sampled_from(["zen3", "zen4", "icelake"]),
    "required_features": st.sampled_from([["avx2"], ["avx512f"]]),
    "excluded_features": st.sampled_from([["avx512f"]]),
})


@st.composite
def _selectors(draw) -> CpuSelector:
    fields = draw(_FIELDS)
    low = draw(st.integers(1, 8))
    high = draw(st.integers(low, 9))
    try:
        return CpuSelector(**fields, minimum_threads=low, maximum_threads=high)
    except TuningValidationError:  # contradictory fields: a plain selector instead
        return CpuSelector(minimum_threads=low, maximum_threads=high)


@settings(max_examples=500, deadline=None)
@given(st.lists(_selectors(), max_size=12))
def test_overlapping_pairs_are_exactly_the_pairs_that_can_overlap(selectors):
    every_pair = [(i, j) for i in range(len(selectors)) for j in range(i + 1, len(selectors))
                  if selectors[i].can_overlap(selectors[j])]
    assert overlapping_pairs(selectors) == every_pair
