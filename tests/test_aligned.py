"""Arrays placed on a cache line, and copies only when an array is not."""

from __future__ import annotations

import numpy as np
import pytest

from kerneltune._support.aligned import ALIGNMENT, aligned, aligned_empty


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8, np.uint64, bool])
@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 5), (7, 0, 2), (1000,)])
def test_aligned_empty_starts_on_a_cache_line(shape, dtype):
    x = aligned_empty(shape, dtype)
    assert x.shape == shape and x.dtype == np.dtype(dtype) and x.flags.c_contiguous
    assert x.flags.writeable
    # a zero-size array has no data to place
    assert x.ctypes.data % ALIGNMENT == 0 or x.size == 0


def test_aligned_keeps_an_aligned_array_and_copies_the_others():
    x = aligned_empty((4, 6), np.float32)
    x[...] = np.arange(24).reshape(4, 6)
    assert aligned(x) is x
    for offset in range(1, 16):
        # views 4 * offset bytes past the cache line, then a strided view
        for view in (x.reshape(-1)[offset:offset + 8], x[:, ::2]):
            copy = aligned(view)
            assert copy.ctypes.data % ALIGNMENT == 0 and copy.flags.c_contiguous
            np.testing.assert_array_equal(copy, view)
            assert not np.shares_memory(copy, x)


def test_aligned_leaves_object_arrays_alone():
    strings = np.array(["a", "bc"], dtype=object)
    assert aligned(strings) is strings
