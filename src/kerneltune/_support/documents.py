"""Versioned documents: kerneltune's files read as plain data, never as code.

Every file kerneltune reads (the calibration cache, and the profile files
built on it) is YAML headed by ``format`` and ``schema_version``. Reading one
is the same everywhere: the bytes as UTF-8, then JSON (a subset of YAML that
``json`` parses an order of magnitude faster), else the safe YAML loader; a
duplicate key is an error; the header is checked before the body, and a newer
version is reported as such, never guessed at. Nothing here raises for the
content of a file: each outcome is a status with problems naming the file and
the field.

Reading cannot hang or exhaust memory: only a regular file is opened (a FIFO,
a device or a socket is a problem naming the path, never opened), and a file
larger than :func:`maximum_bytes` is refused before it is read.

Statuses: ``ok``, ``not_found``, ``unreadable`` (the file cannot be read, or is
not a regular file), ``too_large`` (beyond :func:`maximum_bytes`),
``malformed`` (not plain YAML, not this format, or a broken envelope) and
``unsupported_version``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import Problem

if TYPE_CHECKING:
    import yaml

#: the variable that sets the largest file kerneltune reads, in bytes (``64M``, ``1G``)
SIZE_VARIABLE = "KERNELTUNE_MAX_FILE_BYTES"
#: the default: far beyond any profile, cache or deployment section, far below memory
DEFAULT_MAXIMUM_BYTES = 64 << 20
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_FILE_TYPES = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


@functools.cache
def safe_loader() -> type:
    """The safe loader (the C one where built), refusing duplicate mapping keys.

    Plain YAML loaders keep the last of two equal keys without a word; a file
    that says two things about one field means neither. Made, and yaml imported, at
    the first YAML text: a first session reads none.
    """
    import yaml

    class SafeLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
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

    return SafeLoader


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        raise ValueError("a duplicate key")
    return mapping


def strict_json(text: str | bytes) -> object:
    """A JSON value, refusing what :func:`parse_text` refuses of JSON (a duplicate key, a
    nesting deeper than the parser goes): ``ValueError`` names it."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=float)
    except RecursionError:
        raise ValueError("nested too deeply") from None


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
    import yaml

    try:
        if "*" not in text:  # no alias: nothing can expand
            return yaml.load(text, Loader=safe_loader()), None  # noqa: S506 - a safe loader
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
    import yaml

    loader = safe_loader()(text)
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


def maximum_bytes() -> int:
    """The largest file kerneltune reads: ``KERNELTUNE_MAX_FILE_BYTES``, else 64 MiB.

    A value it cannot read (not a whole number of bytes, optionally with a k, M or G
    suffix) leaves the default.
    """
    text = os.environ.get(SIZE_VARIABLE, "").strip().lower().removesuffix("b")
    number, unit = (text[:-1], text[-1]) if text[-1:].isalpha() else (text, "")
    if not (number.isascii() and number.isdecimal()) or unit not in _UNITS:
        return DEFAULT_MAXIMUM_BYTES
    return int(number) * _UNITS[unit]


@dataclass(frozen=True)
class Contents:
    """A file's bytes (``data``) when ``status`` is ok, else why there are none."""

    status: str
    path: str
    data: bytes | None = None
    problems: tuple[Problem, ...] = ()


def open_regular(target: Path, what: str = "file") -> BinaryIO | Contents:
    """``target`` opened for reading in binary, if it is a regular file; else why not.

    Anything but a regular file (no file, a FIFO, a device, a socket, a
    directory, a symlink loop) is a :class:`Contents` with a problem naming the
    path and ``what`` the file was to be; nothing raises, and nothing but a
    regular file is ever opened. The caller closes the stream.
    """
    path = str(target)
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return Contents("not_found", path)
    except (OSError, ValueError) as error:
        return unreadable(path, what, getattr(error, "strerror", None) or str(error))
    if not stat.S_ISREG(info.st_mode):
        return _special(path, what, info.st_mode)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return Contents("not_found", path)
    except OSError as error:
        return unreadable(path, what, error.strerror or str(error))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # replaced since the stat above
        os.close(fd)
        return _special(path, what, mode)
    return os.fdopen(fd, "rb")


def read_bounded(target: Path, what: str = "file") -> Contents:
    """The bytes of ``target`` if it is a regular file of at most :func:`maximum_bytes`.

    Otherwise a status with a problem naming the path, as :func:`open_regular`
    says, or ``too_large``; nothing raises.
    """
    stream = open_regular(target, what)
    if isinstance(stream, Contents):
        return stream
    path, limit = str(target), maximum_bytes()
    with stream:
        try:
            size = os.fstat(stream.fileno()).st_size
            if size > limit:
                return too_large(path, what, size, limit)
            data = stream.read(limit + 1)
        except OSError as error:
            return unreadable(path, what, error.strerror or str(error))
        except MemoryError:
            return unreadable(path, what, "not enough memory to read it")
    if len(data) > limit:  # it grew since
        return too_large(path, what, len(data), limit)
    return Contents("ok", path, data)


def unreadable(path: str, what: str, why: str) -> Contents:
    """The outcome of a read of ``what`` at ``path`` that failed, and why."""
    return Contents("unreadable", path, problems=(
        Problem("", f"cannot read the {what}: {why}", file=path),))


def _special(path: str, what: str, mode: int) -> Contents:
    kind_of = next((name for test, name in _FILE_TYPES if test(mode)), "not a regular file")
    return Contents("unreadable", path, problems=(
        Problem("", f"{kind_of}, not a regular file: a {what} is never read from one",
                file=path),))


def too_large(path: str, what: str, size: int, limit: int) -> Contents:
    """The outcome of a file of ``size`` bytes refused for being over ``limit``."""
    return Contents("too_large", path, problems=(Problem(
        "", f"{size:,} bytes, more than the {limit:,} a {what} may have ({SIZE_VARIABLE} "
            f"sets the limit)", file=path),))


def read_document(target: Path, form: DocumentFormat, *others: DocumentFormat) -> Document:
    """Read ``target`` as a document of ``form`` (or of one of ``others``, by its ``format``).

    Never raises for what the file holds.
    """
    contents = read_bounded(target, form.what)
    if contents.data is None:
        return Document(contents.status, contents.path, problems=contents.problems)
    return parse_document(contents.data, contents.path, form, *others)


def parse_document(data: bytes, path: str, form: DocumentFormat,
                   *others: DocumentFormat) -> Document:
    """A document of ``form`` (or of one of ``others``) from a file's bytes."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return Document("malformed", path, problems=(
            Problem("", f"not UTF-8 text (byte {error.start}); not a {form.what}", file=path),))
    try:
        document, reason = parse_text(text)
    except MemoryError:
        document, reason = None, "not enough memory to parse it"
    if reason is not None:
        return Document("malformed", path, problems=(Problem("", reason, file=path),))
    if isinstance(document, dict):  # the format named (of its version, when one is known)
        named = [other for other in (form, *others) if other.name == document.get("format")]
        form = next((other for other in named
                     if other.schema_version == document.get("schema_version")),
                    named[0] if named else form)
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
