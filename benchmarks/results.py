"""Benchmark figures as data: one JSON file per run, with what the run ran on.

Each benchmark builds a :class:`Recorder` from its parsed arguments, hands it
every row it prints and every target it checks, and calls
:meth:`Recorder.finish`, which writes the file that ``--json FILE`` names
and, with ``--save``, ``benchmarks/results/<benchmark>-<machine>.json``:
the latest run per machine and benchmark, replaced on rerun (the history is
git's). ``benchmarks/report.py`` turns that folder into docs/benchmarks.md.

<machine> is :func:`machine_slug`: vendor, microarchitecture, family and
model of the processor descriptor, in that order, joined by hyphens, each
lower-cased with every run of characters other than a-z and 0-9 turned into
one hyphen, and ``unknown`` for a field the descriptor does not know (for
example ``amd-x86-64-v4-25-17``). Those are the fields profile selectors
match, so one slug names one tuning target, whatever its cache sizes or core
count.

A ratio field is the peer's time over kerneltune's in the same run (above 1:
kerneltune is faster) unless the table's note says otherwise.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import instructions

# kerneltune and threadpoolctl are imported by the functions that describe and write a run,
# so that report.py renders the results (and `nox -s lint` checks them) without the package.

FORMAT = "kerneltune-benchmark-results"
SCHEMA_VERSION = 1
FOLDER = Path(__file__).resolve().parent / "results"
#: variables that change how the peers' and our thread pools behave, our ISA variant and
#: the instructions the processes saw
ENVIRONMENT_PREFIXES = ("OMP_", "GOMP_", "OPENBLAS_", "KERNELTUNE_ISA",
                        instructions.LEVEL_VARIABLE)
#: the variable that forces kerneltune's ISA variant
VARIANT_VARIABLE = "KERNELTUNE_ISA"
#: peer module -> its distribution, recorded when the benchmark imported it
PEERS = {"numpy": "numpy", "onnxruntime": "onnxruntime", "onnx": "onnx", "yaml": "PyYAML"}
#: what threadpoolctl reports of a library, without its file path (a machine path)
POOL_FIELDS = ("user_api", "internal_api", "prefix", "version", "architecture",
               "threading_layer", "num_threads")
RELATIONS = {"<": operator.lt, "<=": operator.le, "==": operator.eq, ">=": operator.ge,
             ">": operator.gt}
#: the noise of a shared machine is far above the fifth digit
SIGNIFICANT_DIGITS = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--json FILE`` and ``--save``, the same in every benchmark."""
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the figures to FILE")
    parser.add_argument("--save", action="store_true",
                        help="write them to benchmarks/results/<benchmark>-<machine>.json")


def add_variant_arguments(parser: argparse.ArgumentParser) -> None:
    """``--variant NAME`` and ``--all-variants``, the same in every benchmark that has them."""
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--variant", help=f"kerneltune's ISA variant ({VARIANT_VARIABLE}); a "
                                          f"results file of its own")
    chosen.add_argument("--all-variants", action="store_true",
                        help="every variant this machine executes, each in a process of its "
                             "own")


def in_variant(variant: str | None) -> str:
    """Start this script again with ``KERNELTUNE_ISA=variant``, and on the instructions of
    the variant's processors (:mod:`instructions`), unless the environment says so already
    (kerneltune picks its variant when imported, the peers their kernels when they load,
    and the results describe this process); the variant this process runs."""
    if variant is not None and (os.environ.get(VARIANT_VARIABLE) != variant
                                or instructions.CLEAR_VARIABLE not in os.environ):
        masked = instructions.masked_environment(variant, own_variant())
        if masked or os.environ.get(VARIANT_VARIABLE) != variant:
            os.execve(sys.executable, [sys.executable, *sys.argv],
                      {**os.environ, VARIANT_VARIABLE: variant, **masked})
    instructions.warn_unmasked()
    return variant or os.environ.get(VARIANT_VARIABLE) or own_variant()


def runnable_variants() -> list[str]:
    """The installed ISA variants this processor executes, most portable first."""
    from kerneltune.errors import KernelTuningError
    from kerneltune.kernels.variants import installed_variants, select_variant
    from kerneltune.machine.detect import detect_cpu_descriptor

    runnable = []
    for variant in installed_variants():
        try:
            select_variant(detect_cpu_descriptor(), available=[variant], forced=variant)
        except KernelTuningError:  # it would die of an illegal instruction here
            continue
        runnable.append(variant)
    return runnable


def own_variant() -> str:
    """The variant kerneltune picks on this processor when nothing forces one."""
    from kerneltune.kernels.variants import select_variant
    from kerneltune.machine.detect import detect_cpu_descriptor

    return select_variant(detect_cpu_descriptor())


def variant_mode(variant: str) -> str | None:
    """A results file's mode for a run on ``variant``: none for the processor's own variant
    (the figures of this machine), the variant's name for any other."""
    return None if variant == own_variant() else variant


def each_variant(script: str, argv: list[str]) -> int:
    """``script`` with ``argv`` (less ``--all-variants``) once per runnable variant, each in a
    process of its own; the worst exit status."""
    status = 0
    for variant in runnable_variants():
        print(f"== {variant}", flush=True)
        status = max(status, subprocess.run(
            [sys.executable, script, *(a for a in argv if a != "--all-variants"),
             "--variant", variant], check=False).returncode)
    return status


def variant_recorder(script: str, args: argparse.Namespace, argv: list[str]) -> Recorder | int:
    """The recorder of a run on the variant ``args.variant`` names, in a process of that
    variant (this one starts again when it is not); with ``--all-variants``, instead, the
    worst exit status of ``script`` run once per variant."""
    if args.all_variants:
        return each_variant(script, argv)
    args.variant = in_variant(args.variant)
    return Recorder(script, args, mode=variant_mode(args.variant))


def quiet_openblas() -> None:
    """Start this script again with ``OPENBLAS_THREAD_TIMEOUT=4`` unless the environment sets
    it, as ``nox -s calibrate`` runs: OpenBLAS reads it once, when numpy loads."""
    if "OPENBLAS_THREAD_TIMEOUT" not in os.environ:
        os.execve(sys.executable, [sys.executable, *sys.argv],
                  {**os.environ, "OPENBLAS_THREAD_TIMEOUT": "4"})


def timed(contenders: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds per call of each contender over interleaved rounds."""
    for run in contenders.values():  # warm-up: pages, OpenMP pool, caches
        run()
    calls = {}
    for name, run in contenders.items():
        start = time.perf_counter()
        count = 0
        while time.perf_counter() - start < 0.02:
            run()
            count += 1
        calls[name] = max(1, count // 4)
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            start = time.perf_counter()
            for _ in range(calls[name]):
                run()
            samples[name].append((time.perf_counter() - start) / calls[name])
    return {name: statistics.median(values) for name, values in samples.items()}


def median_rows(processes: list[dict[Any, dict]]) -> dict[Any, dict]:
    """One runtime's rows over the fresh processes that timed them, by key (a model, a row
    count): the median of each time and page-fault count, the other fields as the first
    process gave them. One process's figure moves with where its buffers and threads land."""
    return {key: {**row, **{field: statistics.median(p[key][field] for p in processes)
                            for field in row if field.endswith(("_us", "_faults"))}}
            for key, row in processes[0].items()}


def machine_slug(processor: dict[str, Any]) -> str:
    """The processor's stable name in file names (see the module's docstring)."""
    def part(value: Any) -> str:
        text = "" if value is None else re.sub(r"[^a-z0-9]+", "-", str(value).lower())
        return text.strip("-") or "unknown"

    return "-".join(part(processor.get(field))
                    for field in ("vendor", "microarchitecture", "family", "model"))


def model_name() -> str | None:
    """The processor's marketing name (x86_64 ``/proc/cpuinfo``), to name a machine to people."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return found.group(1).strip() if found else None


def machine() -> dict[str, Any]:
    import kerneltune

    processor = kerneltune.get_cpu_descriptor().to_dict()
    return {"slug": machine_slug(processor), "model_name": model_name(),
            "processor": processor,
            "logical_cpus_available": len(kerneltune.current_execution().affinity)}


def git(*arguments: str, folder: str | Path = FOLDER.parent) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(folder), *arguments], check=True,
                              capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout


def checkout_commit(folder: str | Path) -> str | None:
    """The commit of the git checkout holding ``folder`` (short), None outside one."""
    commit = git("rev-parse", "--short=10", "HEAD", folder=folder)
    return commit.strip() if commit else None


def source() -> dict[str, Any]:
    """The commit the benchmark runs from, and whether the tree differed from it (results
    files aside: a run that follows another has that one's file to commit)."""
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--", ":/", f":(exclude){FOLDER.name}")
    return {"commit": commit.strip() if commit else None,
            "dirty": bool(status.strip()) if status is not None else None}


def software() -> dict[str, Any]:
    from threadpoolctl import threadpool_info

    import kerneltune

    startup = kerneltune.startup_report()
    peers = {name: metadata.version(name) for module, name in PEERS.items()
             if module in sys.modules}
    return {"kerneltune": kerneltune.__version__, "implementations": startup.implementations,
            "user_cache": startup.cache.status, "python": platform.python_version(),
            "peers": peers,
            "thread_pools": [{field: pool.get(field) for field in POOL_FIELDS}
                             for pool in threadpool_info()]}


def plain(value: Any) -> Any:
    """JSON data: paths as text, tuples as lists, floats to the digits that mean something."""
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    return value


class Recorder:
    """One run's figures, collected as the benchmark prints them."""

    def __init__(self, script: str, arguments: argparse.Namespace, mode: str | None = None):
        # a mode of a script is a benchmark of its own, with a results file of its own
        self.benchmark = Path(script).stem + (f"-{mode}" if mode else "")
        options = vars(arguments)
        self.json: Path | None = options.get("json")
        self.save: bool = options.get("save", False)
        self.arguments = {name: value for name, value in options.items()
                          if name not in ("json", "save")}
        # taken as the run starts: a commit landing during a long run is not what it ran
        self.date = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.source = source()
        self.started = time.monotonic()
        self.tables: dict[str, dict[str, Any]] = {}
        self.summary: dict[str, Any] = {}
        self.targets: list[dict[str, Any]] = []

    def table(self, name: str, note: str) -> None:
        """Declare a table of rows, with what its fields mean."""
        self.tables[name] = {"note": note, "rows": []}

    def row(self, table: str, **fields: Any) -> None:
        self.tables[table]["rows"].append(fields)

    def figure(self, name: str, value: Any) -> None:
        """A figure of the whole run (a geometric mean, a total)."""
        self.summary[name] = value

    def target(self, name: str, value: Any, relation: str, limit: Any, case: str = "") -> bool:
        """Record whether ``value relation limit`` holds, and return it."""
        met = bool(RELATIONS[relation](value, limit))
        self.targets.append({"name": name, "case": case, "value": value, "relation": relation,
                             "limit": limit, "met": met})
        return met

    def to_dict(self) -> dict[str, Any]:
        return plain({
            "format": FORMAT, "schema_version": SCHEMA_VERSION, "benchmark": self.benchmark,
            "date": self.date, "seconds": time.monotonic() - self.started,
            "machine": machine(), "software": software(), "source": self.source,
            "environment": {name: value for name, value in os.environ.items()
                            if name.startswith(ENVIRONMENT_PREFIXES)},
            "arguments": self.arguments, "tables": self.tables, "summary": self.summary,
            "targets": self.targets,
        })

    def finish(self) -> None:
        """Write the file ``--json`` names and, with ``--save``, the machine's results file."""
        from kerneltune._support.files import write_atomically

        paths = [self.json] if self.json else []
        if not (paths or self.save):
            return
        data = self.to_dict()
        if self.save:
            FOLDER.mkdir(exist_ok=True)
            paths.append(FOLDER / f"{self.benchmark}-{data['machine']['slug']}.json")
        text = json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"
        for path in paths:
            write_atomically(path, text)
            print(f"results written to {path}")
