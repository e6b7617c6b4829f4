"""RuntimeSession against onnxruntime's CPU provider on single-node models.

Abs, Add, Tanh and Sigmoid on FLOAT at 1e3 ... 1.6e7 elements, and Gemm at 64,
256 and 1024 squared, each run through a kerneltune RuntimeSession and an
onnxruntime InferenceSession with the same intra-op thread count, in
interleaved rounds; the figure is the median time per run. Two thread pools
share this process on a small machine, so onnxruntime's threads do not spin
after a run (``allow_spinning=0``): spinning, they would hold the core
kerneltune's OpenMP thread needs next. The ratio is
onnxruntime's time over ours (above 1: we are faster).

Also the session's own cost: a one-node model's ``run`` against a direct call
of the same prepared kernel on the same input, and what contention adds to it
(the check every run makes for a due reading, and one reading).

    python benchmarks/bench_session.py [--threads 2] [--rounds 15] [--quick]
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np
import onnxruntime
from bench_kernels import report, timed
from onnx import TensorProto, helper
from results import Recorder, add_arguments

from kerneltune.runtime import Contention, RuntimeSession

SIZES = (1_000, 10_000, 100_000, 1_000_000, 16_000_000)
GEMM_SIZES = (64, 256, 1024)
OVERHEAD_TARGET_US = 2.0


def single_node(op: str, shapes: list[tuple[int, ...]], output: tuple[int, ...]):
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node(op, names, ["y"], name=op.lower())
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                     for n, s in zip(names, shapes, strict=True)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def onnxruntime_session(model, threads: int):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Both runtimes live in this process: onnxruntime's threads spinning after a run would
    # hold the core kerneltune's OpenMP thread needs (a stall of a scheduler time slice).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(model.SerializeToString(), options,
                                        providers=["CPUExecutionProvider"])


def cases(quick: bool):
    for op, arity in (("Abs", 1), ("Add", 2), ("Tanh", 1), ("Sigmoid", 1)):
        for size in SIZES[:-1] if quick else SIZES:
            yield op, f"{size}", [(size,)] * arity, (size,)
    for n in GEMM_SIZES:
        yield "Gemm", f"{n}^3", [(n, n), (n, n)], (n, n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="sizes up to 1e6 only")
    add_arguments(parser)
    args = parser.parse_args(argv)
    recorder = Recorder(__file__, args)
    recorder.table("models", "single-node FLOAT models; ratio: onnxruntime / kerneltune")
    rng = np.random.default_rng(0)
    ratios, misses = [], []
    print(f"{'model':8} {'size':>10} {'ort us':>10} {'kerneltune us':>14} {'ort / kt':>9}")
    for op, label, shapes, output in cases(args.quick):
        model = single_node(op, shapes, output)
        ours = RuntimeSession(model, threads=args.threads)
        theirs = onnxruntime_session(model, args.threads)
        feed = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
        np.testing.assert_allclose(ours.run(None, feed)[0], theirs.run(None, feed)[0],
                                   rtol=1e-4, atol=1e-4)
        times = timed({"ort": lambda s=theirs, f=feed: s.run(None, f),
                       "ours": lambda s=ours, f=feed: s.run(None, f)}, args.rounds)
        ratio = times["ort"] / times["ours"]
        ratios.append(ratio)
        print(f"{op:8} {label:>10} {times['ort'] * 1e6:>10.1f} {times['ours'] * 1e6:>14.1f} "
              f"{ratio:>9.2f}")
        recorder.row("models", model=op, size=label, onnxruntime_us=times["ort"] * 1e6,
                     kerneltune_us=times["ours"] * 1e6, ratio=ratio)
        elements = math.prod(output)
        if elements >= 1_000_000 and op != "Gemm" and not recorder.target(
                "elementwise models at >= 1e6 elements, onnxruntime / kerneltune", ratio, ">=",
                1.0, f"{op} {label}"):
            misses.append(f"{op} at {label}: {ratio:.2f}x onnxruntime (target >= 1.0)")
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"geometric mean ort / kerneltune: {geomean:.2f} (target >= 0.9)")
    recorder.figure("geomean_ratio", geomean)
    if not recorder.target("geometric mean, onnxruntime / kerneltune", geomean, ">=", 0.9):
        misses.append(f"geometric mean {geomean:.2f}x onnxruntime (target >= 0.9)")

    model = single_node("Abs", [(1000,)], (1000,))
    session = RuntimeSession(model, threads=args.threads)
    prepared = session._steps[0][0]
    x = rng.standard_normal(1000).astype(np.float32)
    reading = Contention(interval=0)
    waiting = Contention()
    waiting.next_reading = 1 << 62
    times = timed({"bare": lambda: prepared(x), "session": lambda: session.run(None, {"x0": x}),
                   "reading": lambda: (reading.start(args.threads), reading.finish()),
                   # the test every run makes for a due reading, as session.run writes it
                   "check": lambda c=waiting: c.fewer or c.clock() >= c.next_reading,
                   "nothing": lambda: None}, args.rounds)
    overhead = (times["session"] - times["bare"]) * 1e6
    check = (times["check"] - times["nothing"]) * 1e6
    recorder.figure("contention_check_us", check)
    recorder.figure("contention_reading_us", times["reading"] * 1e6)
    print(f"contention: {check:.2f} us per run, {times['reading'] * 1e6:.1f} us per reading "
          f"(one run in 10 ms)")
    print(f"session overhead over the bare kernel call (Abs, 1000): {overhead:.2f} us "
          f"(target <= {OVERHEAD_TARGET_US})")
    recorder.figure("overhead_us", overhead)
    if not recorder.target("session overhead over the bare kernel call, Abs 1000 (us)", overhead,
                           "<=", OVERHEAD_TARGET_US):
        misses.append(f"session overhead {overhead:.2f} us (target {OVERHEAD_TARGET_US} us)")
    recorder.finish()
    return report(misses)


if __name__ == "__main__":
    sys.exit(main())
