"""Keys, element types and schemas derived from typed configs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest

from conftest import ToyConfig, toy_key
from kerneltune.errors import TuningValidationError
from kerneltune.tuning.schema import (
    KernelTuningKey,
    KernelTuningSchema,
    element_type_name,
    element_type_number,
    tunable,
)


@pytest.mark.parametrize(
    "spelling", [1, "FLOAT", "float", "float32", "tensor(float)", np.float32, np.dtype("float32")]
)
def test_element_type_spellings_agree(spelling):
    assert element_type_number(spelling) == 1
    assert toy_key(element_type=spelling) == toy_key(element_type=1)


@pytest.mark.parametrize(
    ("spelling", "name"),
    [(np.float64, "DOUBLE"), ("float16", "FLOAT16"), (np.bool_, "BOOL"), ("uint64", "UINT64"),
     (np.int8, "INT8"), (16, "BFLOAT16")],
)
def test_element_type_names(spelling, name):
    assert element_type_name(spelling) == name


@pytest.mark.parametrize("bad", [True, 0, 99, "float128x", "tensor(quux)", object()])
def test_unknown_element_types_are_errors(bad):
    with pytest.raises(TuningValidationError, match="element_type"):
        element_type_number(bad)


def test_key_file_form_writes_names_and_round_trips():
    key = toy_key(element_type=np.float16, tuning_abi=3)
    data = key.to_dict()
    assert data["element_type"] == "FLOAT16"
    assert KernelTuningKey.from_dict(data) == key


def test_key_reports_every_bad_field():
    with pytest.raises(TuningValidationError) as error:
        KernelTuningKey("", "Abs", "baseline", "nonsense", tuning_abi=True)
    fields = {p.field for p in error.value.problems}
    assert fields == {"library", "element_type", "tuning_abi"}


def test_key_from_dict_names_unknown_and_missing_fields():
    with pytest.raises(TuningValidationError) as error:
        KernelTuningKey.from_dict({"library": "x", "kernel": "Abs", "colour": "red"})
    fields = {p.field for p in error.value.problems}
    assert fields == {"key.colour", "key.implementation", "key.element_type"}


@pytest.fixture
def schema() -> KernelTuningSchema:
    return KernelTuningSchema.from_config(toy_key(), ToyConfig)


def test_schema_is_derived_from_the_dataclass(schema):
    assert list(schema.parameters) == [
        "parallel.minimum_elements", "parallel.maximum_threads", "algorithm.tile_m",
        "algorithm.tile_n", "algorithm.expected_speedup", "algorithm.pack_b", "algorithm.layout",
    ]
    minimum = schema.parameters["parallel.minimum_elements"]
    assert (minimum.type, minimum.default, minimum.minimum) == (int, 32768, 1)
    assert minimum.doc == "elements below which the loop stays serial"
    assert schema.default_values()["algorithm.layout"] == "row"


def test_configure_copies_and_never_changes_the_defaults(schema):
    config = schema.configure({"parallel.minimum_elements": 1024})
    assert config.minimum_elements == 1024
    assert schema.defaults.minimum_elements == 32768
    assert ToyConfig().minimum_elements == 32768
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.minimum_elements = 1


def test_validate_collects_every_problem(schema):
    with pytest.raises(TuningValidationError) as error:
        schema.validate({
            "parallel.minimum_elements": 0,            # non-positive grain
            "parallel.maximum_threads": True,          # bool is not an int
            "algorithm.expected_speedup": 1000.0,      # out of range
            "algorithm.pack_b": 1,                     # int is not a bool
            "algorithm.layout": "diagonal",            # not a choice
            "algorithm.tile_m": "64",                  # string is not an int
            "parallel.minimum_element": 5,             # unknown name (typo)
        })
    by_field = {p.field: p.message for p in error.value.problems}
    assert set(by_field) == {
        "parallel.minimum_elements", "parallel.maximum_threads", "algorithm.expected_speedup",
        "algorithm.pack_b", "algorithm.layout", "algorithm.tile_m", "parallel.minimum_element",
    }
    assert "positive" in by_field["parallel.minimum_elements"]
    assert "unknown parameter" in by_field["parallel.minimum_element"]
    assert str(toy_key()) in str(error.value)


def test_cross_field_consistency_is_checked_on_the_applied_config(schema):
    with pytest.raises(TuningValidationError, match="not a multiple"):
        schema.validate({"algorithm.tile_m": 48})
    assert schema.validate({"algorithm.tile_m": 128, "algorithm.tile_n": 256}) == {
        "algorithm.tile_m": 128, "algorithm.tile_n": 256}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 2**70])
def test_non_finite_and_huge_numbers_are_rejected(schema, bad):
    name = "algorithm.expected_speedup" if isinstance(bad, float) else "parallel.minimum_elements"
    with pytest.raises(TuningValidationError, match=name):
        schema.validate({name: bad})


def test_complete_requires_every_value(schema):
    with pytest.raises(TuningValidationError) as error:
        schema.validate({"parallel.minimum_elements": 5}, complete=True)
    assert len(error.value.problems) == len(schema.parameters) - 1
    assert all(p.message == "missing required value" for p in error.value.problems)


def test_values_are_canonicalised(schema):
    assert schema.validate({"algorithm.expected_speedup": 2, "parallel.maximum_threads":
                            np.int64(4)}) == {"algorithm.expected_speedup": 2.0,
                                              "parallel.maximum_threads": 4}


def test_required_parameter_must_be_given():
    @dataclass(frozen=True)
    class Needy:
        grain: int = tunable("parallel.grain", 8, minimum=1, required=True)

    schema = KernelTuningSchema.from_config(toy_key(), Needy)
    with pytest.raises(TuningValidationError, match="missing required value"):
        schema.validate({})
    assert schema.validate({"parallel.grain": 16}) == {"parallel.grain": 16}


def test_invalid_defaults_are_caught_at_schema_creation():
    @dataclass(frozen=True)
    class Broken:
        grain: int = tunable("parallel.grain", 0, minimum=1)

    with pytest.raises(TuningValidationError, match="default"):
        KernelTuningSchema.from_config(toy_key(), Broken)


def test_config_must_be_a_frozen_dataclass_of_tunables():
    @dataclass
    class Mutable:
        grain: int = tunable("parallel.grain", 8)

    @dataclass(frozen=True)
    class Untagged:
        grain: int = 8

    @dataclass(frozen=True)
    class Listy:
        grain: list = tunable("parallel.grain", 8)

    for config in (Mutable, Untagged, Listy, int):
        with pytest.raises(TypeError):
            KernelTuningSchema.from_config(toy_key(), config)


@pytest.mark.parametrize("equal", [True, 1.0])
def test_a_value_equal_to_one_configured_before_is_still_checked_by_its_type(equal):
    schema = KernelTuningSchema.from_config(toy_key(), ToyConfig)
    assert schema.configure({"parallel.minimum_elements": 1}).minimum_elements == 1
    with pytest.raises(TuningValidationError, match="expected an integer"):
        schema.configure({"parallel.minimum_elements": equal})
    first = schema.configure({"parallel.minimum_elements": 4096})
    assert schema.configure({"parallel.minimum_elements": 4096}) is first  # frozen: shared
