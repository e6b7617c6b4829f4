"""A session given N threads runs on at most N, the BLAS path included, and fewer while a
contention source makes its threads wait.

Each run is a fresh process (this file is its script, see ``__main__``) that reads, from
/proc, the CPU time every thread of the process took during the session's runs: a
thread other than the caller's that took CPU time ran some of the work.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading

import pytest

#: a product the BLAS path computes at every thread count (its multiply-adds are far above
#: the default blas_minimum_fmas)
SIZE = 512
#: columns of a weight below the session's BLAS_POOL_MINIMUM_WEIGHT (SIZE x SIZE is above),
#: multiplied by as many more rows, so that the second thread's share takes several ticks
SMALL_WEIGHT_COLUMNS = 120
SMALL_WEIGHT_ROWS = 4 * SIZE
RUNS = 40

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"),
                                reason="reads threads' CPU time from /proc")


def _child(threads: int, mode: str = "budget", **environment: str) -> dict:
    # BLAS's workers sleep as soon as a product ends, so that only work takes their ticks
    done = subprocess.run([sys.executable, __file__, str(threads), mode], capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "KERNELTUNE_CACHE": "off",
                               "OPENBLAS_THREAD_TIMEOUT": "4", **environment})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_session_of_one_thread_runs_blas_on_one_and_puts_the_count_back():
    found = _child(1)
    assert found["paths"] == ["blas"] and found["planned_threads"] == [1]
    assert found["caller_ticks"] > 0
    # no other thread of the process took a tick while the session ran
    assert found["other_ticks"] == 0, found
    # the BLAS library's own setting, which other code in the process sees, is as it was
    assert found["blas_threads_after"] == found["blas_threads_before"]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a second CPU to run BLAS's thread")
def test_a_session_of_two_threads_does_run_blas_on_its_second(tmp_path):
    # the measurement above can see a second thread's work: here it must
    found = _child(2)
    if found["blas_threads_before"] < 2:
        pytest.skip("the BLAS library runs on one thread in this process")
    assert found["paths"] == ["blas"] and found["planned_threads"] == [2]
    assert found["other_ticks"] > 0, found


@pytest.mark.skipif((os.cpu_count() or 1) < 3,
                    reason="three CPUs: BLAS runs at most a thread per CPU, and a budget of one "
                           "is the test above")
def test_a_session_of_two_threads_runs_on_two_where_blas_would_take_more():
    found = _child(2, "wide")
    if found["blas_threads"] < 3 or found["numpy_workers"] < 2:
        pytest.skip(f"the BLAS library runs fewer than three threads in this process: {found}")
    # the same products through numpy took two or more of BLAS's workers; the session one
    assert found["session_workers"] <= 1, found


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a second CPU to run BLAS's thread")
def test_under_contention_the_blas_path_takes_fewer_threads_and_they_come_back():
    found = _child(2, "contended")
    if found["blas_threads_before"] < 2:
        pytest.skip("the BLAS library runs on one thread in this process")
    # while the source makes the session's threads wait: one thread, BLAS included
    assert found["reduced"]["fewer"] == 1 and found["reduced"]["other_ticks"] == 0, found
    assert found["reduced"]["runs_on_fewer_threads"] >= RUNS
    # the source stopped: the next probe gives BLAS its second thread again
    assert found["back"]["fewer"] == 0 and found["back"]["other_ticks"] > 0, found
    assert found["blas_threads_after"] == found["blas_threads_before"]


def _ticks() -> dict[int, int]:
    """Clock ticks of user and system time per thread of this process."""
    ticks = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        ticks[int(task)] = int(fields[11]) + int(fields[12])
    return ticks


def _model_and_input(columns: int = SIZE, rows: int = SIZE):
    """A MatMul of ``rows x SIZE`` by a ``SIZE x columns`` weight, the weight and an input."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((SIZE, columns)).astype(np.float32),
                                     "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])], "blas",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [rows, SIZE])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [rows, columns])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, numpy_helper.to_array(weight), rng.standard_normal((rows, SIZE)).astype(
        np.float32)


def _blas_threads() -> int:
    from threadpoolctl import threadpool_info

    return next(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")


def _other_ticks(session, feed: dict, excluded: set[int]) -> int:
    """Ticks threads other than the caller (and ``excluded``) took over RUNS runs."""
    caller = threading.get_native_id()
    start = _ticks()
    for _ in range(RUNS):
        session.run(None, feed)
    end = _ticks()
    return sum(end[t] - start.get(t, 0) for t in end if t != caller and t not in excluded)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a second CPU to run a second thread")
@pytest.mark.parametrize(("mode", "working", "idle"), [
    # a product far above the BLAS threshold by a small weight, on the compiled path's
    # threads; by a large weight, on BLAS's, the Tanh after it on the calling thread
    ("pool", "openmp_ticks", "blas_ticks"), ("blas-pool", "blas_ticks", "openmp_ticks")])
def test_a_session_of_several_kernels_runs_on_one_pool_alone(mode, working, idle):
    found = _child(2, mode)
    if not found["blas_workers"]:
        pytest.skip("the BLAS library runs on one thread in this process")
    assert found[working] > 0 and found[idle] == 0, found


def _one_pool(columns: int, rows: int) -> dict:
    """A 2-thread session of a MatMul of ``rows`` by a ``SIZE x columns`` weight and a Tanh
    after it: the ticks BLAS's threads and the OpenMP workers took over its runs."""
    import time

    from onnx import helper

    from kerneltune.runtime import RuntimeSession
    from kerneltune.runtime.contention import blas_workers, openmp_workers

    model, _, x = _model_and_input(columns, rows)
    graph = model.graph
    graph.node[0].output[0] = "P"
    graph.node.append(helper.make_node("Tanh", ["P"], ["Y"]))
    openmp = openmp_workers(2)
    time.sleep(0.2)  # the OpenMP worker's spin after that region ends
    blas = blas_workers(2) - openmp
    # an override: from the portable defaults alone, a session keeps its products off a
    # BLAS of narrower kernels than the variant, and off its pool (test_narrow_blas)
    session = RuntimeSession(model, threads=2, contention=None,
                             overrides={"MatMul": {"algorithm.tile_m": 64}})
    session.run(None, {"X": x})
    time.sleep(0.2)
    start = _ticks()
    for _ in range(RUNS):
        session.run(None, {"X": x})
    end = _ticks()
    return {"blas_workers": len(blas),
            "blas_ticks": sum(end.get(t, 0) - start.get(t, 0) for t in blas),
            "openmp_ticks": sum(end.get(t, 0) - start.get(t, 0) for t in openmp)}


def _contended() -> dict:
    """A 2-thread session on the BLAS path beside a contention source this process controls:
    a thread that, while on, adds waits to the caller's schedstat in a task directory of
    the process's threads."""
    import tempfile
    import time
    from pathlib import Path

    from kerneltune.runtime import Contention, RuntimeSession
    from kerneltune.runtime.contention import openmp_workers

    model, _, x = _model_and_input()
    before = _blas_threads()
    openmp_workers(2)  # the OpenMP pool exists before the task directory is written
    tasks = Path(tempfile.mkdtemp())
    for tid in os.listdir("/proc/self/task"):
        (tasks / tid).mkdir()
        (tasks / tid / "schedstat").write_text(f"5000 {0:020d} 7\n")
    skipped = [0]  # nanoseconds the clock jumps: to the probe, once the source stopped
    contention = Contention(interval=0, probe=3600, tasks=tasks, runnable=lambda: None,
                            clock=lambda: time.monotonic_ns() + skipped[0])
    session = RuntimeSession(model, threads=2, contention=contention)
    feed = {"X": x}
    on = threading.Event()
    on.set()

    def source() -> None:  # rewritten in place, at one width: a reading never sees it torn
        descriptor = os.open(tasks / str(threading.main_thread().native_id) / "schedstat",
                             os.O_WRONLY)
        wait = 0
        while on.is_set():
            wait += 10 ** 9
            os.pwrite(descriptor, f"5000 {wait:020d} 7\n".encode(), 0)
            time.sleep(0.0002)
        os.close(descriptor)

    writer = threading.Thread(target=source)
    writer.start()
    try:
        for _ in range(10_000):
            session.run(None, feed)
            if contention.fewer:
                break
        time.sleep(0.2)  # the OpenMP worker's spin after the discovery's region ends
        reduced = {"other_ticks": _other_ticks(session, feed, {writer.native_id}),
                   "fewer": contention.fewer}
    finally:
        on.clear()
        writer.join()
    reduced["runs_on_fewer_threads"] = session.contention_report["runs_on_fewer_threads"][1]
    skipped[0] = 3600 * 10 ** 9
    for _ in range(3):
        session.run(None, feed)
    back = {"other_ticks": _other_ticks(session, feed, {writer.native_id}),
            "fewer": contention.fewer}
    return {"reduced": reduced, "back": back, "blas_threads_before": before,
            "blas_threads_after": _blas_threads()}


def _wide() -> dict:
    """A 2-thread session on the BLAS path, and the same product through numpy on BLAS's own
    thread count: how many threads besides the caller took CPU time over each's runs."""
    from kerneltune.runtime import RuntimeSession

    model, weight, x = _model_and_input()
    session = RuntimeSession(model, threads=2, contention=None)
    caller = threading.get_native_id()

    def workers(run) -> int:
        run()
        start = _ticks()
        for _ in range(RUNS):
            run()
        end = _ticks()
        return sum(1 for t in end if t != caller and end[t] > start.get(t, 0))

    return {"blas_threads": _blas_threads(),
            "session_workers": workers(lambda: session.run(None, {"X": x})),
            "numpy_workers": workers(lambda: x @ weight)}


def _measure(threads: int) -> dict:
    from onnx import TensorProto

    from kerneltune.kernels import library
    from kerneltune.runtime import RuntimeSession

    model, weight, x = _model_and_input()
    # contention off: beside busy processes it would rightly hold a 2-thread session to one
    session = RuntimeSession(model, threads=threads, contention=None)
    before = _blas_threads()
    # the plan of the session's product: its kernel prepared as the session prepares it
    kernel = library()["MatMul"]
    prepared = kernel.prepare(TensorProto.FLOAT, kernel.configure(TensorProto.FLOAT, {}),
                              threads)
    plans = [prepared.plan(x, weight)]
    session.run(None, {"X": x})
    caller = threading.get_native_id()
    start = _ticks()
    for _ in range(RUNS):
        session.run(None, {"X": x})
    end = _ticks()
    return {"paths": [step.path for step in plans], "planned_threads":
            [step.threads for step in plans],
            "caller_ticks": end[caller] - start[caller],
            "other_ticks": sum(end[t] - start.get(t, 0) for t in end if t != caller),
            "blas_threads_before": before, "blas_threads_after": _blas_threads()}


if __name__ == "__main__":
    modes = {"contended": _contended, "wide": _wide,
             "pool": functools.partial(_one_pool, SMALL_WEIGHT_COLUMNS, SMALL_WEIGHT_ROWS),
             "blas-pool": functools.partial(_one_pool, SIZE, SIZE)}
    print(json.dumps(modes[sys.argv[2]]() if sys.argv[2] in modes
                     else _measure(int(sys.argv[1]))))
