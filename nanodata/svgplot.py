"""Bar charts as standalone SVG text: the build report's plots, with no plotting library.

One chart type serves every plot (a histogram is a bar chart whose labels are bin ranges).
Text is escaped, numbers are formatted by the caller, so the output is plain, deterministic SVG.
"""

from __future__ import annotations

import math
from html import escape

WIDTH, HEIGHT = 640, 340
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 90  # margins: room for y ticks, title and slanted x labels
BAR_COLOR = "#3b7dd8"


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
    if len(labels) != len(values):
        raise ValueError(f"{len(labels)} labels for {len(values)} values")
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    ticks = nice_ticks(max(values, default=0))
    top = ticks[-1]
    slot = plot_w / max(len(values), 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
           f'<title>{escape(title)}</title>',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>']
    for t in ticks:
        y = TOP + plot_h - plot_h * t / top
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(value_fmt(t))}</text>')
    for i, (label, v) in enumerate(zip(labels, values)):
        h = plot_h * v / top
        x = LEFT + i * slot + slot * 0.1
        out.append(f'<rect x="{x:.1f}" y="{TOP + plot_h - h:.1f}" width="{slot * 0.8:.1f}" height="{h:.1f}" '
                   f'fill="{BAR_COLOR}"><title>{escape(label)}: {escape(value_fmt(v))}</title></rect>')
        if len(values) <= 16:  # value labels only while they do not overlap
            out.append(f'<text x="{x + slot * 0.4:.1f}" y="{TOP + plot_h - h - 4:.1f}" '
                       f'text-anchor="middle">{escape(value_fmt(v))}</text>')
        cx, ly = LEFT + (i + 0.5) * slot, TOP + plot_h + 14
        out.append(f'<text x="{cx:.1f}" y="{ly}" text-anchor="end" '
                   f'transform="rotate(-35 {cx:.1f} {ly})">{escape(label)}</text>')
    out.append(f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="#333"/>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 8}" text-anchor="middle">{escape(xlabel)}</text>')
    out.append(f'<text x="16" y="{TOP + plot_h / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {TOP + plot_h / 2})">{escape(ylabel)}</text>')
    out.append("</svg>\n")
    return "\n".join(out)
