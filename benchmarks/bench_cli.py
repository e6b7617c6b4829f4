"""How long the commands that measure nothing take, against ``import kerneltune`` itself.

A command line is judged by how fast it answers. Each command below runs in a
fresh process, in interleaved rounds with ``python -c "import kerneltune"``
(the floor every command pays: the kernel library's registration, the profiles
and the cache) and ``python -c pass`` (the interpreter); the figure is the
median wall time, and the ratio the command's over the import's (1 is the
floor). ``backend --help`` must not pay for onnx, which only the search needs.
The import is also timed with ``examples/kernel_library`` installed (a kernel
library found through its entry point): a library's registration is its own
cost, the discovery must add little to it.

    python benchmarks/bench_cli.py [--rounds 15] [--mode NAME]

``--mode NAME`` gives the run a results file of its own (a run beside busy processes).
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

from results import Recorder, add_arguments

SCRIPT = Path(sys.executable).with_name("kerneltune")
COMMANDS = (
    ("--version",),
    ("libraries",),
    ("cpu", "--json"),
    ("cache", "path"),
    ("cache", "inspect"),
    ("kernel", "--list"),
    ("kernel", "--kernel", "Gemm", "--element-type", "FLOAT"),
    ("profiles", "explain"),
    ("backend", "--help"),
)
#: a command answers within this multiple of the import it cannot avoid
TARGET = 1.5
#: the import with the example library installed, over the import without it
LIBRARY_TARGET = 1.10
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kernel_library"


def wall(command: list[str], environment: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=environment, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


WITH_EXAMPLE = "import kerneltune, example library installed"


def _installed_example(target: Path) -> Path:
    """examples/kernel_library installed with pip into ``target``, found through PYTHONPATH."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--disable-pip-version-check", "--target",
                    str(target), str(EXAMPLE)], check=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--mode", help="a results file of its own, e.g. 'busy'")
    add_arguments(parser)
    args = parser.parse_args(argv)
    recorder = Recorder(__file__, args, mode=args.mode)
    recorder.table("commands", "median wall time of a fresh process, ms; over_import: the "
                               "command's time over python -c 'import kerneltune'")
    with tempfile.TemporaryDirectory() as folder:
        # An empty user cache of its own, so the machine's cache does not change the figures.
        environment = {**os.environ, "KERNELTUNE_CACHE": str(Path(folder) / "cache.yaml")}
        example = _installed_example(Path(folder) / "example")
        with_example = {**environment, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(example), environment.get("PYTHONPATH")]))}
        runs = {"python -c pass": [sys.executable, "-c", "pass"],
                "import kerneltune": [sys.executable, "-c", "import kerneltune"],
                **{"kerneltune " + " ".join(c): [str(SCRIPT), *c] for c in COMMANDS}}
        times: dict[str, list[float]] = {name: [] for name in [*runs, WITH_EXAMPLE]}
        for _ in range(args.rounds):
            for name, command in runs.items():
                times[name].append(wall(command, environment))
            times[WITH_EXAMPLE].append(wall(runs["import kerneltune"], with_example))
    medians = {name: statistics.median(values) for name, values in times.items()}
    floor = medians["import kerneltune"]
    misses = []
    print(f"{'command':52} {'ms':>8} {'/ import':>9}")
    with_library = medians.pop(WITH_EXAMPLE)
    for name, median in medians.items():
        ratio = median / floor
        print(f"{name:52} {median * 1e3:8.1f} {ratio:9.2f}")
        recorder.row("commands", command=name, ms=median * 1e3, over_import=ratio)
        if name.startswith("kerneltune ") and not recorder.target(
                "over_import", ratio, "<=", TARGET, case=name):
            misses.append(name)
    ratio = with_library / floor
    print(f"{WITH_EXAMPLE:52} {with_library * 1e3:8.1f} {ratio:9.2f}")
    recorder.table("libraries", "median wall time of python -c 'import kerneltune' with "
                                "examples/kernel_library installed, ms; over_import: over "
                                "the import without it")
    recorder.row("libraries", command=WITH_EXAMPLE, ms=with_library * 1e3, over_import=ratio)
    if not recorder.target("over_import", ratio, "<=", LIBRARY_TARGET, case=WITH_EXAMPLE):
        misses.append(WITH_EXAMPLE)
    recorder.finish()
    if misses:
        print(f"over target ({TARGET}x the import; {LIBRARY_TARGET}x with the example "
              f"installed): {', '.join(misses)}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
