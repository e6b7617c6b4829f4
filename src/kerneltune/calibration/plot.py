"""Crossover plots of a calibration report, so a person sees why a value was chosen.

One panel per measured decision (:mod:`.calibration.curves`): time per call against
size (in the unit the report gives each case) for each path or thread count, the
selected threshold (also named above the panel), the value in use before it and the
crossovers measured as vertical lines; comparisons of settings as times
relative to the value in use. matplotlib is an optional extra (``kerneltune[plot]``),
imported only here and only when a plot is drawn, with its Agg backend: no display is
needed and no process-wide backend is switched.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import KernelTuningError
from .curves import (
    COMPARISON,
    UNMEASURED,
    DecisionCurves,
    KeyCurves,
    ReportCurves,
    Series,
)
from .report import MEASURED, PREVIOUS, SELECTED

#: panels drawn at most; ``kerneltune report --key/--parameter`` choose among more
MAXIMUM_PANELS = 12
_MARK_STYLES = {SELECTED: ("black", "-"), PREVIOUS: ("grey", "--"), MEASURED: ("tab:red", ":")}
#: measured crossovers of a decision's cases, told apart
_MEASURED_COLOURS = ("tab:red", "tab:purple", "tab:brown", "tab:pink")
_CASE_MARKERS = ("o", "s", "^", "D", "v", "P")
_CASE_LINES = ("-", "--", ":", "-.")
#: how far the size axis reaches beyond the sizes measured, as a factor
_AXIS_MARGIN = 1.15


class PlottingUnavailableError(KernelTuningError):
    """matplotlib, which plots need, is not installed."""


@dataclass(frozen=True)
class Plot:
    """What was drawn: the file, the panels in it and the measured decisions left out."""

    path: Path
    panels: tuple[tuple[KeyCurves, DecisionCurves], ...]
    left_out: int


def _matplotlib() -> tuple[Any, Any]:
    """matplotlib's Figure class and its ticker module, or why plots cannot be drawn."""
    try:
        from matplotlib import ticker
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise PlottingUnavailableError(
            f"plotting needs matplotlib, which is not installed ({error}); install the "
            f"extra with: pip install 'kerneltune[plot]'") from None

    def figure(width: float, height: float) -> Any:
        made = Figure(figsize=(width, height), dpi=100, layout="constrained")
        FigureCanvasAgg(made)
        return made
    return figure, ticker


def _size_text(size: float) -> str:
    """1024 as 1K, 1048576 as 1M: grid sizes are powers of two or near them."""
    for factor, suffix in ((1 << 20, "M"), (1 << 10, "K")):
        if size >= factor and size % factor == 0:
            return f"{int(size) // factor}{suffix}"
    return f"{size:g}"


def _microseconds(seconds: float) -> str:
    """5000, not 5e+03; 2.5 and 0.05 as they are."""
    micro = seconds * 1e6
    return f"{micro:.0f}" if micro >= 100 else f"{micro:.3g}"


def _medians(series: Series, relative: bool) -> tuple[list[int], list[float]]:
    """Sizes and the mean of each size's medians (a size measured again has several)."""
    by_size: dict[int, list[float]] = {}
    for point in series.points:
        by_size.setdefault(point.size, []).append(point.relative if relative else point.seconds)
    return list(by_size), [sum(values) / len(values) for values in by_size.values()]


def _title(entry: KeyCurves, decision: DecisionCurves) -> str:
    key = entry.key
    head = (f"{key.kernel} {key.element_type_name} ({key.implementation}), "
            f"{entry.threads_text}: {decision.parameter}")
    change = (f"{decision.baseline} -> {decision.value}" if decision.changed
              else f"{decision.value} kept")
    status = "" if entry.status == "calibrated" else f" [{entry.status}, not published]"
    return f"{head}\n{change}{status}"


def _draw_series(axes: Any, decision: DecisionCurves, relative: bool) -> None:
    colours = {label: f"C{index % 10}" for index, label in enumerate(decision.labels)}
    cases = decision.cases
    for series in decision.series:
        sizes, values = _medians(series, relative)
        chosen = series.label == decision.selected_label
        name = series.label + (f" ({series.case})" if len(cases) > 1 else "")
        name += " (selected)" if chosen else ""
        case = cases.index(series.case)
        axes.plot(sizes, values, marker=_CASE_MARKERS[case % len(_CASE_MARKERS)],
                  linestyle=_CASE_LINES[case % len(_CASE_LINES)], color=colours[series.label],
                  linewidth=2.6 if chosen else 1.4, markersize=5, label=name)
        if not relative:  # each measurement's quartiles, repeats included
            axes.errorbar([p.size for p in series.points], [p.seconds for p in series.points],
                          yerr=[[p.seconds - p.q1 for p in series.points],
                                [p.q3 - p.seconds for p in series.points]],
                          fmt="none", ecolor=colours[series.label], elinewidth=1, capsize=2)


def _draw_marks(axes: Any, decision: DecisionCurves) -> None:
    """A vertical line per mark; one beyond the sizes measured (a value in use that
    switches far off the grid) is named in the legend, off the axis, not stretching it."""
    sizes = [point.size for series in decision.series for point in series.points]
    low, high = min(sizes) / _AXIS_MARGIN, max(sizes) * _AXIS_MARGIN
    measured = 0
    for mark in decision.marks:
        colour, style = _MARK_STYLES[mark.role]
        if mark.role == MEASURED:
            colour = _MEASURED_COLOURS[measured % len(_MEASURED_COLOURS)]
            measured += 1
            label = f"{mark.label}: {_size_text(mark.size)}"
        else:
            label = f"{mark.label}: switches at {_size_text(mark.size)}"
        if not low <= mark.size <= high:
            label += " (beyond the sizes measured)"
        axes.axvline(mark.size, color=colour, linestyle=style,
                     linewidth=1.8 if mark.role == SELECTED else 1.2, label=label)
    axes.set_xlim(low, high)


def _name_selected(axes: Any, ticker: Any, decision: DecisionCurves) -> None:
    """The selected value named above its line, on a top axis: what a reader looks for first,
    where no curve runs through the text."""
    low, high = axes.get_xlim()
    marks = [m for m in decision.marks if m.role == SELECTED and low <= m.size <= high]
    if not marks:
        return
    top = axes.secondary_xaxis("top")
    top.set_xticks([m.size for m in marks], [m.label for m in marks], fontsize=7.5)
    top.xaxis.set_minor_locator(ticker.NullLocator())


def _categorical(decision: DecisionCurves) -> bool:
    """Each case measured at one size (a tile comparison): cases side by side, not a curve."""
    return all(len({p.size for p in series.points}) == 1 for series in decision.series)


def _draw_categories(axes: Any, decision: DecisionCurves) -> None:
    """Bars from 1.0, the value in use, up when a setting is slower and down when faster."""
    cases = decision.cases
    labels = decision.labels
    width = 0.8 / len(labels)
    for index, label in enumerate(labels):
        ratios = {series.case: _medians(series, True)[1][0] for series in decision.series
                  if series.label == label}
        positions = [cases.index(case) + (index - (len(labels) - 1) / 2) * width
                     for case in ratios]
        chosen = label == decision.selected_label
        axes.bar(positions, [ratio - 1.0 for ratio in ratios.values()], width, bottom=1.0,
                 color=f"C{index % 10}", edgecolor="black" if chosen else "none",
                 linewidth=1.5, label=label + (" (selected)" if chosen else ""))
    sizes = {series.case: series.points[0].size for series in decision.series}
    axes.set_xticks(range(len(cases)), [f"{case}\nat {sizes[case]}" for case in cases])


def _panel(axes: Any, ticker: Any, entry: KeyCurves, decision: DecisionCurves) -> None:
    relative = decision.kind == COMPARISON
    if relative and _categorical(decision):
        _draw_categories(axes, decision)
    else:
        _draw_series(axes, decision, relative)
        _draw_marks(axes, decision)
        axes.set_xscale("log", base=2)
        axes.xaxis.set_major_formatter(lambda size, _: _size_text(size))
        units = list(dict.fromkeys(decision.unit(case) for case in decision.cases))
        axes.set_xlabel("; ".join(units) + " (log scale, K = 1024)")
        _name_selected(axes, ticker, decision)
    if relative:
        axes.axhline(1.0, color="grey", linewidth=0.8, label="the value in use")
        axes.set_ylabel(f"time relative to the value in use\n({decision.reference}; lower "
                        f"is faster)")
    else:
        axes.set_yscale("log")  # 1, 2 and 5 of each decade: a panel spans less than one
        axes.yaxis.set_major_locator(ticker.LogLocator(10, subs=(1.0, 2.0, 5.0)))
        axes.yaxis.set_major_formatter(lambda seconds, _: _microseconds(seconds))
        axes.yaxis.set_minor_formatter(ticker.NullFormatter())
        axes.set_ylabel("median time per call (µs, log scale)\nerror bars: quartiles")
    axes.set_title(_title(entry, decision), fontsize=10)
    axes.grid(True, which="major", alpha=0.3)
    axes.legend(fontsize=7.5, loc="best")
    why = decision.reason
    if decision.changed and decision.confirmation is not None:
        why += f"; confirmed: {decision.confirmation.describe()}"
    if entry.interference is not None:
        why += f". Interference: {entry.interference.describe()}"
    reason = textwrap.fill(f"why: {why}", 110)
    axes.annotate(reason, (0, 0), xycoords="axes fraction", xytext=(0, -44),
                  textcoords="offset points", va="top", fontsize=7.5, annotation_clip=False)


def measured_decisions(curves: ReportCurves) -> list[tuple[KeyCurves, DecisionCurves]]:
    """Every decision of ``curves`` that has measurements of its own, in report order."""
    return [(entry, decision) for entry in curves.keys for decision in entry.decisions
            if decision.kind != UNMEASURED]


def plot_report(curves: ReportCurves, output: str | Path,
                panels: Sequence[tuple[KeyCurves, DecisionCurves]] | None = None) -> Plot:
    """Draw one panel per measured decision of ``curves`` (at most :data:`MAXIMUM_PANELS`)
    into the PNG file ``output``."""
    measured = list(panels if panels is not None else measured_decisions(curves))
    if not measured:
        raise ValueError(f"{curves.path}: no decision measured anything to plot")
    drawn = measured[:MAXIMUM_PANELS]
    columns = 1 if len(drawn) == 1 else 2
    rows = math.ceil(len(drawn) / columns)
    make_figure, ticker = _matplotlib()
    figure = make_figure(8.5 * columns, 6.0 * rows)
    for index, (entry, decision) in enumerate(drawn):
        _panel(figure.add_subplot(rows, columns, index + 1), ticker, entry, decision)
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)  # as every file a command writes
    figure.savefig(path, format="png")
    return Plot(path, tuple(drawn), len(measured) - len(drawn))
