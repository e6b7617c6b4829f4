"""The worker threads that share a product's chunks with the calling thread: every chunk
once, errors raised on the caller, a busy worker never waited for, and new workers in a
forked child."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from kerneltune.kernels.workers import Workers

#: generous: only a broken hand-over waits this long
PATIENCE = 120


def test_every_chunk_runs_once_on_the_caller_and_at_most_threads_minus_one_workers():
    workers = Workers()
    ran: list[tuple[int, str]] = []
    worker_ran = threading.Event()

    def chunk(index: int) -> None:
        name = threading.current_thread().name
        ran.append((index, name))
        if name == "kerneltune-worker":
            worker_ran.set()
        elif index == 0:  # the caller's first chunk waits until a worker has one too
            assert worker_ran.wait(PATIENCE)

    for _ in range(3):
        ran.clear()
        workers.run(40, chunk, 3)
        assert sorted(index for index, _ in ran) == list(range(40))
        assert {name for _, name in ran} <= {threading.current_thread().name,
                                             "kerneltune-worker"}
    assert sum(t.name == "kerneltune-worker" for t in threading.enumerate()) >= 1
    assert workers._started == 2


def test_one_thread_or_one_chunk_runs_on_the_caller_alone_and_no_chunk_returns_at_once():
    workers = Workers()
    ran = []
    workers.run(5, lambda i: ran.append(threading.current_thread().name), 1)
    workers.run(1, lambda i: ran.append(threading.current_thread().name), 4)
    workers.run(0, lambda i: ran.append(threading.current_thread().name), 4)
    assert ran == [threading.current_thread().name] * 6
    assert workers._started == 0


def test_the_caller_takes_every_chunk_a_busy_worker_cannot():
    """A worker held in another call's chunk (as a thread kept off its CPU would be) takes
    no chunk of the next call, whose caller runs them all and returns without it."""
    workers = Workers()
    held, release = threading.Event(), threading.Event()

    def first(index: int) -> None:
        if threading.current_thread().name == "kerneltune-worker":
            held.set()
            assert release.wait(PATIENCE)
        else:  # its caller's chunk leaves the other chunk to the worker
            assert held.wait(PATIENCE)

    other = threading.Thread(target=workers.run, args=(2, first, 2))
    other.start()
    assert held.wait(PATIENCE)
    ran = []
    workers.run(16, lambda i: ran.append(threading.current_thread().name), 2)
    assert ran == [threading.current_thread().name] * 16
    release.set()
    other.join(PATIENCE)
    assert not other.is_alive()


def test_an_error_in_a_chunk_is_raised_on_the_caller_once_every_chunk_ran():
    workers = Workers()
    ran = []

    def chunk(index: int) -> None:
        ran.append(index)
        if index == 5:
            raise ValueError("chunk 5")

    with pytest.raises(ValueError, match="chunk 5"):
        workers.run(12, chunk, 2)
    assert sorted(ran) == list(range(12))


def _in_child(workers: Workers, queue) -> None:
    ran = []
    workers.run(8, lambda i: ran.append(i), 2)
    queue.put(sorted(ran))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                    reason="needs fork")
def test_a_forked_child_starts_workers_of_its_own_though_a_worker_held_the_lock():
    """The child of a fork made while a worker holds the workers' lock (as one does between
    its wake-up and its job) has that lock copied held, and no thread to release it."""
    workers = Workers()
    holding, release = threading.Event(), threading.Event()

    def hold(index: int) -> None:
        if threading.current_thread().name == "kerneltune-worker":
            with workers._wake:
                holding.set()
                assert release.wait(PATIENCE)
        else:
            assert holding.wait(PATIENCE)

    runner = threading.Thread(target=workers.run, args=(2, hold, 2))
    runner.start()
    assert holding.wait(PATIENCE)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_in_child, args=(workers, queue))
    child.start()
    release.set()
    runner.join(PATIENCE)
    try:
        assert queue.get(timeout=PATIENCE) == list(range(8))
    except BaseException:  # the child hangs on the copied lock
        child.kill()
        raise
    child.join(PATIENCE)
    assert child.exitcode == 0
