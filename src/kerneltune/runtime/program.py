"""A session's steps as one function of straight-line Python, written once per thread count.

A loop over the steps paid, at every step, for unpacking it, testing its argument count and
testing whether the output pool's mode changes: a few tenths of a microsecond a step, a
sixth of a small model's run at batch 1. The function written here calls each step's
function on its slots of the run's values, in order, and switches the pool where the
steps' outputs go from returned values to intermediates and back (ending with the pool
off, also when a step raises). The step functions are its globals, never its text.

On BLAS's pool a session has two programs, and :class:`PerWork` picks one for each run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..kernels.outputs import intermediates

#: a step: its function, the slots of its arguments, its output's slot, and whether the
#: output is an intermediate (recycled by the output pool)
Step = tuple[Callable, tuple[int, ...], int, bool]


def program(steps: Sequence[Step]) -> Callable[[list], None]:
    """``run(values)``: every step in order, each output stored in its slot of ``values``."""
    names: dict[str, object] = {"intermediates": intermediates}
    lines, pooled = [], False
    for index, (function, arguments, output, intermediate) in enumerate(steps):
        if intermediate is not pooled:
            lines.append(f"intermediates({intermediate})")
            pooled = intermediate
        names[f"step{index}"] = function
        given = ", ".join(f"values[{slot}]" for slot in arguments)
        lines.append(f"values[{output}] = step{index}({given})")
    if any(intermediate for *_, intermediate in steps):
        lines = ["try:", *(f"    {line}" for line in lines), "finally:",
                 "    intermediates(False)"]
    body = "".join(f"    {line}\n" for line in lines) or "    pass\n"
    exec(f"def run(values):\n{body}", names)  # its text: slot numbers and step names
    return names["run"]


#: works whose program :class:`PerWork` remembers; at one more, it forgets them all
WORKS = 64


class PerWork:
    """``run(values)`` of a session on BLAS's pool: ``beside`` for a work (its feeds'
    shapes) whose first run took no product to BLAS, ``on_blas`` for the others.

    ``on_blas`` runs the nodes beside the products on the calling thread, so that no
    OpenMP region waits for a CPU BLAS's spinning threads hold; where every product takes
    a compiled path, the products' regions are the run's only pool, and ``beside`` runs
    the other nodes on the same threads. A work's first run takes ``on_blas``, then asks
    each product (its prepared kernel, the slots of its inputs) the path it took. Both
    programs give the same bits.
    """

    __slots__ = ("on_blas", "beside", "works", "_products", "_feeds")

    def __init__(self, on_blas: Callable[[list], None], beside: Callable[[list], None],
                 products: Sequence[tuple[Any, tuple[int, ...]]], feeds: Sequence[int]):
        self.on_blas, self.beside = on_blas, beside
        #: each work's program (at most WORKS)
        self.works: dict[tuple, Callable[[list], None]] = {}
        self._products, self._feeds = tuple(products), tuple(feeds)

    def __call__(self, values: list) -> None:
        work = tuple([values[slot].shape for slot in self._feeds])
        chosen = self.works.get(work)
        if chosen is not None:
            chosen(values)
            return
        self.on_blas(values)
        if len(self.works) >= WORKS:
            self.works.clear()
        self.works[work] = self.on_blas if any(
            kernel.plan(*[values[slot] for slot in slots]).path == "blas"
            for kernel, slots in self._products) else self.beside
