"""A session's steps as one function of straight-line Python, written once per thread count.

A loop over the steps paid, at every step, for unpacking it, testing its argument count and
testing whether the output pool's mode changes: a few tenths of a microsecond a step, a
sixth of a small model's run at batch 1. The function written here calls each step's
function on its slots of the run's values, in order, and switches the pool where the
steps' outputs go from returned values to intermediates and back (ending with the pool
off, also when a step raises). The step functions are its globals, never its text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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
