"""RuntimeSession against onnxruntime's CPU provider on single-node models, per ISA variant.

Abs, Add, Tanh, Sigmoid, Erf and Gelu on FLOAT at 1e3 ... 1.6e7 elements, Gemm and MatMul
at 64, 256 and 1024 squared (opset 20, Gelu's first). For each thread count (``--threads``,
1 and 2 by default) each runtime times every model in fresh processes of its own, as its
users run it: a kerneltune ``RuntimeSession(model, threads=t)`` on the ISA variant
``--variant`` names (``KERNELTUNE_ISA``; by default the one this processor selects), and
an onnxruntime
``InferenceSession`` with ``intra_op_num_threads=t`` and otherwise its default options
(graph optimisations on, intra-op threads spinning). There are ``--repeats`` such
processes per runtime (3 by default, the runtimes alternating), and a time is the median
over them (``results.median_rows``): one process's figure moves with where its buffers
and threads land. ``ratio`` is onnxruntime's time per run over kerneltune's (above 1:
kerneltune is faster); it is the headline. ``lowest_ratio`` and ``highest_ratio`` are the
extremes of the same ratio process by process (the i-th kerneltune process against the
i-th onnxruntime one). ``same_process_ratio`` is the same from a third process that holds
both runtimes and
times them in interleaved rounds, onnxruntime's threads not spinning
(``allow_spinning=0``, :func:`onnxruntime_session`): spinning, they would hold the core
kerneltune's thread needs next. Every model's outputs are checked against
onnxruntime's there.

Also the session's own cost, in kerneltune's process on 2 threads: a one-node model's
``run`` against a direct call of the same prepared kernel, and what contention adds (the
check every run makes for a due reading, and one reading).

Targets, per variant and thread count: every elementwise model from 1e5 elements up at
least 1.0x onnxruntime, Gemm and MatMul at least 1.0x at every size, the geometric mean
over the models at least 1.3x; the session's overhead at most 2 µs.

``--all-variants`` runs this script once per ISA variant this machine can execute, each
in a process of its own with ``--variant`` and the other arguments. The figures of the
variant this processor picks are the machine's (``bench_session``); every other
variant's go to a results file of their own (``bench_session-<variant>``).

    python benchmarks/bench_session.py [--repeats N] [--quick] [--variant V | --all-variants]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper
from results import (
    Recorder,
    add_arguments,
    add_variant_arguments,
    median_rows,
    timed,
    variant_recorder,
)

SIZES = (1_000, 10_000, 100_000, 1_000_000, 16_000_000)
PRODUCT_SIZES = (64, 256, 1024)
OVERHEAD_TARGET_US = 2.0
#: per variant and thread count: each elementwise model from ELEMENTWISE_FROM elements up,
#: each product, and the geometric mean, onnxruntime / kerneltune
ELEMENTWISE_FROM = 100_000
CASE_TARGET, GEOMEAN_TARGET = 1.0, 1.3
RUNTIMES = ("kerneltune", "onnxruntime", "same-process")


def single_node(op: str, shapes: list[tuple[int, ...]], output: tuple[int, ...]):
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node(op, names, ["y"], name=op.lower())
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                     for n, s in zip(names, shapes, strict=True)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def onnxruntime_session(model, threads: int, spinning: bool = False):
    """onnxruntime on ``threads`` intra-op threads; not spinning unless asked, for a process
    it shares with kerneltune (its spinning threads would hold the cores kerneltune needs)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    if not spinning:
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(model.SerializeToString(), options,
                                        providers=["CPUExecutionProvider"])


def cases(quick: bool):
    """(model, size label, input shapes, output shape) of every single-node model."""
    for op, arity in (("Abs", 1), ("Add", 2), ("Tanh", 1), ("Sigmoid", 1), ("Erf", 1),
                      ("Gelu", 1)):
        for size in SIZES[:-1] if quick else SIZES:
            yield op, size, [(size,)] * arity, (size,)
    for op in ("Gemm", "MatMul"):
        for n in PRODUCT_SIZES:
            yield op, n, [(n, n), (n, n)], (n, n)


def feeds(shapes: list[tuple[int, ...]]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}


# -- the processes that time -------------------------------------------------------------------

def child(runtime: str, threads: int, rounds: int, quick: bool) -> None:
    """One fresh process: a JSON row per model, median microseconds per run."""
    for op, size, shapes, output in cases(quick):
        model, feed = single_node(op, shapes, output), feeds(shapes)
        if runtime == "onnxruntime":
            contenders = {"onnxruntime": onnxruntime_session(model, threads, spinning=True)}
        else:
            from kerneltune.runtime import RuntimeSession

            contenders = {"kerneltune": RuntimeSession(model, threads=threads)}
            if runtime == "same-process":
                contenders["onnxruntime"] = onnxruntime_session(model, threads)
                np.testing.assert_allclose(contenders["kerneltune"].run(None, feed)[0],
                                           contenders["onnxruntime"].run(None, feed)[0],
                                           rtol=1e-4, atol=1e-4, err_msg=f"{op} {size}")
        times = timed({name: lambda s=s, f=feed: s.run(None, f)
                       for name, s in contenders.items()},
                      rounds)
        prefix = "same_" if runtime == "same-process" else ""
        print(json.dumps({"model": op, "size": size,
                          **{f"{prefix}{name}_us": t * 1e6 for name, t in times.items()}}),
              flush=True)
    if runtime == "kerneltune" and threads == 2:
        print(json.dumps({"overhead": overhead(threads, rounds)}), flush=True)


def overhead(threads: int, rounds: int) -> dict[str, float]:
    """The session's own cost over the bare kernel call, and contention's."""
    from kerneltune.runtime import Contention, RuntimeSession

    session = RuntimeSession(single_node("Abs", [(1000,)], (1000,)), threads=threads)
    prepared = session._steps[0][0]
    x = feeds([(1000,)])["x0"]
    reading = Contention(interval=0)
    waiting = Contention()
    waiting.next_reading = 1 << 62
    times = timed({"bare": lambda: prepared(x), "session": lambda: session.run(None, {"x0": x}),
                   "reading": lambda: (reading.start(threads), reading.finish()),
                   # the test every run makes for a due reading, as session.run writes it
                   "check": lambda c=waiting: c.fewer or c.clock() >= c.next_reading,
                   "nothing": lambda: None}, rounds)
    return {"overhead_us": (times["session"] - times["bare"]) * 1e6,
            "contention_check_us": (times["check"] - times["nothing"]) * 1e6,
            "contention_reading_us": times["reading"] * 1e6}


def run_child(runtime: str, threads: int, args: argparse.Namespace, variant: str) -> list[dict]:
    """:func:`child` in a fresh process; kerneltune's run the variant given."""
    environment = {**os.environ, "KERNELTUNE_ISA": variant}
    done = subprocess.run(
        [sys.executable, __file__, "--child", runtime, "--threads", str(threads),
         "--rounds", str(args.rounds), *(["--quick"] if args.quick else [])],
        env=environment, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"the {runtime} process on {threads} threads failed")
    return [json.loads(line) for line in done.stdout.splitlines()]


# -- the run ------------------------------------------------------------------------------------

def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, action="append",
                        help="a thread count (repeatable; default 1 and 2)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=3,
                        help="fresh processes per runtime and thread count, alternating: a "
                             "time is the median over them")
    parser.add_argument("--quick", action="store_true", help="sizes up to 1e6 only")
    add_variant_arguments(parser)
    parser.add_argument("--child", choices=RUNTIMES, help=argparse.SUPPRESS)
    add_arguments(parser)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.threads[0], args.rounds, args.quick)
        return 0
    recorder = variant_recorder(__file__, args, argv)
    if isinstance(recorder, int):  # --all-variants: each variant ran in a process of its own
        return recorder
    recorder.table("models", "single-node FLOAT models; ratio: onnxruntime / kerneltune, each "
                             "in processes of its own (onnxruntime with its default options), "
                             "the median over them, lowest_ratio and highest_ratio the "
                             "extremes process by process; same_process_ratio: both in one "
                             "process, onnxruntime not spinning")
    misses = []
    for threads in args.threads or [1, 2]:
        taken: dict[str, list[dict[tuple, dict]]] = {runtime: [] for runtime in RUNTIMES}
        overheads = []
        for _ in range(args.repeats):
            for runtime in RUNTIMES:
                rows = {}
                for row in run_child(runtime, threads, args, args.variant):
                    if "overhead" in row:
                        overheads.append(row["overhead"])
                    else:
                        rows[row.pop("model"), row.pop("size")] = row
                taken[runtime].append(rows)
        misses += _judged(recorder, args.variant, threads, taken)
        extra = {name: statistics.median(o[name] for o in overheads)
                 for name in (overheads[0] if overheads else ())}
        for name, value in extra.items():
            recorder.figure(name, value)
        if extra:
            print(f"session overhead over the bare kernel call (Abs, 1000): "
                  f"{extra['overhead_us']:.2f} us; contention: {extra['contention_check_us']:.2f}"
                  f" us per run, {extra['contention_reading_us']:.1f} us per reading")
            if not recorder.target("session overhead over the bare kernel call, Abs 1000 (us)",
                                   extra["overhead_us"], "<=", OVERHEAD_TARGET_US):
                misses.append(f"session overhead {extra['overhead_us']:.2f} us")
    recorder.finish()
    for miss in misses:
        print(f"missed: {miss}")
    return 1 if misses else 0


def _judged(recorder: Recorder, variant: str, threads: int,
            taken: dict[str, list[dict[tuple, dict]]]) -> list[str]:
    """Record one thread count's rows, figures and targets from each runtime's processes;
    the misses."""
    print(f"{variant}, {threads} threads, {len(taken['kerneltune'])} processes per runtime")
    print(f"{'model':8} {'size':>10} {'ort us':>10} {'kt us':>10} {'ort / kt':>9} "
          f"{'lowest':>7} {'highest':>7} {'same process':>13}")
    ours, theirs, both = (median_rows(taken[runtime]) for runtime in RUNTIMES)
    ratios, misses = [], []
    for (model, size), row in ours.items():
        kt, ort = row["kerneltune_us"], theirs[model, size]["onnxruntime_us"]
        ratio = ort / kt
        same = both[model, size]["same_onnxruntime_us"] / both[model, size]["same_kerneltune_us"]
        spread = [process[model, size]["onnxruntime_us"] / mine[model, size]["kerneltune_us"]
                  for mine, process in zip(taken["kerneltune"], taken["onnxruntime"],
                                           strict=True)]
        ratios.append(ratio)
        print(f"{model:8} {size:>10} {ort:>10.1f} {kt:>10.1f} {ratio:>9.2f} {min(spread):>7.2f} "
              f"{max(spread):>7.2f} {same:>13.2f}")
        recorder.row("models", model=model, size=size, threads=threads, onnxruntime_us=ort,
                     kerneltune_us=kt, ratio=ratio, lowest_ratio=min(spread),
                     highest_ratio=max(spread), same_process_ratio=same,
                     processes=len(spread))
        product = model in ("Gemm", "MatMul")
        if (product or size >= ELEMENTWISE_FROM) and not recorder.target(
                f"{'products' if product else 'elementwise from 1e5 elements'}, onnxruntime / "
                f"kerneltune, {threads} threads", ratio, ">=", CASE_TARGET, f"{model} {size}"):
            misses.append(f"{model} {size} on {threads} threads: {ratio:.2f}x")
    mean = geomean(ratios)
    print(f"geometric mean onnxruntime / kerneltune: {mean:.2f} (target >= {GEOMEAN_TARGET})")
    recorder.figure("geomean_ratio" if threads == 2 else f"geomean_ratio_{threads}_threads", mean)
    if not recorder.target(f"geometric mean, onnxruntime / kerneltune, {threads} threads", mean,
                           ">=", GEOMEAN_TARGET):
        misses.append(f"geometric mean on {threads} threads: {mean:.2f}x")
    return misses


if __name__ == "__main__":
    sys.exit(main())
