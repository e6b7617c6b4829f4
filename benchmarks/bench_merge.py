"""Three calibrations of one selector merged by their evidence: regret and repeatability.

`kerneltune calibrate --profile` runs six times on this machine, each in a fresh
process with the user cache off (Abs, Add, Tanh, Sigmoid and Gemm on FLOAT,
2 threads, bound to this processor's vendor/family/model): set 1 is runs 1-3,
set 2 runs 4-6. Each set is baked into one deployment file, the bake merging
the runs by the evidence of their reports (kerneltune.profiles.merge).

1. Regret, right after each set's calibrations and bake, on held-out sizes as
   bench_calibration measures it (elementwise_gain: each case at sizes midway
   between the search grid's points, one pass for every set of values, against
   the best values an exhaustive search over the same grid finds): the
   geometric-mean regret of each run's values and of the merged values. Target:
   in each set, the merged regret at most the best single run's. Gemm: default
   time / time with each set of values on bench_calibration's held-out shapes
   (gemm_gain), geometric mean over the shapes; no target.
2. Repeatability: the share of keys with identical values (every parameter) in
   set 1's merge and set 2's; for single runs, run i against run i + 3 ((key,
   parameter) pairs are counted too). Targets: merged at least 97%, and above
   every single pair's (equal when both are 100%).

    python benchmarks/bench_merge.py [--effort normal] [--rounds 9] [--keep DIR] [--save]
        [--mode NAME]

``--mode NAME`` gives the run a results file of its own: another ISA variant
(``KERNELTUNE_ISA=x86_64_v3 ... --mode x86_64_v3``) or a run beside busy processes.

``--keep DIR`` keeps the profiles, their reports and the merged files. Everything
runs with OPENBLAS_THREAD_TIMEOUT=4 unless the environment sets it, as
``nox -s calibrate`` does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_calibration import elementwise_gain, gemm_gain
from results import Recorder, add_arguments, quiet_openblas

from kerneltune.pipeline import bake
from kerneltune.profiles.deployment import read_profiles
from kerneltune.profiles.model import AGREE, BEATEN, CONFIRMED, COUNTED_OUT, DISAGREE

KERNELS = ("Abs", "Add", "Tanh", "Sigmoid", "Gemm")
SAMPLE = [(kernel, "FLOAT") for kernel in KERNELS if kernel != "Gemm"]
RUNS_PER_SET = 3
MERGED = "merged"
#: the bake's merge reasons, as results fields
REASONS = {AGREE: "agree", CONFIRMED: "confirmed", BEATEN: "beaten", DISAGREE: "disagree",
           COUNTED_OUT: "counted_out"}


def calibrate(directory: Path, name: str, effort: str) -> dict:
    """One `calibrate --profile` in a fresh process: its profile, wall seconds, exit status."""
    output = directory / f"{name}.yaml"
    command = [sys.executable, "-m", "kerneltune", "calibrate", "--profile", "--name", name,
               "--output", str(output), "--effort", effort, "--threads", "2",
               "--element-type", "FLOAT",
               *(argument for kernel in KERNELS for argument in ("--kernel", kernel))]
    started = time.perf_counter()
    done = subprocess.run(command, check=False, stdout=subprocess.DEVNULL,
                          env={**os.environ, "KERNELTUNE_CACHE": "off"})
    if done.returncode not in (0, 3):  # 3: done in part, keys unfinished (counted)
        raise subprocess.CalledProcessError(done.returncode, command)
    return {"name": name, "path": output, "seconds": time.perf_counter() - started,
            "status": done.returncode, "entries": entries_of(output)}


def entries_of(path: Path) -> list:
    """The entries of the one profile in a profile or deployment file."""
    read = read_profiles(path)
    if len(read.profiles) != 1:
        raise SystemExit(f"{path}: expected one profile, read {len(read.profiles)} "
                         f"({'; '.join(map(str, read.problems))})")
    return list(read.profiles[0].entries)


def values_of(entries: list) -> dict:
    """The values each key runs with, by key."""
    return {entry.key: dict(entry.values) for entry in entries}


def merge(runs: list[dict], output: Path) -> tuple[list, dict[str, int]]:
    """The set's runs baked into ``output``: the merged entries and the count per reason."""
    report = bake([run["path"] for run in runs], output)
    if not report.written or len(report.merges) != 1:
        raise SystemExit(f"the bake of {', '.join(run['name'] for run in runs)} merged "
                         f"{len(report.merges)} profiles: {'; '.join(report.problems)}")
    return entries_of(output), dict(report.merges[0].reasons)


def regrets(rows: list[dict], labels: list[str]) -> dict[str, list[float]]:
    """Per label, time / exhaustive-best time at every held-out size of every row (the
    merged values are elementwise_gain's "calibrated")."""
    return {label: [time / best for row in rows for time, best in
                    zip(row["calibrated" if label == MERGED else label], row["best"],
                        strict=True)]
            for label in labels}


def gemm_gains(values: dict[str, dict], rounds: int) -> dict[str, float | None]:
    """Per label, default time / time with its values, geometric mean over the held-out Gemm
    shapes; measured once per distinct Gemm values (the same values, the same figure)."""
    measured: dict[str, float | None] = {}
    gains = {}
    for label, found in values.items():
        gemm = {key: found[key] for key in found if key.kernel == "Gemm"}
        text = repr(sorted((str(key), sorted(items.items())) for key, items in gemm.items()))
        if text not in measured:
            ratios = [ratio for _, _, ratio, _ in gemm_gain(gemm, rounds)]
            measured[text] = statistics.geometric_mean(ratios) if ratios else None
        gains[label] = measured[text]
    return gains


def agreement(one: dict, two: dict) -> tuple[int, int, int, int]:
    """(key, parameter) pairs either names and those identical in both; keys likewise."""
    pairs = {(key, name) for values in (one, two) for key, found in values.items()
             for name in found}
    same = sum(1 for key, name in pairs
               if one.get(key, {}).get(name) == two.get(key, {}).get(name))
    keys = one.keys() | two.keys()
    return len(pairs), same, len(keys), sum(1 for key in keys if one.get(key) == two.get(key))


def counted_out(entry) -> dict[str, str]:
    """The runs the merge counted out of an entry's key, and why."""
    return {run: why for evidence in entry.evidence.values()
            for run, why in evidence.counted_out.items()}


def explain(number: int, entry, runs: dict[str, dict], recorder: Recorder) -> None:
    """The runs counted out of a merged entry's key, and its parameters on which the runs
    counted in did not simply agree, with the evidence that decided them."""
    for run, why in sorted(counted_out(entry).items()):
        print(f"    {entry.key.kernel}: {run} counted out: {why}")
        recorder.row("counted_out", set=number, key=str(entry.key), run=run, reason=why)
    for name, evidence in sorted(entry.evidence.items()):
        if evidence.reason == AGREE:
            continue
        found = {run: values.get(entry.key, {}).get(name) for run, values in runs.items()}
        compared = "" if evidence.ratio is None else (
            f"; {evidence.compared} against it: {evidence.ratio:.3f} "
            f"[{evidence.low:.3f}, {evidence.high:.3f}]")
        print(f"    {entry.key.kernel} {name}: {evidence.reason}, published "
              f"{entry.values.get(name)} (in use {evidence.in_use}; runs {found}{compared})")
        recorder.row("decided", set=number, key=str(entry.key), parameter=name,
                     reason=evidence.reason, published=entry.values.get(name),
                     in_use=evidence.in_use, runs=found, compared=evidence.compared,
                     ratio=evidence.ratio)


def measure_set(number: int, directory: Path, args: argparse.Namespace,
                recorder: Recorder) -> dict:
    """One set: its calibrations, their merge, and the regret of each, measured at once."""
    first = (number - 1) * RUNS_PER_SET + 1
    runs = [calibrate(directory, f"run-{index}", args.effort)
            for index in range(first, first + RUNS_PER_SET)]
    merged, reasons = merge(runs, directory / f"merged-{number}.yaml")
    values = {run["name"]: values_of(run["entries"]) for run in runs}
    values[MERGED] = values_of(merged)
    labels = [run["name"] for run in runs] + [MERGED]
    rows = elementwise_gain(values[MERGED], args.effort, args.rounds, SAMPLE,
                            {run["name"]: values[run["name"]] for run in runs})
    gemm = gemm_gains(values, args.rounds)

    print(f"\n# set {number}: runs {', '.join(labels[:-1])}")
    for run in runs:
        print(f"{run['name']}: {run['seconds']:5.1f} s, exit {run['status']}, "
              f"{len(run['entries'])} keys")
        recorder.row("runs", set=number, run=run["name"], seconds=run["seconds"],
                     exit_status=run["status"], keys=len(run["entries"]))
    out = sum(len(counted_out(entry)) for entry in merged)
    print("merged: " + ", ".join(f"{count} {reason}" for reason, count in reasons.items())
          + f"; runs counted out of a key: {out}")
    recorder.row("merges", set=number, runs_out=out,
                 **{REASONS[reason]: count for reason, count in reasons.items()})
    for entry in merged:
        explain(number, entry, {label: values[label] for label in labels[:-1]}, recorder)
    print("held-out regret (time / exhaustive best), geometric mean per key and case:")
    print(f"{'key':<14} {'case':<10} " + " ".join(f"{label:>7}" for label in labels))
    for row in rows:
        found = regrets([row], labels)
        print(f"{row['key']:<14} {row['case']:<10} "
              + " ".join(f"{statistics.geometric_mean(found[label]):7.3f}" for label in labels))
    total = regrets(rows, labels)
    result = {}
    for label in labels:
        regret = statistics.geometric_mean(total[label]) if total[label] else 1.0
        result[label] = regret
        print(f"{label:<7} regret geomean {regret:5.3f} max {max(total[label], default=1.0):5.3f}"
              f"  Gemm default/these {gemm[label] or 0:5.3f}")
        recorder.row("regret", set=number, values=label, regret_geomean=regret,
                      regret_max=max(total[label], default=1.0), gemm_gain=gemm[label])
    best = min(result[label] for label in labels[:-1])
    recorder.figure(f"set{number}_merged_regret", result[MERGED])
    recorder.figure(f"set{number}_best_single_regret", best)
    return {"values": values, "labels": labels, "merged_ok": recorder.target(
        "held out, merged regret at most the best single run's", result[MERGED], "<=", best,
        f"set {number}")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--effort", default="normal", choices=("quick", "normal", "thorough"))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--keep", type=Path, help="keep the profiles, reports and merges here")
    parser.add_argument("--mode", help="a results file of its own, e.g. a variant or 'busy'")
    add_arguments(parser)
    args = parser.parse_args()
    quiet_openblas()
    recorder = Recorder(__file__, args, mode=args.mode)
    recorder.table("runs", "each calibration: wall seconds, exit status, keys in its profile")
    recorder.table("merges", "per set, the merged parameters by the reason that decided "
                   "them; runs_out: (key, run) pairs the merge counted out")
    recorder.table("counted_out", "per set, the runs the merge counted out of a key, and why")
    recorder.table("decided", "merged parameters on which the runs counted in did not simply "
                   "agree")
    recorder.table("regret", "2 threads, per set and values (a run's or the merge's): "
                   "elementwise time / exhaustive-best time on the held-out sizes (geomean, "
                   "max), and Gemm default time / time with the values (geomean over shapes)")
    recorder.table("repeatability", "set 1 against set 2: (key, parameter) pairs and keys "
                   "with identical values")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.keep or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        sets = [measure_set(number, directory, args, recorder) for number in (1, 2)]
    ok = all(found["merged_ok"] for found in sets)

    print("\n# repeatability: set 1 against set 2 (identical values)")
    shares = {}
    pairs = [*zip(sets[0]["labels"], sets[1]["labels"], strict=True)]
    for one, two in pairs:
        count, same, keys, same_keys = agreement(sets[0]["values"][one], sets[1]["values"][two])
        label = MERGED if one == MERGED else f"{one} vs {two}"
        shares[label] = same_keys / keys if keys else 0.0
        print(f"{label:<15} {same_keys}/{keys} keys ({shares[label]:.0%}), "
              f"{same}/{count} parameters")
        recorder.row("repeatability", pair=label, parameters=count, identical=same,
                     share=shares[label], keys=keys, keys_identical=same_keys)
    singles = [share for label, share in shares.items() if label != MERGED]
    recorder.figure("merged_repeatability", shares[MERGED])
    recorder.figure("single_repeatability_mean", statistics.mean(singles))
    ok &= recorder.target("repeatability, merged: share of keys identical",
                          shares[MERGED], ">=", 0.97)
    ok &= recorder.target("repeatability, merged above every single pair's", shares[MERGED],
                          ">=" if max(singles) == 1.0 else ">", max(singles))
    recorder.figure("wall_seconds", time.perf_counter() - started)
    print(f"\nwall time {time.perf_counter() - started:.0f} s")
    recorder.finish()
    print("all targets met" if ok else "some targets MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
