"""Calibration on this machine: its cost, what it gains, its regret, its repeatability.

1. Cost: a full calibration of every calibratable key for 1 and for 2 threads
   (`kerneltune calibrate` in a fresh process, so it starts from the portable
   defaults). Targets: under 5 minutes at normal effort, under 60 s at quick,
   both thread counts together.
2. Gain and regret, on held-out sizes the searches never measured (midway
   between their grid points): for a sample of elementwise keys at 2 threads,
   each case (unary; binary equal, scalar, broadcast) at each held-out size is
   measured once per distinct way of running it (serial or parallel compute,
   and for FLOAT16 serial or parallel conversions; a config's way at a size is
   what its plan says). From those medians come the time with the calibrated
   values, with the portable defaults, and with the best values an exhaustive
   search over the same candidate grid finds (and, for comparison, over a grid
   twice as fine). Targets: calibrated never slower
   than the defaults by more than 3% at any size; geometric-mean regret against
   the exhaustive best at most 5%. Gemm and MatMul are compared calibrated
   against defaults on held-out shapes (interleaved, medians). All of this runs
   right after the calibration it judges: on a machine whose 2-thread speedup
   moves over minutes, a comparison made later judges the machine instead.
3. Repeatability: the same calibration runs again in another fresh process; at
   least 90% of keys get identical values and every threshold is within one grid
   step of the first run's. A key whose search a budget cut short is not
   published: it runs with the values in use it kept, and is compared with
   those. The keys measured steadily in both are also counted apart.

    python benchmarks/bench_calibration.py [--effort normal|quick] [--rounds 9] [--reports DIR]

``--reports DIR`` keeps both calibrations' full reports (first.json,
second.json) for a look at why a value differs. Everything runs with
OPENBLAS_THREAD_TIMEOUT=4 unless the environment sets it, as ``nox -s
calibrate`` does (the benchmark starts itself again with it when it is not
set: OpenBLAS reads it once, when numpy loads).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from results import Recorder, add_arguments, quiet_openblas

from kerneltune import KernelTuningKey, current_execution
from kerneltune._support.aligned import aligned
from kerneltune.calibration import CalibrationOptions
from kerneltune.calibration.measure import Deadline, measure
from kerneltune.kernels import library
from kerneltune.kernels.calibrate import (
    BROADCAST_MINIMUM,
    CONVERSION_MINIMUM,
    MAXIMUM_THREADS,
    NEVER,
    PARALLEL_MINIMUM,
    ElementwiseCalibration,
    grain_of,
)
from kerneltune.kernels.probes import machine_probe
from kerneltune.tuning.schema import element_type_number

SAMPLE = [(kernel, element_type)
          for kernel in ("Abs", "Exp", "Tanh", "Add", "Mul", "Greater")
          for element_type in ("FLOAT", "DOUBLE", "FLOAT16", "INT32")]
GEMM_SHAPES = {"square 48": (48, 48, 48), "square 96": (96, 96, 96),
               "square 181": (181, 181, 181), "square 362": (362, 362, 362),
               "skinny 3": (3, 512, 512), "skinny 12": (12, 512, 512),
               "one row": (1, 1218, 1218)}
#: thresholds, with the power of the searched size they grow by (one grid step of a size is
#: step ** power of a multiply-add count, for instance)
THRESHOLDS = {PARALLEL_MINIMUM: 1, BROADCAST_MINIMUM: 1, CONVERSION_MINIMUM: 1,
              "algorithm.pack_b_minimum_elements": 2, "algorithm.blas_minimum_fmas": 3,
              "algorithm.skinny_blas_minimum_fmas": 2, "algorithm.vector_blas_minimum_fmas": 2,
              "algorithm.skinny_minimum_b_elements": 2, "parallel.fmas_per_work_unit": 3,
              "parallel.skinny_fmas_per_work_unit": 2,
              "algorithm.skinny_m_limit": 1}


#: fixed calls whose 2-thread speedup tells how the machine itself moves (kernel, type, size)
PROBES = (("Abs", "INT8", 65536), ("Add", "FLOAT", 32768), ("Abs", "DOUBLE", 16384))


def machine_probes(rounds: int) -> list[float]:
    """Serial time / 2-thread time of each probe, measured as calibration measures.

    Taken before, between and after the two calibrations: when these move, the
    crossovers move with them, and no search can repeat what the machine does not.
    """
    kernels = library()
    return [machine_probe(kernels[name], element_type_number(element_type), size // 2,
                          rounds)(2) for name, element_type, size in PROBES]


def full_calibration(effort: str, directory: Path, name: str) -> list[dict]:
    """`kerneltune calibrate` for 1 and 2 threads in a fresh process, as a farm job runs it.

    A fresh process each time (with the user cache off) starts from the
    portable defaults and from the same process history, so two runs differ
    only by what the machine does meanwhile.
    """
    report = directory / f"{name}.json"
    command = [sys.executable, "-m", "kerneltune", "calibrate", "--effort", effort,
               "--threads", "1", "--threads", "2", "--report", str(report)]
    done = subprocess.run(command, check=False, stdout=subprocess.DEVNULL,
                          env={**os.environ, "KERNELTUNE_CACHE": "off"})
    if done.returncode not in (0, 3):  # 3: done in part, keys withheld or stopped (counted)
        raise subprocess.CalledProcessError(done.returncode, command)
    return json.loads(report.read_text())


def values_by_key(batch: dict) -> dict[KernelTuningKey, dict]:
    """The values each key runs with after the batch: those published, else, for a key
    whose search a budget cut short, the values in use it kept."""
    kept = {KernelTuningKey.from_dict(entry["key"]): entry["report"]["baseline"]
            for entry in batch["skipped"] if entry["report"]}
    return kept | {KernelTuningKey.from_dict(entry["key"]): entry["values"]
                   for entry in batch["calibrated"]}


def grid_values(calibration: ElementwiseCalibration, context) -> tuple[list[int], list[int]]:
    """The candidate grain values of the search grid, and of a grid twice as fine."""
    finer = calibration.sizes(context, 2 * context.options.level.steps_per_octave)
    return (sorted({grain_of(size) for size in calibration.sizes(context)}),
            sorted({grain_of(size) for size in finer}))


def held_out_sizes(effort: str) -> list[int]:
    """Sizes midway (geometrically) between the search grid's points, off its alignment."""
    steps = CalibrationOptions(effort=effort).level.steps_per_octave
    return [int(2 ** (12 + (i + 0.5) / steps)) // 64 * 64 + 32
            for i in range(steps * 10)]


def signature(prepared, inputs) -> tuple[int, int]:
    """How a prepared elementwise kernel runs these inputs: compute and conversion threads."""
    plan = prepared.plan(*inputs)
    conversion = 0
    if hasattr(prepared, "_conversion_threads"):
        conversion = prepared._conversion_threads(int(np.size(inputs[0])), False)
    return plan.threads, conversion


def elementwise_gain(values_of, effort: str, rounds: int, sample=SAMPLE,
                     compared=None) -> list[dict]:
    """Per sampled key and case: times with calibrated, default and exhaustive-best values.

    ``sample`` is the (kernel, element type) pairs; ``compared`` more labelled values by key,
    measured in the same pass, their times under their label (a key one lacks: defaults).
    """
    from kerneltune.calibration.context import CalibrationContext

    kernels = library()
    execution = current_execution(2)
    options = CalibrationOptions(threads=2, effort=effort, repetitions=rounds)
    rows = []
    for name, element_type in sample:
        kernel = kernels[name]
        number = element_type_number(element_type)
        if number not in kernel.element_types:
            continue
        key = kernel.tuning_key(number)
        schema = kernel.schema(number)
        calibrated = values_of.get(key)
        if calibrated is None:
            continue
        context = CalibrationContext(key, schema, execution, options, schema.default_values(),
                                     Deadline(math.inf, "none"))
        calibration = ElementwiseCalibration(kernel, number)
        grid, finer = grid_values(calibration, context)
        for case in calibration.cases(context).values():
            parameter = BROADCAST_MINIMUM if case.name == "broadcast" else PARALLEL_MINIMUM
            searched = [parameter]
            if CONVERSION_MINIMUM in schema.parameters:
                searched.append(CONVERSION_MINIMUM)
            candidates = [dict(zip(searched, combo, strict=True))
                          for combo in itertools.product(finer + [NEVER], repeat=len(searched))]
            on_grid = [i for i, c in enumerate(candidates)
                       if all(v in grid or v == NEVER for v in c.values())]
            configs = {"default": schema.defaults,
                       "calibrated": schema.configure(calibrated),
                       **{label: schema.configure(values.get(key, {}))
                          for label, values in (compared or {}).items()}}
            options_of = [schema.configure({**calibrated, **c, MAXIMUM_THREADS: 256})
                          for c in candidates]
            times: dict[str, list[float]] = {label: [] for label in configs}
            per_candidate = [[] for _ in candidates]
            for size in held_out_sizes(effort):
                inputs = case.inputs(size)
                prepared = {label: kernel.prepare(number, config, 2)
                            for label, config in configs.items()}
                candidate_prepared = [kernel.prepare(number, config, 2) for config in options_of]
                ways = {}
                for p in [*prepared.values(), *candidate_prepared]:
                    ways.setdefault(signature(p, inputs), p)
                measured = dict(zip(ways, measure(
                    [lambda p=p, inputs=inputs: p.run(*inputs) for p in ways.values()], rounds,
                    0.0004,
                    Deadline(math.inf, "none")), strict=True))
                for label, p in prepared.items():
                    times[label].append(measured[signature(p, inputs)].median)
                for index, p in enumerate(candidate_prepared):
                    per_candidate[index].append(measured[signature(p, inputs)].median)
            best = min(on_grid, key=lambda i: sum(per_candidate[i]))
            finest = min(range(len(candidates)), key=lambda i: sum(per_candidate[i]))
            rows.append({"key": f"{name} {element_type}", "case": case.name,
                         "default": times["default"], "calibrated": times["calibrated"],
                         "best": per_candidate[best], "best_values": candidates[best],
                         "finer": per_candidate[finest],
                         **{label: times[label] for label in compared or {}}})
    return rows


def gemm_gain(values_of, rounds: int) -> list[tuple[str, str, float, str]]:
    """default time / calibrated time per held-out shape, and the two plans when they differ
    (a shape that both run the same way shows the noise of the comparison)."""
    kernels = library()
    out = []
    for name in ("Gemm", "MatMul"):
        kernel = kernels[name]
        for element_type in ("FLOAT", "DOUBLE"):
            key = kernel.tuning_key(element_type)
            calibrated = values_of.get(key)
            if calibrated is None:
                continue
            schema = kernel.schema(element_type)
            default = kernel.prepare(element_type, schema.defaults, 2)
            tuned = kernel.prepare(element_type, schema.configure(calibrated), 2)
            rng = np.random.default_rng(0)
            dtype = np.float32 if element_type == "FLOAT" else np.float64
            for shape_name, (m, k, n) in GEMM_SHAPES.items():
                # placed as calibration and a session's weights are (kerneltune._support.aligned)
                a = aligned(rng.standard_normal((m, k)).astype(dtype))
                b = aligned(rng.standard_normal((k, n)).astype(dtype))
                runs = [lambda p=p, a=a, b=b: p.run(a, b) for p in (default, tuned)]
                d, t = measure(runs, rounds, 0.0004, Deadline(math.inf, "none"))
                plans = [p.plan(a, b) for p in (default, tuned)]
                how = ("same path" if plans[0] == plans[1] else
                       " -> ".join(f"{p.path} on {p.threads}" for p in plans))
                out.append((f"{name} {element_type}", shape_name, d.median / t.median, how))
    return out


def differing_threshold(first, second, step: float) -> list[str]:
    """Thresholds more than one grid step apart, and other values that differ."""
    far = []
    for name, value in first.items():
        other = second[name]
        if value == other:
            continue
        low, high = min(value, other), max(value, other)
        # grid sizes are rounded (to whole chunks of elements, to whole 64-column blocks for
        # Gemm: 181 becomes 192), which widens a step by up to 7%
        if (name in THRESHOLDS and low > 0 and high < NEVER
                and high / low <= (step * 1.07) ** THRESHOLDS[name]):
            continue
        far.append(f"{name}: {value} vs {other}")
    return far


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--effort", default="normal", choices=("quick", "normal", "thorough"))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--reports", type=Path,
                        help="keep both calibrations' reports in this directory")
    add_arguments(parser)
    args = parser.parse_args()
    quiet_openblas()
    recorder = Recorder(__file__, args)
    ok = True

    print(f"# calibration cost ({args.effort} effort, every calibratable key)")
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.reports or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        probes = [machine_probes(args.rounds)]
        first = full_calibration(args.effort, directory, "first")
        # the gain right after the calibration it judges, before the machine moves on
        values_of = values_by_key(first[1])
        rows = elementwise_gain(values_of, args.effort, args.rounds)
        gemm_rows = gemm_gain(values_of, args.rounds)
        probes.append(machine_probes(args.rounds))
        second = full_calibration(args.effort, directory, "second")
        probes.append(machine_probes(args.rounds))
    total = sum(batch["seconds"] for batch in first)
    recorder.table("cost", "the first calibration, per thread count: seconds and keys")
    for batch in first:
        changed = sum(1 for r in batch["calibrated"] for d in r["decisions"] if d["changed"])
        print(f"threads {batch['execution']['effective_threads']}: {batch['seconds']:7.1f} s, "
              f"{len(batch['calibrated'])} keys calibrated, {len(batch['skipped'])} skipped, "
              f"{len(batch['unsupported'])} unsupported, {changed} values changed from the "
              f"defaults")
        reasons = collections.Counter(s["reason"] for s in batch["skipped"])
        for reason, count in reasons.items():
            print(f"    skipped {count} keys: {reason}")
        recorder.row("cost", threads=batch["execution"]["effective_threads"],
                     seconds=batch["seconds"], calibrated=len(batch["calibrated"]),
                     skipped=len(batch["skipped"]), unsupported=len(batch["unsupported"]),
                     changed=changed, skipped_reasons=dict(reasons))
    limit = 300 if args.effort == "normal" else 60 if args.effort == "quick" else math.inf
    print(f"total {total:.1f} s (target < {limit} s): {'ok' if total < limit else 'MISSED'}")
    recorder.figure("total_seconds", total)
    if math.isfinite(limit):
        ok &= recorder.target(f"cost of every key for 1 and 2 threads at {args.effort} effort (s)",
                              total, "<", limit)

    print("\n# held-out sizes, 2 threads: time / time with the portable defaults, and regret "
          "(calibrated / exhaustive best)")
    worst, regrets, finer_regrets = 0.0, [], []
    recorder.table("held_out", "2 threads, per sampled key and case over the held-out sizes: "
                   "calibrated / default time (max, geomean) and regret, calibrated / "
                   "exhaustive best (geomean, max)")
    for row in rows:
        ratios = [c / d for c, d in zip(row["calibrated"], row["default"], strict=True)]
        regret = [c / b for c, b in zip(row["calibrated"], row["best"], strict=True)]
        regrets += regret
        finer_regrets += [c / b for c, b in zip(row["calibrated"], row["finer"], strict=True)]
        worst = max(worst, max(ratios))
        print(f"{row['key']:<16} {row['case']:<10} calibrated/default max {max(ratios):5.3f} "
              f"geomean {statistics.geometric_mean(ratios):5.3f}  regret geomean "
              f"{statistics.geometric_mean(regret):5.3f} max {max(regret):5.3f}")
        recorder.row("held_out", key=row["key"], case=row["case"], max_ratio=max(ratios),
                     geomean_ratio=statistics.geometric_mean(ratios),
                     regret_geomean=statistics.geometric_mean(regret), regret_max=max(regret),
                     best_values=row["best_values"])
    geomean_regret = statistics.geometric_mean(regrets) if regrets else 1.0
    print(f"worst calibrated/default at any size: {worst:.3f} (target <= 1.03): "
          f"{'ok' if worst <= 1.03 else 'MISSED'}")
    print(f"geometric-mean regret: {geomean_regret:.3f} (target <= 1.05): "
          f"{'ok' if geomean_regret <= 1.05 else 'MISSED'}")
    recorder.figure("worst_ratio", worst)
    recorder.figure("regret_geomean", geomean_regret)
    if finer_regrets:
        print(f"and against the exhaustive best on a grid twice as fine: "
              f"{statistics.geometric_mean(finer_regrets):.3f}")
        recorder.figure("finer_regret_geomean", statistics.geometric_mean(finer_regrets))
    ok &= recorder.target("held out, worst calibrated / default time at any size", worst, "<=",
                          1.03)
    ok &= recorder.target("held out, geometric-mean regret (calibrated / exhaustive best)",
                          geomean_regret, "<=", 1.05)

    print("\n# Gemm and MatMul on held-out shapes, 2 threads: default time / calibrated time")
    recorder.table("gemm_held_out", "2 threads; ratio: default time / calibrated time; plans: "
                   "default -> calibrated path and threads, when they differ")
    for key, shape, ratio, how in gemm_rows:
        print(f"{key:<14} {shape:<11} {ratio:5.3f}  {how}")
        recorder.row("gemm_held_out", key=key, shape=shape, ratio=ratio, plans=how)

    print("\n# the machine: serial time / 2-thread time of fixed calls, before the first "
          "calibration, between its held-out measurements and the second, and after the second")
    recorder.table("machine_probes", "serial time / 2-thread time of fixed calls before the "
                   "first calibration, between it and the second, and after the second")
    for index, (name, element_type, size) in enumerate(PROBES):
        print(f"{name} {element_type} {size:>8}: "
              f"{'  '.join(f'{run[index]:5.2f}' for run in probes)}")
        recorder.row("machine_probes", probe=f"{name} {element_type} {size}",
                     before=probes[0][index], between=probes[1][index], after=probes[2][index])
    print("and the calibrations' own machine probes (each aspect's rate over each batch):")
    recorder.table("steadiness", "per calibration and thread count: keys measured again, and "
                   "keys never measured steadily")
    for label, run in (("first", first), ("second", second)):
        for batch in run:
            for watched in batch["steadiness"]:
                print(f"{label} calibration, threads {watched['threads']}: "
                      f"{len(watched['remeasured'])} keys measured again, "
                      f"{len(watched['unsettled'])} never measured steadily")
                recorder.row("steadiness", calibration=label, threads=watched["threads"],
                             remeasured=len(watched["remeasured"]),
                             unsettled=len(watched["unsettled"]))
                for trace in watched["probes"]:
                    print(f"    {trace['aspect']:<12}: {trace['lowest'] or 0:.3g} to "
                          f"{trace['highest'] or 0:.3g} over {len(trace['samples'])} probes "
                          f"(moved {trace['moved']:.0%}), reference state "
                          f"{trace['reference'] or 0:.3g}"
                          f"{'; ' + trace['error'] if trace['error'] else ''}")

    print("\n# repeatability: a second calibration in another process")
    step = 2 ** (1 / CalibrationOptions(effort=args.effort).level.steps_per_octave)
    recorder.table("repeatability", "the second calibration against the first: keys with "
                   "identical values, and the values beyond one grid step")
    for one, two in zip(first, second, strict=True):
        before, after = values_by_key(one), values_by_key(two)
        common = [key for key in before if key in after]
        identical = sum(1 for key in common if before[key] == after[key])
        far = {key: differing_threshold(before[key], after[key], step) for key in common}
        far = {key: diffs for key, diffs in far.items() if diffs}
        share = identical / len(common) if common else 0.0
        print(f"threads {one['execution']['effective_threads']}: identical values for "
              f"{identical}/{len(common)} keys ({share:.0%}, target >= 90%); beyond one grid "
              f"step: {len(far)} keys (target 0)")
        for key, diffs in far.items():
            print(f"    {key}: {'; '.join(diffs)}")
        threads = one["execution"]["effective_threads"]
        recorder.row("repeatability", threads=threads, keys=len(common), identical=identical,
                     share=share, beyond_one_step={str(key): diffs for key, diffs in far.items()})
        ok &= recorder.target("repeatability, share of keys with identical values", share, ">=",
                              0.9, f"{threads} threads")
        ok &= recorder.target("repeatability, keys beyond one grid step", len(far), "==", 0,
                              f"{threads} threads")
        unsettled = {name for batch in (one, two) for watched in batch["steadiness"]
                     for name in watched["unsettled"]}
        settled = [key for key in common if str(key) not in unsettled]
        if len(settled) < len(common):
            same = sum(1 for key in settled if before[key] == after[key])
            print(f"    of the {len(settled)} keys measured steadily in both runs: "
                  f"{same} identical ({same / len(settled) if settled else 0:.0%}), "
                  f"{sum(1 for key in settled if key in far)} beyond one grid step")
    recorder.finish()
    print("\nall targets met" if ok else "\nsome targets missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
