"""The kernels and their typed configurations: each tunable value with a portable default.

numpy releases the GIL in its loops, so a pool of threads each running numpy
on its own chunk runs in parallel; a thread costs tens of microseconds to
wake, so a call runs on one thread below its parallel grain.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from kerneltune import KernelTuningKey, tunable

LIBRARY = "example"
#: numpy's loops, whatever the instruction set: one implementation
IMPLEMENTATION = "numpy"
#: bumped when a parameter's meaning changes, so older profiles go stale, not wrong
TUNING_ABI = 1
ELEMENT_TYPES = ("FLOAT", "DOUBLE")


@dataclass(frozen=True)
class SumOfSquaresConfig:
    block_elements: int = tunable(
        "block.elements", 16384, minimum=64,
        doc="elements squared and summed per step: a step's temporary should stay in cache")
    minimum_elements: int = tunable(
        "parallel.minimum_elements", 262144, minimum=1,
        doc="elements per thread from which a call runs on more than one thread")


@dataclass(frozen=True)
class ScaleConfig:
    minimum_elements: int = tunable(
        "parallel.minimum_elements", 131072, minimum=1,
        doc="elements per thread from which a call runs on more than one thread")


def key_of(kernel: str, element_type: object) -> KernelTuningKey:
    return KernelTuningKey(LIBRARY, kernel, IMPLEMENTATION, element_type,
                           tuning_abi=TUNING_ABI)


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(threads, thread_name_prefix="kerneltune-example")


def _chunks(size: int, grain: int, threads: int) -> list[slice]:
    """At most ``threads`` chunks of at least ``grain`` elements each (one below 2 grains)."""
    count = max(1, min(threads, size // max(grain, 1)))
    bounds = np.linspace(0, size, count + 1).astype(int)
    return [slice(low, high) for low, high in zip(bounds[:-1], bounds[1:], strict=True)]


def _blocked(x: np.ndarray, block: int) -> float:
    total = x.dtype.type(0)
    for start in range(0, x.size, block):
        part = x[start:start + block]
        total += np.dot(part, part)
    return total


def sum_of_squares(x: np.ndarray, *, config: SumOfSquaresConfig = SumOfSquaresConfig(),
                   threads: int = 1) -> np.ndarray:
    """The sum of ``x``'s squares, block by block, on up to ``threads`` threads."""
    x = np.ravel(x)
    chunks = _chunks(x.size, config.minimum_elements, threads)
    if len(chunks) == 1:
        return np.asarray(_blocked(x, config.block_elements))
    parts = _pool(threads).map(lambda chunk: _blocked(x[chunk], config.block_elements), chunks)
    return np.asarray(sum(parts, x.dtype.type(0)))


def scale(x: np.ndarray, a: float, b: float, *, config: ScaleConfig = ScaleConfig(),
          threads: int = 1) -> np.ndarray:
    """``a * x + b`` elementwise, on up to ``threads`` threads."""
    out = np.empty_like(x)
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    a, b = x.dtype.type(a), x.dtype.type(b)

    def part(chunk: slice) -> None:
        np.multiply(flat_x[chunk], a, out=flat_out[chunk])
        np.add(flat_out[chunk], b, out=flat_out[chunk])

    chunks = _chunks(x.size, config.minimum_elements, threads)
    if len(chunks) == 1:
        part(chunks[0])
    else:
        list(_pool(threads).map(part, chunks))
    return out


#: kernel name -> (function, typed config)
KERNELS = {"SumOfSquares": (sum_of_squares, SumOfSquaresConfig), "Scale": (scale, ScaleConfig)}
