"""The corpus of a parameter search: ONNX cases that run on kerneltune and use one kernel.

Cases come from onnx's own node test cases and from folders in onnx's layout
(``model.onnx`` beside ``test_data_set_*/input_*.pb`` and ``output_*.pb``),
chosen by a regular expression on their names. A case is kept only when a
:class:`~kerneltune.RuntimeSession` accepts its model and one of its nodes
runs the selected tuning key, since the others cannot tell parameter sets
apart.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._support.documents import read_bounded
from ..errors import UnsupportedModelError
from ..tuning.schema import KernelTuningKey

#: onnx's comparison tolerances for a case that does not give its own
RTOL, ATOL = 1e-3, 1e-7

DataSet = tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]


@dataclass(frozen=True)
class CorpusCase:
    """One case: its model (serialised, so that it crosses to a worker cheaply), inputs and
    expected outputs, and where it came from (``onnx`` or its folder)."""

    name: str
    model: bytes
    data_sets: tuple[DataSet, ...]
    source: str
    rtol: float = RTOL
    atol: float = ATOL


@dataclass(frozen=True)
class SkippedCase:
    """A case the pattern chose and the corpus left out, and why."""

    name: str
    source: str
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "source": self.source, "reason": self.reason}


@dataclass(frozen=True)
class Corpus:
    pattern: str
    key: KernelTuningKey
    cases: tuple[CorpusCase, ...]
    skipped: tuple[SkippedCase, ...]

    def to_dict(self) -> dict[str, object]:
        return {"pattern": self.pattern, "key": self.key.to_dict(),
                "cases": [{"name": c.name, "source": c.source} for c in self.cases],
                "skipped": [s.to_dict() for s in self.skipped]}


def _bytes(path: Path, what: str) -> bytes:
    """A case file's bytes; a FIFO, a device or a file too large raises ``ValueError``."""
    contents = read_bounded(path, what)
    if contents.data is None:
        raise ValueError("; ".join(map(str, contents.problems)) or f"{path}: no such file")
    return contents.data


def _tensor(path: Path) -> np.ndarray:
    import onnx  # here: the command line reads the search's defaults without loading onnx
    from onnx import numpy_helper

    return numpy_helper.to_array(onnx.load_tensor_from_string(_bytes(path, "tensor")))


def _numbered(folder: Path, pattern: str) -> list[Path]:
    """The files ``pattern`` matches in numeric order of their suffix (``_10`` after ``_9``)."""
    def number(path: Path) -> tuple[int, str]:
        suffix = path.stem.rpartition("_")[2]
        return (int(suffix) if suffix.isdigit() else -1, path.name)

    return sorted(folder.glob(pattern), key=number)


def read_case_folder(folder: str | os.PathLike[str]) -> CorpusCase:
    """A case in onnx's layout; a data set that is not plain tensors raises ``ValueError``."""
    folder = Path(folder)
    data_sets = []
    for data in _numbered(folder, "test_data_set_*"):
        try:
            inputs = tuple(_tensor(path) for path in _numbered(data, "input_*.pb"))
            outputs = tuple(_tensor(path) for path in _numbered(data, "output_*.pb"))
        except Exception as error:  # noqa: BLE001 - any unreadable file: the case is left out
            raise ValueError(f"{data.name}: not a tensor data set: {error}") from error
        data_sets.append((inputs, outputs))
    if not data_sets:
        raise ValueError("no test_data_set_* folder")
    return CorpusCase(folder.name, _bytes(folder / "model.onnx", "model"), tuple(data_sets),
                       os.fspath(folder))


def _case_folders(folder: Path) -> list[Path]:
    """The folder itself when it is a case, else its subfolders that are."""
    if not folder.is_dir():
        raise ValueError(f"--cases {folder}: not a folder")
    if (folder / "model.onnx").is_file():
        return [folder]
    return sorted(path for path in folder.iterdir() if (path / "model.onnx").is_file())


def _onnx_node_cases(chosen: re.Pattern[str]) -> Iterable[CorpusCase]:
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # generating onnx's cases warns about its own casts
        tests = load_model_tests(kind="node")
    for test in tests:
        if not chosen.search(test.name):
            continue
        if test.model_dir is not None:
            found = read_case_folder(test.model_dir)
            yield CorpusCase(test.name, found.model, found.data_sets, "onnx",
                              test.rtol, test.atol)
        else:
            data_sets = tuple((tuple(map(np.asarray, inputs)), tuple(map(np.asarray, outputs)))
                              for inputs, outputs in test.data_sets)
            yield CorpusCase(test.name, test.model.SerializeToString(), data_sets, "onnx",
                              test.rtol, test.atol)


def _uses(case: CorpusCase, key: KernelTuningKey) -> str | None:
    """Why the case cannot measure ``key``, or None when it can."""
    from ..runtime.session import RuntimeSession

    try:
        session = RuntimeSession(case.model)
    except UnsupportedModelError as error:
        return f"unsupported: {error}"
    except Exception as error:  # noqa: BLE001 - an invalid model is left out, not fatal
        return f"not a valid model: {type(error).__name__}: {error}"
    if not any(entry["key"] == key.to_dict() for entry in session.tuning_diagnostics):
        return f"no node runs {key.kernel} {key.element_type_name}"
    return None


def collect_corpus_cases(pattern: str, key: KernelTuningKey,
                          cases_dirs: Sequence[str | os.PathLike[str]] = ()) -> Corpus:
    """The cases whose name ``pattern`` matches (``re.search``) that can measure ``key``.

    onnx's node cases come first, then those of ``cases_dirs`` in the order
    given. Two cases of one name are an error: names are the columns of the
    comparison.
    """
    try:
        chosen = re.compile(pattern)
    except re.error as error:
        raise ValueError(f"invalid case pattern {pattern!r}: {error}") from None
    kept: dict[str, CorpusCase] = {}
    skipped = []

    def offer(case: CorpusCase) -> None:
        if case.name in kept:
            raise ValueError(f"two cases are named {case.name!r}: {kept[case.name].source} and "
                             f"{case.source}")
        reason = _uses(case, key)
        if reason is None:
            kept[case.name] = case
        else:
            skipped.append(SkippedCase(case.name, case.source, reason))

    for case in _onnx_node_cases(chosen):
        offer(case)
    for folder in map(Path, cases_dirs):
        for path in _case_folders(folder):
            if not chosen.search(path.name):
                continue
            try:
                case = read_case_folder(path)
            except (OSError, ValueError) as error:
                skipped.append(SkippedCase(path.name, os.fspath(path), str(error)))
                continue
            offer(case)
    return Corpus(pattern, key, tuple(kept.values()), tuple(skipped))
