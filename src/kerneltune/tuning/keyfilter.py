"""Which tuning keys an operation applies to: the key filter of calibration and the cache.

Calibration, cache loading and the parameter listing all take the same five
filters. An empty filter selects everything; a non-empty one keeps the keys
whose field is one of its values, and the filters combine with AND, so
``kernels=("Add", "Mul"), element_types=("FLOAT",)`` is "(Add or Mul) and FLOAT".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import Problem, TuningValidationError
from .schema import KernelTuningKey, element_type_name, element_type_number


@dataclass(frozen=True)
class KeyFilter:
    library: str | None = None
    kernels: frozenset[str] = frozenset()
    implementations: frozenset[str] = frozenset()
    element_types: frozenset[int] = frozenset()
    device: str | None = None

    @classmethod
    def of(
        cls,
        library: str | None = None,
        kernels: Iterable[str] | str = (),
        implementations: Iterable[str] | str = (),
        element_types: Iterable[object] | object = (),
        device: str | None = None,
    ) -> KeyFilter:
        """Validate and normalise the arguments of the public functions (every problem at once).

        A single string is accepted for a one-value filter; element types take
        any spelling :func:`~kerneltune.element_type_number` accepts.
        """
        problems: list[Problem] = []

        def names(field: str, values: object) -> frozenset[str]:
            values = (values,) if isinstance(values, str) else values
            try:
                values = tuple(values)
            except TypeError:
                problems.append(Problem(field, f"expected names, got {values!r}"))
                return frozenset()
            for value in values:
                if not isinstance(value, str) or not value:
                    problems.append(Problem(field, f"expected a non-empty string, got {value!r}"))
            return frozenset(v for v in values if isinstance(v, str))

        def single(field: str, value: object) -> None:
            if value is not None and (not isinstance(value, str) or not value):
                problems.append(Problem(field, f"expected a non-empty string, got {value!r}"))

        single("library", library)
        single("device", device)
        kernel_names = names("kernels", kernels)
        implementation_names = names("implementations", implementations)
        if isinstance(element_types, str) or not isinstance(element_types, Iterable):
            element_types = (element_types,)
        numbers = set()
        for element_type in element_types:
            try:
                numbers.add(element_type_number(element_type))
            except TuningValidationError as error:
                problems += [Problem("element_types", p.message) for p in error.problems]
        if problems:
            raise TuningValidationError(problems, context="kernel selection")
        return cls(library, kernel_names, implementation_names, frozenset(numbers), device)

    def matches(self, key: KernelTuningKey) -> bool:
        return (
            (self.library is None or key.library == self.library)
            and (not self.kernels or key.kernel in self.kernels)
            and (not self.implementations or key.implementation in self.implementations)
            and (not self.element_types or key.element_type in self.element_types)
            and (self.device is None or key.device == self.device)
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "library": self.library,
            "kernels": sorted(self.kernels),
            "implementations": sorted(self.implementations),
            "element_types": sorted(element_type_name(t) for t in self.element_types),
            "device": self.device,
        }
