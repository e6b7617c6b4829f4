"""Cost of loading, inspecting and updating the calibration cache at 100, 1,000 and 10,000 entries.

Each cache holds entries for a quarter as many registered keys, each at four
thread counts of this processor, so a load publishes every entry (the worst
case). Figures are medians of ``-r`` runs, in ms:

- load: read, parse, validate every entry and publish them in one generation
  (into a fresh registry each run, created outside the timing);
- inspect: read, parse and check, publishing nothing;
- update: lock, re-read, merge one new entry, write a temporary, fsync, replace;
- the peers, timed on the same file in the same run: ``json`` parsing alone
  (what the reader parses the file with), a plain file copy, and the safe YAML
  loader on the same text (what a YAML-only reader would cost).

It exits non-zero when a 10,000-entry load exceeds 300 ms or its update
500 ms (the targets of the cache), so a regression does not pass unnoticed.

    python benchmarks/bench_cache.py -r 7
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from results import Recorder, add_arguments

from kerneltune import current_execution
from kerneltune.cache.kernel_tuning_cache import (
    inspect_kernel_tuning_cache,
    load_kernel_tuning_cache,
    update_kernel_tuning_cache,
)
from kerneltune.tuning.registry import KernelTuningProfile, KernelTuningRegistry
from kerneltune.tuning.schema import KernelTuningKey, tunable

SIZES = (100, 1_000, 10_000)
THREAD_COUNTS = (1, 2, 3, 4)
TARGET_MS = {"load": 300.0, "update": 500.0}  # at 10,000 entries, from the issue


@dataclass(frozen=True)
class ElementwiseConfig:
    minimum_elements: int = tunable("parallel.minimum_elements", 32768, minimum=1)
    maximum_threads: int = tunable("parallel.maximum_threads", 64, minimum=1)
    layout: str = tunable("algorithm.layout", "row", choices=("row", "column"))


def keys(count: int) -> list[KernelTuningKey]:
    return [KernelTuningKey("bench", f"Kernel{n}", "baseline", "FLOAT") for n in range(count)]


def registry_for(count: int) -> KernelTuningRegistry:
    registry = KernelTuningRegistry()
    registry.register_schemas((key, ElementwiseConfig) for key in keys(count))
    return registry


def profiles(entries: int) -> list[KernelTuningProfile]:
    base = current_execution()
    executions = [replace(base, effective_threads=threads) for threads in THREAD_COUNTS]
    return [
        KernelTuningProfile(key, {"parallel.minimum_elements": 1024 + n,
                                  "parallel.maximum_threads": threads, "algorithm.layout": "row"},
                            execution=execution, origin="calibration",
                            report_digest=f"{n:064x}")
        for n, key in enumerate(keys(entries // len(THREAD_COUNTS)))
        for threads, execution in zip(THREAD_COUNTS, executions, strict=True)
    ]


def median_ms(function, repeats: int, setup=lambda: None) -> float:
    times = []
    for _ in range(repeats):
        argument = setup()
        start = time.perf_counter()
        function(argument)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(entries: int, folder: Path, repeats: int) -> dict[str, float]:
    path = folder / f"cache_{entries}.yaml"
    count = entries // len(THREAD_COUNTS)
    registry = registry_for(count + 1)
    report = update_kernel_tuning_cache(profiles(entries), path, registry=registry)
    assert report.status == "updated", report.to_dict()
    load = load_kernel_tuning_cache(path=path, registry=registry)
    assert load.status == "loaded" and len(load.loaded) == entries, load.status
    extra = KernelTuningProfile(KernelTuningKey("bench", f"Kernel{count}", "baseline", "FLOAT"),
                                {"parallel.minimum_elements": 512},
                                execution=current_execution(), origin="calibration")
    text = path.read_text(encoding="utf-8")
    copy = folder / "copy.yaml"
    # each update run adds then removes nothing: alternate the value so every run writes
    values = iter(range(10**9))

    def update(_):
        profile = KernelTuningProfile(extra.key, {"parallel.minimum_elements": 512 + next(values)},
                                      execution=extra.execution, origin="calibration")
        status = update_kernel_tuning_cache([profile], path, registry=registry).status
        assert status == "updated", status

    return {
        "load": median_ms(lambda fresh: load_kernel_tuning_cache(path=path, registry=fresh),
                          repeats, setup=lambda: registry_for(count + 1)),
        "inspect": median_ms(lambda _: inspect_kernel_tuning_cache(path), repeats),
        "update": median_ms(update, repeats),
        "json parse": median_ms(lambda _: json.loads(text), repeats),
        "file copy": median_ms(lambda _: shutil.copyfile(path, copy), repeats),
        "yaml parse": median_ms(
            lambda _: yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)),
            min(repeats, 3)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-r", "--repeats", type=int, default=7)
    add_arguments(parser)
    args = parser.parse_args()
    recorder = Recorder(__file__, args)
    recorder.table("sizes", "medians in ms per cache size; json_parse_ratio and yaml_parse_ratio "
                   "are the peer's time over the load's")
    columns = ("load", "inspect", "update", "json parse", "file copy", "yaml parse")
    print(f"{'entries':>8} " + " ".join(f"{c + ' ms':>14}" for c in columns))
    failed = []
    with tempfile.TemporaryDirectory() as folder:
        for entries in SIZES:
            row = measure(entries, Path(folder), args.repeats)
            print(f"{entries:>8} " + " ".join(f"{row[c]:>14.1f}" for c in columns))
            recorder.row("sizes", entries=entries,
                         **{f"{c.replace(' ', '_')}_ms": row[c] for c in columns},
                         json_parse_ratio=row["json parse"] / row["load"],
                         yaml_parse_ratio=row["yaml parse"] / row["load"])
            if entries == SIZES[-1]:
                failed += [f"{name} of {entries} entries: {row[name]:.0f} ms > {limit:.0f} ms"
                           for name, limit in TARGET_MS.items()
                           if not recorder.target(f"{name} of {entries} entries (ms)",
                                                  row[name], "<=", limit)]
    recorder.finish()
    for failure in failed:
        print(f"target missed: {failure}", file=sys.stderr)
    if failed:
        return 1
    print("targets met: load of 10,000 entries < 300 ms, update < 500 ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
