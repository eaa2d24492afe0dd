"""Fitting text into a figure: the grid of panels with its title, wrapped text, legend columns, room below.

Widths are measured with the Agg renderer (the one that writes the PNGs), not guessed from character counts,
so a title, a note or a legend never runs past the figure's edge, whatever the panel count and labels; and a
figure grows (wider, then taller) rather than squeezing its panels when the text under them is long.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.legend import Legend

DPI = 100
PANEL = (4.4, 3.4)  # inches per panel, before the title and the legend
MARGIN = 0.03  # fraction of the figure's width kept clear on each side
ROOM_BELOW = 0.9  # inches grid() leaves under the panels for a legend or a note; more text grows the figure
MAX_ROWS = 6  # a legend longer than this widens a narrow figure (up to MAX_WIDTH) to get more columns
MAX_WIDTH = 12.0
TITLE_SIZE = 13


@functools.cache
def renderer(dpi: float = DPI) -> RendererAgg:
    return RendererAgg(1, 1, dpi)


def text_width(text: str, size: float, weight: str = "normal", dpi: float = DPI) -> float:
    """Pixels one line of text takes (a '\\$' escaped for mathtext is drawn as '$')."""
    prop = FontProperties(size=size, weight=weight)
    return renderer(dpi).get_text_width_height_descent(text.replace("\\$", "$"), prop, ismath=False)[0]


def usable_width(fig: Figure) -> float:
    """Pixels between the figure's side margins."""
    return fig.get_figwidth() * fig.dpi * (1 - 2 * MARGIN)


def wrap(text: str, fig: Figure | float, size: float, weight: str = "normal") -> str:
    """`text` broken into lines no wider than the figure's usable width (or `fig` pixels): at spaces, and inside
    a word only when the word alone is wider than a line."""
    width = usable_width(fig) if isinstance(fig, Figure) else float(fig)
    dpi = fig.dpi if isinstance(fig, Figure) else DPI

    def fits(line: str) -> bool:
        return text_width(line, size, weight, dpi) <= width

    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            candidate = f"{line} {word}" if line else word
            if fits(candidate) or not line:
                line = candidate
            else:
                lines.append(line)
                line = word
            while not fits(line) and len(line) > 1:  # one word wider than the line: cut it where it fits
                cut = next(i for i in range(len(line) - 1, 0, -1) if fits(line[:i]) or i == 1)
                lines.append(line[:cut])
                line = line[cut:]
        lines.append(line)
    return "\n".join(lines)


def grid(nrows: int, ncols: int, title: str, sharey: bool | str = False,
         panel: tuple[float, float] = PANEL) -> tuple[Figure, np.ndarray]:
    """A figure of nrows x ncols panels with a bold title wrapped to its width (the figure taller by its lines)."""
    fig = Figure(figsize=(panel[0] * ncols + 0.6, panel[1] * nrows + 1.4), layout="constrained", dpi=DPI)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey)
    title = wrap(title, fig, TITLE_SIZE, "bold")
    fig.suptitle(title, fontsize=TITLE_SIZE, fontweight="bold")
    fig.set_figheight(fig.get_figheight() + title.count("\n") * TITLE_SIZE * 1.2 / 72)
    return fig, axes


def make_room(fig: Figure, below: Artist) -> None:
    """Grow the figure by whatever `below` (a legend or a note under the panels) needs beyond ROOM_BELOW, so the
    constrained layout keeps the panels' size instead of squeezing them."""
    extra = below.get_window_extent(renderer(fig.dpi)).height / fig.dpi - ROOM_BELOW
    if extra > 0:
        fig.set_figheight(fig.get_figheight() + extra)


def fit_legend(make: Callable[..., Legend], handles: list, fig: Figure, width: float | None = None,
               title: str | None = None, grow: bool = False) -> Legend:
    """The legend `make(ncols=..., labels=..., title=...)` builds, with the most columns that fit `width` pixels
    (default: the figure's usable width), rows balanced (6 entries in two rows are 3 + 3, not 5 + 1), and the
    title and any label wider than the width wrapped onto several lines.

    With `grow`, a legend under the whole figure: more than MAX_ROWS rows widen the figure (up to MAX_WIDTH)
    until MAX_ROWS rows fit, and the figure grows taller by what the legend needs beyond ROOM_BELOW."""
    legend, ncols = _fit(make, handles, fig, width, title)
    wanted = math.ceil(len(handles) / MAX_ROWS)
    if grow and ncols < wanted and fig.get_figwidth() < MAX_WIDTH:
        legend.remove()
        trial = make(ncols=wanted, labels=[str(h.get_label()) for h in handles], title=None)
        need = trial.get_window_extent(renderer(fig.dpi)).width / fig.dpi / (1 - 2 * MARGIN) + 0.05
        trial.remove()
        fig.set_figwidth(min(MAX_WIDTH, max(fig.get_figwidth(), need)))
        legend, ncols = _fit(make, handles, fig, None, title)
    if grow:
        make_room(fig, legend)
    return legend


def _fit(make: Callable[..., Legend], handles: list, fig: Figure, width: float | None,
         title: str | None) -> tuple[Legend, int]:
    width = usable_width(fig) if width is None else width
    labels = [str(h.get_label()) for h in handles]
    probe = make(ncols=1, labels=labels or None, title=title)
    size = (probe.get_texts() or [probe.get_title()])[0].get_fontsize()
    em = size * fig.dpi / 72  # the legend's paddings are in font sizes
    pad = 2 * probe.borderpad * em + 2  # around everything, plus a pixel of rounding on each side
    chrome = probe.handlelength * em + probe.handletextpad * em + pad  # beside a label's text
    title_size = probe.get_title().get_fontsize()
    probe.remove()
    if title:
        title = wrap(title, width - pad, title_size)
    labels = [wrap(t, max(width - chrome, em), size) for t in labels]
    if not labels:  # a legend with just its title
        return make(ncols=1, labels=None, title=title), 1

    def fits(ncols: int) -> bool:
        legend = make(ncols=ncols, labels=labels, title=title)
        fit = legend.get_window_extent(renderer(fig.dpi)).width <= width
        legend.remove()
        return fit

    ncols = next((k for k in range(len(labels), 1, -1) if fits(k)), 1)
    balanced = math.ceil(len(labels) / math.ceil(len(labels) / ncols))
    ncols = balanced if balanced == ncols or fits(balanced) else ncols
    return make(ncols=ncols, labels=labels, title=title), ncols
