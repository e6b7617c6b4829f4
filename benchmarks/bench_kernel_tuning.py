"""Cost of capturing a registry snapshot and of resolving one key's tuning.

Registers 1, 100 and 1,000 selector profiles for one key (a realistic mix:
exact processors, microarchitectures with thread ranges, families, instruction
sets), then times ``snapshot()`` and ``resolve()`` for a Zen 4 execution that
several of them match. Each figure is the median of repeated runs of ``-n``
calls, reported next to a plain dictionary lookup measured in the same run
(the floor any registry pays).

Then a RuntimeSession over a small model: cold initialisation (snapshot
capture and resolution, as the session reports them) apart from steady
``run`` calls, and a check that steady runs leave every registry access
counter unchanged: if one moves, the benchmark fails without a success line.

    python benchmarks/bench_kernel_tuning.py -n 100000
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper
from results import Recorder, add_arguments

from kerneltune.machine.descriptor import CpuDescriptor, CpuExecutionDescriptor
from kerneltune.machine.selectors import CpuSelector
from kerneltune.runtime import RuntimeSession
from kerneltune.tuning.registry import KernelTuningProfile, KernelTuningRegistry, access_counts
from kerneltune.tuning.schema import KernelTuningKey, tunable

TARGET_NS = {1: 2_000, 1000: 20_000}  # resolution, from the issue


@dataclass(frozen=True)
class ElementwiseConfig:
    minimum_elements: int = tunable("parallel.minimum_elements", 32768, minimum=1)
    maximum_threads: int = tunable("parallel.maximum_threads", 64, minimum=1)


KEY = KernelTuningKey("bench", "Abs", "baseline", "FLOAT")
ZEN4 = CpuDescriptor(architecture="x86_64", vendor="amd", family=25, model=17, stepping=1,
                     microarchitecture="zen4", features=frozenset({"avx2", "avx512f", "fma"}))
EXECUTION = CpuExecutionDescriptor(ZEN4, 2, frozenset({0, 1}), 2)
# Another Zen 4 model that no exact profile names: resolution must scan the
# group and instruction-set buckets to find its best profile.
UNLISTED = CpuExecutionDescriptor(dataclasses.replace(ZEN4, model=97), 2, frozenset({0, 1}), 2)
UARCHS = ["zen2", "zen3", "zen4", "zen5", "haswell", "skylake_avx512", "icelake",
          "sapphirerapids", "neoverse_n1", "neoverse_v1"]


def profiles(count: int) -> list[KernelTuningProfile]:
    """``count`` non-ambiguous profiles; the first always matches the benchmark execution."""
    made = [KernelTuningProfile(KEY, {"parallel.minimum_elements": 4096},
                                selector=CpuSelector(vendor="amd", family=25, models=[17]))]
    n = 1
    while len(made) < count:
        kind = n % 4
        if kind == 0:
            selector = CpuSelector(vendor="intel", family=6, models=[n])
        elif kind == 1:
            selector = CpuSelector(microarchitecture=UARCHS[n % len(UARCHS)],
                                   minimum_threads=n, maximum_threads=n)
        elif kind == 2:
            selector = CpuSelector(vendor="amd", family=(n % 7) + 23, minimum_threads=n,
                                   maximum_threads=n)
        else:
            selector = CpuSelector(required_features=["avx2"], minimum_threads=n,
                                   maximum_threads=n)
        made.append(KernelTuningProfile(KEY, {"parallel.minimum_elements": 1024 + n},
                                        selector=selector, name=f"p{n}"))
        n += 1
    return made


def per_call_ns(function, calls: int, repeats: int) -> tuple[float, float]:
    """Median and spread (max - min) of ns per call over ``repeats`` timed runs."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(calls):
            function()
        samples.append((time.perf_counter_ns() - start) / calls)
    return statistics.median(samples), max(samples) - min(samples)


def session_model():
    """Add then Tanh then Mul on FLOAT: three tunable kernels."""
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
             helper.make_node("Mul", ["t", "x"], ["z"])]
    value = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N"]) for n in "xyz"]
    graph = helper.make_graph(nodes, "bench", value[:2], value[2:])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def sessions(calls: int, repeats: int, recorder: Recorder) -> list[str]:
    """Cold initialisation apart from steady runs; a steady run must not touch the registry."""
    model = session_model()
    statistics = [RuntimeSession(model).tuning_resolution_statistics for _ in range(50)]
    snapshot_us = statistics_median(s["snapshot_seconds"] for s in statistics) * 1e6
    resolve_us = statistics_median(s["resolution_seconds"] for s in statistics) * 1e6
    session = RuntimeSession(model)
    feed = {"x": np.ones(1000, np.float32), "y": np.ones(1000, np.float32)}
    session.run(None, feed)
    before = access_counts()
    run_ns, _ = per_call_ns(lambda: session.run(None, feed), max(1, calls // 10), repeats)
    after = access_counts()
    kernels = statistics[0]["tunable_kernels"]
    print(f"\nsession cold init: snapshot {snapshot_us:.1f} us, resolution of {kernels} kernels "
          f"{resolve_us:.1f} us; steady run (3 nodes, 1000 elements) {run_ns / 1000:.2f} us")
    recorder.figure("session_snapshot_us", snapshot_us)
    recorder.figure("session_resolution_us", resolve_us)
    recorder.figure("session_tunable_kernels", kernels)
    recorder.figure("session_steady_run_us", run_ns / 1000)
    if not recorder.target("steady session runs leave the registry access counters unchanged",
                           after == before, "==", True):
        return [f"steady runs changed the registry access counters: {before} -> {after}"]
    print(f"steady runs left the access counters unchanged ({after})")
    return []


def statistics_median(values) -> float:
    return statistics.median(list(values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100_000, help="calls per timed run")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per figure")
    add_arguments(parser)
    args = parser.parse_args(argv)
    recorder = Recorder(__file__, args)
    recorder.table("resolution", "ns per call by profiles registered for the key; over_floor: "
                   "resolution time / a dict lookup's; unlisted: a Zen 4 model no exact profile "
                   "names")

    table = {("key",): 1}
    floor, _ = per_call_ns(lambda: table[("key",)], args.n, args.repeats)
    print(f"dict lookup floor: {floor:.0f} ns")
    recorder.figure("dict_lookup_ns", floor)
    print(f"{'profiles':>8} {'snapshot ns':>12} {'resolve ns':>11} {'spread':>8} "
          f"{'x floor':>8} {'unlisted ns':>12} {'target ns':>10}")
    failed = []
    for count in (1, 100, 1000):
        registry = KernelTuningRegistry()
        registry.register_schema(KEY, ElementwiseConfig)
        registry.register_profiles(profiles(count))
        snapshot = registry.snapshot()
        assert snapshot.resolve(KEY, EXECUTION).values["parallel.minimum_elements"] == 4096
        snap_ns, _ = per_call_ns(registry.snapshot, args.n, args.repeats)
        resolve_ns, spread = per_call_ns(lambda s=snapshot: s.resolve(KEY, EXECUTION), args.n,
                                         args.repeats)
        unlisted_ns, _ = per_call_ns(lambda s=snapshot: s.resolve(KEY, UNLISTED), args.n,
                                     args.repeats)
        target = TARGET_NS.get(count)
        print(f"{count:>8} {snap_ns:>12.0f} {resolve_ns:>11.0f} {spread:>8.0f} "
              f"{resolve_ns / floor:>8.1f} {unlisted_ns:>12.0f} {target or '':>10}")
        recorder.row("resolution", profiles=count, snapshot_ns=snap_ns, resolve_ns=resolve_ns,
                     spread_ns=spread, over_floor=resolve_ns / floor, unlisted_ns=unlisted_ns)
        worst = max(resolve_ns, unlisted_ns)
        if target is not None and not recorder.target(
                "resolution, slower of listed and unlisted (ns)", worst, "<=", target,
                f"{count} profiles"):
            failed.append(f"resolution with {count} profiles took {worst:.0f} ns "
                          f"(target {target} ns)")
    failed += sessions(args.n, args.repeats, recorder)
    recorder.finish()
    for message in failed:
        print(f"MISSED: {message}", file=sys.stderr)
    if not failed:
        print("OK: resolution targets met; steady session runs never touch the registry")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
