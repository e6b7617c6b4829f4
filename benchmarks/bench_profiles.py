"""Cost of reading, importing and resolving a deployment of 10,000 profile entries.

The deployment: 10 disjoint exact-processor selectors (AMD family 25, one
model each), 4 thread ranges ([1, 1], [2, 3], [4, 7], [8, 8]) and 250
synthetic keys with a small typed config, every entry's values valid. A
profile file binds one selector, so the deployment is 10 files of 1,000
entries each, imported together (``import_deployment_profiles`` takes the
list and publishes them in one generation). Figures are medians of ``-r``
runs:

- read: ``read_deployment_profile`` of the 10 files (parse and check the
  structure of every entry);
- import: ``import_deployment_profiles`` of the 10 files (which reads them
  again, checks every entry against the schemas, then publishes), each run
  into a fresh registry holding the 250 schemas, built outside the timing;
- resolution: ns per key, resolving the 250 keys for a processor one
  selector names at 3 threads (inside [2, 3]), with the 10,000 entries
  registered and, interleaved in the same runs, in the same registry's
  generation before the import (schemas only); the ratio is the first over
  the second (1: the entries cost resolution nothing). The cost of the loop
  itself (a dict lookup per key) is reported beside them.

Before timing, it checks that every key resolves to its entry's values for
each selector and each thread count 1 to 8, and to the defaults at 9 threads
and on a model no selector names. It exits non-zero when an entry is not
imported or resolves wrong, when the import takes more than 1 s or
resolution more than 2x the empty registry's (the targets of the deployment
profiles).

    python benchmarks/bench_profiles.py -r 7
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench_cache import median_ms
from results import Recorder, add_arguments

from kerneltune.machine.descriptor import CpuDescriptor, CpuExecutionDescriptor
from kerneltune.machine.selectors import CpuSelector, Tier
from kerneltune.profiles.files import read_deployment_profile, write_deployment_profile
from kerneltune.profiles.importer import import_deployment_profiles
from kerneltune.profiles.model import DeploymentProfile, ProfileEntry
from kerneltune.tuning.registry import KernelTuningRegistry
from kerneltune.tuning.schema import KernelTuningKey, tunable

MODELS = (1, 8, 17, 24, 33, 68, 80, 97, 116, 160)
THREAD_RANGES = ((1, 1), (2, 3), (4, 7), (8, 8))
KEYS = 250
ENTRIES = len(MODELS) * len(THREAD_RANGES) * KEYS
IMPORT_TARGET_MS = 1000.0
RATIO_TARGET = 2.0
#: the execution timed: the third selector's model, inside the range [2, 3]
TIMED_MODEL, TIMED_THREADS = 17, 3


@dataclass(frozen=True)
class DeploymentConfig:
    minimum_elements: int = tunable("parallel.minimum_elements", 32768, minimum=1)
    maximum_threads: int = tunable("parallel.maximum_threads", 64, minimum=1)
    pack: bool = tunable("algorithm.pack_b", True)


PROCESSOR = CpuDescriptor(architecture="x86_64", vendor="amd", family=25, model=TIMED_MODEL,
                          stepping=1, microarchitecture="zen4",
                          features=frozenset({"avx2", "avx512f", "fma"}))


def keys() -> list[KernelTuningKey]:
    return [KernelTuningKey("bench", f"Kernel{n}", "baseline", "FLOAT") for n in range(KEYS)]


def registry_with_schemas() -> KernelTuningRegistry:
    registry = KernelTuningRegistry()
    registry.register_schemas((key, DeploymentConfig) for key in keys())
    return registry


def values(selector: int, threads: int, key: int) -> dict[str, object]:
    """Values unique to each (selector, range, key), so a wrong pick is seen."""
    return {"parallel.minimum_elements": 1000 * (selector * len(THREAD_RANGES) + threads + 1)
            + key, "parallel.maximum_threads": THREAD_RANGES[threads][1],
            "algorithm.pack_b": key % 2 == 0}


def deployment() -> list[DeploymentProfile]:
    """One profile per selector, an entry per key and thread range."""
    return [
        DeploymentProfile(
            f"model-{model}", CpuSelector(vendor="amd", family=25, models=[model]),
            tuple(ProfileEntry(key, bounds, values(s, t, k))
                  for k, key in enumerate(keys()) for t, bounds in enumerate(THREAD_RANGES)),
            versions={"kerneltune": "bench"}, provenance=({"blas": []},))
        for s, model in enumerate(MODELS)]


def execution(model: int, threads: int) -> CpuExecutionDescriptor:
    return CpuExecutionDescriptor(dataclasses.replace(PROCESSOR, model=model), threads,
                                  frozenset(range(threads)), threads)


def check(registry: KernelTuningRegistry) -> list[str]:
    """Every key, selector and thread count resolves to its entry; the rest to defaults."""
    snapshot, wrong = registry.snapshot(), []
    for s, model in enumerate(MODELS):
        for t, (low, high) in enumerate(THREAD_RANGES):
            for threads in range(low, high + 1):
                on = execution(model, threads)
                wrong += [f"{key} on model {model}, {threads} threads"
                          for k, key in enumerate(keys())
                          if dict(snapshot.resolve(key, on).values) != values(s, t, k)]
    outside = (execution(MODELS[0], THREAD_RANGES[-1][1] + 1), execution(2, 1))
    wrong += [f"{key} outside every selector or range took a profile"
              for on in outside for key in keys()
              if snapshot.resolve(key, on).source.tier is not Tier.DEFAULTS]
    return wrong


def per_key_ns(resolvers: dict[str, object], passes: int, repeats: int) -> dict[str, float]:
    """Median ns per key of each resolver over all keys, the resolvers taking turns."""
    samples: dict[str, list[float]] = {name: [] for name in resolvers}
    listed = keys()
    for _ in range(repeats):
        for name, resolve in resolvers.items():
            start = time.perf_counter_ns()
            for _ in range(passes):
                for key in listed:
                    resolve(key)
            samples[name].append((time.perf_counter_ns() - start) / (passes * len(listed)))
    return {name: statistics.median(times) for name, times in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-r", "--repeats", type=int, default=7, help="timed runs per figure")
    parser.add_argument("-n", "--passes", type=int, default=200,
                        help="passes over the 250 keys per timed resolution run")
    add_arguments(parser)
    args = parser.parse_args(argv)
    recorder = Recorder(__file__, args)
    with tempfile.TemporaryDirectory() as folder:
        paths = [write_deployment_profile(profile, Path(folder) / f"{profile.name}.yaml")
                 for profile in deployment()]
        registry = registry_with_schemas()
        empty = registry.snapshot()
        report = import_deployment_profiles(paths, registry=registry)
        entries = sum(file.imported for file in report.files if file.status == "imported")
        wrong = check(registry)
        print(f"{len(paths)} files, {entries} entries imported; {len(wrong)} wrong resolutions")
        for problem in [*report.problems, *wrong][:5]:
            print(f"  {problem}", file=sys.stderr)
        recorder.target("entries imported", entries, "==", ENTRIES)
        recorder.target("every key resolves to its entry, or to the defaults outside",
                        not wrong, "==", True)
        read_ms = median_ms(lambda _: [read_deployment_profile(path) for path in paths],
                            args.repeats)
        import_ms = median_ms(lambda fresh: import_deployment_profiles(paths, registry=fresh),
                              args.repeats, setup=registry_with_schemas)
    on = execution(TIMED_MODEL, TIMED_THREADS)
    full = registry.snapshot()
    table = dict.fromkeys(keys())
    ns = per_key_ns({"full": lambda key: full.resolve(key, on),
                     "empty": lambda key: empty.resolve(key, on),
                     "loop": table.__getitem__}, args.passes, args.repeats)
    ratio = ns["full"] / ns["empty"]
    print(f"read and validate {len(paths)} files: {read_ms:.0f} ms")
    print(f"import {entries} entries: {import_ms:.0f} ms (target <= {IMPORT_TARGET_MS:.0f} ms)")
    print(f"resolution per key: {ns['full']:.0f} ns with {entries} entries, {ns['empty']:.0f} ns "
          f"with none ({ratio:.2f}x; target <= {RATIO_TARGET:.0f}x); loop {ns['loop']:.0f} ns")
    for name, value in (("files", len(paths)), ("entries", entries), ("read_ms", read_ms),
                        ("import_ms", import_ms), ("resolve_ns", ns["full"]),
                        ("resolve_empty_ns", ns["empty"]), ("loop_ns", ns["loop"]),
                        ("resolve_ratio", ratio)):
        recorder.figure(name, value)
    recorder.target(f"import of {ENTRIES} entries in {len(MODELS)} files (ms)", import_ms, "<=",
                    IMPORT_TARGET_MS)
    recorder.target("resolution with every entry / with none", ratio, "<=", RATIO_TARGET)
    recorder.finish()
    missed = [target for target in recorder.targets if not target["met"]]
    for target in missed:
        print(f"MISSED: {target['name']}: {target['value']:.4g} (target {target['relation']} "
              f"{target['limit']:.4g})", file=sys.stderr)
    if not missed:
        print("OK: every resolution right; import and resolution targets met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
