"""Contention: fewer threads for regions whose threads wait for CPUs, and all of them again
when they stop waiting; read from real schedstat files, real OpenMP workers and real
threads that hold the CPUs."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from kerneltune.runtime import Contention, RuntimeSession
from kerneltune.runtime.contention import openmp_workers

MS = 1_000_000  # nanoseconds
WORKER = 999_991


class Threads:
    """A task directory of real schedstat files: the calling thread's and one worker's."""

    def __init__(self, root: Path, tids=(WORKER,)):
        self.root = root
        self.caller = threading.get_native_id()
        self.waits = dict.fromkeys((self.caller, *tids), 0)
        self.write()

    def wait(self, nanoseconds: int, tid: int | None = None) -> None:
        self.waits[WORKER if tid is None else tid] += nanoseconds
        self.write()

    def write(self) -> None:
        for tid, wait in self.waits.items():
            (self.root / str(tid)).mkdir(exist_ok=True)
            (self.root / str(tid) / "schedstat").write_text(f"5000 {wait} 7\n")


class Clock:
    def __init__(self):
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def advance(self, nanoseconds: int) -> None:
        self.now += nanoseconds


@pytest.fixture
def threads(tmp_path):
    return Threads(tmp_path)


@pytest.fixture
def clock():
    return Clock()


def contention(threads, clock, workers=None, **options) -> Contention:
    return Contention(tasks=threads.root, clock=clock,
                      workers=workers or (lambda n: {WORKER}), **options)


def step(contention, threads, clock, waited=0, wanted=2) -> int:
    """One reading ``interval`` after the last, the workers having waited ``waited``."""
    threads.wait(waited)
    clock.advance(10 * MS)
    return contention.threads(wanted)


def test_two_waiting_readings_running_take_a_thread(threads, clock):
    c = contention(threads, clock)
    assert c.threads(2) == 2  # the first reading only sets where waits count from
    assert step(c, threads, clock, waited=2 * MS) == 2  # once is noise
    assert step(c, threads, clock) == 2
    assert step(c, threads, clock, waited=2 * MS) == 2
    assert step(c, threads, clock, waited=2 * MS) == 1
    assert c.fewer == 1
    assert c.threads(8) == 7  # a wider session keeps the CPUs the others leave


def test_waits_below_the_stall_and_readings_within_the_interval_change_nothing(threads, clock):
    c = contention(threads, clock)
    c.threads(2)
    for _ in range(5):
        assert step(c, threads, clock, waited=MS // 2) == 2
    threads.wait(5 * MS)
    clock.advance(MS)  # within the interval: not read
    assert c.threads(2) == 2
    assert step(c, threads, clock, waited=2 * MS) == 2  # the earlier wait counts here, once


def test_the_caller_waiting_counts_as_its_workers_do(threads, clock):
    c = contention(threads, clock)
    c.threads(2)
    for _ in range(2):
        threads.wait(2 * MS, tid=threads.caller)
        clock.advance(10 * MS)
        c.threads(2)
    assert c.fewer == 1


def test_at_least_one_thread_however_long_the_waits(threads, clock):
    c = contention(threads, clock)
    c.threads(4)
    answers = [step(c, threads, clock, waited=2 * MS, wanted=4) for _ in range(8)]
    assert answers == [4, 3, 2, 1, 1, 1, 1, 1]
    assert c.threads(2) == 1


def test_a_probe_brings_the_threads_back_and_a_wait_in_it_sends_them_away(threads, clock):
    c = contention(threads, clock, probe=0.5)
    c.threads(2)
    step(c, threads, clock, waited=2 * MS)
    assert step(c, threads, clock, waited=2 * MS) == 1
    assert step(c, threads, clock) == 1  # no wait, but no probe yet
    clock.advance(500 * MS)
    assert c.threads(2) == 2  # the probe: all threads
    assert step(c, threads, clock, waited=2 * MS) == 1  # one wait in a probe is enough
    clock.advance(500 * MS)
    assert c.threads(2) == 2
    for _ in range(60):  # a probe without waits: kept
        assert step(c, threads, clock) == 2


def test_unknown_workers_leave_the_threads_as_asked(threads, clock):
    c = contention(threads, clock, workers=lambda n: None)
    for _ in range(4):
        assert step(c, threads, clock, waited=5 * MS) == 2
    assert not c.enabled


def test_no_task_directory_leaves_the_threads_as_asked(tmp_path, clock):
    c = Contention(tasks=tmp_path / "missing", clock=clock, workers=lambda n: {WORKER})
    for _ in range(3):
        clock.advance(10 * MS)
        assert c.threads(2) == 2
    assert not c.enabled


def test_an_ended_worker_has_the_pool_asked_again(threads, clock):
    asked = []

    def workers(n):
        asked.append(n)
        return {WORKER}

    c = contention(threads, clock, workers=workers)
    c.threads(2)
    (threads.root / str(WORKER) / "schedstat").unlink()
    clock.advance(10 * MS)
    assert c.threads(2) == 2
    assert step(c, threads, clock) == 2  # the file is back
    assert asked == [2, 2] and c.enabled


def test_a_one_thread_session_never_asks(tmp_path):
    def workers(n):
        raise AssertionError("a one-thread session has no region to size")

    session = RuntimeSession(_add(), threads=1, contention=Contention(workers=workers))
    x = np.ones(1_000_000, np.float32)
    session.run(None, {"A": x, "B": x})


# -- real threads ---------------------------------------------------------------------------


def _add(op: str = "Add"):
    inputs = ["A", "B"] if op == "Add" else ["A"]
    node = helper.make_node(op, inputs, ["Z"])
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N"]) for n in inputs],
        [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["N"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _cpu_time(tid: int) -> int:
    return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])


needs_schedstat = pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"),
                                     reason="the system does not count threads' waits")


@needs_schedstat
def test_the_kernels_regions_run_on_the_workers_libgomp_names():
    (worker,) = openmp_workers(2)
    assert worker != threading.get_native_id()
    assert str(worker) in os.listdir("/proc/self/task")
    assert openmp_workers(2) == {worker}  # the pool is kept from one region to the next
    session = RuntimeSession(_add("Tanh"), threads=2, contention=None)
    x = np.ones(4_000_000, np.float32)
    before = _cpu_time(worker)
    for _ in range(3):
        session.run(None, {"A": x})
    assert _cpu_time(worker) > before


@needs_schedstat
def test_threads_that_hold_the_cpus_take_a_thread_and_the_results_stay_the_same():
    cpus = len(os.sched_getaffinity(0))
    stop = threading.Event()

    def hold() -> None:  # numpy releases the interpreter's lock in its loop
        y = np.ones(1_000_000, np.float32)
        while not stop.is_set():
            np.multiply(y, 1.0, out=y)

    holders = [threading.Thread(target=hold) for _ in range(cpus)]
    contention = Contention(interval=0.005)
    session = RuntimeSession(_add(), threads=2, contention=contention)
    fixed = RuntimeSession(_add(), threads=2, contention=None)
    rng = np.random.default_rng(0)
    feed = {"A": rng.standard_normal(2_000_000).astype(np.float32),
            "B": rng.standard_normal(2_000_000).astype(np.float32)}
    for holder in holders:
        holder.start()
    try:
        for _ in range(2000):
            (z,) = session.run(None, feed)
            if contention.fewer:
                break
    finally:
        stop.set()
        for holder in holders:
            holder.join()
    assert contention.enabled and contention.fewer == 1 and 1 in session._fewer
    assert session.run(None, feed)[0].tobytes() == fixed.run(None, feed)[0].tobytes()
    assert z.tobytes() == (feed["A"] + feed["B"]).tobytes()
