"""Tail latency of one-node sessions, alone and beside the thread pools a process also runs.

Abs, Add and Tanh at 1e5, 1e6, 4e6 and 1.6e7 FLOAT elements and MatMul 256
cubed on the blocked path, each a RuntimeSession on 1 and 2 threads, timed
call by call: p50, p90 and p99 over ``--runs`` calls. Each neighbour runs in a
fresh process of its own, as in a deployment:

- ``alone``: nothing else;
- ``onnxruntime``: an onnxruntime session with default options (its intra-op
  threads spin after a run) runs just before every timed call;
- ``openblas``: numpy's BLAS multiplies two 256 x 256 matrices just before every
  timed call, without ``OPENBLAS_THREAD_TIMEOUT`` (its threads spin after it);
- ``python-thread``: a Python thread loops over numpy additions all along;
- ``onnxruntime-no-spin`` and ``openblas-timeout``: the first two with the
  settings docs/kernels.md gives for them (``session.intra_op.allow_spinning``
  0, ``OPENBLAS_THREAD_TIMEOUT=4``).

A short sleep between calls lets pools settle as between requests. Ratios are
over the median of the same case alone (a neighbour that slows every call
shows in the median too). Targets on 2 threads at 1e6 elements and above: p90
at most 1.5x and p99 at most 3x that median beside every neighbour.

    python benchmarks/bench_tail.py [--runs 300] [--threads 1 --threads 2]
        [--neighbour onnxruntime] [--set OMP_WAIT_POLICY=passive]

``--set NAME=VALUE`` runs every process with that variable: how a wait policy
or spin count is compared, each in a run of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection

import numpy as np
from results import Recorder, add_arguments

NEIGHBOURS = ("alone", "onnxruntime", "openblas", "python-thread", "onnxruntime-no-spin",
              "openblas-timeout")
SIZES = (100_000, 1_000_000, 4_000_000, 16_000_000)
MATMUL = 256
#: the blocked path at 256 cubed, whatever a profile says of BLAS
BLOCKED = {"algorithm.blas_minimum_fmas": 1 << 62, "algorithm.skinny_blas_minimum_fmas": 1 << 62,
           "algorithm.vector_blas_minimum_fmas": 1 << 62}
P90_TARGET, P99_TARGET = 1.5, 3.0
#: seconds between calls: requests do not arrive back to back
PAUSE = 0.0005


def cases():
    for op, arity in (("Abs", 1), ("Add", 2), ("Tanh", 1)):
        for size in SIZES:
            yield op, size, [(size,)] * arity, (size,), None
    yield "MatMul", MATMUL ** 3, [(MATMUL, MATMUL)] * 2, (MATMUL, MATMUL), {"MatMul": BLOCKED}


def _neighbour(name: str) -> Callable[[], None]:
    """What runs just before each timed call (nothing for a neighbour that runs all along)."""
    if name.startswith("onnxruntime"):
        import onnxruntime
        from bench_session import single_node

        model = single_node("Add", [(100_000,)] * 2, (100_000,))
        options = onnxruntime.SessionOptions()
        if name == "onnxruntime-no-spin":
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
        feed = {"x0": np.ones(100_000, np.float32), "x1": np.ones(100_000, np.float32)}
        return lambda: session.run(None, feed)
    if name.startswith("openblas"):
        a = np.random.default_rng(1).standard_normal((256, 256))
        return lambda: a @ a
    if name == "python-thread":
        def spin() -> None:
            x = np.ones(100_000, np.float32)
            while True:
                np.add(x, x, out=x)
        threading.Thread(target=spin, daemon=True).start()
    return lambda: None


def child(neighbour: str, threads: int, runs: int,
          only: Collection[tuple[str, int]] | None = None) -> None:
    """Time every case (of ``only``: model, size) beside ``neighbour``; a JSON row per case."""
    from bench_session import single_node

    from kerneltune.runtime import RuntimeSession

    before = _neighbour(neighbour)
    rng = np.random.default_rng(0)
    for op, size, shapes, output, overrides in cases():
        if only is not None and (op, size) not in only:
            continue
        session = RuntimeSession(single_node(op, shapes, output), threads=threads,
                                 overrides=overrides)
        feed = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
        for _ in range(5):
            session.run(None, feed)
        count = max(30, runs // 4) if size >= 16_000_000 else runs
        samples = []
        for _ in range(count):
            before()
            time.sleep(PAUSE)
            start = time.perf_counter()
            session.run(None, feed)
            samples.append(time.perf_counter() - start)
        p50, p90, p99 = np.percentile(np.array(samples) * 1e6, [50, 90, 99])
        print(json.dumps({"model": op, "size": size, "threads": threads,
                          "neighbour": neighbour, "calls": count, "p50_us": p50,
                          "p90_us": p90, "p99_us": p99}), flush=True)


def environment(neighbour: str, settings: Collection[str]) -> dict[str, str]:
    """This process's environment with ``settings`` (NAME=VALUE), as ``neighbour`` needs it."""
    variables = {**os.environ, **dict(setting.split("=", 1) for setting in settings)}
    if neighbour == "openblas":
        variables.pop("OPENBLAS_THREAD_TIMEOUT", None)
    elif neighbour == "openblas-timeout":
        variables["OPENBLAS_THREAD_TIMEOUT"] = "4"
    return variables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="timed calls per case")
    parser.add_argument("--threads", type=int, action="append")
    parser.add_argument("--neighbour", action="append", choices=NEIGHBOURS)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable of every process (repeatable)")
    parser.add_argument("--child", choices=NEIGHBOURS, help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args(argv)
    threads = args.threads or [1, 2]
    if args.child:
        child(args.child, threads[0], args.runs)
        return 0
    recorder = Recorder(__file__, args)
    recorder.table("latency", "µs per call; p50_ratio, p90_ratio and p99_ratio: over the p50 of "
                              "the same case and threads alone")
    misses, alone = [], {}
    print(f"{'neighbour':14} {'threads':>7} {'model':7} {'size':>9} {'p50 us':>9} "
          f"{'p90 us':>9} {'p99 us':>9} {'p50/alone':>9} {'p90/alone':>9} {'p99/alone':>9}")
    # alone first: the others' ratios are over its medians
    for neighbour in dict.fromkeys(("alone", *(args.neighbour or NEIGHBOURS))):
        for count in threads:
            done = subprocess.run(
                [sys.executable, __file__, "--child", neighbour, "--threads", str(count),
                 "--runs", str(args.runs)], env=environment(neighbour, args.set),
                capture_output=True, text=True, check=True)
            for line in done.stdout.splitlines():
                row = json.loads(line)
                median = alone.setdefault((row["model"], row["size"], count), row["p50_us"])
                p50, p90, p99 = (row[f"p{p}_us"] / median for p in (50, 90, 99))
                print(f"{neighbour:14} {count:>7} {row['model']:7} {row['size']:>9.3g} "
                      f"{row['p50_us']:>9.1f} {row['p90_us']:>9.1f} {row['p99_us']:>9.1f} "
                      f"{p50:>9.2f} {p90:>9.2f} {p99:>9.2f}")
                recorder.row("latency", **row, p50_ratio=p50, p90_ratio=p90, p99_ratio=p99)
                if count == 2 and row["model"] != "MatMul" and row["size"] >= 1_000_000:
                    case = f"{row['model']} {row['size']:.3g}, {neighbour}"
                    if not recorder.target("p90 / p50 alone", p90, "<=", P90_TARGET, case):
                        misses.append(f"{case}: p90 {p90:.2f}x the median alone")
                    if not recorder.target("p99 / p50 alone", p99, "<=", P99_TARGET, case):
                        misses.append(f"{case}: p99 {p99:.2f}x the median alone")
    recorder.finish()
    for miss in misses:
        print(f"MISSED: {miss}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
