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

``--fleet 10,100,1000`` measures deployment files at fleet scale instead: for each
count of machine types, a profile per type (every key of the kernel library this
process registered, for 1 and 2 threads: about 460 entries, the values different
per type and thread count), each bound to an exact processor of its own, the first
to this host's vendor, family and model; the project's own bake merges them. Per
count: the bake's time, the file's size, ``kerneltune profiles validate`` of the
file (a fresh process, wall time), ``import kerneltune`` in a fresh process with
the file named and with none (interleaved runs, medians), the import's overhead
(what its step of importing the file took, as ``startup_report().seconds`` says:
the difference of two whole imports is lost in their noise), and resolution per
key for this host with the file imported over without. Targets: the import
overhead at the largest count within 2x of the smallest's and under 100 ms; the
bake under 60 s and validate under 30 s at 1,000 types.

    python benchmarks/bench_profiles.py --fleet 10,100,1000 --save
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench_cache import median_ms
from results import Recorder, add_arguments

import kerneltune
from kerneltune.machine import current_execution, get_cpu_descriptor
from kerneltune.machine.descriptor import CpuDescriptor, CpuExecutionDescriptor
from kerneltune.machine.selectors import CpuSelector, Tier
from kerneltune.pipeline import bake
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


# --- fleet mode ----------------------------------------------------------------------------

#: import overhead at the largest count over the smallest's, and at most (ms)
FLEET_GROWTH_TARGET, FLEET_IMPORT_TARGET_MS = 2.0, 100.0
#: the bake and validate of 1,000 machine types (s)
FLEET_BAKE_TARGET_S, FLEET_VALIDATE_TARGET_S = 60.0, 30.0
#: the thread ranges of every type's entries
FLEET_RANGES = ((1, 1), (2, 2))
#: the child that times ``import kerneltune`` and says what it imported
IMPORT_TIMER = """
import json, time
start = time.perf_counter()
import kerneltune
seconds = time.perf_counter() - start
startup = kerneltune.startup_report()
report = startup.profiles
files = [] if report is None else [[f.status, f.imported, len(f.unread)] for f in report.files]
print(json.dumps([seconds, startup.seconds["profiles"], files]))
"""


def fleet_profile(number: int) -> DeploymentProfile:
    """Machine type ``number``'s profile: the first for this host, the others for processors
    of their own; values differ per type, key and thread range, as calibrations do."""
    host = get_cpu_descriptor()
    if number == 0:
        selector = CpuSelector(architecture=host.architecture, vendor=host.vendor,
                               family=host.family, models=[host.model])
    else:
        selector = CpuSelector(architecture="x86_64", vendor=("intel", "amd")[number % 2],
                               family=200 + number // 250, models=[number % 250])
    snapshot = kerneltune.default_registry.snapshot()
    entries = []
    for index, key in enumerate(sorted(snapshot.keys(), key=str)):
        defaults = snapshot.schema(key).default_values()
        for low, high in FLEET_RANGES:
            shift = (number * 7 + index + low) % 64
            values = ({"parallel.minimum_elements": 1024 * (1 + shift)}
                      if "parallel.minimum_elements" in defaults
                      else {"parallel.minimum_tasks": 1 + shift % 16})
            entries.append(ProfileEntry(key, (low, high), values))
    return DeploymentProfile(f"type-{number:04d}", selector, tuple(entries),
                             versions={"kerneltune": kerneltune.__version__},
                             provenance=({"thread_counts": [1, 2]},))


def fresh_import(deployment: Path | None) -> tuple[float, float, list]:
    """``import kerneltune`` timed in a fresh process, with ``deployment`` named or none: the
    whole import, its step importing the file, and what that step imported."""
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith("KERNELTUNE_")}
    environment["KERNELTUNE_CACHE"] = "off"
    if deployment is not None:
        environment["KERNELTUNE_DEPLOYMENT_PROFILES"] = str(deployment)
    done = subprocess.run([sys.executable, "-c", IMPORT_TIMER], env=environment, check=True,
                          capture_output=True, text=True)
    return tuple(json.loads(done.stdout))


def wall_seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def fleet_count(count: int, folder: Path, args: argparse.Namespace, recorder: Recorder
                ) -> dict[str, float]:
    """One count of machine types: written, baked, validated, imported, resolved."""
    paths = [write_deployment_profile(fleet_profile(n), folder / f"type-{n:04d}.yaml")
             for n in range(count)]
    output = folder / "deployment.yaml"
    bakes = []
    for _ in range(args.fleet_repeats):
        output.unlink(missing_ok=True)
        start = time.perf_counter()
        baked = bake(paths, output)
        bakes.append(time.perf_counter() - start)
        if not baked.written:
            raise SystemExit(f"the bake of {count} types failed: {baked.problems[:3]}")
    validate = [wall_seconds([sys.executable, "-m", "kerneltune", "profiles", "validate",
                              str(output)]) for _ in range(args.fleet_repeats)]
    plain, named, steps = [], [], []
    for _ in range(args.imports):
        plain.append(fresh_import(None)[0])
        seconds, step, files = fresh_import(output)
        named.append(seconds)
        steps.append(step)
        if files != [["imported", len(FLEET_RANGES) * len(kerneltune.default_registry
                                                          .snapshot().keys()), count - 1]]:
            raise SystemExit(f"{count} types: the import took {files}, not this host's profile "
                             f"alone")
    registry = KernelTuningRegistry()
    kerneltune.kernels.register_library(registry)
    empty = registry.snapshot()
    import_deployment_profiles(output, registry=registry, processor=get_cpu_descriptor())
    full, on = registry.snapshot(), current_execution(2)
    listed = sorted(full.keys(), key=str)
    ns = {}
    for name, snapshot in (("full", full), ("empty", empty)):
        runs = []
        for _ in range(args.repeats):
            start = time.perf_counter_ns()
            for key in listed:
                snapshot.resolve(key, on)
            runs.append((time.perf_counter_ns() - start) / len(listed))
        ns[name] = statistics.median(runs)
    row = {"types": count, "entries": count * len(listed) * len(FLEET_RANGES),
           "file_mib": output.stat().st_size / (1 << 20),
           "bake_s": statistics.median(bakes), "validate_s": statistics.median(validate),
           "import_ms": statistics.median(named) * 1e3,
           "import_none_ms": statistics.median(plain) * 1e3,
           "import_overhead_ms": statistics.median(steps) * 1e3,
           "resolve_ns": ns["full"], "resolve_ratio": ns["full"] / ns["empty"]}
    recorder.row("fleet", **row)
    print(f"{count} types: bake {row['bake_s']:.1f} s, {row['file_mib']:.1f} MiB, validate "
          f"{row['validate_s']:.1f} s, import {row['import_ms']:.0f} ms "
          f"({row['import_none_ms']:.0f} ms with none; its step importing the file "
          f"{row['import_overhead_ms']:.1f} ms), "
          f"resolution {row['resolve_ns']:.0f} ns per key "
          f"({row['resolve_ratio']:.2f}x)")
    return row


def fleet(args: argparse.Namespace) -> int:
    recorder = Recorder(__file__, args, mode="fleet")
    recorder.table("fleet", "per count of machine types: the bake (s), the deployment file "
                            "(MiB), profiles validate in a fresh process (s), import kerneltune "
                            "in a fresh process with the file and with none (ms), its step "
                            "importing the file (ms), resolution per key for this host (ns) and "
                            "over no file")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for count in args.fleet:
            folder = Path(scratch) / str(count)
            folder.mkdir()
            rows.append(fleet_count(count, folder, args, recorder))
    first, last = rows[0], rows[-1]
    growth = last["import_overhead_ms"] / max(first["import_overhead_ms"], 1e-3)
    recorder.figure("import_overhead_growth", growth)
    recorder.target(f"import overhead, {last['types']} over {first['types']} types", growth,
                    "<=", FLEET_GROWTH_TARGET)
    recorder.target(f"import overhead at {last['types']} types (ms)", last["import_overhead_ms"],
                    "<", FLEET_IMPORT_TARGET_MS)
    for row in rows:
        if row["types"] == 1000:
            recorder.target("bake of 1,000 types (s)", row["bake_s"], "<", FLEET_BAKE_TARGET_S)
            recorder.target("validate of 1,000 types (s)", row["validate_s"], "<",
                            FLEET_VALIDATE_TARGET_S)
    return report_targets(recorder)


def report_targets(recorder: Recorder) -> int:
    """Write the results; say which targets were missed (exit status 1) or that none was."""
    recorder.finish()
    missed = [target for target in recorder.targets if not target["met"]]
    for target in missed:
        print(f"MISSED: {target['name']}: {target['value']:.4g} (target {target['relation']} "
              f"{target['limit']:.4g})", file=sys.stderr)
    if not missed:
        print("OK: every target met")
    return 1 if missed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-r", "--repeats", type=int, default=7, help="timed runs per figure")
    parser.add_argument("-n", "--passes", type=int, default=200,
                        help="passes over the 250 keys per timed resolution run")
    parser.add_argument("--fleet", type=lambda text: [int(n) for n in text.split(",")],
                        metavar="N1,N2,...",
                        help="measure deployment files of these counts of machine types")
    parser.add_argument("--fleet-repeats", type=int, default=3,
                        help="bakes and validates per count in fleet mode")
    parser.add_argument("--imports", type=int, default=15,
                        help="fresh-process imports with and without the file per count")
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.fleet:
        return fleet(args)
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
    return report_targets(recorder)


if __name__ == "__main__":
    sys.exit(main())
