"""The corpus parameter search: which values of one kernel's parameters run a corpus fastest.

Kernel calibration asks where a kernel's own workload crosses a threshold; this asks
which parameter set minimises latency over a corpus of ONNX cases a user chooses.
Owns the corpus (:mod:`.cases`), the measurement of each set in a worker process of
its own (:mod:`.search`) and the statistics that choose a set (:mod:`.analysis`).
The advice is never published. May import :mod:`kerneltune.runtime` and every layer
below it.
"""

from __future__ import annotations

from .analysis import CaseLatency, LatencyAnalysis, SetMetrics, analyze_kernel_tuning_latencies
from .cases import Corpus, CorpusCase, SkippedCase, collect_corpus_cases, read_case_folder
from .search import CaseResult, CorpusProgress, CorpusSearchReport, search_corpus_parameters

__all__ = [
    "CaseLatency",
    "CaseResult",
    "Corpus",
    "CorpusCase",
    "CorpusProgress",
    "CorpusSearchReport",
    "LatencyAnalysis",
    "SetMetrics",
    "SkippedCase",
    "analyze_kernel_tuning_latencies",
    "collect_corpus_cases",
    "read_case_folder",
    "search_corpus_parameters",
]
