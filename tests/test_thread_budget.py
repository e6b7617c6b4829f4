"""A session given N threads runs on at most N, the BLAS path included.

Each run is a fresh process (this file is its script, see ``__main__``) that reads, from
/proc, the CPU time every thread of the process took during the session's runs: a
thread other than the caller's that took CPU time ran some of the work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

#: a product the BLAS path computes at every thread count (its multiply-adds are far above
#: the default blas_minimum_fmas)
SIZE = 512
RUNS = 40

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"),
                                reason="reads threads' CPU time from /proc")


def _child(threads: int) -> dict:
    done = subprocess.run([sys.executable, __file__, str(threads)], capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "KERNELTUNE_CACHE": "off"})
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


def _measure(threads: int) -> dict:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from threadpoolctl import threadpool_info

    from kerneltune.kernels import library
    from kerneltune.runtime import RuntimeSession

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((SIZE, SIZE)).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])], "blas",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [SIZE, SIZE])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [SIZE, SIZE])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = RuntimeSession(model, threads=threads)
    x = rng.standard_normal((SIZE, SIZE)).astype(np.float32)

    def blas() -> int:
        return next(pool["num_threads"] for pool in threadpool_info()
                    if pool["user_api"] == "blas")

    before = blas()
    # the plan of the session's product: its kernel prepared as the session prepares it
    kernel = library()["MatMul"]
    prepared = kernel.prepare(TensorProto.FLOAT, kernel.configure(TensorProto.FLOAT, {}),
                              threads)
    plans = [prepared.plan(x, numpy_helper.to_array(weight))]
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
            "blas_threads_before": before, "blas_threads_after": blas()}


if __name__ == "__main__":
    print(json.dumps(_measure(int(sys.argv[1]))))
