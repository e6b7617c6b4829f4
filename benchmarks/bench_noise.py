"""Calibration beside busy processes: what noise may move, and what it costs when quiet.

The same calibration (Abs, Add, Tanh, Sigmoid and Gemm on FLOAT, 2 threads,
normal effort, ``kerneltune calibrate`` in a fresh process with the user cache
off) runs on the quiet machine, then beside one busy-looping process per CPU,
then quiet again, in one run of this script. Targets:

- beside the busy processes, no published value moves beyond a factor 2 from
  the first quiet run's (a thread cap must be equal), or its key is withheld;
- quiet, no key is withheld, and the second quiet run repeats the first's values
  within a factor 2 (the cost against the calibration before this rule is
  bench_calibration's to judge: it runs every key).

    python benchmarks/bench_noise.py [--busy-per-cpu 1] [--save]

Everything runs with OPENBLAS_THREAD_TIMEOUT=4 unless the environment sets it,
as ``nox -s calibrate`` does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from results import Recorder, add_arguments, quiet_openblas

KERNELS = ("Abs", "Add", "Tanh", "Sigmoid", "Gemm")
#: a published value this many times its quiet value, or less than its inverse, moved
FACTOR = 2.0
THREAD_CAP = "parallel.maximum_threads"


@contextlib.contextmanager
def busy(per_cpu: int) -> Iterator[int]:
    """``per_cpu`` busy-looping processes per CPU this process may use, while inside."""
    count = per_cpu * len(os.sched_getaffinity(0))
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(count)]
    try:
        time.sleep(1.0)  # the scheduler spreads them first
        yield count
    finally:
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait()


def calibrate(directory: Path, name: str) -> dict:
    """One calibration in a fresh process; its batch report and its exit status."""
    report = directory / f"{name}.json"
    command = [sys.executable, "-m", "kerneltune", "calibrate", "--effort", "normal",
               "--threads", "2", "--element-type", "FLOAT", "--report", str(report),
               *(argument for kernel in KERNELS for argument in ("--kernel", kernel))]
    environment = {name: value for name, value in os.environ.items()
                   if name != "KERNELTUNE_MAXIMUM_INTERFERENCE"}
    started = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, check=False,
                          env={**environment, "KERNELTUNE_CACHE": "off"})
    seconds = time.perf_counter() - started
    if not report.exists():
        raise SystemExit(f"calibration {name} wrote no report (exit status {done.returncode})")
    (batch,) = json.loads(report.read_text())
    return {"batch": batch, "status": done.returncode, "seconds": seconds}


def published(batch: dict) -> dict[str, dict]:
    """The values each calibrated key published, by key name."""
    return {f"{r['key']['kernel']}/{r['key']['element_type']}": r["values"]
            for r in batch["calibrated"]}


def discarded(batch: dict) -> int:
    """Measurements discarded for interference, over the keys published and withheld."""
    reports = [*batch["calibrated"], *(w["report"] for w in batch.get("withheld", []))]
    return sum(len(r["interference"]["discarded"]) for r in reports if r.get("interference"))


def moved(reference: dict[str, dict], other: dict[str, dict]) -> list[tuple[str, str, object,
                                                                               object]]:
    """(key, parameter, reference value, other value) beyond the factor (a cap: unequal)."""
    found = []
    for key, values in other.items():
        for name, value in values.items():
            before = reference.get(key, {}).get(name)
            if before is None or before == value:
                continue
            if name == THREAD_CAP or not isinstance(value, int | float) or isinstance(
                    value, bool) or min(value, before) <= 0 \
                    or max(value / before, before / value) > FACTOR:
                found.append((key, name, before, value))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy-per-cpu", type=int, default=1,
                        help="busy-looping processes per CPU beside the second run")
    add_arguments(parser)
    args = parser.parse_args()
    quiet_openblas()
    recorder = Recorder(__file__, args)
    with tempfile.TemporaryDirectory() as scratch:
        quiet = calibrate(Path(scratch), "quiet")
        with busy(args.busy_per_cpu) as loops:
            loaded = calibrate(Path(scratch), "busy")
        again = calibrate(Path(scratch), "quiet-again")
    recorder.figure("busy_processes", loops)
    recorder.table("runs", "each calibration: wall seconds, keys published and withheld, "
                           "measurements discarded for interference, exit status")
    print(f"# {', '.join(KERNELS)} on FLOAT, 2 threads, normal effort; busy: {loops} "
          f"busy-looping processes")
    for name, run in (("quiet", quiet), ("busy", loaded), ("quiet again", again)):
        batch = run["batch"]
        withheld = [f"{w['key']['kernel']}" for w in batch.get("withheld", [])]
        print(f"{name:<12} {run['seconds']:6.1f} s  {len(batch['calibrated'])} published, "
              f"{len(withheld)} withheld {withheld}, {discarded(batch)} measurements "
              f"discarded, exit {run['status']}")
        recorder.row("runs", run=name, seconds=run["seconds"],
                     published=len(batch["calibrated"]), withheld=withheld,
                     discarded=discarded(batch), exit_status=run["status"])
    reference = published(quiet["batch"])
    recorder.table("moved", "values beyond a factor 2 of the first quiet run's (a thread "
                            "cap: any change)")
    ok = True
    for name, run in (("busy", loaded), ("quiet again", again)):
        found = moved(reference, published(run["batch"]))
        for key, parameter, before, value in found:
            print(f"  {name}: {key} {parameter}: {before} -> {value}")
            recorder.row("moved", run=name, key=key, parameter=parameter, quiet=before,
                         value=value)
        ok &= recorder.target(f"values beyond a factor {FACTOR:g} of the quiet run's, {name}",
                              len(found), "==", 0)
    ok &= recorder.target("keys withheld on the quiet machine",
                          len(quiet["batch"].get("withheld", [])), "==", 0)
    recorder.figure("quiet_seconds", quiet["seconds"])
    recorder.figure("busy_seconds", loaded["seconds"])
    recorder.finish()
    print("all targets met" if ok else "some targets MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
