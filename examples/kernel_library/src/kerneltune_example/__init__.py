"""kerneltune_example: a kernel library for kerneltune, as a library author writes one.

Two numpy kernels, each with thresholds that depend on the machine:
:func:`sum_of_squares` (a blocked reduction: the block size and the parallel
grain) and :func:`scale` (``a * x + b``, elementwise: the parallel grain).
:func:`~.library.register` is the entry point kerneltune calls at ``import
kerneltune``; :func:`prepare` resolves a kernel's configuration once, the way a
runtime does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import kerneltune

from .kernels import KERNELS, LIBRARY, key_of, scale, sum_of_squares
from .library import VERSION as __version__
from .library import register


def prepare(name: str, dtype: object, threads: int | None = None,
            registry: kerneltune.KernelTuningRegistry | None = None
            ) -> tuple[Callable[..., np.ndarray], kerneltune.Resolution]:
    """One kernel for ``dtype`` on ``threads`` threads, its configuration resolved once.

    Returns the callable and the resolution (its values and the profile they came
    from), so a caller can say where its thresholds came from.
    """
    registry = registry or kerneltune.default_registry
    key = key_of(name, dtype)
    execution = kerneltune.current_execution(threads)
    resolution = registry.resolve(key, execution)
    config = registry.snapshot().schema(key).configure(resolution.values)
    function, _ = KERNELS[name]
    count = execution.effective_threads
    return (lambda *arguments: function(*arguments, config=config, threads=count)), resolution


__all__ = ["LIBRARY", "__version__", "prepare", "register", "scale", "sum_of_squares"]
