"""The machine probes a kernel library registers with a registry, beside its schemas and
calibration functions: what a calibration batch runs between keys to see which state the
machine is in (:mod:`kerneltune.calibration.steadiness` says how it judges them).

Here rather than in :mod:`kerneltune.calibration`, so that registering a library's probes,
which every ``import kerneltune`` does, loads none of the calibration machinery.
"""

from __future__ import annotations

from collections.abc import Callable

from .registry import KernelTuningRegistry, default_registry

#: the aspect of the machine a probe watches unless it says otherwise
PARALLEL = "parallel"

#: ``probe(threads)``: how fast one fixed call runs now, higher when faster (a speedup,
#: calls per second); only its ratio to the same probe's other results counts
MachineProbe = Callable[[int], float]


class _Registration:
    """What the registry keeps for a probe: calling it probes. A plain class: a dataclass's
    methods are generated as its module loads, which every ``import kerneltune`` does."""

    __slots__ = ("minimum_threads", "probe")

    def __init__(self, probe: MachineProbe, minimum_threads: int):
        self.probe, self.minimum_threads = probe, minimum_threads

    def __call__(self, threads: int) -> float:
        return self.probe(threads)


def register_machine_probe(library: str, probe: MachineProbe, aspect: str = PARALLEL,
                           minimum_threads: int = 2, *,
                           registry: KernelTuningRegistry = default_registry) -> None:
    """Watch one aspect of the machine with ``probe`` while keys of ``library`` are calibrated
    in ``registry`` (batches on other registries do not run it).

    ``probe(threads)`` times one fixed call of the library and returns a rate,
    higher when the machine is faster: for the parallel aspect, the call's
    serial time over its time on ``threads`` threads; a call near the
    library's serial/parallel crossovers moves most with the machine. Batches
    for fewer than ``minimum_threads`` threads do not run it (one thread has no
    parallel speed to watch). It runs once between two keys, so it should
    take milliseconds. A later registration for the library and aspect
    replaces the earlier one.
    """
    if not isinstance(library, str) or not library:
        raise TypeError(f"expected a library name, got {library!r}")
    if not isinstance(aspect, str) or not aspect:
        raise TypeError(f"expected an aspect name, got {aspect!r}")
    if not callable(probe):
        raise TypeError(f"expected a callable probe, got {probe!r}")
    if isinstance(minimum_threads, bool) or not isinstance(minimum_threads, int) \
            or minimum_threads < 1:
        raise ValueError(f"minimum_threads must be a positive int, got {minimum_threads!r}")
    registry.register_machine_probe(library, aspect, _Registration(probe, minimum_threads))
