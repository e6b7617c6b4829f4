"""Shared test parts: a small typed config, processors to resolve against, toy calibrations."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kerneltune.calibration import (
    CalibrationOptions,
    Interference,
    calibrate_registered_kernels,
    register_kernel_calibration_function,
)
from kerneltune.calibration.interference import Counters
from kerneltune.calibration.measure import Measurement
from kerneltune.errors import KernelTuningError
from kerneltune.kernels.variants import select_variant
from kerneltune.machine.descriptor import CpuDescriptor, CpuExecutionDescriptor
from kerneltune.machine.detect import detect_cpu_descriptor, get_cpu_descriptor
from kerneltune.tuning.registry import KernelTuningRegistry
from kerneltune.tuning.schema import KernelTuningKey, tunable

#: The suite's real calibrations check what the kernels decide, and run beside the other
#: tests' processes (and a CI runner's neighbours), which take their CPUs: they keep every
#: measurement, as this process's children do. Tests of interference set their limit.
os.environ["KERNELTUNE_MAXIMUM_INTERFERENCE"] = "1"

#: the CPUs this process may run on (``CPUS`` below is the folder of fake sysroots)
AVAILABLE_CPUS = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                  else os.cpu_count())
needs_two_cpus = pytest.mark.skipif(AVAILABLE_CPUS < 2, reason="needs two CPUs")


@dataclass(frozen=True)
class ToyConfig:
    """A config with one parameter of every kind and a cross-field rule."""

    minimum_elements: int = tunable("parallel.minimum_elements", 32768, minimum=1,
                                    doc="elements below which the loop stays serial")
    maximum_threads: int = tunable("parallel.maximum_threads", 64, minimum=1)
    tile_m: int = tunable("algorithm.tile_m", 64, minimum=1)
    tile_n: int = tunable("algorithm.tile_n", 256, minimum=1)
    speedup: float = tunable("algorithm.expected_speedup", 1.5, minimum=0.0, maximum=100.0)
    pack: bool = tunable("algorithm.pack_b", True)
    layout: str = tunable("algorithm.layout", "row", choices=("row", "column"))

    def consistency(self):
        if self.tile_n % self.tile_m:
            yield ("algorithm.tile_n", f"{self.tile_n} is not a multiple of algorithm.tile_m "
                                       f"{self.tile_m}")


#: variables that would make a child see another machine, cache or profiles than the test gives
_HOST_VARIABLES = ("KERNELTUNE_CPU_DESCRIPTOR", "KERNELTUNE_DEPLOYMENT_PROFILES",
                   "KERNELTUNE_CACHE")


def variant_environment() -> dict[str, str]:
    """This environment without kerneltune's variables but ``KERNELTUNE_ISA``: a child that
    reads what this process wrote for its keys must run the same ISA variant."""
    return {name: value for name, value in os.environ.items()
            if not name.startswith("KERNELTUNE_") or name == "KERNELTUNE_ISA"}


def kerneltune_script() -> Path:
    """The installed ``kerneltune`` console script, the way a user runs the command."""
    script = Path(sys.executable).with_name("kerneltune.exe" if os.name == "nt" else "kerneltune")
    assert script.is_file(), f"no kerneltune console script next to {sys.executable}"
    return script


def run_kerneltune(*arguments: str, cache: str | os.PathLike[str] = "off", cwd=None,
                   timeout: float = 900, **variables: str) -> subprocess.CompletedProcess:
    """Run the console script with this host's processor and ``cache`` as the user cache."""
    environment = {name: value for name, value in os.environ.items()
                   if name not in _HOST_VARIABLES}
    environment.update(KERNELTUNE_CACHE=str(cache), **variables)
    return subprocess.run([str(kerneltune_script()), *map(str, arguments)], env=environment,
                          cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


#: fake sysroots of real processors, one folder each with its expected.yaml
CPUS = Path(__file__).parent / "data" / "cpus"
FIXTURES = sorted(path.name for path in CPUS.iterdir() if (path / "expected.yaml").is_file())


def expected_of(name: str) -> dict:
    return yaml.safe_load((CPUS / name / "expected.yaml").read_text(encoding="utf-8"))


def detect(name: str) -> CpuDescriptor:
    """The descriptor of a fixture, read as of its own architecture (not the host's)."""
    return detect_cpu_descriptor(root=CPUS / name, machine=expected_of(name)["architecture"])


def toy_key(kernel: str = "Abs", element_type: object = "FLOAT", **fields) -> KernelTuningKey:
    return KernelTuningKey(fields.pop("library", "test_library"), kernel,
                           fields.pop("implementation", "baseline"), element_type, **fields)


ZEN4 = {
    "architecture": "x86_64", "vendor": "amd", "family": 25, "model": 17, "stepping": 1,
    "microarchitecture": "zen4",
    "features": frozenset({"sse2", "avx", "avx2", "fma", "avx512f", "avx512bw"}),
    "l1_data_bytes": 32768, "l2_bytes": 1048576, "l3_bytes": 33554432, "cache_line_bytes": 64,
    "physical_cores": 2, "logical_cores": 4,
}


def processor(**changes) -> CpuDescriptor:
    return CpuDescriptor(**{**ZEN4, **changes})


def execution(threads: int = 2, **changes) -> CpuExecutionDescriptor:
    return CpuExecutionDescriptor(processor(**changes), threads, frozenset(range(threads)),
                                  threads)


@pytest.fixture
def key() -> KernelTuningKey:
    return toy_key()


def host_can_run(variant: str) -> bool:
    """Whether this processor runs ``variant`` (a wrong one dies with SIGILL)."""
    try:
        select_variant(get_cpu_descriptor(), available=[variant], forced=variant)
    except KernelTuningError:
        return False
    return True


KERNELS, TYPES, IMPLEMENTATIONS = ("Abs", "Add"), ("FLOAT", "DOUBLE"), ("baseline", "v3")


#: how long a toy key takes to calibrate: a batch measures keys again for a time in
#: proportion to its first pass, which instant keys would leave to the probes' overhead
TOY_SECONDS = 0.01


@pytest.fixture
def toys():
    """A fresh registry with 8 toy keys, 7 of them calibratable by a recording function."""
    registry = KernelTuningRegistry()
    keys = [toy_key(kernel, element_type, implementation=implementation)
            for kernel in KERNELS for element_type in TYPES for implementation in IMPLEMENTATIONS]
    registry.register_schemas((key, ToyConfig) for key in keys)
    calls = []

    def calibrate(context):
        calls.append(context.key)
        time.sleep(TOY_SECONDS)
        return {"parallel.minimum_elements": 4096 + context.threads}

    uncalibratable = KernelTuningKey("toy_unsupported", "Add", "v3", "DOUBLE")
    registry.register_schema(uncalibratable, ToyConfig)
    for key in keys:
        register_kernel_calibration_function(key, calibrate, registry=registry)
    return registry, keys, calls, uncalibratable


def calibrate_toys(registry, **selection):
    """Calibrate the selection in ``registry``: one thread, quick, unless ``options`` say."""
    options = selection.pop("options", CalibrationOptions(threads=1, effort="quick"))
    return calibrate_registered_kernels(options=options, registry=registry, **selection)


def measurement_of(seconds: float) -> Measurement:
    """A synthetic measurement whose median is ``seconds``, with narrow quartiles."""
    return Measurement(tuple(seconds * f for f in (0.99, 1.0, 1.0, 1.0, 1.01)), (), 1)


class Scripted:
    """Interference the test decides: the share others take of each measurement, in turn
    (the last one repeats), and whether a key's CPUs are stolen."""

    def __init__(self, *shares: float, stolen: bool = False):
        self.shares, self.stolen, self.measurements = list(shares) or [0.0], stolen, 0

    def reading(self, steal: bool = False) -> Counters:
        return Counters(time.perf_counter(), 0.0, 0.0 if steal else None, 0.0)

    def since(self, before: Counters, threads: int) -> Interference:
        if before.stolen is not None:  # the whole key
            return Interference(1.0, threads, 0.0, 0.9 if self.stolen else 0.0, 1, 0.5)
        share = self.shares[min(self.measurements, len(self.shares) - 1)]
        self.measurements += 1
        # one thread, runnable throughout: it waited ``share`` of the time and ran the rest
        return Interference(1.0, 1, share, None, 1, 0.5, 1.0 - share)
