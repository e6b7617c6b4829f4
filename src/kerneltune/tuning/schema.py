"""Tuning keys, tuning values and the typed configurations kernels declare.

A kernel declares its tunable values once, as a frozen dataclass whose fields
carry the dotted parameter name, the default and the constraints (see
:func:`tunable`). The schema that validates profiles, caches and overrides is
derived from that dataclass, so a parameter is never described twice and the
compiled-in defaults are always a valid, complete configuration.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import numbers
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Union

from .._support.checks import is_int
from ..errors import Problem, TuningValidationError

TuningValue = Union[int, float, bool, str]  # noqa: UP007 - a runtime alias, also used in isinstance

#: ONNX ``TensorProto.DataType`` numbers. Files store the names, the API takes either.
ELEMENT_TYPES: Mapping[str, int] = types.MappingProxyType(
    {
        "FLOAT": 1,
        "UINT8": 2,
        "INT8": 3,
        "UINT16": 4,
        "INT16": 5,
        "INT32": 6,
        "INT64": 7,
        "STRING": 8,
        "BOOL": 9,
        "FLOAT16": 10,
        "DOUBLE": 11,
        "UINT32": 12,
        "UINT64": 13,
        "COMPLEX64": 14,
        "COMPLEX128": 15,
        "BFLOAT16": 16,
        "FLOAT8E4M3FN": 17,
        "FLOAT8E4M3FNUZ": 18,
        "FLOAT8E5M2": 19,
        "FLOAT8E5M2FNUZ": 20,
        "UINT4": 21,
        "INT4": 22,
        "FLOAT4E2M1": 23,
        "FLOAT8E8M0": 24,
        "UINT2": 25,
        "INT2": 26,
        "FLOAT6E2M3": 27,
        "FLOAT6E3M2": 28,
    }
)
_ELEMENT_TYPE_NAMES = {number: name for name, number in ELEMENT_TYPES.items()}

#: numpy spellings of the ONNX element types.
_NUMPY_NAMES = {
    "float32": "FLOAT",
    "float64": "DOUBLE",
    "float16": "FLOAT16",
    "bfloat16": "BFLOAT16",
    "bool": "BOOL",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "complex64": "COMPLEX64",
    "complex128": "COMPLEX128",
    "str": "STRING",
    # ml_dtypes' narrow types, a byte an element in numpy
    "float8_e4m3fn": "FLOAT8E4M3FN",
    "float8_e4m3fnuz": "FLOAT8E4M3FNUZ",
    "float8_e5m2": "FLOAT8E5M2",
    "float8_e5m2fnuz": "FLOAT8E5M2FNUZ",
    "uint4": "UINT4",
    "int4": "INT4",
    "float4_e2m1fn": "FLOAT4E2M1",
    "float8_e8m0fnu": "FLOAT8E8M0",
    "uint2": "UINT2",
    "int2": "INT2",
    "float6_e2m3fn": "FLOAT6E2M3",
    "float6_e3m2fn": "FLOAT6E3M2",
}

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: configs a schema keeps by their values: the entries of a fleet's deployment file per key
MEMO_SIZE = 4096


def element_type_number(element_type: object) -> int:
    """The ONNX number of an element type given as a number, a name or a numpy dtype.

    Accepts ``1``, ``"FLOAT"``, ``"float"``, ``"float32"``, ``"tensor(float)"``,
    ``numpy.float32`` and ``numpy.dtype("float32")``.
    """
    if isinstance(element_type, bool):
        raise TuningValidationError([Problem("element_type", "a bool is not an element type")])
    if isinstance(element_type, numbers.Integral):
        if int(element_type) in _ELEMENT_TYPE_NAMES:
            return int(element_type)
    elif isinstance(element_type, str):
        text = element_type.strip()
        match = re.fullmatch(r"tensor\((\w+)\)", text)
        if match:
            text = match.group(1)
        name = text.upper() if text.upper() in ELEMENT_TYPES else _NUMPY_NAMES.get(text.lower())
        if name is not None:
            return ELEMENT_TYPES[name]
    else:
        name = _numpy_name(element_type)
        if name is not None:
            return ELEMENT_TYPES[name]
    raise TuningValidationError(
        [Problem("element_type", f"unknown element type {element_type!r}; expected an ONNX "
                                 f"name such as FLOAT or a numpy dtype such as float32")]
    )


def _numpy_name(element_type: object) -> str | None:
    import numpy  # only reached with a numpy object in hand, so numpy is already loaded

    try:
        dtype = numpy.dtype(element_type)  # type: ignore[call-overload]
    except TypeError:
        return None
    return _NUMPY_NAMES.get(dtype.name)


def element_type_name(element_type: object) -> str:
    """The ONNX name (``FLOAT``) of an element type in any accepted spelling."""
    return _ELEMENT_TYPE_NAMES[element_type_number(element_type)]


@dataclass(frozen=True)
class KernelTuningKey:
    """The exact identity a schema, a profile and a cache entry are bound to.

    Element types are stored as ONNX numbers whatever spelling was given, so two
    keys built from ``"FLOAT"`` and ``numpy.float32`` are equal.
    """

    library: str
    kernel: str
    implementation: str
    element_type: int
    device: str = "cpu"
    tuning_abi: int = 1

    def __post_init__(self) -> None:
        problems = []
        for name in ("library", "kernel", "implementation", "device"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                problems.append(Problem(name, f"expected a non-empty string, got {value!r}"))
        if not is_int(self.tuning_abi) or self.tuning_abi <= 0:
            problems.append(
                Problem("tuning_abi", f"expected an integer > 0, got {self.tuning_abi!r}"))
        try:
            object.__setattr__(self, "element_type", element_type_number(self.element_type))
        except TuningValidationError as error:
            problems.extend(error.problems)
        if problems:
            raise TuningValidationError(problems)
        object.__setattr__(self, "tuning_abi", int(self.tuning_abi))
        object.__setattr__(self, "_hash", hash(self._fields()))

    def _fields(self) -> tuple:
        return (self.library, self.kernel, self.implementation, self.element_type, self.device,
                self.tuning_abi)

    def __hash__(self) -> int:
        # Keys are looked up on every resolution; hashing six fields each time is
        # most of a dictionary lookup, so the hash is computed once.
        return self._hash  # type: ignore[attr-defined]

    @property
    def without_abi(self) -> tuple:
        """The key apart from its tuning ABI: what two ABIs of one kernel share."""
        return (self.library, self.kernel, self.implementation, self.element_type, self.device)

    @property
    def element_type_name(self) -> str:
        return _ELEMENT_TYPE_NAMES[self.element_type]

    def to_dict(self) -> dict[str, object]:
        return {
            "library": self.library,
            "kernel": self.kernel,
            "implementation": self.implementation,
            "element_type": self.element_type_name,
            "device": self.device,
            "tuning_abi": self.tuning_abi,
        }

    @classmethod
    def from_dict(cls, data: object) -> KernelTuningKey:
        """Build a key from its file form, reporting every wrong or unknown field."""
        if not isinstance(data, Mapping):
            raise TuningValidationError([Problem("key", f"expected a mapping, got {_kind(data)}")])
        fields = {f.name for f in dataclasses.fields(cls)}
        problems = [
            Problem(f"key.{name}", "unknown field") for name in data if name not in fields
        ]
        problems += [
            Problem(f"key.{name}", "missing")
            for name in ("library", "kernel", "implementation", "element_type")
            if name not in data
        ]
        if problems:
            raise TuningValidationError(problems)
        try:
            return cls(**data)
        except TuningValidationError as error:
            raise TuningValidationError(
                dataclasses.replace(p, field=f"key.{p.field}") for p in error.problems
            ) from None
        except TypeError as error:
            raise TuningValidationError([Problem("key", str(error))]) from None

    def __str__(self) -> str:
        return (
            f"{self.library}/{self.kernel}/{self.implementation}/{self.element_type_name}"
            f" ({self.device}, abi {self.tuning_abi})"
        )


def value_problems(values: object) -> list[Problem]:
    """What keeps ``values`` (read from a file) from being parameter names to finite scalars.

    The schema judges the values themselves; this only checks their plain-data form.
    """
    if not isinstance(values, dict | Mapping):  # a dict first: the ABC's check is slower
        return [Problem("values", f"expected a mapping of parameter names, got "
                                  f"{_kind(values)}")]
    problems = []
    for name, value in values.items():
        if not isinstance(name, str) or not isinstance(value, _ALLOWED_TYPES):
            problems.append(Problem(f"values.{name}", f"expected an int, float, bool or "
                                                      f"string, got {_kind(value)}"))
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(Problem(f"values.{name}", f"expected a finite number, got "
                                                      f"{value!r}"))
    return problems


def _kind(value: object) -> str:
    return type(value).__name__


_METADATA_KEY = "kerneltune"


@dataclass(frozen=True)
class TuningParameter:
    """One named value of a schema: its type, default and constraints."""

    name: str
    attribute: str
    type: type
    default: TuningValue
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[TuningValue, ...] | None = None
    required: bool = False
    doc: str = ""

    def check(self, value: object) -> tuple[TuningValue | None, str | None]:
        """The value in its canonical Python type, or the reason it is not acceptable."""
        if self.type is bool:
            if not isinstance(value, bool):
                return None, f"expected a bool, got {_kind(value)} {value!r}"
            converted: TuningValue = value
        elif self.type is int:
            if not is_int(value):
                return None, f"expected an integer, got {_kind(value)} {value!r}"
            converted = int(value)  # type: ignore[arg-type]
            if not _INT64_MIN <= converted <= _INT64_MAX:
                return None, f"{converted} does not fit a 64-bit integer"
        elif self.type is float:
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                return None, f"expected a number, got {_kind(value)} {value!r}"
            converted = float(value)
            if not math.isfinite(converted):
                return None, f"expected a finite number, got {value!r}"
        else:
            if not isinstance(value, str):
                return None, f"expected a string, got {_kind(value)} {value!r}"
            converted = value
        if self.choices is not None and converted not in self.choices:
            allowed = ", ".join(repr(c) for c in self.choices)
            return None, f"{converted!r} is not one of {allowed}"
        if self.minimum is not None and converted < self.minimum:  # type: ignore[operator]
            if self.minimum == 1 and self.type is int:
                return None, f"must be a positive integer, got {converted!r}"
            return None, f"must be >= {self.minimum}, got {converted!r}"
        if self.maximum is not None and converted > self.maximum:  # type: ignore[operator]
            return None, f"must be <= {self.maximum}, got {converted!r}"
        return converted, None

    def describe(self) -> dict[str, object]:
        """The parameter as plain data, for listings and documentation."""
        info: dict[str, object] = {"type": self.type.__name__, "default": self.default}
        for name in ("minimum", "maximum", "choices"):
            if getattr(self, name) is not None:
                info[name] = getattr(self, name)
        if self.required:
            info["required"] = True
        if self.doc:
            info["doc"] = self.doc
        return info


def tunable(
    name: str,
    default: TuningValue,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: Iterable[TuningValue] | None = None,
    required: bool = False,
    doc: str = "",
) -> Any:
    """Declare a field of a typed tuning config: its dotted name, default and constraints.

    ``minimum=1`` is how a grain says it must be positive. ``required=True``
    means every profile must give the value (the default still serves when no
    profile applies).
    """
    spec = {
        "name": name,
        "minimum": minimum,
        "maximum": maximum,
        "choices": tuple(choices) if choices is not None else None,
        "required": required,
        "doc": doc,
    }
    return dataclasses.field(default=default, metadata={_METADATA_KEY: spec})


_ALLOWED_TYPES = (bool, int, float, str)


@functools.cache
def _parameters_of(config_type: type) -> tuple[TuningParameter, ...]:
    if not (dataclasses.is_dataclass(config_type) and isinstance(config_type, type)):
        raise TypeError(f"{config_type!r} is not a dataclass type")
    if not config_type.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"{config_type.__name__} must be a frozen dataclass")
    hints = typing.get_type_hints(config_type)
    parameters = []
    problems = []
    for field in dataclasses.fields(config_type):
        spec = field.metadata.get(_METADATA_KEY)
        if spec is None:
            problems.append(f"{field.name}: not declared with tunable()")
            continue
        kind = hints[field.name]
        if kind not in _ALLOWED_TYPES:
            problems.append(f"{spec['name']}: type {kind!r} is not int, float, bool or str")
            continue
        parameters.append(TuningParameter(attribute=field.name, type=kind, default=field.default,
                                          **spec))
    names = [p.name for p in parameters]
    problems += [f"{n}: declared twice" for n in sorted({n for n in names if names.count(n) > 1})]
    if problems:
        raise TypeError(f"{config_type.__name__}: " + "; ".join(problems))
    return tuple(parameters)


@functools.cache
def _checked_defaults(config_type: type) -> tuple[Mapping[str, TuningParameter], Any]:
    """A config type's parameters by name and its validated defaults, which every key of the
    type shares (frozen, so one instance serves them all)."""
    parameters = _parameters_of(config_type)
    defaults = config_type()
    problems = [
        Problem(p.name, f"default: {reason}")
        for p in parameters
        for reason in [p.check(p.default)[1]]
        if reason
    ] + _consistency_problems(defaults)
    if problems:
        raise TuningValidationError(problems, context=f"defaults of {config_type.__name__}")
    return types.MappingProxyType({p.name: p for p in parameters}), defaults


def _consistency_problems(config: object) -> list[Problem]:
    """Cross-field problems a config reports through its optional ``consistency`` method.

    The method yields ``(dotted_name, message)`` pairs or plain messages; it
    runs on a fully applied config, so it sees the values a kernel would use.
    """
    check = getattr(config, "consistency", None)
    if check is None:
        return []
    return [Problem(*item) if isinstance(item, tuple) else Problem("", item) for item in check()]


@dataclass(frozen=True, eq=False)
class KernelTuningSchema:
    """The complete set of named, typed values of one exact key, with their defaults.

    Derived from a kernel's frozen config dataclass by :meth:`from_config`.
    ``defaults`` is the compiled portable configuration; applying values returns
    another frozen config and never changes it.
    """

    key: KernelTuningKey
    config_type: type
    parameters: Mapping[str, TuningParameter]
    defaults: Any
    #: configs of values applied to the defaults, by the values: a deployment file's entry is
    #: configured when it is checked and again when it is registered
    _configured: dict = dataclasses.field(default_factory=dict, init=False, repr=False)

    @classmethod
    def from_config(cls, key: KernelTuningKey, config_type: type) -> KernelTuningSchema:
        return cls(key, config_type, *_checked_defaults(config_type))

    def default_values(self) -> dict[str, TuningValue]:
        return self.values_of(self.defaults)

    def values_of(self, config: object) -> dict[str, TuningValue]:
        """The dotted-name view of a config of this schema."""
        return {name: getattr(config, p.attribute) for name, p in self.parameters.items()}

    def validate(
        self, values: Mapping[str, object], *, complete: bool = False
    ) -> dict[str, TuningValue]:
        """Check values as a whole and return them in canonical types.

        Every problem is collected into one :class:`TuningValidationError`:
        unknown names, missing required values (all values when ``complete``),
        wrong types, out-of-range values and, once every value is acceptable on
        its own, the config's cross-field consistency with the defaults filling
        in what is not given.
        """
        self.configure(values, complete=complete)
        return {name: self._canonical(name, value) for name, value in values.items()}

    def _canonical(self, name: str, value: object) -> TuningValue:
        converted, _ = self.parameters[name].check(value)
        return converted  # type: ignore[return-value]

    def configure(
        self, values: Mapping[str, object] | None = None, *, base: object = None,
        complete: bool = False,
    ) -> Any:
        """A config: ``base`` (the defaults unless given) with ``values`` applied.

        Configs are frozen, so the one of values applied to the defaults before is given
        again: its values are keyed with their types, since ``True``, ``1`` and ``1.0``
        are equal keys of a dict and only one of them is an integer.
        """
        memo = None
        if base is None and not complete and isinstance(values, dict | types.MappingProxyType):
            memo = tuple((name, type(value), value) for name, value in values.items())
            try:
                return self._configured[memo]
            except (KeyError, TypeError):  # not configured yet, or a value no dict can hold
                pass
        config = self._configure(values, base, complete)
        if memo is not None and len(self._configured) < MEMO_SIZE:
            with contextlib.suppress(TypeError):
                self._configured[memo] = config
        return config

    def _configure(self, values: Mapping[str, object] | None, base: object,
                   complete: bool) -> Any:
        # the concrete types first: the Mapping ABC's check is slow, and runs for every entry
        if not isinstance(values, dict | types.MappingProxyType | Mapping | None):
            raise TuningValidationError([Problem("values", f"expected a mapping of parameter "
                                                           f"names, got {_kind(values)}")])
        values = values or {}
        problems = []
        changes = {}
        for name, value in values.items():
            parameter = self.parameters.get(name) if isinstance(name, str) else None
            if parameter is None:
                problems.append(Problem(str(name), f"unknown parameter for {self.key.kernel}"
                                                   f" (known: {', '.join(self.parameters)})"))
                continue
            converted, reason = parameter.check(value)
            if reason:
                problems.append(Problem(name, reason))
            else:
                changes[parameter.attribute] = converted
        problems += [
            Problem(name, "missing required value")
            for name, p in self.parameters.items()
            if (complete or p.required) and name not in values
        ]
        if not problems:
            config = dataclasses.replace(self.defaults if base is None else base, **changes)
            problems = _consistency_problems(config)
        if problems:
            raise TuningValidationError(problems, context=str(self.key))
        return config
