"""docs/benchmarks.md, and README's headline table, from the files of benchmarks/results/.

The headline table replaces what stands between README's two marker lines
(``HEADLINE_MARKERS``), when README has them. ``--check`` writes nothing and
exits 1 when either is not what the results files generate.

    python benchmarks/report.py [--check]
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from results import FOLDER, FORMAT

ROOT = FOLDER.parent.parent
DOCS = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"
HEADLINE_MARKERS = ("<!-- results:headline -->", "<!-- /results:headline -->")


@dataclass(frozen=True)
class Figure:
    """One headline figure: a summary value of a benchmark, or a field of its row matching
    ``where``, from a run whose arguments include ``arguments``."""

    label: str
    benchmark: str
    field: str
    unit: str = "x"
    table: str | None = None
    where: tuple[tuple[str, Any], ...] = ()
    arguments: tuple[tuple[str, Any], ...] = ()


def elementwise(kernel: str, field: str, threads: str) -> Figure:
    return Figure(f"{kernel}, 1e6 FLOAT, {threads}: numpy / kerneltune",
                  "bench_kernels", field, table="elementwise",
                  where=(("kernel", kernel), ("elements", 1_000_000)))


#: README's headline, at most 12 rows
HEADLINE = (
    *(elementwise(kernel, field, threads) for kernel in ("Abs", "Add", "Tanh", "Sigmoid")
      for field, threads in (("serial_ratio", "serial"), ("parallel_ratio", "2 threads"))),
    Figure("Gemm, 1024 x 1024 x 1024 FLOAT, 2 threads: numpy / kerneltune", "bench_kernels",
           "parallel_ratio", table="gemm", where=(("m", 1024), ("k", 1024), ("n", 1024))),
    # each runtime in a process of its own since runs record the variant (older runs had
    # both in one process, onnxruntime not spinning)
    Figure("RuntimeSession, 2 threads, geometric mean over single-node models, each in its "
           "own process: onnxruntime / kerneltune", "bench_session", "geomean_ratio",
           arguments=(("all_variants", False),)),
    Figure("RuntimeSession's overhead over a bare kernel call", "bench_session", "overhead_us",
           unit="us"),
    Figure("Calibration of every key for 1 and 2 threads, normal effort", "bench_calibration",
           "total_seconds", unit="s", arguments=(("effort", "normal"),)),
)
UNITS = {"x": "{:.2f}x", "s": "{:.0f} s", "us": "{:.2f} µs"}
#: the worst of a target's cases, by the direction of its relation
WORST = {">": min, "<": max}
#: missed cases named per target; the results file has them all
MISSES_SHOWN = 6


@dataclass(frozen=True)
class View:
    """The fields of a benchmark's table shown in docs/benchmarks.md, of the rows whose
    fields take one of the values in ``where``."""

    table: str
    fields: tuple[str, ...]
    where: tuple[tuple[str, tuple[Any, ...]], ...] = ()


#: per benchmark, the tables docs/benchmarks.md shows beside its targets and summary figures
VIEWS = {
    "bench_cache": (View("sizes", ("entries", "load_ms", "inspect_ms", "update_ms",
                                   "json_parse_ratio", "yaml_parse_ratio")),),
    "bench_calibration": (
        View("cost", ("threads", "seconds", "calibrated", "skipped", "unsupported", "changed")),
        View("repeatability", ("threads", "keys", "identical", "share"))),
    "bench_kernel_tuning": (View("resolution", ("profiles", "snapshot_ns", "resolve_ns",
                                                "over_floor", "unlisted_ns")),),
    "bench_kernels": (
        View("elementwise", ("kernel", "elements", "serial_ratio", "parallel_ratio"),
             (("elements", (1_000_000, 16_000_000)),)),
        View("halves", ("kernel", "elements", "float16_us", "bfloat16_us", "ratio"),
             (("elements", (1_000_000,)),)),
        View("gemm", ("m", "k", "n", "serial_ratio", "parallel_ratio", "path")),
        View("narrow", ("m", "k", "n", "path", "default_us", "blocked_ratio", "numpy_ratio")),
        View("constant_b", ("m", "k", "n", "trans_b", "threads", "path", "bound_us",
                            "unbound_ratio", "numpy_ratio"))),
    "bench_merge": (
        View("merges", ("set", "agree", "confirmed", "beaten", "disagree", "counted_out",
                        "runs_out")),
        View("regret", ("set", "values", "regret_geomean", "regret_max", "gemm_gain")),
        View("repeatability", ("pair", "parameters", "identical", "share", "keys",
                               "keys_identical"))),
    "bench_models": (
        View("corpus", ("model", "source", "status", "max_abs_diff", "unsupported_ops",
                        "reason")),
        View("geomeans", ("batch", "threads", "ratio", "same_process_ratio", "worst",
                          "worst_ratio")),
        View("timings", ("model", "batch", "threads", "kerneltune_us", "onnxruntime_us",
                         "ratio", "same_process_ratio", "kerneltune_faults",
                         "onnxruntime_faults", "products", "parallel_nodes")),
        View("first_session", ("runtime", "median_ms", "python_ms", "import_ms", "session_ms",
                               "first_run_ms", "processes"))),
    "bench_busy": (View("cases", ("load", "case", "size", "threads", "onnxruntime_p50_us",
                                  "onnxruntime_p90_us", "kerneltune_p50_us", "kerneltune_p90_us",
                                  "ratio", "mean_ratio", "kerneltune_p90_over_p50",
                                  "quiet_cost", "contention_off_ratio",
                                  "contention_off_mean_ratio", "values")),
                   View("contention", ("load", "threads", "readings", "waited", "probes",
                                       "probes_waited", "probes_skipped", "fewer"))),
    "bench_cli": (View("commands", ("command", "ms", "over_import")),
                  View("libraries", ("command", "ms", "over_import"))),
    "bench_processes": (View("configurations", ("element_type", "threads", "rows", "build",
                                                "median", "off_state", "processes")),),
    "bench_session": (View("models", ("model", "size", "threads", "onnxruntime_us",
                                      "kerneltune_us", "ratio", "lowest_ratio",
                                      "highest_ratio", "same_process_ratio")),),
    "bench_tail": (View("latency", ("neighbour", "contention", "model", "size", "p50_us",
                                    "p90_us", "p99_us", "p90_over_p50", "p99_over_p50",
                                    "p50_ratio"),
                        (("threads", (2,)),)),
                   View("neighbours", ("neighbour", "contention", "worst_p90_over_p50",
                                       "worst_p99_over_p50", "within_targets",
                                       "p50_over_alone"))),
    "bench_wait_policy": (View("policies", ("setting", "neighbour", "model", "p50_us",
                                            "p90_us", "p99_us", "p50_ratio")),),
    "bench_profiles-fleet": (View("fleet", ("types", "entries", "file_mib", "bake_s",
                                            "validate_s", "import_ms", "import_none_ms",
                                            "import_overhead_ms", "resolve_ns")),),
    "bench_store": (
        View("lookup", ("profiles", "lookup_ns", "dict_ns", "over_dict", "rejected_us")),
        View("store", ("profiles", "store_ms", "write_ms", "over_write", "load_ms", "file_kib"))),
}


def load(folder: Path = FOLDER) -> list[dict[str, Any]]:
    """Every results file, by benchmark then machine."""
    runs = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise SystemExit(f"{path.name}: not a {FORMAT} file")
        runs.append(data)
    return sorted(runs, key=lambda run: (run["benchmark"], run["machine"]["slug"]))


def number(value: Any) -> str:
    """A cell: three significant digits or so, whole numbers from 100 up."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, float):
        return str(value)
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3g}"


def markdown_table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    def line(cells: Iterable[Any]) -> str:
        text = [number(cell).replace("|", r"\|") for cell in cells]
        return f"| {' | '.join(text)} |"

    header = list(header)
    return [line(header), f"|{'---|' * len(header)}", *(line(row) for row in rows)]


def machine_name(run: Mapping[str, Any]) -> str:
    machine = run["machine"]
    return (f"{machine['model_name'] or 'unnamed'}, {machine['logical_cpus_available']} "
            f"logical CPUs ({machine['slug']})")


def matches(row: Mapping[str, Any], where: Iterable[tuple[str, Any]]) -> bool:
    return all(row.get(name) == value for name, value in where)


def value_of(figure: Figure, run: Mapping[str, Any]) -> Any:
    """The figure's value in ``run``, or None when the run does not have it."""
    if not matches(run["arguments"], figure.arguments):
        return None
    if figure.table is None:
        return run["summary"].get(figure.field)
    rows = [row for row in run["tables"].get(figure.table, {}).get("rows", [])
            if matches(row, figure.where)]
    return rows[0].get(figure.field) if rows else None


def headline(runs: list[dict[str, Any]]) -> list[str]:
    """One row per headline figure, one column per machine."""
    runs_of = {(run["benchmark"], run["machine"]["slug"]): run for run in runs}
    machines = {run["machine"]["slug"]: machine_name(run) for run in runs
                if run["benchmark"] in {figure.benchmark for figure in HEADLINE}}
    rows = []
    for figure in HEADLINE:
        cells = []
        for slug in machines:
            run = runs_of.get((figure.benchmark, slug))
            value = value_of(figure, run) if run else None
            cells.append("not measured" if value is None else UNITS[figure.unit].format(value))
        rows.append([figure.label, *cells])
    return markdown_table(["figure", *machines.values()], rows)


def target_groups(targets: list[dict[str, Any]]) -> list[list[Any]]:
    """A row per target (name, relation and limit): cases met, the worst value, the misses."""
    groups: dict[tuple[str, str, Any], list[dict[str, Any]]] = {}
    for target in targets:
        groups.setdefault((target["name"], target["relation"], target["limit"]), []).append(target)
    rows = []
    for (name, relation, limit), cases in groups.items():
        values = [case["value"] for case in cases]
        worst = WORST[relation[0]](values) if relation[0] in WORST else ""
        missed = [f"{case['case']} ({number(case['value'])})" if case["case"]
                  else number(case["value"]) for case in cases if not case["met"]]
        if len(missed) > MISSES_SHOWN:
            missed[MISSES_SHOWN:] = [f"{len(missed) - MISSES_SHOWN} more"]
        rows.append([name, f"{relation} {number(limit)}",
                     f"{sum(case['met'] for case in cases)} of {len(cases)}",
                     worst, ", ".join(missed)])
    return rows


def provenance(run: Mapping[str, Any]) -> str:
    """Where a run's figures come from, in one paragraph."""
    software, source = run["software"], run["source"]
    commit = (source["commit"] or "unknown")[:10]
    blas = "; ".join(f"{pool['internal_api']} {pool['version']} ({pool['architecture']}, "
                     f"{pool['num_threads']} threads)"
                     for pool in software["thread_pools"] if pool["user_api"] == "blas")
    peers = ", ".join(f"{name} {version}" for name, version in software["peers"].items())
    environment = ", ".join(f"{name}={value}" for name, value in run["environment"].items())
    arguments = ", ".join(f"{name}={value}" for name, value in run["arguments"].items()
                          if value is not None)
    # results before kernel libraries were plugins name one implementation
    variant = software.get("implementation") or ", ".join(
        implementation for implementations in software.get("implementations", {}).values()
        for implementation in implementations)
    return (f"kerneltune {software['kerneltune']} ({variant or 'no'} variant), "
            f"commit `{commit}`{' with uncommitted changes' if source['dirty'] else ''}, "
            f"{run['date']}, {number(float(run['seconds']))} s; "
            f"{run['machine']['logical_cpus_available']} logical CPUs; "
            f"Python {software['python']}, {peers or 'no peers'}; BLAS: {blas or 'none'}; "
            f"environment: {environment or 'none set'}; arguments: {arguments or 'none'}.")


def section(run: Mapping[str, Any], script: str) -> list[str]:
    """A run's figures; a mode of the script (``bench_profiles-fleet``) says so in its title."""
    mode = run["benchmark"][len(script) + 1:]
    title = f"{mode} mode, {machine_name(run)}" if mode else machine_name(run)
    lines = [f"### {title}", "", provenance(run), ""]
    if run["targets"]:
        lines += [*markdown_table(("target", "limit", "met", "worst", "missed"),
                                  target_groups(run["targets"])), ""]
    if run["summary"]:
        lines += [*markdown_table(("figure", "value"), run["summary"].items()), ""]
    for view in VIEWS.get(run["benchmark"], VIEWS.get(script, ())):
        table = run["tables"].get(view.table)
        if table is None:
            continue
        rows = [["" if row.get(field) is None else row[field] for field in view.fields]
                for row in table["rows"]
                if all(row.get(name) in values for name, values in view.where)]
        lines += [f"`{view.table}`: {table['note']}.", "", *markdown_table(view.fields, rows), ""]
    return lines


def usage(script: Path) -> tuple[str, str]:
    """A benchmark's one-line description and its command line, from its docstring."""
    docstring = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or ""
    commands = [line.strip() for line in docstring.splitlines()
                if line.strip().startswith("python benchmarks/")]
    return docstring.splitlines()[0], commands[0] if commands else f"python {script.name}"


def document(runs: list[dict[str, Any]]) -> str:
    scripts = sorted(FOLDER.parent.glob("bench_*.py"))
    lines = [
        "<!-- Generated by `python benchmarks/report.py`: do not edit by hand. -->",
        "",
        "# Benchmarks",
        "",
        "Generated by `python benchmarks/report.py` from the files of `benchmarks/results/`;",
        "do not edit it by hand. To refresh it, rerun a benchmark with `--save` and then the",
        "script. Each benchmark takes `--json FILE` (write its figures to FILE) and `--save`",
        "(write them to `benchmarks/results/<benchmark>-<machine>.json`, replacing that",
        "machine's previous run; the history is git's). `<machine>` is the processor's",
        "vendor, microarchitecture, family and model, lower-cased, each run of characters",
        "other than a-z and 0-9 turned into a hyphen, `unknown` for what is not known.",
        "A ratio is the peer's time over kerneltune's in the same run (above 1: kerneltune",
        "is faster) unless its table says otherwise.",
        "",
        "A run on an ISA variant below the machine's own (`--variant`, `--all-variants`) is",
        "filed under the variant's name. Where the processor and Linux support CPUID",
        "faulting, its processes ran on the instructions of a processor of the variant's",
        "level, which its environment names (`KERNELTUNE_BENCH_INSTRUCTIONS`): the peers'",
        "kernels, and the BLAS beside kerneltune's, are that processor's",
        "(`benchmarks/instructions.py`); without it, on every instruction the machine has.",
        "",
        "## Running them",
        "",
        *markdown_table(("benchmark", "measures", "command"),
                        ([script.stem, *(f"`{part}`" if index else part for index, part
                                         in enumerate(usage(script)))] for script in scripts)),
        "",
        "## Headline",
        "",
        *headline(runs),
    ]
    for script in scripts:
        sections = [line for run in runs
                    if run["benchmark"].partition("-")[0] == script.stem
                    for line in section(run, script.stem)]
        lines += ["", f"## {script.stem}", "", usage(script)[0], ""]
        lines += sections or ["Not run yet on any machine.", ""]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).rstrip("\n") + "\n"


def with_headline(readme: str, runs: list[dict[str, Any]]) -> str:
    """README with the headline table between its markers (unchanged without them)."""
    start, end = HEADLINE_MARKERS
    table = "\n".join(headline(runs))
    pattern = re.compile(rf"^{re.escape(start)}$.*?^{re.escape(end)}$", re.DOTALL | re.MULTILINE)
    return pattern.sub(lambda _: f"{start}\n{table}\n{end}", readme, count=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a generated file is out of date, writing nothing")
    args = parser.parse_args(argv)
    runs = load()
    wanted = {DOCS: document(runs)}
    if README.exists():
        wanted[README] = with_headline(README.read_text(encoding="utf-8"), runs)
    stale = [path for path, text in wanted.items()
             if not path.exists() or path.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is not what benchmarks/results/ generates: "
                  f"run python benchmarks/report.py", file=sys.stderr)
        return 1 if stale else 0
    from kerneltune._support.files import write_atomically  # --check needs no kerneltune

    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, wanted[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
