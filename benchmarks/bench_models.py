"""Converters' models through RuntimeSession against onnxruntime, each in a process of its own.

The corpus: the seventeen scikit-learn estimators skl2onnx wrote in tests/data/converted
(``make_models.py`` there; input ``X``, FLOAT, [N, 8]), and three transformer MLP blocks
as exporters write them, built here with onnx.helper (hidden 256 -> 1024 -> 256, FLOAT,
opset 17 unless said, input ``X`` [N, 256], weights drawn as PyTorch initialises a
Linear):

- ``gelu_gemm``: Gemm with transB=1 and a bias, GELU in its tanh form written out as
  exporters write it (Pow, Mul, Add, Tanh: ``0.5 * x * (1 + tanh(sqrt(2 / pi) *
  (x + 0.044715 * x^3)))``), a second Gemm with transB=1;
- ``silu_matmul``: the rows reshaped to one sequence [1, N, 256], MatMul and Add, SiLU as
  ``x * Sigmoid(x)``, MatMul and Add, reshaped back to [N, 256];
- ``layernorm_gelu``: a pre-norm block as the PyTorch exporter writes ``nn.LayerNorm`` and
  ``nn.GELU`` from opset 20 on: LayerNormalization, MatMul and Add, Gelu, MatMul and Add,
  and the residual Add of the input.

A model RuntimeSession refuses at construction is recorded as refused, with the
UnsupportedModelError's first line and the operator types it names. Every model that
runs is checked against onnxruntime (``assert_allclose``, rtol and atol 1e-4, at every
row count and thread count; the largest absolute difference is recorded), then timed at
1, 64 and 4096 rows on 1 and 2 threads: a kerneltune ``RuntimeSession(model,
threads=t)`` and an onnxruntime ``InferenceSession`` with ``intra_op_num_threads=t``
and otherwise default options (graph optimisations on, intra-op threads spinning: as
its users run it), each runtime in fresh processes of its own per model and thread
count, which time every row count: the median over rounds after warm-up
(``results.timed``), as many rounds as make about ``--seconds`` (at least 7). There are
``--repeats`` such processes per runtime (3 by default, the runtimes alternating), and a
figure is the median over them: one process's figure moves with where its buffers and
threads happened to land (a 4096-row MLP on two threads took about 165 µs in some
processes and 265 µs in others, the same code). ``ratio`` is onnxruntime's time over
kerneltune's (above 1: kerneltune is faster); ``lowest_ratio`` and ``highest_ratio`` are
the extremes of the same ratio process by process (the i-th kerneltune process against
the i-th onnxruntime one), the spread the median leaves out.
``same_process_ratio`` is the same in a third process that holds both, onnxruntime
with spinning off (``bench_session.onnxruntime_session``), timed in interleaved rounds
as bench_session does. ``products`` is the path and thread count each Gemm and MatMul
of the kerneltune session takes at that row count; ``parallel_nodes`` how many of its
other kernels run on more than one thread; ``kerneltune_faults`` and
``onnxruntime_faults`` the minor page faults per run in each runtime's own process
(memory the allocator gave back to the system and takes again).

First session: the wall time from just before a fresh process starts to the result of
its first run (one row of ``mlp_regressor_relu``), imports included, each runtime with
its default thread count and options, the median over ``--processes`` processes each,
alternating, after one untimed process of each (the files in the page cache, and the
modules' bytecode: the processes write and read it under a directory of their own,
``PYTHONPYCACHEPREFIX``, whatever ``PYTHONDONTWRITEBYTECODE`` says, as an installed
package has its bytecode; compiling every module from source took kerneltune's first
session from about 290 to 470 ms).

Everything runs with OPENBLAS_THREAD_TIMEOUT=4 unless the environment sets it, the
setting kerneltune's documentation gives for a deployment (kerneltune's BLAS path is
numpy's OpenBLAS; onnxruntime does not use it).

Targets: every corpus model runs and matches onnxruntime; the geometric mean over
the models that run of onnxruntime / kerneltune at least 1.0 at each row count and
thread count, and no model below 0.8; the first session at most 2x onnxruntime's.

``--variant`` runs kerneltune's processes on one ISA variant (``KERNELTUNE_ISA``),
``--all-variants`` on each variant this machine executes, in turn; every variant but the
processor's own writes a results file of its own (``bench_models-<variant>``).

    python benchmarks/bench_models.py [--repeats N] [--model NAME] [--variant V | --all-variants]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_tail import rows
from results import (
    add_arguments,
    add_variant_arguments,
    median_rows,
    quiet_openblas,
    timed,
    variant_recorder,
)

# kerneltune, onnxruntime and onnx are imported where they are used: the onnxruntime
# process never loads kerneltune, nor the kerneltune process onnxruntime.

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "converted"
BATCHES = (1, 64, 4096)
THREADS = (1, 2)
HIDDEN, INNER = 256, 1024
BLOCKS = ("gelu_gemm", "silu_matmul", "layernorm_gelu")
FIRST_SESSION_MODEL = "mlp_regressor_relu"
RATIO_TARGET, MODEL_RATIO_TARGET, FIRST_SESSION_TARGET = 1.0, 0.8, 2.0
TOLERANCE = 1e-4
MIN_ROUNDS = 7
#: a round of results.timed lasts about this long when a call is shorter
ROUND_SECONDS = 0.005
RUNTIMES = ("kerneltune", "onnxruntime", "same-process")

#: one fresh process's first session: import, construction, first run; argv: runtime, model
FIRST_SESSION = """
import json, sys, time
started = time.monotonic()
import numpy as np
if sys.argv[1] == "kerneltune":
    from kerneltune.runtime import RuntimeSession as Session
    options = {}
else:
    from onnxruntime import InferenceSession as Session
    options = {"providers": ["CPUExecutionProvider"]}
loaded = time.monotonic()
session = Session(sys.argv[2], **options)
built = time.monotonic()
(signature,) = session.get_inputs()
result = session.run(None, {signature.name: np.ones((1, signature.shape[-1]), np.float32)})
done = time.monotonic()
print(json.dumps({"started": started, "done": done, "import_s": loaded - started,
                  "session_s": built - loaded, "run_s": done - built}))
"""


# -- the corpus -------------------------------------------------------------------------------

def linear(rng: np.random.Generator, rows: int, columns: int) -> np.ndarray:
    """A weight as PyTorch initialises a Linear of ``columns`` inputs: U(-1/sqrt, 1/sqrt)."""
    bound = 1 / math.sqrt(columns)
    return rng.uniform(-bound, bound, (rows, columns)).astype(np.float32)


def block(name: str):
    """A transformer MLP block as an exporter writes it (see the module's docstring)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(BLOCKS.index(name))
    w1, w2 = linear(rng, INNER, HIDDEN), linear(rng, HIDDEN, INNER)  # (out, in)
    b1 = rng.uniform(-1 / HIDDEN ** 0.5, 1 / HIDDEN ** 0.5, INNER).astype(np.float32)
    b2 = rng.uniform(-1 / INNER ** 0.5, 1 / INNER ** 0.5, HIDDEN).astype(np.float32)
    constants = {"b1": b1, "b2": b2}
    node = helper.make_node
    if name == "gelu_gemm":
        constants.update(w1=w1, w2=w2, half=np.float32(0.5), three=np.float32(3.0),
                         cubic=np.float32(0.044715), scale=np.float32(math.sqrt(2 / math.pi)),
                         one=np.float32(1.0))
        nodes = [
            node("Gemm", ["X", "w1", "b1"], ["h"], name="fc1", transB=1),
            node("Pow", ["h", "three"], ["h3"], name="gelu/pow"),
            node("Mul", ["h3", "cubic"], ["h3c"], name="gelu/mul_cubic"),
            node("Add", ["h", "h3c"], ["inner"], name="gelu/add"),
            node("Mul", ["inner", "scale"], ["scaled"], name="gelu/mul_scale"),
            node("Tanh", ["scaled"], ["t"], name="gelu/tanh"),
            node("Add", ["t", "one"], ["t1"], name="gelu/add_one"),
            node("Mul", ["h", "half"], ["hh"], name="gelu/mul_half"),
            node("Mul", ["hh", "t1"], ["g"], name="gelu/mul"),
            node("Gemm", ["g", "w2", "b2"], ["Y"], name="fc2", transB=1),
        ]
    elif name == "layernorm_gelu":
        constants.update(w1=np.ascontiguousarray(w1.T), w2=np.ascontiguousarray(w2.T),
                         gamma=rng.uniform(0.5, 1.5, HIDDEN).astype(np.float32),
                         beta=rng.uniform(-0.1, 0.1, HIDDEN).astype(np.float32))
        nodes = [
            node("LayerNormalization", ["X", "gamma", "beta"], ["n"], name="norm", axis=-1,
                 epsilon=1e-5),
            node("MatMul", ["n", "w1"], ["m1"], name="fc1/matmul"),
            node("Add", ["m1", "b1"], ["h"], name="fc1/add"),
            node("Gelu", ["h"], ["g"], name="gelu"),
            node("MatMul", ["g", "w2"], ["m2"], name="fc2/matmul"),
            node("Add", ["m2", "b2"], ["f"], name="fc2/add"),
            node("Add", ["X", "f"], ["Y"], name="residual"),
        ]
    else:
        constants.update(w1=np.ascontiguousarray(w1.T), w2=np.ascontiguousarray(w2.T),
                         sequence=np.array([1, -1, HIDDEN], np.int64),
                         rows=np.array([-1, HIDDEN], np.int64))
        nodes = [
            node("Reshape", ["X", "sequence"], ["x3"], name="to_sequence"),
            node("MatMul", ["x3", "w1"], ["m1"], name="fc1/matmul"),
            node("Add", ["m1", "b1"], ["h"], name="fc1/add"),
            node("Sigmoid", ["h"], ["s"], name="silu/sigmoid"),
            node("Mul", ["h", "s"], ["a"], name="silu/mul"),
            node("MatMul", ["a", "w2"], ["m2"], name="fc2/matmul"),
            node("Add", ["m2", "b2"], ["y3"], name="fc2/add"),
            node("Reshape", ["y3", "rows"], ["Y"], name="to_rows"),
        ]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", HIDDEN])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", HIDDEN])],
        [numpy_helper.from_array(np.asarray(value), key) for key, value in constants.items()])
    opset = 20 if name == "layernorm_gelu" else 17  # Gelu is an operator from opset 20
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="bench_models")
    return model


def corpus(folder: Path, only: list[str] | None) -> dict[str, tuple[str, Path]]:
    """Model name -> (where it comes from, its file); the blocks are written to ``folder``."""
    import onnx

    models = {path.stem: ("skl2onnx", path) for path in sorted(CORPUS.glob("*.onnx"))}
    for name in BLOCKS:
        path = folder / f"{name}.onnx"
        onnx.save(block(name), path)
        models[name] = ("exporter-style", path)
    return {name: entry for name, entry in models.items() if not only or name in only}


def features(count: int, columns: int) -> np.ndarray:
    return np.random.default_rng(count).standard_normal((count, columns)).astype(np.float32)


def feeds(signature, batches) -> list[tuple[int, dict[str, np.ndarray]]]:
    """Per row count, the feed of a model's one input (its last dimension fixed)."""
    return [(batch, {signature.name: features(batch, signature.shape[-1])})
            for batch in batches]


def refusal(error: Exception) -> tuple[str, list[str], list[str]]:
    """An UnsupportedModelError's first line, the operator types its lines name, and the
    lines that name them."""
    lines = str(error).splitlines()
    nodes = [line.strip().removeprefix("- ") for line in lines[1:] if ": op " in line]
    ops = sorted({line.split(": op ")[1].split(",")[0] for line in nodes})
    return lines[0], ops, nodes


def values(output) -> np.ndarray:
    """An output as an array: ZipMap's list of {label: probability} dicts as rows."""
    if isinstance(output, list):
        return np.array([[row[label] for label in sorted(row)] for row in output])
    return output


def check(path: Path, batches) -> dict:
    """Whether kerneltune accepts the model and matches onnxruntime's default session."""
    import onnxruntime

    from kerneltune.errors import UnsupportedModelError
    from kerneltune.runtime import RuntimeSession

    try:
        sessions = {threads: RuntimeSession(path, threads=threads) for threads in THREADS}
    except UnsupportedModelError as error:
        reason, ops, nodes = refusal(error)
        return {"status": "refused", "reason": reason, "unsupported_ops": ", ".join(ops),
                "nodes": nodes}
    reference = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    largest, problems = 0.0, []
    for batch, feed in feeds(reference.get_inputs()[0], batches):
        expected = reference.run(None, feed)
        for threads, session in sessions.items():
            for ours, theirs in zip(map(values, session.run(None, feed)), map(values, expected),
                                    strict=True):
                if object in (ours.dtype, theirs.dtype):  # string labels: equal or not
                    if ours.tolist() != theirs.tolist():
                        problems.append(f"{batch} rows, {threads} threads: labels differ")
                    continue
                if ours.shape == theirs.shape and ours.size:
                    largest = max(largest, float(np.max(np.abs(
                        ours.astype(np.float64) - theirs.astype(np.float64)))))
                try:
                    np.testing.assert_allclose(ours, theirs, rtol=TOLERANCE, atol=TOLERANCE)
                except AssertionError as error:
                    first = next(line for line in str(error).splitlines() if line.strip())
                    problems.append(f"{batch} rows, {threads} threads: {first.strip()}")
    return {"status": "mismatch" if problems else "runs", "max_abs_diff": largest,
            "reason": "; ".join(problems[:2])}


# -- the processes that time ------------------------------------------------------------------

def measured(contenders: dict, seconds: float) -> tuple[dict[str, float], int]:
    """``results.timed`` with as many rounds as make about ``seconds`` per contender."""
    probe = 0.0
    for run in contenders.values():
        run()
        start = time.perf_counter()
        run()
        probe = max(probe, time.perf_counter() - start)
    rounds = max(MIN_ROUNDS, round(seconds / max(probe, ROUND_SECONDS)))
    return timed(contenders, rounds), rounds


def products(session, feed: dict) -> tuple[str, str]:
    """The path and threads of each Gemm and MatMul of a run of ``feed``, and how many other
    kernels run on more than one thread (one traced run, as ``RuntimeSession.run`` steps;
    on BLAS's pool, the other kernels of a run whose products take no BLAS are
    ``_prepared_beside``'s)."""
    values = session._template.copy()
    for name, index, *_ in session._feeds:
        values[index] = feed[name]
    prepared = zip(session._prepared, session._prepared_beside or session._prepared,
                   strict=True)
    plans, others = [], []
    for node, (run, arguments, output, _) in zip(session._model.nodes, session._steps,
                                              strict=True):
        inputs = [values[i] for i in arguments]
        if node.kernel is not None:
            on_blas, beside = next(prepared)
            plan = on_blas.plan(*inputs)
            if node.op_type in ("Gemm", "MatMul"):
                plans.append((node.op_type, plan))
            else:
                others.append((plan.threads, beside.plan(*inputs).threads))
        values[output] = run(*inputs)
    blas = any(plan.path == "blas" for _, plan in plans)
    parallel = sum((on_blas if blas else beside) > 1 for on_blas, beside in others)
    return (", ".join(f"{op_type} {plan.path}/{plan.threads}" for op_type, plan in plans),
            f"{parallel} of {len(others)}")


def faults_per_run(run, calls: int = 20) -> float:
    """Minor page faults per call of ``run``: memory the allocator took back from the OS."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        run()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def child(runtime: str, path: Path, threads: int, batches, seconds: float) -> None:
    """One fresh process: a JSON row per row count, median microseconds per run (and, in a
    process of one runtime, its minor page faults per run)."""
    if runtime == "onnxruntime":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        session = onnxruntime.InferenceSession(str(path), options,
                                               providers=["CPUExecutionProvider"])
        contenders = {"onnxruntime": session}
    else:
        from kerneltune.runtime import RuntimeSession

        session = RuntimeSession(path, threads=threads)
        contenders = {"kerneltune": session}
        if runtime == "same-process":
            import onnx
            from bench_session import onnxruntime_session

            contenders["onnxruntime"] = onnxruntime_session(onnx.load(path), threads)
    for batch, feed in feeds(session.get_inputs()[0], batches):
        runs = {name: lambda s=s, f=feed: s.run(None, f) for name, s in contenders.items()}
        times, rounds = measured(runs, seconds)
        row = {"batch": batch, "rounds": rounds,
               **{f"{name}_us": value * 1e6 for name, value in times.items()}}
        if runtime != "same-process":
            row[f"{runtime}_faults"] = faults_per_run(runs[runtime])
        if runtime == "kerneltune":
            row["products"], row["parallel_nodes"] = products(session, feed)
        print(json.dumps(row), flush=True)


def run_child(runtime: str, path: Path, threads: int, args: argparse.Namespace) -> list[dict]:
    """:func:`child` in a fresh process (bench_tail's ``rows``), its error shown."""
    try:
        return rows(__file__, runtime, (), "--model-path", str(path), "--threads",
                    str(threads), "--seconds", str(args.seconds),
                    *(f"--batch={batch}" for batch in args.batch or BATCHES))
    except subprocess.CalledProcessError as error:
        sys.stderr.write(error.stderr)
        raise


def first_session(runtime: str, path: Path, bytecode: Path) -> dict:
    """Wall seconds from just before a fresh process starts to its first run's result, the
    modules' bytecode under ``bytecode``."""
    environment = {name: value for name, value in os.environ.items()
                   if name != "PYTHONDONTWRITEBYTECODE"}
    environment["PYTHONPYCACHEPREFIX"] = str(bytecode)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", FIRST_SESSION, runtime, str(path)],
                          capture_output=True, text=True, check=True, env=environment)
    row = json.loads(done.stdout.splitlines()[-1])
    return {"seconds": row.pop("done") - start, "python_s": row.pop("started") - start, **row}


# -- the run ----------------------------------------------------------------------------------

def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.2,
                        help="about this long timing each figure")
    parser.add_argument("--repeats", type=int, default=3,
                        help="fresh processes per runtime, model and thread count, alternating: "
                             "a figure is the median over them")
    parser.add_argument("--processes", type=int, default=5,
                        help="fresh processes per runtime for the first session")
    parser.add_argument("--model", action="append", help="only this corpus model (repeatable)")
    parser.add_argument("--batch", type=int, action="append",
                        help="only this row count (repeatable)")
    parser.add_argument("--child", choices=RUNTIMES, help=argparse.SUPPRESS)
    parser.add_argument("--model-path", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    add_variant_arguments(parser)
    add_arguments(parser)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.model_path, args.threads, args.batch or BATCHES, args.seconds)
        return 0
    quiet_openblas()
    from bench_kernels import report

    recorder = variant_recorder(__file__, args, argv)
    if isinstance(recorder, int):  # --all-variants: each variant ran in a process of its own
        return recorder
    recorder.table("corpus", "status: runs (and matches onnxruntime at rtol and atol 1e-4), "
                   "mismatch, or refused at construction; reason: the refusal's first line, nodes: "
                   "its other lines; max_abs_diff: over every row count and thread count")
    recorder.table("timings", "µs per run, each runtime in processes of its own (onnxruntime "
                   "with default options), the median over them; ratio: onnxruntime / "
                   "kerneltune, lowest and highest: process by process; same_process_ratio: "
                   "both in one process, onnxruntime with spinning off; faults: minor page "
                   "faults per run in the runtime's own process; products: path/threads of each "
                   "Gemm and MatMul; parallel_nodes: other kernels on 2+ threads")
    recorder.table("geomeans", "geometric means over the models that run; worst: the lowest "
                   "ratio's model")
    recorder.table("first_session", "ms from just before a fresh process starts to its first "
                   "run's result (one row of mlp_regressor_relu), imports included, and its parts: "
                   "the interpreter's start, the imports, the session's construction and its "
                   "first run, each the median over processes")
    misses: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        models = corpus(Path(folder), args.model)
        running = {}
        print(f"{'model':30} {'source':15} {'status':9} detail")
        for name, (origin, path) in models.items():
            found = check(path, args.batch or BATCHES)
            detail = (f"max |diff| {found['max_abs_diff']:.2g}" if found["status"] == "runs"
                      else f"{found['reason']} [{found.get('unsupported_ops', '')}]")
            print(f"{name:30} {origin:15} {found['status']:9} {detail}")
            recorder.row("corpus", model=name, source=origin, **found)
            if found["status"] != "refused":
                running[name] = path
            if not recorder.target("corpus model runs and matches onnxruntime",
                                   found["status"] == "runs", "==", True, name):
                misses.append(f"{name}: {found['status']} ({found['reason']} "
                              f"{found.get('unsupported_ops', '')})")

        ratios: dict[tuple[int, int], dict[str, float]] = {}
        print(f"\n{'model':24} {'rows':>5} {'thr':>3} {'kt us':>10} {'ort us':>10} "
              f"{'ort/kt':>7} {'same ort/kt':>11} {'kt faults':>9}  kerneltune's products")
        for name, path in running.items():
            for threads in THREADS:
                taken: dict[str, list[dict[int, dict]]] = {runtime: [] for runtime in RUNTIMES}
                for _ in range(args.repeats):
                    for runtime in RUNTIMES:
                        taken[runtime].append({row["batch"]: row for row in
                                               run_child(runtime, path, threads, args)})
                ours, theirs, both = (median_rows(taken[runtime]) for runtime in RUNTIMES)
                for batch, row in ours.items():
                    kt, ort = row["kerneltune_us"], theirs[batch]["onnxruntime_us"]
                    same = both[batch]["onnxruntime_us"] / both[batch]["kerneltune_us"]
                    ratio = ort / kt
                    spread = [process[batch]["onnxruntime_us"] / mine[batch]["kerneltune_us"]
                              for mine, process in zip(taken["kerneltune"],
                                                       taken["onnxruntime"], strict=True)]
                    ratios.setdefault((batch, threads), {})[name] = ratio
                    print(f"{name:24} {batch:>5} {threads:>3} {kt:>10.1f} {ort:>10.1f} "
                          f"{ratio:>7.2f} {same:>11.2f} {row['kerneltune_faults']:>9.0f}  "
                          f"{row['products']}")
                    recorder.row("timings", model=name, batch=batch, threads=threads,
                                 kerneltune_us=kt, onnxruntime_us=ort, ratio=ratio,
                                 same_process_kerneltune_us=both[batch]["kerneltune_us"],
                                 same_process_onnxruntime_us=both[batch]["onnxruntime_us"],
                                 same_process_ratio=same,
                                 kerneltune_faults=row["kerneltune_faults"],
                                 onnxruntime_faults=theirs[batch]["onnxruntime_faults"],
                                 products=row["products"],
                                 parallel_nodes=row["parallel_nodes"],
                                 rounds=row["rounds"], processes=args.repeats,
                                 lowest_ratio=min(spread), highest_ratio=max(spread))
                    if not recorder.target("each model, onnxruntime / kerneltune", ratio, ">=",
                                           MODEL_RATIO_TARGET,
                                           f"{name}, {batch} rows, {threads} threads"):
                        misses.append(f"{name} at {batch} rows, {threads} threads: "
                                      f"{ratio:.2f}x onnxruntime (target >= "
                                      f"{MODEL_RATIO_TARGET})")

        rows_of = {(row["model"], row["batch"], row["threads"]): row
                   for row in recorder.tables["timings"]["rows"]}
        print(f"\n{'rows':>5} {'thr':>3} {'geomean ort/kt':>15} {'same process':>13}  worst")
        for (batch, threads), by_model in sorted(ratios.items()):
            mean = geomean(list(by_model.values()))
            same = geomean([rows_of[name, batch, threads]["same_process_ratio"]
                            for name in by_model])
            worst = min(by_model, key=by_model.get)
            print(f"{batch:>5} {threads:>3} {mean:>15.2f} {same:>13.2f}  {worst} "
                  f"{by_model[worst]:.2f}")
            recorder.row("geomeans", batch=batch, threads=threads, ratio=mean,
                         same_process_ratio=same, models=len(by_model), worst=worst,
                         worst_ratio=by_model[worst])
            if not recorder.target("geometric mean over models, onnxruntime / kerneltune",
                                   mean, ">=", RATIO_TARGET,
                                   f"{batch} rows, {threads} threads"):
                misses.append(f"geometric mean at {batch} rows, {threads} threads: {mean:.2f}x "
                              f"onnxruntime (target >= {RATIO_TARGET})")

        if args.processes and FIRST_SESSION_MODEL in models:
            path = models[FIRST_SESSION_MODEL][1]
            runtimes = ("kerneltune", "onnxruntime")
            samples: dict[str, list[dict]] = {runtime: [] for runtime in runtimes}
            with tempfile.TemporaryDirectory() as bytecode:
                for index in range(args.processes + 1):
                    for runtime in runtimes:
                        sample = first_session(runtime, path, Path(bytecode))
                        if index:  # the first of each reads the files, writes the bytecode
                            samples[runtime].append(sample)
            medians = {}
            print(f"\n{'first session':13} {'median ms':>10} {'python ms':>10} "
                  f"{'import ms':>10} {'session ms':>11} {'run ms':>8}")
            for runtime, taken in samples.items():
                median = {field: statistics.median(s[field] for s in taken) * 1e3
                          for field in ("seconds", "python_s", "import_s", "session_s",
                                        "run_s")}
                medians[runtime] = median["seconds"]
                print(f"{runtime:13} {median['seconds']:>10.1f} {median['python_s']:>10.1f} "
                      f"{median['import_s']:>10.1f} "
                      f"{median['session_s']:>11.1f} {median['run_s']:>8.2f}")
                recorder.row("first_session", runtime=runtime, median_ms=median["seconds"],
                             fastest_ms=min(s["seconds"] for s in taken) * 1e3,
                             slowest_ms=max(s["seconds"] for s in taken) * 1e3,
                             python_ms=median["python_s"], import_ms=median["import_s"],
                             session_ms=median["session_s"],
                             first_run_ms=median["run_s"], processes=len(taken))
            over = medians["kerneltune"] / medians["onnxruntime"]
            recorder.figure("first_session_kerneltune_ms", medians["kerneltune"])
            recorder.figure("first_session_onnxruntime_ms", medians["onnxruntime"])
            recorder.figure("first_session_kerneltune_over_onnxruntime", over)
            print(f"first session, kerneltune / onnxruntime: {over:.2f} "
                  f"(target <= {FIRST_SESSION_TARGET})")
            if not recorder.target("first session in a fresh process, imports included: "
                                   "kerneltune / onnxruntime", over, "<=",
                                   FIRST_SESSION_TARGET, FIRST_SESSION_MODEL):
                misses.append(f"first session {over:.2f}x onnxruntime's (target <= "
                              f"{FIRST_SESSION_TARGET})")
    recorder.figure("corpus_models", len(models))
    recorder.figure("models_running", len(running))
    recorder.figure("models_matching", sum(row["status"] == "runs"
                                           for row in recorder.tables["corpus"]["rows"]))
    recorder.finish()
    return report(misses)


if __name__ == "__main__":
    sys.exit(main())
