"""libgomp's wait policies compared: each alone and beside each spinning neighbour.

The cases and neighbours of ``bench_tail.py`` (Add and Tanh at 1e6 FLOAT
elements on 2 threads, by default), run once with nothing set and once with
each setting of ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``, every run a
process of its own. Ratios are over the median alone with nothing set: how a
policy trades the median alone for the stalls beside a neighbour that spins
(docs/kernels.md, Beside other thread pools).

    python benchmarks/bench_wait_policy.py [--runs 200] [--setting GOMP_SPINCOUNT=10000]
"""

from __future__ import annotations

import argparse
import os
import sys

from bench_tail import child, rows
from results import Recorder, add_arguments

NEIGHBOURS = ("alone", "onnxruntime", "openblas", "python-thread")
CASES = (("Add", 1_000_000), ("Tanh", 1_000_000))
SETTINGS = ("GOMP_SPINCOUNT=100000", "GOMP_SPINCOUNT=30000", "GOMP_SPINCOUNT=10000",
            "GOMP_SPINCOUNT=3000", "OMP_WAIT_POLICY=passive", "OMP_WAIT_POLICY=active")
THREADS = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="timed calls per case")
    parser.add_argument("--setting", action="append", metavar="NAME=VALUE",
                        help="a setting to compare with none (repeatable; default: all)")
    parser.add_argument("--child", choices=NEIGHBOURS, help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, THREADS, args.runs, only=CASES)
        return 0
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):  # "none" is none, whatever the shell sets
        os.environ.pop(name, None)
    recorder = Recorder(__file__, args)
    recorder.table("policies", "µs per call on 2 threads; ratios over the p50 of the same case "
                               "alone with nothing set")
    alone = {}
    print(f"{'setting':24} {'neighbour':14} {'model':5} {'p50 us':>9} {'p90 us':>9} "
          f"{'p99 us':>9} {'p50/alone':>9}")
    for setting in ("", *(args.setting or SETTINGS)):
        settings = [setting] if setting else []
        for neighbour in NEIGHBOURS:
            for row in rows(__file__, neighbour, settings, "--runs", str(args.runs)):
                median = alone.setdefault((row["model"], row["size"]), row["p50_us"])
                ratios = {f"p{p}_ratio": row[f"p{p}_us"] / median for p in (50, 90, 99)}
                print(f"{setting or 'none':24} {neighbour:14} {row['model']:5} "
                      f"{row['p50_us']:>9.1f} {row['p90_us']:>9.1f} {row['p99_us']:>9.1f} "
                      f"{ratios['p50_ratio']:>9.2f}")
                recorder.row("policies", setting=setting or "none", **row, **ratios)
    recorder.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
