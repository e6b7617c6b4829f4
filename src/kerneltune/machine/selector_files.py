"""Named selector files: a processor selector with a name and the reason for its fields.

A selector file names a family of processors once, so that every profile
calibrated for that family is bound to the same fields. The shipped ones (the
top-level ``selectors/`` folder) install as package data under
``kerneltune/data/selectors``, so an installed kerneltune loads ``zen4`` by
name. Files are read as plain data only (:mod:`kerneltune._support.documents`), and a
file that cannot be used raises :class:`~kerneltune.errors.ProfileError` with
every problem it has.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .._support.documents import DocumentFormat, read_document
from .._support.files import write_atomically
from ..errors import Problem, ProfileError, TuningValidationError
from .descriptor import CpuDescriptor
from .selectors import CpuSelector

SELECTOR_FORMAT = DocumentFormat(
    "kerneltune-selector", 1,
    {"format": str, "schema_version": int, "name": str, "description": str, "selector": dict},
    what="selector file")
_SUFFIX = ".yaml"

#: a name is a file stem and a word on a command line: no separators, no spaces
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


@dataclass(frozen=True)
class NamedSelector:
    """A selector as a selector file gives it: its name, why its fields were chosen, the fields.

    ``path`` is where it was read from (None for one built in memory); it is
    not part of equality, so a selector read back from a copy is the same one.
    """

    name: str
    description: str
    selector: CpuSelector
    path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        problems = _text_problems(self.name, self.description)
        if not isinstance(self.selector, CpuSelector):
            problems.append(Problem("selector", f"expected a CpuSelector, got "
                                                f"{type(self.selector).__name__}"))
        if problems:
            raise _error(problems)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "description": self.description,
                "selector": self.selector.to_dict(), "path": self.path}


def read_selector(path_or_name: str | os.PathLike[str]) -> NamedSelector:
    """Read a selector file, or the shipped selector of that name (``"zen4"``).

    A string without a directory separator or a suffix is a shipped name;
    anything else is a path, so ``zen4.yaml`` means the file of that name here.
    """
    if isinstance(path_or_name, str) and not _looks_like_path(path_or_name):
        known = _shipped_files()
        if path_or_name not in known:
            raise _error([Problem("name", f"no shipped selector {path_or_name!r}; the shipped "
                                          f"ones are {', '.join(sorted(known))}")])
        return _read(known[path_or_name])
    return _read(Path(path_or_name))


def shipped_selectors() -> tuple[NamedSelector, ...]:
    """Every selector shipped with kerneltune, sorted by name."""
    return tuple(_read(entry) for _, entry in sorted(_shipped_files().items()))


def processor_selector(processor: CpuDescriptor) -> NamedSelector:
    """The exact vendor/family/model selector of ``processor``, named after it.

    What a farm machine binds its profile to when given no selector file.
    """
    missing = [name for name in ("vendor", "family", "model") if getattr(processor, name) is None]
    if missing:
        raise ProfileError([Problem(name, "unknown on this processor; give a selector file")
                            for name in missing], context="no selector for this machine")
    name = f"{processor.vendor}-{processor.family}-{processor.model}"
    return NamedSelector(name, f"this processor: {processor.vendor} family {processor.family} "
                               f"model {processor.model}",
                         CpuSelector(architecture=processor.architecture,
                                     vendor=processor.vendor, family=processor.family,
                                     models=[processor.model]), None)


def write_selector(named: NamedSelector, path: str | os.PathLike[str]) -> None:
    """Write ``named`` as a selector file, whole or not at all; equal selectors give equal bytes."""
    write_atomically(Path(path), selector_text(named))


def selector_text(named: NamedSelector) -> str:
    """The text of ``named``'s file: the header, then the fields in their canonical form."""
    document = {"format": SELECTOR_FORMAT.name, "schema_version": SELECTOR_FORMAT.schema_version,
                "name": named.name, "description": named.description,
                "selector": named.selector.to_dict()}
    import yaml  # imported where YAML is written: a first session writes none

    # Lists of scalars in flow style keep a long model list to a few lines.
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=None,
                          allow_unicode=True)


def _looks_like_path(text: str) -> bool:
    return any(s and s in text for s in (os.sep, os.altsep)) or bool(Path(text).suffix)


def _shipped_directory() -> Path:
    # A package with compiled extensions is installed as files, never inside an archive.
    from importlib import resources

    return Path(str(resources.files("kerneltune"))) / "data" / "selectors"


def _shipped_files() -> dict[str, Path]:
    """The shipped selector files by name; their absence is a broken installation."""
    directory = _shipped_directory()
    if not directory.is_dir():
        raise _error([Problem("", "this kerneltune has no shipped selectors (its package data "
                                  "kerneltune/data/selectors is missing)", file=str(directory))])
    return {entry.stem: entry for entry in directory.iterdir() if entry.suffix == _SUFFIX}


def _read(target: Path) -> NamedSelector:
    document = read_document(target, SELECTOR_FORMAT)
    path = document.path
    if document.status == "not_found":
        raise _error([Problem("", "no such selector file", file=path)])
    if document.data is None:
        raise _error(document.problems)
    data = document.data
    problems = [p.located(file=path) for p in _text_problems(data["name"], data["description"])]
    try:
        selector = CpuSelector.from_dict(data["selector"])
    except TuningValidationError as error:
        raise _error(problems + [Problem(f"selector.{p.field}" if p.field else "selector",
                                         p.message, file=path) for p in error.problems]) from None
    if problems:
        raise _error(problems)
    return NamedSelector(data["name"], data["description"], selector, path)


def _error(problems: Iterable[Problem]) -> ProfileError:
    return ProfileError(problems, context="selector file")


def _text_problems(name: object, description: object) -> list[Problem]:
    problems = []
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        problems.append(Problem("name", f"expected lowercase letters, digits, '_' and '-' "
                                        f"(a file stem), got {name!r}"))
    if not isinstance(description, str) or not description.strip() or "\n" in description:
        problems.append(Problem("description", f"expected one non-empty line, got "
                                               f"{description!r}"))
    return problems
