"""Versioned documents: kerneltune's files read as plain data, never as code.

Every file kerneltune reads (the calibration cache, and the profile files
built on it) is YAML headed by ``format`` and ``schema_version``. Reading one
is the same everywhere: the bytes as UTF-8, then JSON (a subset of YAML that
``json`` parses an order of magnitude faster), else the safe YAML loader; a
duplicate key is an error; the header is checked before the body, and a newer
version is reported as such, never guessed at. Nothing here raises for the
content of a file: each outcome is a status with problems naming the file and
the field.

Statuses: ``ok``, ``not_found``, ``unreadable`` (the file cannot be read),
``malformed`` (not plain YAML, not this format, or a broken envelope) and
``unsupported_version``.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import Problem


class SafeLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader (the C one where built), refusing duplicate mapping keys.

    Plain YAML loaders keep the last of two equal keys without a word; a file
    that says two things about one field means neither.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        mapping = super().construct_mapping(node, deep)
        if len(mapping) != len(node.value):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"found the key {key_node.value!r} twice",
                        key_node.start_mark)
                seen.add(key_node.value)
        return mapping


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        raise ValueError("a duplicate key")
    return mapping


def parse_text(text: str) -> tuple[object, str | None]:
    """Plain data from a file's text, or why it is not plain YAML.

    ``NaN`` is read as the float it spells (the safe YAML loader reads ``.nan``
    the same way), so a non-finite value fails its entry, not the file. JSON
    that ``json`` refuses (a duplicate key, an over-long integer) goes to the
    YAML loader, which reports it with a line and column.
    """
    if not text.strip():
        return None, "the file is empty"
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=float), None
    except (ValueError, RecursionError):
        pass
    try:
        if "*" not in text:  # no alias: nothing can expand
            return yaml.load(text, Loader=SafeLoader), None  # noqa: S506 - a safe loader
        return _load_bounded(text)
    except (yaml.YAMLError, ValueError, RecursionError) as error:
        return None, f"not plain YAML: {' '.join(str(error).split())}"


#: nodes a document may expand to through its aliases; far beyond any real kerneltune file
MAXIMUM_NODES = 5_000_000


def _load_bounded(text: str) -> tuple[object, str | None]:
    """Load a text with aliases unless they expand past :data:`MAXIMUM_NODES` nodes.

    A few anchors, each naming the previous one several times, expand to more
    nodes than memory holds; the composed graph is small, so its expanded size
    is counted there, once per node, before anything is constructed.
    """
    loader = SafeLoader(text)
    try:
        root = loader.get_single_node()
        sizes: dict[int, int] = {}

        def size(node: yaml.Node) -> int:
            known = sizes.get(id(node))
            if known is None:
                children = (node.value if isinstance(node, yaml.SequenceNode) else
                            [n for pair in node.value for n in pair]
                            if isinstance(node, yaml.MappingNode) else ())
                known = sizes[id(node)] = 1 + sum(size(child) for child in children)
            return known

        if root is not None and size(root) > MAXIMUM_NODES:
            return None, (f"its aliases expand to more than {MAXIMUM_NODES:,} nodes; "
                          f"not a kerneltune file")
        return (None if root is None else loader.construct_document(root)), None
    finally:
        loader.dispose()


def kind(value: object) -> str:
    """The type name a problem message shows for a value of the wrong type."""
    return type(value).__name__


@dataclass(frozen=True)
class DocumentFormat:
    """What a kind of file must hold at its top level.

    ``fields`` maps each top-level field (``format`` and ``schema_version``
    included) to the type its value must have; ``what`` names the kind of
    file in messages.
    """

    name: str
    schema_version: int
    fields: Mapping[str, type]
    what: str = field(default="file")

    def opening(self) -> str:
        """The document's first line as JSON-form YAML, left open for the fields that follow."""
        return json.dumps({"format": self.name, "schema_version": self.schema_version})[:-1]


@dataclass(frozen=True)
class Document:
    """A file read and its header checked: ``data`` is the document when ``status`` is ok."""

    status: str
    path: str
    data: dict[str, Any] | None = None
    problems: tuple[Problem, ...] = ()


def read_document(target: Path, form: DocumentFormat, *others: DocumentFormat) -> Document:
    """Read ``target`` as a document of ``form`` (or of one of ``others``, by its ``format``).

    Never raises for what the file holds.
    """
    path = str(target)
    try:
        data = target.read_bytes()
    except FileNotFoundError:
        return Document("not_found", path)
    except OSError as error:
        return Document("unreadable", path, problems=(
            Problem("", f"cannot read the {form.what}: {error.strerror or error}", file=path),))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return Document("malformed", path, problems=(
            Problem("", f"not UTF-8 text (byte {error.start}); not a {form.what}", file=path),))
    document, reason = parse_text(text)
    if reason is not None:
        return Document("malformed", path, problems=(Problem("", reason, file=path),))
    if isinstance(document, dict):  # the format named, when it is one of the others
        form = next((other for other in others if other.name == document.get("format")), form)
    status, problems = check_envelope(document, path, form)
    return Document(status, path, document if status == "ok" else None, tuple(problems))


def check_envelope(document: object, path: str, form: DocumentFormat) -> tuple[str, list[Problem]]:
    """The file-level status of a parsed document: its header first, then its shape."""
    names = ", ".join(form.fields)

    def problem(name: str, message: str) -> tuple[str, list[Problem]]:
        return "malformed", [Problem(name, message, file=path)]

    if not isinstance(document, dict):
        return problem("", f"expected a mapping with the fields {names}, got {kind(document)}")
    if document.get("format") != form.name:
        return problem("format", f"expected {form.name!r}, got {document.get('format')!r}")
    version = document.get("schema_version")
    if type(version) is not int:
        return problem("schema_version", f"expected the integer {form.schema_version}, got "
                                         f"{version!r}")
    if version != form.schema_version:
        return "unsupported_version", [Problem(
            "schema_version", f"version {version}; this kerneltune reads version "
                              f"{form.schema_version} only (a newer kerneltune may have "
                              f"written it)", file=path)]
    problems = [Problem(str(name), f"unknown field; expected {names}", file=path)
                for name in document if name not in form.fields]
    problems += [Problem(name, "missing", file=path) for name in form.fields
                 if name not in document]
    if not problems:
        problems = [Problem(name, f"expected {_article(expected)}, got {kind(document[name])}",
                            file=path)
                    for name, expected in form.fields.items()
                    if not isinstance(document[name], expected)]
    return ("malformed" if problems else "ok"), problems


_TYPE_WORDS = {dict: "a mapping", list: "a list", str: "a string", int: "an integer"}


def _article(expected: type) -> str:
    return _TYPE_WORDS.get(expected, f"a {expected.__name__}")


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector out of a bulk read.

    A large file allocates some 10^5 containers that all live on; the collector
    would traverse them (and the rest of the heap) several times over for no
    garbage.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
