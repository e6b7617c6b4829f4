"""randn_tensor: the same bytes on every machine, aligned, in every element type's range."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from kerneltune._support.aligned import ALIGNMENT
from kerneltune.calibration import randn_tensor

#: sha256 prefixes of randn_tensor(type, (3, 5), 42): the same on every machine
GOLDEN = {
    "FLOAT": "dcce08d7b0ada3e1",
    "DOUBLE": "56296b7783048f48",
    "FLOAT16": "fdf6201d40842e6e",
    "INT8": "40dddf6f48bba0fc",
    "INT16": "a7f5af61d1435812",
    "INT32": "db57abb12803f272",
    "INT64": "b6721f9cecabc523",
    "UINT8": "40dddf6f48bba0fc",
    "UINT16": "a7f5af61d1435812",
    "UINT32": "db57abb12803f272",
    "UINT64": "b6721f9cecabc523",
    "BOOL": "4ee78f3e8316d81c",
}


@pytest.mark.parametrize("element_type", sorted(GOLDEN))
def test_randn_tensor_bytes_are_fixed(element_type):
    x = randn_tensor(element_type, (3, 5), 42)
    assert x.shape == (3, 5) and x.flags.c_contiguous
    assert hashlib.sha256(x.tobytes()).hexdigest()[:16] == GOLDEN[element_type]
    assert np.array_equal(x, randn_tensor(element_type, [3, 5], 42))


def test_randn_tensor_seeds_and_spellings():
    a = randn_tensor("FLOAT", 1000, 1)
    assert not np.array_equal(a, randn_tensor("FLOAT", 1000, 2))
    assert np.array_equal(a, randn_tensor(np.float32, (1000,), 1))
    assert np.array_equal(a, randn_tensor(1, 1000, 1))
    assert randn_tensor("DOUBLE", (), 0).shape == ()
    assert randn_tensor("INT8", (0, 4), 0).shape == (0, 4)


@pytest.mark.parametrize("element_type", sorted(GOLDEN))
def test_randn_tensor_starts_on_a_cache_line(element_type):
    # many shapes, so that malloc's placement could not pass by luck
    for n in range(1, 40):
        assert randn_tensor(element_type, (n, 3), n).ctypes.data % ALIGNMENT == 0


def test_randn_tensor_looks_normal_for_floats_and_covers_integer_ranges():
    x = randn_tensor("DOUBLE", 200_000, 7)
    assert abs(x.mean()) < 0.02 and abs(x.std() - 1.0) < 0.02
    assert np.all(np.abs(x) <= 2 * np.sqrt(3.0))
    u = randn_tensor("UINT8", 10_000, 7)
    assert u.min() == 0 and u.max() == 255
    b = randn_tensor("BOOL", 10_000, 7)
    assert 0.45 < b.mean() < 0.55


def test_randn_tensor_fills_the_allocators_array():
    given = []

    def allocator(shape, dtype):
        given.append(np.zeros(shape, dtype))
        return given[-1]

    x = randn_tensor("FLOAT", (4, 4), 3, allocator=allocator)
    assert x is given[0] and np.array_equal(x, randn_tensor("FLOAT", (4, 4), 3))


@pytest.mark.parametrize("arguments", [
    ("STRING", 4, 0), ("FLOAT", -1, 0), ("FLOAT", (2, 1.5), 0), ("FLOAT", 4, -1),
    ("FLOAT", 4, True),
])
def test_randn_tensor_rejects_bad_arguments(arguments):
    with pytest.raises(ValueError):
        randn_tensor(*arguments)


def test_randn_tensor_rejects_a_wrong_allocation():
    with pytest.raises(ValueError, match="allocator"):
        randn_tensor("FLOAT", 4, 0, allocator=lambda shape, dtype: np.empty(5, dtype))
