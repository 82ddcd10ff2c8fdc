"""Bar charts as standalone SVG text: the build report's plots, with no plotting library.

One chart type serves every plot: bars per label, one or more series side by side (a histogram is a
bar chart whose labels are bin ranges).
Text is escaped, numbers are formatted by the caller, so the output is plain, deterministic SVG.
"""

from __future__ import annotations

import math
from html import escape

WIDTH, HEIGHT = 640, 340
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 90  # margins: room for y ticks, title and slanted x labels
COLORS = ("#3b7dd8", "#e8833a", "#59a14f", "#b07aa1")  # one per series, in order


def nice_ticks(vmax: float, n: int = 5) -> list[float]:
    """Round tick values 0..>=vmax (steps of 1, 2 or 5 times a power of ten)."""
    if vmax <= 0:
        return [0.0, 1.0]
    raw = vmax / n
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [i * step for i in range(int(math.ceil(vmax / step - 1e-9)) + 1)]


def _num(v: float) -> str:
    return f"{v:.6g}"


def bar_chart(title: str, labels: list[str], values: list[float], *, xlabel: str, ylabel: str,
              value_fmt=_num) -> str:
    """An SVG bar chart; `value_fmt` formats the value printed above each bar and the y ticks."""
    return grouped_bar_chart(title, labels, {"": values}, xlabel=xlabel, ylabel=ylabel, value_fmt=value_fmt)


def grouped_bar_chart(title: str, labels: list[str], series: dict[str, list[float]], *, xlabel: str, ylabel: str,
                      value_fmt=_num) -> str:
    """Bars of several series side by side per label, one colour per series with a legend (none for one
    unnamed series). `value_fmt` formats the values printed above the bars and the y ticks."""
    for name, values in series.items():
        if len(labels) != len(values):
            raise ValueError(f"{len(labels)} labels for {len(values)} values of series {name!r}")
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    ticks = nice_ticks(max((v for values in series.values() for v in values), default=0))
    top = ticks[-1]
    slot = plot_w / max(len(labels), 1)
    bar_w = slot * 0.8 / max(len(series), 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
           f'<title>{escape(title)}</title>',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>']
    for t in ticks:
        y = TOP + plot_h - plot_h * t / top
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(value_fmt(t))}</text>')
    show_values = len(labels) * len(series) <= 16  # value labels only while they do not overlap
    for s, (name, values) in enumerate(series.items()):
        color = COLORS[s % len(COLORS)]
        for i, (label, v) in enumerate(zip(labels, values, strict=False)):
            h = plot_h * v / top
            x = LEFT + i * slot + slot * 0.1 + s * bar_w
            what = f"{label}, {name}" if name else label
            out.append(f'<rect x="{x:.1f}" y="{TOP + plot_h - h:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                       f'fill="{color}"><title>{escape(what)}: {escape(value_fmt(v))}</title></rect>')
            if show_values:
                out.append(f'<text x="{x + bar_w / 2:.1f}" y="{TOP + plot_h - h - 4:.1f}" '
                           f'text-anchor="middle">{escape(value_fmt(v))}</text>')
    for i, label in enumerate(labels):
        cx, ly = LEFT + (i + 0.5) * slot, TOP + plot_h + 14
        out.append(f'<text x="{cx:.1f}" y="{ly}" text-anchor="end" '
                   f'transform="rotate(-35 {cx:.1f} {ly})">{escape(label)}</text>')
    if any(series):  # a legend, top right, for named series
        for s, name in enumerate(series):
            y = TOP + 4 + 14 * s
            out.append(f'<rect x="{WIDTH - RIGHT - 110}" y="{y}" width="10" height="10" '
                       f'fill="{COLORS[s % len(COLORS)]}"/>')
            out.append(f'<text x="{WIDTH - RIGHT - 96}" y="{y + 9}">{escape(name)}</text>')
    out.append(f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="#333"/>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 8}" text-anchor="middle">{escape(xlabel)}</text>')
    out.append(f'<text x="16" y="{TOP + plot_h / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {TOP + plot_h / 2})">{escape(ylabel)}</text>')
    out.append("</svg>\n")
    return "\n".join(out)
