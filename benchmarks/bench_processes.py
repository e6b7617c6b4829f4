"""Gemm's skinny path from one fresh process to the next, against the blocked path.

A kernel whose speed is decided per process (by where the heap or the kernel's
own buffers land) makes every calibration process draw its own crossover, and
every application process its own speed. For each element type, thread count
and row count (B is 512 x 512), this starts fresh processes; each times the
skinny path, the blocked path as configured by default (B packed at this size)
and the blocked path reading B in place, forced, on the same operands in
interleaved rounds, and reports their medians. The figure per process is
skinny / blocked (below 1 the skinny path wins); a configuration is steady when
no process's ratio is more than 25% above the configuration's median ratio.
Each path's spread, its slowest process over its fastest, shows what a ratio
hides when both paths move together (and, alike in every path of a process,
the machine's state while that process ran). Fresh processes of one script lay
out their heaps alike, so each child first leaves a few small blocks of sizes
drawn from its index on the heap, as a process that did other work first
would have. With ``--baseline DIR`` (another build installed with
``pip install --target DIR``) every process of this build alternates with one
of that build, and both are reported: two builds compared in separate runs
differ by the machine's state.

    python benchmarks/bench_processes.py [--processes 10] [--rounds 25] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time

from results import Recorder, add_arguments

from kerneltune.calibration import randn_tensor
from kerneltune.kernels import library
from kerneltune.kernels.calibrate import NEVER

CONFIGS = [(element_type, threads, rows) for element_type in ("FLOAT", "DOUBLE", "FLOAT16")
           for threads in (1, 2) for rows in (1, 4, 8, 16, 32)]
#: a process whose ratio is this much above the median ratio ran in another state
OFF_STATE = 1.25
NO_BLAS = {"algorithm.blas_minimum_fmas": NEVER, "algorithm.skinny_blas_minimum_fmas": NEVER,
           "algorithm.vector_blas_minimum_fmas": NEVER}
PATHS = {"skinny": {"algorithm.skinny_m_limit": 64, "algorithm.skinny_minimum_b_elements": 0,
                    **NO_BLAS},
         "blocked": {"algorithm.skinny_m_limit": 0, **NO_BLAS},
         "in place": {"algorithm.skinny_m_limit": 0, "algorithm.pack_b_minimum_elements": NEVER,
                      **NO_BLAS}}


def child(element_type: str, threads: int, rows: int, index: int, rounds: int) -> None:
    """One fresh process: the paths' medians, in microseconds, on one line."""
    draw = random.Random(index)
    held = [bytearray(draw.randrange(16, 1024, 16)) for _ in range(draw.randrange(1, 64))]
    gemm = library()["Gemm"]
    runs = [gemm.prepare(element_type, gemm.configure(element_type, values), threads).run
            for values in PATHS.values()]
    a = randn_tensor(element_type, (rows, 512), 0)
    b = randn_tensor(element_type, (512, 512), 1)
    if len({run(a, b).tobytes() for run in runs}) > 1:
        sys.exit("the paths' results differ")
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(rounds):
        for run, taken in zip(runs, times, strict=True):
            run(a, b)
            start = time.perf_counter()
            run(a, b)
            taken.append(time.perf_counter() - start)
    print(" ".join(f"{statistics.median(taken) * 1e6:.1f}" for taken in times))
    del held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=10, help="fresh processes per figure")
    parser.add_argument("--rounds", type=int, default=25, help="interleaved rounds per process")
    parser.add_argument("--baseline", metavar="DIR",
                        help="another build's install directory, measured alternately")
    parser.add_argument("--child", nargs=4, metavar=("TYPE", "THREADS", "ROWS", "INDEX"),
                        help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], *map(int, args.child[1:]), args.rounds)
        return 0
    recorder = Recorder(__file__, args)
    recorder.table("configurations", "B is 512 x 512; ratios: skinny / blocked per process, "
                   "sorted (below 1 the skinny path wins); off_state: processes more than 25% "
                   "above the median ratio; spreads: slowest process over fastest for the "
                   "skinny, blocked and in-place paths")
    builds = {"this build": os.environ}
    if args.baseline:
        path = os.pathsep.join(filter(None, [args.baseline, os.environ.get("PYTHONPATH")]))
        builds["baseline"] = {**os.environ, "PYTHONPATH": path}
    print(f"{'type':7} {'threads':>7} {'rows':>5} {'build':>10} "
          f"{'skinny / blocked per process':>40} {'median':>7} {'off state':>10} "
          f"{'spread: skinny, blocked, in place':>34}")
    unsteady = dict.fromkeys(builds, 0)
    for element_type, threads, rows in CONFIGS:
        medians: dict[str, list[list[float]]] = {build: [] for build in builds}
        for index in range(args.processes):
            for build, env in builds.items():
                out = subprocess.run(
                    [sys.executable, __file__, "--rounds", str(args.rounds), "--child",
                     element_type, str(threads), str(rows), str(index)],
                    capture_output=True, text=True, check=True, env=env).stdout.split()
                medians[build].append([float(value) for value in out])
        for build, processes in medians.items():
            ratios = sorted(skinny / blocked for skinny, blocked, _ in processes)
            median = statistics.median(ratios)
            off = sum(ratio > OFF_STATE * median for ratio in ratios)
            unsteady[build] += off > 0
            spreads = [max(path) / min(path) for path in zip(*processes, strict=True)]
            print(f"{element_type:7} {threads:>7} {rows:>5} {build:>10} "
                  f"{' '.join(f'{ratio:.2f}' for ratio in ratios):>40} {median:>7.2f}"
                  f" {off:>6} of {len(ratios)} "
                  f"{', '.join(f'{spread:.2f}' for spread in spreads):>34}")
            recorder.row("configurations", element_type=element_type, threads=threads,
                         rows=rows, build=build, ratios=ratios, median=median, off_state=off,
                         processes=len(ratios), spreads=spreads)
    print()
    for build, count in unsteady.items():
        print(f"{build}: {len(CONFIGS) - count} of {len(CONFIGS)} configurations steady")
        recorder.figure(f"steady_configurations_{build.replace(' ', '_')}", len(CONFIGS) - count)
    recorder.figure("configurations", len(CONFIGS))
    recorder.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
