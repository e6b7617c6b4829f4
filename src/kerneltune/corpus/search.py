"""Backend-case parameter search: which values of one kernel's parameters run a corpus fastest.

Kernel calibration finds where a kernel's synthetic workload crosses a
threshold; this search measures a user-chosen corpus of ONNX cases instead,
once per parameter set of a Cartesian product. Every set runs in a fresh
``spawn`` worker (forking after OpenMP kernels ran is unsafe) whose
``KERNELTUNE_CACHE`` is a temporary file holding only that set, so no session
can keep another set's values and the machine's own cache is never read or
written. The result is advisory: nothing is published or persisted.

A search over many sets finds one faster by chance, so the fastest set is
advised only when calibration's confirmation rule says so
(:mod:`kerneltune.calibration.confirmation`): it and the values in use run again,
fastest, values in use, values in use, fastest (an ABBA order, which cancels a
drift of the machine), and on those fresh samples alone (the ones that made it
the fastest would favour it) it must beat the values in use by the margin at the
stated confidence. Otherwise the advice is that no set beats the values in use.
When the values in use did not run every case, there is nothing to confirm
against, and the fastest complete set is advised as it stands.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import json
import math
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._support.checks import is_count, is_positive_number
from .._support.files import write_atomically
from .._support.reprs import brief_repr
from ..cache.location import ENVIRONMENT_VARIABLE
from ..calibration.confirmation import Confirmation, confirm
from ..calibration.parameters import one_key, set_kernel_tuning_parameters
from ..errors import Problem, TuningValidationError
from ..machine.detect import current_execution
from ..tuning.registry import default_registry
from ..tuning.schema import KernelTuningKey, TuningValue
from .analysis import (
    BASELINE,
    CRITERIA,
    CaseLatency,
    LatencyAnalysis,
    analyze_kernel_tuning_latencies,
    unknown_criterion,
)
from .cases import Corpus, CorpusCase, collect_corpus_cases

MAX_SETS = 256
DEFAULT_CRITERION = "median"
DEFAULT_REPEAT = 20
DEFAULT_WARMUP = 3
#: seconds one case may take in a worker (session, output check, warm-up and timed runs)
DEFAULT_TIMEOUT = 60.0
#: how much faster than the values in use the fastest set must be, confirmed, to be advised
DEFAULT_MARGIN = 0.05
#: seconds a worker may take to import kerneltune and load its cache before its first case
STARTUP_TIMEOUT = 300.0

OK, TIMEOUT, WRONG_OUTPUT, ERROR = "ok", "timeout", "wrong_output", "error"


@dataclass(frozen=True)
class CaseResult:
    """One case with one set: its median latency, or why it has none.

    ``resolved`` is what the worker's session resolved for the key, so a
    report shows that each set ran with its own values.
    """

    set_index: int
    case: str
    status: str
    latency_seconds: float | None = None
    resolved: Mapping[str, TuningValue] | None = None
    message: str | None = None
    #: the timed runs' seconds, whose median is the latency
    samples: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"set": self.set_index, "case": self.case, "status": self.status,
                "latency_seconds": self.latency_seconds,
                "resolved": None if self.resolved is None else dict(self.resolved),
                "message": self.message, "samples": list(self.samples)}


@dataclass(frozen=True)
class CorpusProgress:
    """Reported after every case: which one finished, and how far the search is."""

    set_index: int
    case: str
    status: str
    cases_done: int
    cases_total: int
    sets_done: int
    sets_total: int


@brief_repr
@dataclass(frozen=True, repr=False)
class CorpusSearchReport:
    """The sets (set 0: the active values, the baseline), every result and the analysis.

    ``sets`` hold every parameter of the key, those not searched at their
    active values. The selected set is advice: persisting it takes an explicit
    :func:`~kerneltune.set_kernel_tuning_parameters`. It is the set the
    criterion ranks first (``fastest``) when that is set 0, when ``confirmation``
    confirmed it against set 0, or when set 0 is incomplete (nothing to confirm
    against); else set 0, the values in use.
    """

    key: KernelTuningKey
    parameters: tuple[str, ...]
    sets: tuple[Mapping[str, TuningValue], ...]
    corpus: Corpus
    results: tuple[CaseResult, ...]
    analysis: LatencyAnalysis
    repeat: int
    warmup: int
    timeout: float
    #: the fastest set against set 0 (None: nothing to confirm, or no complete baseline)
    confirmation: Confirmation | None = None
    #: the results of the confirming runs: the fastest set, set 0, set 0, the fastest
    confirming: tuple[CaseResult, ...] = ()

    @property
    def fastest(self) -> int | None:
        """The set the criterion ranks first."""
        return self.analysis.selected

    @property
    def selected(self) -> int | None:
        """The set advised: the fastest when confirmed (or set 0 itself), else set 0."""
        if self.confirmation is not None and not self.confirmation.confirmed:
            return BASELINE
        return self.fastest

    @property
    def selected_values(self) -> Mapping[str, TuningValue] | None:
        return None if self.selected is None else self.sets[self.selected]

    @property
    def failures(self) -> tuple[CaseResult, ...]:
        """Wrong outputs and worker errors: what a person must look at (timeouts are not)."""
        return tuple(r for r in self.results if r.status in (WRONG_OUTPUT, ERROR))

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key.to_dict(), "parameters": list(self.parameters),
                "sets": [{"set": index, "values": dict(values)}
                         for index, values in enumerate(self.sets)],
                "corpus": self.corpus.to_dict(),
                "measurement": {"repeat": self.repeat, "warmup": self.warmup,
                                "timeout_seconds": self.timeout},
                "results": [r.to_dict() for r in self.results],
                "analysis": self.analysis.to_dict(), "fastest": self.fastest,
                "confirmation": (None if self.confirmation is None
                                 else self.confirmation.to_dict()),
                "confirming": [r.to_dict() for r in self.confirming],
                "selected": self.selected,
                "selected_values": (None if self.selected_values is None
                                    else dict(self.selected_values))}

    def to_csv(self) -> str:
        """One line per set and case, the searched values as columns."""
        stream = io.StringIO()
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(["set", *self.parameters, "case", "status", "latency_seconds",
                         "message"])
        for r in self.results:
            values = self.sets[r.set_index]
            writer.writerow([r.set_index, *(values[name] for name in self.parameters), r.case,
                             r.status, "" if r.latency_seconds is None else r.latency_seconds,
                             r.message or ""])
        return stream.getvalue()

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the report as JSON (``.json``) or CSV (``.csv``), atomically."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix == ".json":
            text = json.dumps(self.to_dict(), indent=2) + "\n"
        elif suffix == ".csv":
            text = self.to_csv()
        else:
            raise ValueError(f"{path}: the report is written as .json or .csv, not "
                             f"{suffix or 'a file without a suffix'!r}")
        write_atomically(path, text)
        return path


# --- the parameter sets ---------------------------------------------------------------------


def parameter_sets(key: KernelTuningKey, active: Mapping[str, TuningValue],
                   parameters: Mapping[str, Sequence[object]]) -> list[dict[str, TuningValue]]:
    """The active values first, then the Cartesian product of ``parameters`` over them.

    A product set equal to the active values is measured once, as set 0. Every
    set is validated by the key's schema before anything runs; more than
    :data:`MAX_SETS` sets, or fewer than two, raise.
    """
    problems = []
    if not isinstance(parameters, Mapping) or not parameters:
        raise TuningValidationError(["give at least one parameter and its values"],
                                    context="corpus search")
    for name, values in parameters.items():
        if name not in active:
            problems.append(Problem(name, f"{key.kernel} {key.element_type_name} has no such "
                                          f"parameter; parameters: {', '.join(sorted(active))}"))
        elif isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            problems.append(Problem(name, f"expected a non-empty sequence of values, got "
                                          f"{values!r}"))
    if problems:
        raise TuningValidationError(problems, context="corpus search")
    count = math.prod(len(values) for values in parameters.values())
    if count > MAX_SETS:
        raise TuningValidationError([f"{count} parameter sets; at most {MAX_SETS} can be "
                                     f"searched"], context="corpus search")
    schema = default_registry.snapshot().schema(key)
    sets = [dict(active)]
    for index, combination in enumerate(itertools.product(*parameters.values()), start=1):
        try:
            values = schema.validate({**active, **dict(zip(parameters, combination,
                                                          strict=True))})
        except TuningValidationError as error:
            raise error.located(entry=f"parameter set {index}") from None
        if values not in sets:
            sets.append(values)
    if len(sets) > MAX_SETS:
        raise TuningValidationError([f"{len(sets)} parameter sets with the active values; at "
                                     f"most {MAX_SETS} can be searched"], context="corpus search")
    if len(sets) < 2:
        raise TuningValidationError(["every value given is the active one: nothing to compare"],
                                    context="corpus search")
    return sets


# --- the worker -----------------------------------------------------------------------------


def _compare(outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray], case: CorpusCase,
             data_set: int) -> str | None:
    if len(outputs) != len(expected):
        return f"data set {data_set}: {len(outputs)} outputs, expected {len(expected)}"
    for number, (output, reference) in enumerate(zip(outputs, expected, strict=True)):
        where = f"data set {data_set}, output {number}"
        if output.dtype != reference.dtype or output.shape != reference.shape:
            return (f"{where}: {output.dtype} {output.shape}, expected {reference.dtype} "
                    f"{reference.shape}")
        try:
            np.testing.assert_allclose(output, reference, rtol=case.rtol, atol=case.atol)
        except AssertionError as error:
            return f"{where}: {str(error).strip()[:500]}"
    return None


def _measure(case: CorpusCase, key: KernelTuningKey, threads: int | None, repeat: int,
             warmup: int
             ) -> tuple[str, float | None, dict | None, str | None, tuple[float, ...]]:
    """Check every data set's outputs, warm up, then time ``repeat`` runs of the first one."""
    from ..runtime.session import RuntimeSession

    session = RuntimeSession(case.model, threads=threads)
    resolved = next(entry["values"] for entry in session.tuning_diagnostics
                    if entry["key"] == key.to_dict())
    names = [signature.name for signature in session.get_inputs()]
    feeds = [dict(zip(names, inputs, strict=True)) for inputs, _ in case.data_sets]
    for number, (feed, (_, expected)) in enumerate(zip(feeds, case.data_sets, strict=True)):
        wrong = _compare(session.run(None, feed), expected, case, number)
        if wrong:
            return WRONG_OUTPUT, None, resolved, wrong, ()
    for _ in range(warmup):
        session.run(None, feeds[0])
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        session.run(None, feeds[0])
        times.append(time.perf_counter() - started)
    # a run faster than the clock's resolution still took some time
    times = [max(seconds, 1e-9) for seconds in times]
    return OK, statistics.median(times), resolved, None, tuple(times)


def _work(connection, cases: Sequence[CorpusCase], key: KernelTuningKey,
          threads: int | None, repeat: int, warmup: int) -> None:
    """A worker's life: say which cache it loaded, then send one result per case."""
    from .. import startup_report

    cache = startup_report().cache
    connection.send((None if cache is None else cache.path,
                     None if cache is None else cache.status))
    for case in cases:
        try:
            result = _measure(case, key, threads, repeat, warmup)
        except Exception as error:  # noqa: BLE001 - reported for this case; the next one runs
            result = (ERROR, None, None, f"{type(error).__name__}: {error}", ())
        connection.send(result)


_ENVIRONMENT = threading.Lock()


@contextlib.contextmanager
def _cache_variable(path: Path) -> Iterator[None]:
    """``KERNELTUNE_CACHE=path`` while a worker starts: a spawned child copies this
    process's environment, and reads its cache at import, before any code of ours runs."""
    with _ENVIRONMENT:
        before = os.environ.get(ENVIRONMENT_VARIABLE)
        os.environ[ENVIRONMENT_VARIABLE] = os.fspath(path)
        try:
            yield
        finally:
            if before is None:
                del os.environ[ENVIRONMENT_VARIABLE]
            else:
                os.environ[ENVIRONMENT_VARIABLE] = before


def _receive(connection, timeout: float) -> tuple[bool, object]:
    """(True, message), or (False, None) on a timeout, or (True, None) when the worker died."""
    if not connection.poll(timeout):
        return False, None
    try:
        return True, connection.recv()
    except EOFError:
        return True, None


def _run_worker(index: int, cases: Sequence[CorpusCase], cache: Path, key: KernelTuningKey,
                threads: int | None, repeat: int, warmup: int,
                timeout: float) -> Iterator[CaseResult]:
    """Results in case order until the cases end, one times out or the worker dies."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_work, args=(sender, cases, key, threads, repeat, warmup),
                              daemon=True, name=f"kerneltune-corpus-set-{index}")
    with _cache_variable(cache):
        process.start()
    sender.close()
    try:
        arrived, ready = _receive(receiver, STARTUP_TIMEOUT)
        if ready != (os.fspath(cache), "loaded"):
            if ready is not None:
                problem = f"the worker's cache was {ready!r}, not ({os.fspath(cache)!r}, loaded)"
            elif arrived:
                process.join(1)
                problem = f"the worker exited with code {process.exitcode} before its first case"
            else:
                problem = f"the worker did not start within {STARTUP_TIMEOUT:g} s"
            for case in cases:
                yield CaseResult(index, case.name, ERROR, message=problem)
            return
        for case in cases:
            arrived, result = _receive(receiver, timeout)
            if not arrived:
                yield CaseResult(index, case.name, TIMEOUT,
                                        message=f"no result within {timeout:g} s; worker killed")
                return
            if result is None:
                process.join(1)
                yield CaseResult(index, case.name, ERROR,
                                        message=f"the worker exited with code {process.exitcode}")
                return
            yield CaseResult(index, case.name, *result)
    finally:
        if process.is_alive():
            process.kill()
        process.join()
        receiver.close()


def _checked_result(result: CaseResult,
                    values: Mapping[str, TuningValue]) -> CaseResult:
    """A latency measured with other values than the set's is no latency of the set."""
    if result.status != OK or result.resolved == dict(values):
        return result
    return CaseResult(result.set_index, result.case, ERROR, None, result.resolved,
                             f"the session resolved {result.resolved}, not the set's {values}")


# --- the search -----------------------------------------------------------------------------


def _check_options(repeat: object, warmup: object, timeout: object, criterion: str) -> None:
    problems = [] if criterion in CRITERIA else [Problem("criterion", unknown_criterion(criterion))]
    if not is_count(repeat, minimum=1):
        problems.append(Problem("repeat", f"must be an int >= 1, got {repeat!r}"))
    if not is_count(warmup):
        problems.append(Problem("warmup", f"must be an int >= 0, got {warmup!r}"))
    if not is_positive_number(timeout):
        problems.append(Problem("timeout", f"must be a number of seconds above 0, got "
                                           f"{timeout!r}"))
    if problems:
        raise TuningValidationError(problems, context="corpus search")


def search_corpus_parameters(
    pattern: str,
    parameters: Mapping[str, Sequence[object]],
    kernel: str,
    element_type: object,
    *,
    cases_dirs: Sequence[str | os.PathLike[str]] = (),
    criterion: str = DEFAULT_CRITERION,
    repeat: int = DEFAULT_REPEAT,
    warmup: int = DEFAULT_WARMUP,
    timeout: float = DEFAULT_TIMEOUT,
    implementation: str | None = None,
    threads: int | None = None,
    progress: Callable[[CorpusProgress], None] | None = None,
    margin: float = DEFAULT_MARGIN,
) -> CorpusSearchReport:
    """Measure every parameter set on the cases ``pattern`` selects, and analyse the latencies.

    ``parameters`` maps parameter names of the ``kernel``/``element_type`` key
    to the values to try; set 0 holds the active values and is the speedup
    baseline. A case that times out, fails or gives wrong outputs has no
    latency, which makes its set incomplete and never selected. The fastest
    set is selected only when it beats set 0 by ``margin``, confirmed (see
    the module's description); otherwise set 0 is.

    Workers are started with ``spawn``, which imports the caller's main
    module again: a script calling this must do so under
    ``if __name__ == "__main__":``.
    """
    _check_options(repeat, warmup, timeout, criterion)
    if not is_positive_number(margin) or margin >= 1:
        raise TuningValidationError([Problem("margin", f"expected a fraction in (0, 1), got "
                                                       f"{margin!r}")], context="corpus search")
    execution = current_execution(threads)
    snapshot = default_registry.snapshot()
    key = one_key(snapshot.keys(), kernel, element_type, implementation, None, None)
    active = snapshot.resolve(key, execution).values
    sets = parameter_sets(key, active, parameters)
    corpus = collect_corpus_cases(pattern, key, cases_dirs)
    if not corpus.cases:
        reasons = "".join(f"\n  - {s.name}: {s.reason}" for s in corpus.skipped[:20])
        raise ValueError(f"no case matching {pattern!r} runs {key.kernel} "
                         f"{key.element_type_name} on kerneltune{reasons}")
    results: list[CaseResult] = []
    total = len(sets) * len(corpus.cases)

    def run(index: int, folder: str, report: bool = True) -> list[CaseResult]:
        """Every case with set ``index``, a worker again after one that timed out or died."""
        values, cache = sets[index], Path(folder) / f"set-{index}.yaml"
        if not cache.exists():
            set_kernel_tuning_parameters(key.kernel, key.element_type, values,
                                         key.implementation, key.tuning_abi, cache, load=False,
                                         library=key.library, execution=execution)
        ran, pending = [], list(corpus.cases)
        while pending:
            for result in _run_worker(index, pending, cache, key, execution.effective_threads,
                                      repeat, warmup, timeout):
                ran.append(_checked_result(result, values))
                pending.pop(0)
                if report and progress is not None:
                    progress(CorpusProgress(index, result.case, ran[-1].status,
                                            len(results) + len(ran), total,
                                            index + (not pending), len(sets)))
        return ran

    confirming: list[CaseResult] = []
    confirmation = None
    with tempfile.TemporaryDirectory(prefix="kerneltune-corpus-") as folder:
        for index in range(len(sets)):
            results += run(index, folder)
        analysis = analyze_kernel_tuning_latencies(
            (CaseLatency(r.set_index, r.case, r.latency_seconds) for r in results), criterion)
        fastest = analysis.selected
        if fastest not in (None, BASELINE) and analysis.baseline_complete:
            for index in (fastest, BASELINE, BASELINE, fastest):
                confirming += run(index, folder, False)
            confirmation = _confirmation(confirming, fastest, margin)
    return CorpusSearchReport(key, tuple(parameters), tuple(sets), corpus, tuple(results),
                               analysis, repeat, warmup, float(timeout), confirmation,
                               tuple(confirming))


def _confirmation(results: Sequence[CaseResult], fastest: int, margin: float) -> Confirmation:
    """Set ``fastest`` against set 0 on each case's samples, pooled over the runs of each
    (a case one of them has no sample of is left out)."""
    pooled: dict[tuple[int, str], list[float]] = {}
    for result in results:
        pooled.setdefault((result.set_index, result.case), []).extend(result.samples)
    cases = [case for index, case in pooled if index == BASELINE
             and pooled[BASELINE, case] and pooled.get((fastest, case))]
    return confirm([pooled[BASELINE, case] for case in cases],
                   [pooled[fastest, case] for case in cases], margin)
