"""Contention: fewer threads for regions whose threads wait for CPUs, and all of them again
when they stop waiting; read from real schedstat files, real OpenMP workers and real
threads that hold the CPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from kerneltune.kernels import library, register_library
from kerneltune.machine.selectors import CpuSelector
from kerneltune.runtime import Contention, RuntimeSession
from kerneltune.runtime.contention import blas_workers, openmp_workers, thread_cpu_time
from kerneltune.tuning.registry import KernelTuningRegistry

CORPUS = Path(__file__).resolve().parent / "data" / "converted"

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
    """A contention on ``threads``' files whose probes are never skipped unless
    ``runnable`` says how many threads the machine runs."""
    options.setdefault("runnable", lambda: None)
    return Contention(tasks=threads.root, clock=clock,
                      workers=workers or (lambda n: {WORKER}), **options)


def run(contention, threads, clock, waited=0, ran=MS, wanted=2, tid=None, work=None) -> int:
    """One run of ``work`` read from start to finish, ``interval`` after the last: it took
    ``ran``, and a thread (the worker, unless ``tid``) waited ``waited``. Its thread count."""
    clock.advance(10 * MS)
    count, reading = contention.start(wanted, work=work)
    assert reading
    threads.wait(waited, tid)
    clock.advance(ran)
    contention.finish()
    return count


def test_two_waiting_runs_running_take_a_thread(threads, clock):
    c = contention(threads, clock)
    assert [run(c, threads, clock, waited=MS), run(c, threads, clock),  # once is noise
            run(c, threads, clock, waited=MS), run(c, threads, clock, waited=MS),
            run(c, threads, clock)] == [2, 2, 2, 2, 1]
    assert c.fewer == 1
    assert c.start(8)[0] == 7  # a wider session keeps the CPUs the others leave


def test_a_run_waited_a_threads_share_of_its_time_or_it_does_not_count(threads, clock):
    c = contention(threads, clock)
    for _ in range(5):
        assert run(c, threads, clock, waited=MS // 2 - 1) == 2
    run(c, threads, clock, waited=MS // 2)
    assert run(c, threads, clock, waited=MS // 2) == 2
    assert c.fewer == 1


def test_waits_between_runs_and_runs_not_read_do_not_count(threads, clock):
    c = contention(threads, clock)
    for _ in range(5):
        threads.wait(50 * MS)  # a worker spinning between runs, queued behind a neighbour
        assert run(c, threads, clock) == 2
    clock.advance(10 * MS)
    c.start(2)
    assert c.start(2) == (2, False)  # within the interval: not read
    c.finish()
    assert c.fewer == 0


def test_the_caller_waiting_counts_as_its_workers_do(threads, clock):
    c = contention(threads, clock)
    for _ in range(2):
        run(c, threads, clock, waited=MS, tid=threads.caller)
    assert c.fewer == 1


def test_at_least_one_thread_however_long_the_waits(threads, clock):
    c = contention(threads, clock)
    answers = [run(c, threads, clock, waited=MS, wanted=4) for _ in range(9)]
    assert answers == [4, 4, 3, 3, 2, 2, 1, 1, 1]  # two waiting readings for each thread


def test_a_probe_brings_the_threads_back_and_a_wait_in_it_sends_them_away(threads, clock):
    c = contention(threads, clock, probe=0.5)
    run(c, threads, clock, waited=MS)
    run(c, threads, clock, waited=MS)
    assert run(c, threads, clock) == 1  # no wait, but no probe yet
    clock.advance(500 * MS)
    # the probe: all threads; its first run, which wakes the workers, is not judged
    assert run(c, threads, clock, waited=50 * MS) == 2
    assert run(c, threads, clock, waited=MS) == 2  # the run that judges it
    assert run(c, threads, clock) == 1  # one wait in a probe is enough
    clock.advance(1000 * MS)  # twice as long after a probe that waited
    assert run(c, threads, clock, waited=50 * MS) == 2
    for _ in range(60):  # a probe without waits: kept
        assert run(c, threads, clock) == 2


def probe_periods(c, threads, clock, probes: int) -> list[int]:
    """The times, in ``probe`` periods, between ``probes`` probes that all wait: the first
    after two waiting readings, each after the last. A run is 11 ms: 10 apart, 1 long."""
    run(c, threads, clock, waited=MS)
    run(c, threads, clock, waited=MS)
    periods, since = [], 0
    while len(periods) < probes:
        since += 1
        if run(c, threads, clock, waited=MS) == 2:  # a probe, waiting
            periods.append(round(since * 11 * MS / (c.probe * 1e9)))
            assert run(c, threads, clock, waited=MS) == 2  # the run that judges it
            since = 1
    return periods


def test_each_probe_that_waits_doubles_the_time_to_the_next_up_to_a_limit(threads, clock):
    c = contention(threads, clock, probe=0.5)
    assert probe_periods(c, threads, clock, 7) == [1, 2, 4, 8, 16, 16, 16]
    for _ in range(800):  # the neighbour went: the next probe keeps all threads
        if run(c, threads, clock) == 2:
            break
    assert run(c, threads, clock) == 2  # the probe's judging run
    assert c.fewer == 0
    # and a neighbour that comes back is probed for as soon as it first was
    assert probe_periods(c, threads, clock, 2) == [1, 2]


def test_a_probe_waits_while_the_runnable_threads_fill_the_cpus(threads, clock):
    cpus = len(os.sched_getaffinity(0))
    runnable = [1 + cpus]  # this thread and a neighbour per CPU
    c = contention(threads, clock, probe=0.5, runnable=lambda: runnable[0])
    run(c, threads, clock, waited=MS)
    run(c, threads, clock, waited=MS)
    for _ in range(300):  # 3.3 s of runs: every due probe skipped, at no run's cost
        assert run(c, threads, clock) == 1
    skipped = c.statistics()["probes_skipped"]
    assert skipped >= 5 and c.statistics()["probes"] == 0
    runnable[0] = 1  # the neighbours left: the next probe comes within a probe period
    answers = [run(c, threads, clock) for _ in range(50)]
    assert answers[-1] == 2 and answers.index(2) < 50
    assert c.statistics() == {"readings": 352, "waited": 2, "faster": 0, "probes": 1,
                              "probes_waited": 0, "probes_skipped": skipped, "fewer": 0}


def reduce(c, threads, clock, work, ran=MS):
    """Two waiting runs of ``work`` on two threads, each ``ran`` long: one thread after."""
    for _ in range(2):
        assert run(c, threads, clock, waited=MS, ran=ran, work=work) == 2
    assert c.fewer == 1


def test_a_run_faster_than_its_work_on_fewer_threads_keeps_them_whatever_its_waits(
        threads, clock):
    c = contention(threads, clock, probe=0.5)
    reduce(c, threads, clock, "w")
    for _ in range(3):  # one thread takes twice as long
        assert run(c, threads, clock, ran=2 * MS, work="w") == 1
    clock.advance(500 * MS)
    for _ in range(60):  # the probe and every run after: waiting, but in half the time
        assert run(c, threads, clock, waited=MS, work="w") == 2
    # the probe's first run is not judged
    assert c.statistics()["faster"] == 59 and c.statistics()["probes_waited"] == 0
    # two threads no longer faster than one was: their waits take a thread again
    reduce(c, threads, clock, "w", ran=2 * MS)


def test_the_times_of_other_work_do_not_count(threads, clock):
    c = contention(threads, clock, probe=0.5)
    reduce(c, threads, clock, "small")
    run(c, threads, clock, ran=10 * MS, work="large")  # on one thread
    clock.advance(500 * MS)
    assert run(c, threads, clock, work="small") == 2  # the probe
    assert run(c, threads, clock, waited=MS, work="small") == 2  # its judging run waited
    assert run(c, threads, clock, work="small") == 1
    assert c.statistics()["faster"] == 0


def test_beside_neighbours_a_probe_goes_ahead_where_fewer_threads_took_longer(threads, clock):
    cpus = len(os.sched_getaffinity(0))
    c = contention(threads, clock, probe=0.5, runnable=lambda: 1 + cpus)
    reduce(c, threads, clock, "even")
    for _ in range(100):  # one thread as fast as two: probes skipped while neighbours stay
        assert run(c, threads, clock, work="even") == 1
    assert c.statistics()["probes"] == 0 and c.statistics()["probes_skipped"] >= 1
    reduce(d := contention(threads, clock, probe=0.5, runnable=lambda: 1 + cpus), threads,
           clock, "slower")
    answers = [run(d, threads, clock, ran=2 * MS, work="slower") for _ in range(100)]
    assert answers[-1] == 2  # the probe ran, beside the neighbours, and kept both threads
    assert d.statistics()["probes"] == 1 and d.statistics()["probes_skipped"] == 0


def test_each_work_keeps_its_own_count_and_a_new_one_is_tried_on_all_threads(threads,
                                                                           clock):
    cpus = len(os.sched_getaffinity(0))
    c = contention(threads, clock, probe=0.5, runnable=lambda: 1 + cpus)
    reduce(c, threads, clock, "short")
    # a work first read now starts on the count the neighbours left; once it has a time
    # there, its next reading tries all threads, beside the neighbours too
    assert run(c, threads, clock, ran=10 * MS, work="long") == 1
    assert run(c, threads, clock, waited=3 * MS, ran=6 * MS, work="long") == 2  # the probe
    for _ in range(50):  # waiting, but faster than one thread: kept, for this work only
        assert run(c, threads, clock, waited=3 * MS, ran=6 * MS, work="long") == 2
        assert run(c, threads, clock, work="short") == 1
    assert c.fewer == 1 and c.statistics()["probes"] == 1 and c.statistics()["faster"] == 50
    # a work whose try on all threads was slower stays reduced while the neighbours stay
    assert run(c, threads, clock, work="slow") == 1
    assert run(c, threads, clock, waited=5 * MS, ran=5 * MS, work="slow") == 2  # the probe
    assert run(c, threads, clock, waited=5 * MS, ran=5 * MS, work="slow") == 2  # its judge
    assert [run(c, threads, clock, work="slow") for _ in range(100)] == [1] * 100
    assert c.statistics()["probes"] == 2 and c.statistics()["probes_waited"] == 1
    # without the neighbours, a new work starts on all threads
    d = contention(threads, clock)
    assert run(d, threads, clock, work="a") == 2 and run(d, threads, clock, work="b") == 2


def test_a_counts_pace_is_its_median_neither_its_luckiest_nor_its_unluckiest_run(threads, clock):
    c = contention(threads, clock, probe=0.5)
    reduce(c, threads, clock, "w")
    assert run(c, threads, clock, ran=4 * MS, work="w") == 1  # once, one thread ran alone
    for _ in range(4):
        assert run(c, threads, clock, ran=10 * MS, work="w") == 1
    clock.advance(500 * MS)
    assert run(c, threads, clock, work="w") == 2  # the probe
    # waiting, but in 6 ms where one thread takes 10 (its shortest run, 4, is not its pace)
    for _ in range(10):
        assert run(c, threads, clock, waited=3 * MS, ran=6 * MS, work="w") == 2
    # two runs that lost a time slice among them: the typical run is still faster
    for _ in range(2):
        assert run(c, threads, clock, waited=8 * MS, ran=14 * MS, work="w") == 2
    assert run(c, threads, clock, waited=3 * MS, ran=6 * MS, work="w") == 2
    assert c.statistics()["faster"] == 13 and c.statistics()["probes_waited"] == 0


def test_a_work_not_read_for_a_probe_period_holds_no_run_back(threads, clock):
    c = contention(threads, clock, probe=0.5)
    reduce(c, threads, clock, "old")
    assert run(c, threads, clock, work="new") == 1  # a new work starts on the count settled
    answers = [run(c, threads, clock, work="new") for _ in range(60)]  # tried, no waits
    assert set(answers) == {2}
    assert c.fewer == 0  # "old", still reduced, was last read 0.67 s ago: no run asks
    assert run(c, threads, clock, work="old") == 2  # read again: its probe is due


def test_the_runs_that_waited_a_time_slice_are_not_their_counts_pace(threads, clock):
    cpus = len(os.sched_getaffinity(0))
    c = contention(threads, clock, probe=0.5, runnable=lambda: 1 + cpus)
    for _ in range(5):
        assert run(c, threads, clock, work="w") == 2
    for _ in range(2):  # two runs that queued for a time slice: a thread fewer
        run(c, threads, clock, waited=8 * MS, ran=8 * MS, work="w")
    assert c.fewer == 1
    answers: list[int] = []
    for _ in range(60):  # one thread takes 2 ms, two after the probe 1 (the probe's run: 2)
        answers.append(run(c, threads, clock, ran=MS if answers[-1:] == [2] else 2 * MS,
                           work="w"))
    answers += [run(c, threads, clock, waited=MS, work="w") for _ in range(10)]
    # two threads' pace is their median recent run: the probe went ahead and stayed
    assert answers[-10:] == [2] * 10 and c.statistics()["faster"] >= 1
    assert c.statistics()["probes_skipped"] == 0


def test_beside_neighbours_a_probe_still_runs_once_in_the_longest_probe_period(threads,
                                                                             clock):
    cpus = len(os.sched_getaffinity(0))
    c = contention(threads, clock, probe=0.5, runnable=lambda: 1 + cpus)
    reduce(c, threads, clock, "even")
    answers = [run(c, threads, clock, waited=MS, work="even") for _ in range(1500)]  # 16.5 s
    assert answers.count(2) == 4  # a probe (two runs) every BACKOFF periods, undone
    assert c.statistics()["probes"] == c.statistics()["probes_waited"] == 2


def test_the_threads_of_a_run_itself_are_not_its_neighbours(threads, clock):
    # a run of 3 of 4 threads, its workers spinning: runnable 3 leaves 4 CPUs to a probe
    c = contention(threads, clock, probe=0.5, runnable=lambda: 3)
    c._cpus = 4
    for _ in range(2):
        run(c, threads, clock, waited=MS, wanted=4)
    clock.advance(500 * MS)
    assert run(c, threads, clock, wanted=4) == 4


def test_a_run_that_may_take_the_blas_path_reads_the_blas_workers_too(tmp_path, clock):
    blas_worker = 999_983
    threads = Threads(tmp_path, tids=(WORKER, blas_worker))
    asked = []
    c = contention(threads, clock, blas=lambda n: asked.append(n) or {blas_worker})
    for _ in range(2):  # the BLAS worker waits, in runs that never run BLAS: not read
        assert run(c, threads, clock, waited=MS, tid=blas_worker) == 2
    assert c.fewer == 0 and asked == []
    for _ in range(2):
        clock.advance(10 * MS)
        assert c.start(2, blas=True) == (2, True)
        threads.wait(MS, blas_worker)
        clock.advance(MS)
        c.finish()
    assert c.fewer == 1 and asked == [2]  # asked once per thread count

    def other_caller() -> None:  # the BLAS pool is the process's: not asked again
        Threads(threads.root, tids=())
        clock.advance(10 * MS)
        c.start(2, blas=True)
        c.finish()

    other = threading.Thread(target=other_caller)
    other.start()
    other.join()
    assert asked == [2]


def test_the_blas_workers_are_looked_for_once_a_product_has_used_blas(tmp_path, clock):
    """Looking takes threadpoolctl's scan of the libraries: not on the first run of a model
    whose products never reach BLAS."""
    blas_worker, used, asked = 999_983, [], []
    threads = Threads(tmp_path, tids=(WORKER, blas_worker))
    c = contention(threads, clock, blas=lambda n: asked.append(n) or {blas_worker},
                   blas_used=lambda: bool(used))

    def reading() -> None:
        clock.advance(10 * MS)
        assert c.start(2, blas=True) == (2 - c.fewer, True)
        threads.wait(MS, blas_worker)
        clock.advance(MS)
        c.finish()

    for _ in range(2):  # BLAS unused: its worker's waits are not this run's
        reading()
    assert c.fewer == 0 and asked == []
    used.append(True)
    for _ in range(2):
        reading()
    assert c.fewer == 1 and asked == [2]


def test_a_first_run_that_never_reaches_blas_loads_no_threadpoolctl():
    code = ("import json, sys\n"
            "import numpy as np\n"
            "from kerneltune.runtime import RuntimeSession\n"
            f"session = RuntimeSession({str(CORPUS / 'mlp_regressor_relu.onnx')!r}, threads=2)\n"
            "session.run(None, {'X': np.ones((1, 8), np.float32)})\n"
            "print(json.dumps('threadpoolctl' in sys.modules))\n")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout
    assert json.loads(output) is False


def test_unknown_workers_leave_the_threads_as_asked(threads, clock):
    c = contention(threads, clock, workers=lambda n: None)
    for _ in range(4):
        clock.advance(10 * MS)
        assert c.start(2) == (2, False)
    assert not c.enabled


def test_no_task_directory_leaves_the_threads_as_asked(tmp_path, clock):
    c = Contention(tasks=tmp_path / "missing", clock=clock, workers=lambda n: {WORKER})
    for _ in range(3):
        clock.advance(10 * MS)
        assert c.start(2) == (2, False)
    assert not c.enabled


def test_an_ended_worker_has_the_pool_asked_again(threads, clock):
    asked = []

    def workers(n):
        asked.append(n)
        return {WORKER}

    c = contention(threads, clock, workers=workers)
    clock.advance(10 * MS)
    assert c.start(2) == (2, True)
    (threads.root / str(WORKER) / "schedstat").write_text("")  # as a thread that ended
    c.finish()
    threads.write()
    assert run(c, threads, clock) == 2
    assert asked == [2, 2] and c.enabled


def test_an_unreadable_caller_turns_it_off_whatever_its_workers(threads, clock):
    asked = []
    c = contention(threads, clock, workers=lambda n: asked.append(n) or {WORKER})
    (threads.root / str(threads.caller) / "schedstat").unlink()
    for _ in range(3):
        clock.advance(10 * MS)
        assert c.start(2) == (2, False)
    assert not c.enabled and asked == [2]


def test_workers_that_fail_turn_it_off_and_the_run_goes_on(threads, clock):
    def workers(n):
        raise RuntimeError("no OpenMP runtime")

    c = contention(threads, clock, workers=workers)
    clock.advance(10 * MS)
    assert c.start(2) == (2, False) and not c.enabled


def test_a_reduced_run_reads_the_workers_of_its_own_threads(threads, clock):
    asked = []
    c = contention(threads, clock, workers=lambda n: asked.append(n) or {WORKER})
    for _ in range(3):
        run(c, threads, clock, waited=MS, wanted=4)
    assert asked == [4, 3]  # not the idle fourth thread, which may spin at no cost


def test_a_run_that_takes_no_time_never_waited(threads, clock):
    c = contention(threads, clock)
    for _ in range(4):
        run(c, threads, clock, ran=0)
    assert c.fewer == 0


def test_each_calling_thread_has_its_own_reading(threads, clock):
    c = contention(threads, clock)
    run(c, threads, clock, waited=MS)  # a first waiting reading
    started, go = threading.Event(), threading.Event()

    def other_thread_run() -> None:
        Threads(threads.root, tids=())  # its own schedstat file
        clock.advance(10 * MS)
        assert c.start(2) == (2, True)
        started.set()
        go.wait()
        c.finish()

    clock.advance(10 * MS)
    assert c.start(2) == (2, True)
    other = threading.Thread(target=other_thread_run)
    other.start()
    started.wait()  # the other thread's reading began during this one
    threads.wait(6 * MS)
    clock.advance(MS)
    c.finish()  # this thread's reading: the second waiting one
    go.set()
    other.join()
    assert c.fewer == 1


def test_the_files_of_ended_threads_are_closed(threads, clock):
    c = contention(threads, clock)
    opened = len(os.listdir("/proc/self/fd"))

    def short_lived() -> None:
        Threads(threads.root, tids=())
        run(c, threads, clock)

    for _ in range(20):
        thread = threading.Thread(target=short_lived)
        thread.start()
        tid = thread.native_id
        thread.join()
        for file in (threads.root / str(tid)).iterdir():  # as /proc forgets an ended thread
            file.unlink()
        (threads.root / str(tid)).rmdir()
    assert len(os.listdir("/proc/self/fd")) - opened <= 2


@pytest.mark.parametrize(("op", "element_type", "shape", "overrides"), [
    ("MatMul", TensorProto.FLOAT, (256, 256), {"MatMul": {
        "algorithm.blas_minimum_fmas": 1 << 62, "algorithm.skinny_blas_minimum_fmas": 1 << 62,
        "algorithm.vector_blas_minimum_fmas": 1 << 62}}),
    ("Add", TensorProto.FLOAT16, (1_000_000,), None),
    ("Tanh", TensorProto.FLOAT, (1_000_000,), None),
])
def test_a_run_on_fewer_threads_gives_the_same_bits(threads, clock, op, element_type, shape,
                                                    overrides):
    c = contention(threads, clock)
    for _ in range(2):
        run(c, threads, clock, waited=MS)
    assert c.fewer == 1
    model = _model(op, element_type, len(shape))
    reduced = RuntimeSession(model, threads=2, contention=c, overrides=overrides)
    full = RuntimeSession(model, threads=2, contention=None, overrides=overrides)
    rng = np.random.default_rng(0)
    feed = {name: rng.standard_normal(shape).astype(helper.tensor_dtype_to_np_dtype(element_type))
            for name in (["A", "B"] if op != "Tanh" else ["A"])}
    assert reduced.run(None, feed)[0].tobytes() == full.run(None, feed)[0].tobytes()
    assert 1 in reduced._programs and full._prepared[0].plan(*feed.values()).threads == 2


def test_a_run_on_fewer_threads_takes_the_values_profiled_for_that_count(threads, clock):
    registry = KernelTuningRegistry()
    register_library(registry)
    key = library()["Add"].tuning_key("FLOAT")
    grain = "parallel.minimum_elements"
    registry.register_profile(key, CpuSelector(maximum_threads=1), {grain: 4096}, name="one")
    registry.register_profile(key, CpuSelector(minimum_threads=2), {grain: 8192}, name="two")
    c = contention(threads, clock)
    session = RuntimeSession(_model("Add"), threads=2, contention=c, registry=registry)
    small = np.ones(1000, np.float32)
    session.run(None, {"A": small, "B": small})
    assert session.contention_report["runs_on_fewer_threads"] == {}
    for _ in range(2):
        run(c, threads, clock, waited=MS)
    x = np.ones(100_000, np.float32)
    for _ in range(3):  # work first read on one thread: it starts on the count settled
        (z,) = session.run(None, {"A": x, "B": x})
    assert z.tobytes() == (x + x).tobytes()
    report = session.contention_report
    assert report["threads"] == 2 and report["runs_on_fewer_threads"] == {1: 3}
    assert report["sources"][2][str(key)]["profile_name"] == "two"
    assert report["sources"][1][str(key)]["profile_name"] == "one"
    assert report["contention"]["fewer"] == 1 and report["contention"]["waited"] == 2
    assert session._configs[key, 1].minimum_elements == 4096
    assert session._configs[key, 2].minimum_elements == 8192


@pytest.mark.parametrize(("field", "value"), [
    ("interval", -0.01), ("interval", float("nan")), ("probe", True), ("probe", "0.5"),
])
def test_bad_timings_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=f"Contention: {field} must be .* got {value!r}"):
        Contention(**{field: value})


def test_a_session_refuses_anything_but_a_contention_or_none():
    with pytest.raises(TypeError, match="contention must be a Contention or None, got 'on'"):
        RuntimeSession(_model("Add"), threads=2, contention="on")


def test_a_session_names_its_work_by_its_inputs_shapes():
    works = []

    class Recording(Contention):
        def start(self, wanted, blas=False, work=None):
            works.append(work)
            return wanted, False

    first, second = (RuntimeSession(_model("Add"), threads=2, contention=Recording(interval=0))
                     for _ in range(2))
    for session, size in ((first, 10), (first, 10), (first, 20), (second, 10)):
        x = np.ones(size, np.float32)
        session.run(None, {"A": x, "B": x})
    assert works[0] == works[1] and len({works[1], works[2], works[3]}) == 3
    assert works[0][1:] == ((10,), (10,))


def test_a_one_thread_session_never_asks():
    def workers(n):
        raise AssertionError("a one-thread session has no region to size")

    session = RuntimeSession(_model("Add"), threads=1, contention=Contention(workers=workers))
    x = np.ones(1_000_000, np.float32)
    session.run(None, {"A": x, "B": x})


# -- real threads ---------------------------------------------------------------------------


def _model(op: str, element_type: int = TensorProto.FLOAT, rank: int = 1):
    inputs = ["A"] if op == "Tanh" else ["A", "B"]
    shape = [f"D{axis}" for axis in range(rank)]
    node = helper.make_node(op, inputs, ["Z"])
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(n, element_type, shape) for n in inputs],
        [helper.make_tensor_value_info("Z", element_type, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])



needs_schedstat = pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"),
                                     reason="the system does not count threads' waits")


@needs_schedstat
def test_the_kernels_regions_run_on_the_workers_libgomp_names():
    (worker,) = openmp_workers(2)
    assert worker != threading.get_native_id()
    assert str(worker) in os.listdir("/proc/self/task")
    assert openmp_workers(2) == {worker}  # the pool is kept from one region to the next
    # parallel from the first element: whatever values earlier tests of this process
    # registered, the region has two threads
    session = RuntimeSession(_model("Tanh"), threads=2, contention=None,
                             overrides={"Tanh": {"parallel.minimum_elements": 1}})
    x = np.ones(4_000_000, np.float32)
    assert session._prepared[0].plan(x).threads == 2
    # its CPU clock: schedstat's run time of a worker spinning on its CPU through three
    # short regions may wait for a tick that does not come
    before = thread_cpu_time(worker)
    for _ in range(3):
        session.run(None, {"A": x})
    assert thread_cpu_time(worker) > before


@needs_schedstat
def test_the_blas_workers_are_threads_a_blas_product_runs_on():
    from threadpoolctl import threadpool_info

    if max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"),
           default=1) < 2:
        pytest.skip("the BLAS library runs on one thread in this process")
    workers = blas_workers(2)
    assert workers - openmp_workers(2), "a thread of the BLAS library's own"
    assert threading.get_native_id() not in workers
    assert workers <= {int(tid) for tid in os.listdir("/proc/self/task")}
    assert blas_workers(2, tasks="/nonexistent") is None


@needs_schedstat
def test_threads_that_hold_the_cpus_take_a_thread_and_the_results_stay_the_same():
    cpus = len(os.sched_getaffinity(0))
    stop = threading.Event()

    def hold() -> None:  # numpy releases the interpreter's lock in its loop
        y = np.ones(1_000_000, np.float32)
        while not stop.is_set():
            np.multiply(y, 1.0, out=y)

    holders = [threading.Thread(target=hold) for _ in range(cpus)]
    contention = Contention(interval=0.005, probe=60)  # no probe in the test
    session = RuntimeSession(_model("Add"), threads=2, contention=contention)
    fixed = RuntimeSession(_model("Add"), threads=2, contention=None)
    rng = np.random.default_rng(0)
    feed = {"A": rng.standard_normal(2_000_000).astype(np.float32),
            "B": rng.standard_normal(2_000_000).astype(np.float32)}
    for holder in holders:
        holder.start()
    try:
        for _ in range(2000):
            session.run(None, feed)
            if contention.fewer:
                break
        (z,) = session.run(None, feed)  # on one thread
    finally:
        stop.set()
        for holder in holders:
            holder.join()
    assert contention.enabled and contention.fewer == 1 and 1 in session._programs
    assert session.run(None, feed)[0].tobytes() == fixed.run(None, feed)[0].tobytes()
    assert z.tobytes() == (feed["A"] + feed["B"]).tobytes()
