"""Shared test parts: a small typed config and processors to resolve against."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kerneltune.cpu import CpuDescriptor, CpuExecutionDescriptor
from kerneltune.detect import detect_cpu_descriptor, get_cpu_descriptor
from kerneltune.errors import KernelTuningError
from kerneltune.kernels.variants import select_variant
from kerneltune.schema import KernelTuningKey, tunable


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


#: fake sysroots of real processors, one folder each with its expected.yaml
CPUS = Path(__file__).parent / "data" / "cpus"
FIXTURES = sorted(path.name for path in CPUS.iterdir() if (path / "expected.yaml").is_file())


def expected_of(name: str) -> dict:
    return yaml.safe_load((CPUS / name / "expected.yaml").read_text(encoding="utf-8"))


def detect(name: str) -> CpuDescriptor:
    """The descriptor of a fixture, read as of its own architecture (not the host's)."""
    return detect_cpu_descriptor(root=CPUS / name, machine=expected_of(name)["architecture"])


def toy_key(kernel: str = "Abs", element_type: object = "FLOAT", **fields) -> KernelTuningKey:
    return KernelTuningKey("test_library", kernel, fields.pop("implementation", "baseline"),
                           element_type, **fields)


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
