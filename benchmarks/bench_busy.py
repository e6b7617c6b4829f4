"""Sessions beside busy processes: kerneltune and onnxruntime, quiet and on a loaded host.

The cases: bench_session's single-node FLOAT models (Abs, Add, Tanh and Sigmoid at 1e3
... 1.6e7 elements, Gemm at 64, 256 and 1024 squared), MatMul at 256 squared on the
blocked path and on the BLAS path (the thresholds set so, whatever a profile says), MatMul
of 4096 x 256 by 256 x 1024 on the blocked path (``MatMul workers``: a grid large enough
for the workers of the variants that have them, docs/kernels.md, Workers), and
bench_models' two transformer MLP blocks at 64 rows (``gelu_gemm``, ``silu_matmul``).

Each load is a set of processes this script starts that loop in Python for as long as
the load lasts: ``quiet`` none, ``busy-1`` one per CPU, ``busy-2`` two per CPU. Under
each, every runtime times every case in a fresh process of its own, on ``--threads``
threads, as its users run it: a kerneltune ``RuntimeSession(model, threads=t)`` on the
ISA variant ``--variant`` names, and an onnxruntime ``InferenceSession`` with
``intra_op_num_threads=t`` and otherwise its default options (intra-op threads
spinning). A case is called back to back: for ``SETTLE`` seconds untimed (the first
case longer, while contention finds its thread count), then timed call by call for
``--seconds``. Each process runs ``--repeats`` times, the runtimes alternating, and a
case's p50 and p90 are the medians over them. ``ratio`` is onnxruntime's p50 over
kerneltune's (above 1: kerneltune is faster); ``kerneltune_p90_over_p50`` is
kerneltune's tail over its own median; ``mean_ratio`` is onnxruntime's mean time per call
over kerneltune's, which the calls that waited a time slice weigh on as the median does not
(a throughput's measure); ``values`` says where the session's Gemm and
MatMul values came from on each thread count its runs used (``defaults``, a
profile's tier, ``calibrated`` from the user's cache).

kerneltune also runs with contention off (``contention=None``;
``contention_off_ratio`` is the p50 with it on over off, ``contention_off_mean_ratio`` the
mean's) and, quiet, with
``--before SRC``, as the kerneltune package in ``SRC`` (the ``src`` folder of an
earlier checkout whose compiled kernels are in place): ``quiet_cost`` is the p50 now
over that one's, what this version's policy costs where nothing competes. Each
kerneltune process records its contention's statistics (runs read, runs that waited,
runs faster than on fewer threads, probes run, probes that waited, probes skipped) at its
end.

Targets, beside busy processes: onnxruntime / kerneltune at least 0.8 in every case
and at least 1.0 by geometric mean, kerneltune's p90 at most 3x its median; quiet,
the geometric mean of ``quiet_cost`` at most 1.05.

    python benchmarks/bench_busy.py [--threads 2] [--seconds 1] [--repeats 3]
        [--load busy-1] [--before SRC] [--variant V | --all-variants]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager

import numpy as np
from bench_session import feeds, geomean, onnxruntime_session, single_node
from results import (
    Recorder,
    add_arguments,
    add_variant_arguments,
    checkout_commit,
    variant_recorder,
)

LOADS = {"quiet": 0, "busy-1": 1, "busy-2": 2}
SIZES = (1_000, 10_000, 100_000, 1_000_000, 16_000_000)
PRODUCT_SIZES = (64, 256, 1024)
MATMUL = 256
#: (M, K, N) of the blocked product whose grid gives the workers their share
WORKERS_PRODUCT = (4096, 256, 1024)
ROWS = 64
#: the thresholds that keep a product on one path, whatever a profile says
PATHS = {
    "blocked": dict.fromkeys(("algorithm.blas_minimum_fmas", "algorithm.skinny_blas_minimum_fmas",
                              "algorithm.vector_blas_minimum_fmas"), 1 << 62),
    "blas": dict.fromkeys(("algorithm.blas_minimum_fmas", "algorithm.skinny_blas_minimum_fmas",
                           "algorithm.vector_blas_minimum_fmas"), 0),
}
SETTLE, FIRST_SETTLE = 0.5, 2.0
RATIO_TARGET, GEOMEAN_TARGET, TAIL_TARGET, QUIET_COST_TARGET = 0.8, 1.0, 3.0, 1.05
RUNTIMES = ("kerneltune", "onnxruntime", "kerneltune-off", "kerneltune-before")
#: the runtimes that run beside a load, not only quiet
UNDER_LOAD = ("kerneltune", "onnxruntime", "kerneltune-off")


def cases():
    """(case name, size, model, feed, kerneltune's overrides) of every case."""
    for op, arity in (("Abs", 1), ("Add", 2), ("Tanh", 1), ("Sigmoid", 1)):
        for size in SIZES:
            shapes = [(size,)] * arity
            yield op, size, single_node(op, shapes, (size,)), feeds(shapes), None
    for n in PRODUCT_SIZES:
        yield "Gemm", n, single_node("Gemm", [(n, n)] * 2, (n, n)), feeds([(n, n)] * 2), None
    for path, thresholds in PATHS.items():
        shapes = [(MATMUL, MATMUL)] * 2
        yield (f"MatMul {path}", MATMUL, single_node("MatMul", shapes, (MATMUL, MATMUL)),
               feeds(shapes), {"MatMul": thresholds})
    m, k, n = WORKERS_PRODUCT
    yield ("MatMul workers", m, single_node("MatMul", [(m, k), (k, n)], (m, n)),
           feeds([(m, k), (k, n)]), {"MatMul": PATHS["blocked"]})
    from bench_models import HIDDEN, block

    x = np.random.default_rng(0).standard_normal((ROWS, HIDDEN)).astype(np.float32)
    for name in ("gelu_gemm", "silu_matmul"):
        yield name, ROWS, block(name), {"X": x}, None


def latencies(run, settle: float, seconds: float) -> list[float]:
    """Seconds per call, called back to back after ``settle`` seconds of calls."""
    end = time.perf_counter() + settle
    while time.perf_counter() < end:
        run()
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 20:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return sorted(times)


def child(runtime: str, threads: int, seconds: float) -> None:
    """One fresh process: a JSON row per case (p50 and p90 in microseconds), then kerneltune's
    contention statistics."""
    from kerneltune.runtime import RuntimeSession, default_contention

    settle = FIRST_SETTLE
    for name, size, model, feed, overrides in cases():
        if runtime == "onnxruntime":
            session = onnxruntime_session(model, threads, spinning=True)
        else:
            session = RuntimeSession(model, threads=threads, overrides=overrides,
                                     contention=None if runtime == "kerneltune-off"
                                     else default_contention)
        times = latencies(lambda s=session, f=feed: s.run(None, f), settle, seconds)
        settle = SETTLE
        row = {"case": name, "size": size, "p50_us": times[len(times) // 2] * 1e6,
               "p90_us": times[int(len(times) * 0.9)] * 1e6,
               "mean_us": statistics.fmean(times) * 1e6}
        if runtime == "kerneltune" and hasattr(session, "contention_report"):
            row["values"] = products_values(session.contention_report)
        print(json.dumps(row), flush=True)
    if runtime == "kerneltune" and hasattr(default_contention, "statistics"):
        print(json.dumps({"contention": default_contention.statistics()}), flush=True)


def products_values(report: dict) -> str:
    """Where each Gemm and MatMul key's values came from, per thread count the runs used."""
    return "; ".join(
        f"{threads}: " + ", ".join(sorted({source["tier"] for key, source in sources.items()
                                           if "/Gemm/" in key or "/MatMul/" in key}))
        for threads, sources in report["sources"].items()
        if any("/Gemm/" in key or "/MatMul/" in key for key in sources))


@contextmanager
def load(per_cpu: int):
    """``per_cpu`` processes per CPU that loop in Python while the block runs."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(per_cpu * len(os.sched_getaffinity(0)))]
    try:
        if busy:
            time.sleep(1)  # the scheduler has them running
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()


def run_child(runtime: str, threads: int, args: argparse.Namespace, variant: str) -> list[dict]:
    environment = {**os.environ, "KERNELTUNE_ISA": variant}
    if runtime == "kerneltune-before":
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(args.before), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, __file__, "--child", "kerneltune" if runtime == "kerneltune-before"
         else runtime, "--threads", str(threads), "--seconds", str(args.seconds)],
        env=environment, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"the {runtime} process on {threads} threads failed")
    return [json.loads(line) for line in done.stdout.splitlines()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, action="append",
                        help="a thread count (repeatable; default 2)")
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="timed seconds per case and runtime")
    parser.add_argument("--repeats", type=int, default=1,
                        help="processes per runtime and load, alternating (default 1)")
    parser.add_argument("--load", choices=LOADS, action="append",
                        help="a load (repeatable; default all)")
    parser.add_argument("--before", type=os.path.abspath,
                        help="the src folder of an earlier kerneltune, compared quiet")
    add_variant_arguments(parser)
    parser.add_argument("--child", choices=RUNTIMES, help=argparse.SUPPRESS)
    add_arguments(parser)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.threads[0], args.seconds)
        return 0
    recorder = variant_recorder(__file__, args, argv)
    if isinstance(recorder, int):  # --all-variants: each variant ran in a process of its own
        return recorder
    if args.before:  # the earlier checkout's commit, not this machine's path to it
        recorder.arguments["before"] = checkout_commit(args.before)
    recorder.table("cases", "per load and case: p50 and p90 µs per call, each runtime in a "
                            "process of its own beside the load (medians over the repeats); "
                            "ratio: onnxruntime's p50 over kerneltune's; quiet_cost: "
                            "kerneltune's p50 over the earlier version's; contention_off_ratio: "
                            "over its own with contention off; values: where the products' "
                            "values came from per thread count")
    recorder.table("contention", "per load: kerneltune's contention statistics at the end of "
                                 "its process")
    misses: list[str] = []
    for threads in args.threads or [2]:
        for name in args.load or LOADS:
            runtimes = [r for r in RUNTIMES if r in UNDER_LOAD or name == "quiet"
                        and (r != "kerneltune-before" or args.before)]
            samples: dict[tuple, dict[str, list[dict]]] = {}
            with load(LOADS[name]):
                for _ in range(args.repeats):
                    for runtime in runtimes:
                        for row in run_child(runtime, threads, args, args.variant):
                            if "contention" in row:
                                if runtime == "kerneltune":
                                    recorder.row("contention", load=name, threads=threads,
                                                 **row["contention"])
                                continue
                            samples.setdefault((row["case"], row["size"]), {}).setdefault(
                                runtime, []).append(row)
            measured = {case: {runtime: medians(rows) for runtime, rows in by_runtime.items()}
                        for case, by_runtime in samples.items()}
            misses += _judged(recorder, name, threads, measured)
    recorder.finish()
    for miss in misses:
        print(f"missed: {miss}")
    return 1 if misses else 0


def medians(rows: list[dict]) -> dict:
    """One runtime's row of a case over its processes: the medians of p50, p90 and mean."""
    return {**rows[0], **{field: statistics.median(row[field] for row in rows)
                          for field in ("p50_us", "p90_us", "mean_us")}}


def _judged(recorder: Recorder, name: str, threads: int, measured: dict) -> list[str]:
    """Record one load's rows, figures and targets; the misses."""
    print(f"{name}, {threads} threads")
    print(f"{'case':14} {'size':>9} {'ort p50':>9} {'kt p50':>9} {'kt p90':>9} {'ort / kt':>9}")
    ratios, mean_ratios, costs, misses = [], [], [], []
    busy = name != "quiet"
    for (case, size), row in measured.items():
        kt, ort = row["kerneltune"], row["onnxruntime"]
        ratio, tail = ort["p50_us"] / kt["p50_us"], kt["p90_us"] / kt["p50_us"]
        mean_ratio = ort["mean_us"] / kt["mean_us"]
        ratios.append(ratio)
        mean_ratios.append(mean_ratio)
        fields = {"load": name, "case": case, "size": size, "threads": threads,
                  "onnxruntime_p50_us": ort["p50_us"], "onnxruntime_p90_us": ort["p90_us"],
                  "kerneltune_p50_us": kt["p50_us"], "kerneltune_p90_us": kt["p90_us"],
                  "ratio": ratio, "kerneltune_p90_over_p50": tail, "values": kt["values"],
                  "onnxruntime_mean_us": ort["mean_us"], "kerneltune_mean_us": kt["mean_us"],
                  "mean_ratio": mean_ratio}
        if "kerneltune-off" in row:
            off = row["kerneltune-off"]
            fields["contention_off_ratio"] = kt["p50_us"] / off["p50_us"]
            fields["contention_off_mean_ratio"] = kt["mean_us"] / off["mean_us"]
        if "kerneltune-before" in row:
            fields["quiet_cost"] = kt["p50_us"] / row["kerneltune-before"]["p50_us"]
            costs.append(fields["quiet_cost"])
        recorder.row("cases", **fields)
        print(f"{case:14} {size:>9} {ort['p50_us']:>9.1f} {kt['p50_us']:>9.1f} "
              f"{kt['p90_us']:>9.1f} {ratio:>9.2f}")
        label = f"{case} {size}"
        if busy and not recorder.target(f"{name}, onnxruntime / kerneltune, {threads} threads",
                                        ratio, ">=", RATIO_TARGET, label):
            misses.append(f"{name} {label}: {ratio:.2f}x")
        if busy and not recorder.target(f"{name}, kerneltune p90 / p50, {threads} threads",
                                        tail, "<=", TAIL_TARGET, label):
            misses.append(f"{name} {label}: p90 {tail:.1f}x its median")
    mean = geomean(ratios)
    print(f"geometric mean onnxruntime / kerneltune: {mean:.2f}")
    recorder.figure(f"geomean_ratio_{name}_{threads}_threads", mean)
    recorder.figure(f"geomean_mean_ratio_{name}_{threads}_threads", geomean(mean_ratios))
    if busy and not recorder.target(f"{name}, geometric mean, onnxruntime / kerneltune, "
                                    f"{threads} threads", mean, ">=", GEOMEAN_TARGET):
        misses.append(f"{name} geometric mean: {mean:.2f}x")
    if costs:
        cost = geomean(costs)
        print(f"quiet: now / before, geometric mean {cost:.3f}")
        recorder.figure(f"quiet_cost_{threads}_threads", cost)
        if not recorder.target(f"quiet, now / before, geometric mean, {threads} threads",
                               cost, "<=", QUIET_COST_TARGET):
            misses.append(f"quiet cost {cost:.3f}")
    return misses


if __name__ == "__main__":
    sys.exit(main())
