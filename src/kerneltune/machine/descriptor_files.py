"""Processor descriptor files: a descriptor written once and read anywhere.

A descriptor file stands in for detection (``KERNELTUNE_CPU_DESCRIPTOR``), so a
build farm can resolve profiles for a processor it is not running on. It may
come from anywhere, so only plain YAML is read, and a newer format is refused
rather than guessed at.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .._support.documents import read_bounded
from ..errors import CpuDescriptorError, Problem
from .descriptor import CpuDescriptor, _descriptor_error

if TYPE_CHECKING:
    import yaml

FILE_FORMAT = "kerneltune-cpu-descriptor"
SCHEMA_VERSION = 1


def write_cpu_descriptor(descriptor: CpuDescriptor, path: str | os.PathLike[str]) -> None:
    """Write ``descriptor`` under a format header, so a later reader can refuse a newer file."""
    import yaml

    document = {"format": FILE_FORMAT, "schema_version": SCHEMA_VERSION, **descriptor.to_dict()}
    Path(path).write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


def read_cpu_descriptor(path: str | os.PathLike[str]) -> CpuDescriptor:
    """Read a descriptor file written by :func:`write_cpu_descriptor` or by hand.

    Only plain YAML is accepted: a tag that would construct a Python object
    is an error, since a descriptor file may come from anywhere. (yaml is imported by
    the functions that read or write YAML: a first session reads none.)
    """
    import yaml

    source = os.fspath(path)
    contents = read_bounded(Path(path), "processor descriptor")
    if contents.data is None:
        raise _descriptor_error(source, [Problem("", p.message) for p in contents.problems]
                                or [Problem("", "no such file; expected a processor descriptor")])
    try:
        text = contents.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CpuDescriptorError(f"{source}: cannot read the processor descriptor: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _descriptor_error(source, [_yaml_problem(text, exc)]) from None
    if data is None:
        raise CpuDescriptorError(f"{source}: the file is empty; expected a processor descriptor")
    if isinstance(data, Mapping) and ("format" in data or "schema_version" in data):
        data = dict(data)
        header = [_check_header("format", data.pop("format", None), FILE_FORMAT)]
        header.append(
            _check_header("schema_version", data.pop("schema_version", None), SCHEMA_VERSION)
        )
        if any(header):
            raise _descriptor_error(source, filter(None, header))
    return CpuDescriptor.from_dict(data, source=source)


def _check_header(name: str, value: object, expected: object) -> Problem | None:
    if type(value) is type(expected) and value == expected:
        return None
    found = "it is missing" if value is None else f"got {value!r}"
    return Problem(name, f"expected {expected!r} (the only one this version reads), {found}")


def _yaml_problem(text: str, error: yaml.YAMLError) -> Problem:
    """Locate a YAML error at the descriptor field it occurred in, where that can be told."""
    mark = getattr(error, "problem_mark", None)
    if mark is None:
        return Problem("", f"not a plain YAML processor descriptor: {error}")
    parts = [
        f"{message} (line {where.line + 1}, column {where.column + 1})"
        for message, where in (
            (getattr(error, "context", None), getattr(error, "context_mark", None)),
            (getattr(error, "problem", None), mark),
        )
        if message and where
    ]
    return Problem(
        _field_at(text, mark), f"not a plain YAML processor descriptor: {': '.join(parts)}"
    )


def _field_at(text: str, mark: yaml.Mark) -> str:
    """The dotted key path whose value contains ``mark``; composing builds no Python objects."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return ""
    path: list[str] = []
    while isinstance(node, yaml.MappingNode):
        inside = [
            (key, value)
            for key, value in node.value
            if value.start_mark.index <= mark.index <= value.end_mark.index
        ]
        if not inside:
            break
        key, node = inside[0]
        path.append(str(key.value))
    return ".".join(path)
