"""The shared reading of versioned files, apart from any one kind of file."""

from __future__ import annotations

import pytest

from kerneltune._support.documents import DocumentFormat, parse_text, read_document
from kerneltune._support.files import file_lock, remove_stray_temporaries, write_atomically

FORM = DocumentFormat("toy-format", 2, {"format": str, "schema_version": int, "items": list},
                      what="toy file")


def _read(tmp_path, text: str | bytes):
    path = tmp_path / "doc.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return read_document(path, FORM)


def test_a_good_document_is_read_as_plain_data(tmp_path):
    document = _read(tmp_path, "format: toy-format\nschema_version: 2\nitems: [1, 2]\n")
    assert document.status == "ok" and document.data["items"] == [1, 2] and not document.problems


@pytest.mark.parametrize(("text", "status", "field", "words"), [
    ("", "malformed", "", "empty"),
    (b"\xff\xfe", "malformed", "", "not a toy file"),
    ("[1, 2]", "malformed", "", "expected a mapping"),
    ("format: other\nschema_version: 2\nitems: []", "malformed", "format", "toy-format"),
    ("format: toy-format\nschema_version: '2'\nitems: []", "malformed", "schema_version",
     "integer"),
    ("format: toy-format\nschema_version: 3\nitems: []", "unsupported_version",
     "schema_version", "reads version 2 only"),
    ("format: toy-format\nschema_version: 2\nitems: {}", "malformed", "items", "a list"),
    ("format: toy-format\nschema_version: 2\n", "malformed", "items", "missing"),
    ("format: toy-format\nschema_version: 2\nitems: []\nextra: 1", "malformed", "extra",
     "unknown field"),
    ("format: toy-format\nformat: toy-format\nschema_version: 2\nitems: []", "malformed", "",
     "twice"),
    ("format: toy-format\nschema_version: 2\nitems: !!python/object:os.system []",
     "malformed", "", "not plain YAML"),
])
def test_each_bad_document_is_a_status_with_a_problem_naming_the_file(
        tmp_path, text, status, field, words):
    document = _read(tmp_path, text)
    assert document.status == status and document.data is None
    (problem,) = document.problems
    assert problem.file == str(tmp_path / "doc.yaml") and problem.field == field
    assert words in problem.message


def test_a_missing_file_is_not_found(tmp_path):
    assert read_document(tmp_path / "absent.yaml", FORM).status == "not_found"


def test_json_is_read_first_and_nan_is_the_float_it_spells():
    data, reason = parse_text('{"a": NaN, "b": [1]}')
    assert reason is None and data["a"] != data["a"] and data["b"] == [1]


def test_an_alias_bomb_is_refused_before_anything_expands():
    bomb = "a: &a [x, x]\n" + "".join(f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}]\n"
                                       for p, c in zip("abcdefghijklmn", "bcdefghijklmno",
                                                       strict=True))
    data, reason = parse_text(bomb)
    assert data is None and "expand to more than" in reason


def test_benign_aliases_are_read():
    data, reason = parse_text("a: &shared {x: 1}\nb: *shared\n")
    assert reason is None and data == {"a": {"x": 1}, "b": {"x": 1}}


def test_a_star_inside_a_string_is_no_alias():
    data, reason = parse_text("name: 'a*b'\nnote: \"*x\"\n")
    assert reason is None and data == {"name": "a*b", "note": "*x"}


def test_stray_temporaries_are_removed_under_the_lock_and_nothing_else(tmp_path):
    target = tmp_path / "file.yaml"
    write_atomically(target, "kept\n")
    (tmp_path / "file.yaml.0123.tmp").write_text("left by a writer that died")
    (tmp_path / "other.yaml.0123.tmp").write_text("another file's")
    with file_lock(target, timeout=5):
        assert remove_stray_temporaries(target) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "file.yaml", "file.yaml.lock", "other.yaml.0123.tmp"]
    assert target.read_text() == "kept\n"
