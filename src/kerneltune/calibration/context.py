"""What a calibration callback gets: its key, the execution, budgets and the measuring tools.

A callback runs the real kernel through the context: it makes inputs with
:meth:`CalibrationContext.randn`, times configured instances with
:meth:`measure` after :meth:`check` compared their outputs, and records one
:class:`~.report.Decision` per parameter. Later searches see earlier decisions
in :attr:`values`, so a kernel can settle its algorithm before its threads.
A measurement taken while the process waited for its CPUs is discarded and
taken again once they are free (:mod:`.interference`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CalibrationError
from ..tuning.schema import KernelTuningKey, KernelTuningSchema, TuningValue
from .interference import Interference, InterferenceSource
from .measure import Deadline, Measurement, measure
from .options import CalibrationOptions
from .report import Candidate, Decision, Mark
from .tensors import randn_tensor

if TYPE_CHECKING:
    from ..machine.descriptor import CpuExecutionDescriptor
    from .confirmation import Confirmation


@dataclass(frozen=True)
class Tolerance:
    """How close two outputs must be when instances legitimately sum in different orders."""

    rtol: float
    atol: float


#: seconds the first pause after a measurement under interference lasts; each next one is
#: twice as long, up to :data:`LONGEST_PAUSE`: a neighbour's burst passes, a busy one stays
FIRST_PAUSE, LONGEST_PAUSE = 0.05, 1.0


class CalibrationContext:
    def __init__(
        self,
        key: KernelTuningKey,
        schema: KernelTuningSchema,
        execution: CpuExecutionDescriptor,
        options: CalibrationOptions,
        baseline: Mapping[str, TuningValue],
        deadline: Deadline,
        inputs: dict[tuple, np.ndarray] | None = None,
        interference: InterferenceSource | None = None,
    ):
        self.key, self.schema, self.execution = key, schema, execution
        self.options = options
        self.threads = execution.effective_threads
        self.baseline: Mapping[str, TuningValue] = types.MappingProxyType(dict(baseline))
        self.deadline = deadline
        self.decisions: list[Decision] = []
        self.comparison: list[Mapping[str, object]] = []
        self.stopped_early: str | None = None
        self.contradictions: list[str] = []
        self._values = dict(baseline)
        self._base_config = schema.configure(baseline)
        self._inputs = {} if inputs is None else inputs
        self.interference = interference
        #: the measurements kept, and those discarded for interference, with what each lost
        self.kept: list[Interference] = []
        self.discarded: list[Interference] = []

    @property
    def values(self) -> Mapping[str, TuningValue]:
        """The baseline with every decision so far applied."""
        return types.MappingProxyType(dict(self._values))

    def configure(self, values: Mapping[str, object] | None = None) -> Any:
        """A typed config: the current :attr:`values` with ``values`` applied (validated)."""
        return self.schema.configure({**self._values, **(values or {})})

    def randn(self, element_type: object, shape: int | Sequence[int], salt: int = 0
              ) -> np.ndarray:
        """Deterministic inputs, the same for a seed, type, shape and salt on every machine.

        Kept (and shared by the keys of one batch with this element type), since
        searches revisit sizes and kernels of one type use the same cases.
        """
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        cache_key = (element_type, shape, salt)
        if cache_key not in self._inputs:
            text = f"{self.options.seed}:{element_type}:{shape}:{salt}"
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            self._inputs[cache_key] = randn_tensor(element_type, shape, seed)
        return self._inputs[cache_key]

    def fits(self, nbytes: int) -> bool:
        return nbytes <= self.options.memory_budget

    def measure(self, runs: Mapping[str, Callable[[], object]],
                samples: int | None = None) -> dict[str, Measurement]:
        """Interleaved measurements of each run (see :func:`.measure.measure`), ``samples``
        each (the effort's unless given).

        One taken while the threads waited for CPUs beyond the limit is discarded and
        taken again after a pause, each pause twice the last: until the key's budget
        runs out (:class:`~.measure.BudgetExhausted`), which withholds the key.
        """
        level, pause = self.options.level, FIRST_PAUSE
        while True:
            before = None if self.interference is None else self.interference.reading()
            results = measure(list(runs.values()), samples or self.options.samples,
                              level.minimum_sample_seconds, self.deadline)
            if before is None:
                return dict(zip(runs, results, strict=True))
            seen = self.interference.since(before, self.threads)
            if seen.clean(self.options.interference_limit):
                self.kept.append(seen)
                return dict(zip(runs, results, strict=True))
            self.discarded.append(seen)
            time.sleep(max(0.0, min(pause, self.deadline.remaining)))
            pause = min(2 * pause, LONGEST_PAUSE)

    def check(self, case: str, point: object, outputs: Mapping[str, np.ndarray],
              tolerance: Tolerance | None = None) -> None:
        """Every output equals the first one (bit for bit unless a tolerance is given).

        A mismatch is a :class:`CalibrationError`: timing a wrong result would
        let a broken path win.
        """
        names = list(outputs)
        reference = np.asarray(outputs[names[0]])
        for name in names[1:]:
            other = np.asarray(outputs[name])
            if other.shape != reference.shape or other.dtype != reference.dtype:
                same = False
            elif tolerance is None:
                same = np.array_equal(reference.view(np.uint8), other.view(np.uint8))
            else:
                same = bool(np.allclose(other, reference, rtol=tolerance.rtol,
                                        atol=tolerance.atol, equal_nan=True))
            if not same:
                raise CalibrationError(
                    f"{self.key}: case {case} at {point}: the output of {name} differs from "
                    f"{names[0]}'s ({_difference(reference, other)}); no value is chosen from "
                    f"a kernel that computes different results")

    def decide(self, parameter: str, value: TuningValue, reason: str,
               candidates: Sequence[Candidate] = (), measured: TuningValue | None = None,
               fewer_threads: bool = False, marks: Sequence[Mark] = (),
               confirmation: Confirmation | None = None) -> Decision:
        """Record the value chosen for ``parameter`` (validated with the values so far);
        ``fewer_threads``: it runs some calls on fewer threads than the value in use;
        ``marks``: where a crossover's thresholds lie (see :class:`~.report.Mark`);
        ``confirmation``: the comparison it stands on."""
        self.configure({parameter: value})
        decision = Decision(parameter, value, self.baseline[parameter], reason,
                            tuple(candidates), measured, fewer_threads, tuple(marks),
                            confirmation)
        self.decisions.append(decision)
        self._values[parameter] = value
        return decision

    def keep(self, parameter: str, reason: str, candidates: Sequence[Candidate] = (),
             measured: TuningValue | None = None, marks: Sequence[Mark] = ()) -> Decision:
        """Record that ``parameter`` keeps the value in use."""
        return self.decide(parameter, self._values[parameter], reason, candidates, measured,
                           marks=marks)

    def confirmed(self, parameter: str, confirmation: Confirmation) -> None:
        """Attach the comparison that confirmed ``parameter``'s decision in effect."""
        index = max(i for i, d in enumerate(self.decisions) if d.parameter == parameter)
        self.decisions[index] = dataclasses.replace(self.decisions[index],
                                                    confirmation=confirmation)

    def revert(self, reasons: Mapping[str, str],
               comparisons: Mapping[str, Confirmation] | None = None) -> None:
        """Put each parameter of ``reasons`` back to its value in use, at once (one may not
        be valid without another), each a decision with its reason and its comparison."""
        if not reasons:
            return
        self.configure({name: self.baseline[name] for name in reasons})
        for name, reason in reasons.items():
            self._values[name] = self.baseline[name]
            self.decisions.append(Decision(name, self.baseline[name], self.baseline[name],
                                           reason, confirmation=(comparisons or {}).get(name)))

    def stop(self, budget: str) -> None:
        self.stopped_early = self.stopped_early or f"{budget} time budget exhausted"

    def contradict(self, what: str) -> None:
        """Record two measurements of one point won by opposite sides: the machine changed
        while the key was measured, and a batch measures the key again (see
        :mod:`.steadiness`)."""
        self.contradictions.append(what)


def _difference(reference: np.ndarray, other: np.ndarray) -> str:
    if other.shape != reference.shape or other.dtype != reference.dtype:
        return f"{other.dtype}{list(other.shape)} against {reference.dtype}{list(reference.shape)}"
    flat_a, flat_b = reference.reshape(-1), other.reshape(-1)
    size = flat_a.size
    same = np.all(flat_a.view(np.uint8).reshape(size, -1)
                  == flat_b.view(np.uint8).reshape(size, -1), axis=1)
    unequal = np.flatnonzero(~same)
    if unequal.size == 0:
        return "beyond the tolerance"
    index = int(unequal[0])
    return (f"{unequal.size} elements differ, first at flat index {index}: "
            f"{flat_b[index]!r} instead of {flat_a[index]!r}")
