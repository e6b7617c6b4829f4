"""Recycled output blocks: reused only after every view of an output is gone."""

from __future__ import annotations

import copy
import ctypes
import gc
import pickle
import threading

import numpy as np
import pytest

from kerneltune._support.aligned import ALIGNMENT
from kerneltune.kernels import library, outputs

LARGE = outputs.RECYCLE_MINIMUM_BYTES // 4 + 1000  # float32 elements of a recycled output
#: float32 elements of a recycled intermediate of a session
INTERMEDIATE = outputs.INTERMEDIATE_MINIMUM_BYTES // 4 + 1000


def address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


@pytest.fixture(autouse=True)
def fresh_pool():
    # an earlier test's failed run may hold a block in a traceback's cycle: collected now,
    # its block cannot come back to the pool in the middle of this test
    gc.collect()
    previous = outputs.set_output_pool_limit(0)
    outputs.set_output_pool_limit(previous)
    yield
    outputs.set_output_pool_limit(0)
    outputs.set_output_pool_limit(previous)


def test_a_released_block_serves_the_next_output_of_that_size():
    first = outputs.empty((LARGE,), np.float32)
    where = address(first)
    del first
    assert outputs.output_pool_bytes() >= LARGE * 4
    second = outputs.empty((LARGE // 2, 2), np.float32)
    assert address(second) == where
    assert second.shape == (LARGE // 2, 2) and second.dtype == np.float32
    assert second.flags.c_contiguous and second.flags.writeable
    assert where % ALIGNMENT == 0


def test_a_view_keeps_the_block_from_being_handed_out_again():
    first = outputs.empty((LARGE,), np.float32)
    first[:] = 7
    view = first[::2]
    del first
    second = outputs.empty((LARGE,), np.float32)
    second[:] = 0
    assert not np.shares_memory(second, view)
    assert (view == 7).all()
    where = address(view)
    del view
    third = outputs.empty((LARGE,), np.float32)
    assert address(third) == where


def test_small_outputs_are_plain_numpy_arrays():
    small = outputs.empty((1000,), np.float64)
    assert small.flags.owndata


def test_aligned_outputs_start_on_a_cache_line_at_every_size():
    for n in (*range(1, 40), LARGE):
        x = outputs.empty((n,), np.float32, aligned=True)
        assert x.shape == (n,) and address(x) % ALIGNMENT == 0


def test_without_an_idle_limit_nothing_waits_for_reuse():
    outputs.set_output_pool_limit(0)
    first = outputs.empty((LARGE,), np.float32)
    del first
    assert outputs.output_pool_bytes() == 0


def test_lowering_the_limit_frees_waiting_blocks():
    first = outputs.empty((LARGE,), np.float32)
    second = outputs.empty((LARGE,), np.float32)
    del first, second
    assert outputs.output_pool_bytes() >= 2 * LARGE * 4
    outputs.set_output_pool_limit(outputs.block_bytes(LARGE * 4))
    assert outputs.output_pool_bytes() <= outputs.block_bytes(LARGE * 4)


@pytest.mark.parametrize("nbytes", [outputs.RECYCLE_MINIMUM_BYTES, 200_000, 3_000_001,
                                    (1 << 24) + 1])
def test_a_block_holds_its_output_with_at_most_a_sixteenth_unused(nbytes):
    block = outputs.block_bytes(nbytes)
    assert nbytes <= block < nbytes + nbytes / outputs.SIZES_PER_OCTAVE + ALIGNMENT
    assert outputs.block_bytes(block) == block


def test_a_session_s_intermediates_come_from_the_pool_run_after_run():
    """Intermediates of 128 KiB and more are pooled blocks: the second run takes the one
    the first released. What a run returns, and a lone kernel's output of that size, are
    plain arrays (glibc hands a lone kernel's block back warm; the pool would cost it)."""
    from onnx import TensorProto, helper

    from kerneltune.runtime import RuntimeSession

    # r is read twice, so that no step writes over it
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "r"], ["y"])]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [INTERMEDIATE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [INTERMEDIATE])])
    # unfused: fused, the two nodes are one call with no intermediate
    session = RuntimeSession(helper.make_model(graph), threads=1, fusion=False)
    x = np.ones(INTERMEDIATE, np.float32)
    block = outputs.block_bytes(INTERMEDIATE * 4)
    (first,) = session.run(None, {"x": x})
    assert outputs.output_pool_bytes() == block  # the intermediate, back in the pool
    (second,) = session.run(None, {"x": x})
    assert outputs.output_pool_bytes() == block  # taken by the second run and given back
    assert not isinstance(second.base, ctypes.Array) and not np.shares_memory(first, second)
    np.testing.assert_array_equal(second, np.ones(INTERMEDIATE, np.float32))
    lone = library()["Relu"].prepare("FLOAT", threads=1).run(x)
    assert lone.base is None  # np.empty's own array
    assert outputs.output_pool_bytes() == block


def test_a_run_whose_step_raises_leaves_the_pool_to_returned_values():
    """A Reshape to sizes the run is given fails between two pooled intermediates: the
    outputs made after the failed run (a lone kernel's) are plain arrays again."""
    from onnx import TensorProto, helper

    from kerneltune.runtime import RuntimeSession

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "s"], ["v"]),
             helper.make_node("Neg", ["v"], ["y"])]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [INTERMEDIATE]),
                         helper.make_tensor_value_info("s", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M"])])
    session = RuntimeSession(helper.make_model(graph), threads=1)
    x = np.ones(INTERMEDIATE, np.float32)
    with pytest.raises(ValueError):
        session.run(None, {"x": x, "s": np.array([INTERMEDIATE + 1], np.int64)})
    assert library()["Relu"].prepare("FLOAT", threads=1).run(x).base is None
    (y,) = session.run(None, {"x": x, "s": np.array([INTERMEDIATE], np.int64)})
    np.testing.assert_array_equal(y, -x)


def test_a_negative_limit_is_refused():
    with pytest.raises(ValueError, match="at least 0"):
        outputs.set_output_pool_limit(-1)


@pytest.mark.parametrize("op_type", ["MatMul", "Gemm"])
def test_a_compiled_product_s_large_intermediate_comes_from_the_pool(op_type):
    """A product made on a compiled path writes its large output into a pooled block, which
    the next step releases and the next run takes again."""
    from onnx import TensorProto, helper, numpy_helper

    from kerneltune.runtime import RuntimeSession

    rows, depth, columns = 512, 4, 256  # 512 KiB out, kept off BLAS
    weight = np.random.default_rng(0).standard_normal((depth, columns)).astype(np.float32)
    # p is read twice, so that no step writes over it
    nodes = [helper.make_node(op_type, ["x", "w"], ["p"]),
             helper.make_node("Mul", ["p", "p"], ["y"])]
    graph = helper.make_graph(
        nodes, "product", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, depth])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, columns])],
        [numpy_helper.from_array(weight, "w")])
    compiled = dict.fromkeys(("algorithm.blas_minimum_fmas",
                              "algorithm.packed_blas_minimum_fmas"), 1 << 62)
    session = RuntimeSession(helper.make_model(graph), threads=1, overrides={op_type: compiled})
    x = np.random.default_rng(1).standard_normal((rows, depth)).astype(np.float32)
    block = outputs.block_bytes(rows * columns * 4)
    for _ in range(2):
        (y,) = session.run(None, {"x": x})
        assert outputs.output_pool_bytes() == block
        np.testing.assert_allclose(y, (x @ weight) ** 2, rtol=1e-5, atol=1e-5)


def test_kernel_outputs_from_recycled_blocks_are_correct_and_distinct():
    abs_ = library()["Abs"].prepare("FLOAT", threads=2)
    x = np.linspace(-1, 1, LARGE, dtype=np.float32)
    kept = abs_.run(x)
    for _ in range(3):
        again = abs_.run(-x)
        assert not np.shares_memory(again, kept)
        np.testing.assert_array_equal(again, np.abs(x))
    np.testing.assert_array_equal(kept, np.abs(x))


def test_threads_never_hold_the_same_block():
    rounds, workers = 10, 4
    barrier = threading.Barrier(workers)
    failures = []

    def work(value: int) -> None:
        for _ in range(rounds):
            out = outputs.empty((LARGE,), np.float32)
            out[:] = value
            barrier.wait()  # every worker holds an output and has written it
            if not (out == value).all():
                failures.append(value)
            barrier.wait()  # every worker has checked before any output is released
            del out

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_a_release_while_the_pool_is_busy_frees_the_block_without_waiting():
    out = outputs.empty((LARGE,), np.float32)
    before = outputs.output_pool_bytes()
    with outputs._lock:  # as when a collection runs a finaliser inside the pool's own code
        del out
    assert outputs.output_pool_bytes() == before


def test_a_lease_cannot_be_copied():
    out = outputs.empty((LARGE,), np.float32)
    lease = out.base.base
    for duplicate in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError, match="one owner"):
            duplicate(lease)
    assert np.frombuffer(pickle.loads(pickle.dumps(out)), np.float32).size == LARGE


def test_released_blocks_make_room_for_other_sizes():
    outputs.set_output_pool_limit(2 * (outputs.block_bytes(LARGE * 4)))
    first, second = (outputs.empty((LARGE,), np.float32) for _ in range(2))
    del first, second  # the pool is full of this size
    other = outputs.empty((2 * LARGE,), np.float32)
    where = address(other)
    del other  # evicts the older blocks to fit
    again = outputs.empty((2 * LARGE,), np.float32)
    assert address(again) == where


def test_a_view_of_a_batched_matmul_output_keeps_its_block():
    matmul = library()["MatMul"].prepare("FLOAT", threads=2)
    a = np.ones((LARGE // 1024, 1, 16), np.float32)
    b = np.ones((LARGE // 1024, 16, 1024), np.float32)
    row = matmul.run(a, b)[:, 0, :]
    fresh = outputs.empty((LARGE // 1024, 1, 1024), np.float32)
    fresh[...] = -1
    assert not np.shares_memory(fresh, row)
    assert (row == 16).all()


def test_a_recycled_output_starts_where_its_input_does_within_a_cache_line():
    from kerneltune._support.aligned import aligned_empty

    count = LARGE
    storage = aligned_empty((count + 16,), np.float32)
    for start in (0, 1, 4, 15):
        x = storage[start:start + count]
        out = outputs.empty(x.shape, np.float32, like=x)
        assert out.ctypes.data % ALIGNMENT == x.ctypes.data % ALIGNMENT
        assert out.shape == x.shape and out.flags.c_contiguous and out.flags.writeable
        out[-1] = 1.0  # the whole array lies in its block
        del out
    placed = outputs.empty((count,), np.float32)
    assert placed.ctypes.data % ALIGNMENT == 0  # without an input: on a cache line
