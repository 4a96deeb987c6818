"""The HTML report's three figures as inline SVG, drawn from numpy arrays: the S-curve of the bands, the histogram
of the candidates' exact Jaccard and the group sizes.

They are simple charts (a curve, points, bars, two axes), so they are written here rather than by a plotting
library: matplotlib took 0.3-0.5 CPU s to import and draw them, more than the 10% of a run's time the report may
cost (issue 21, bench/report.py). Every number is printed with fixed precision, so the same data give the same
bytes. Colours, hatching, captions and a <title> per bar (its range and count, read by screen readers and shown on
hover) keep the figures readable without colour.
"""
from __future__ import annotations

import math
from html import escape

import numpy as np

from ..kernels import lsh

WIDTH, HEIGHT = 259.2, 180.0  # 3.6 x 2.5 inches at 72 per inch: three side by side in 1280 pixels
LEFT, RIGHT, TOP, BOTTOM = 44.0, 251.0, 7.0, 148.0  # the plot area
INK, BLUE, ORANGE, GREY = "#333", "#1f4e8c", "#b35900", "#bbbbbb"


def _num(x: float) -> str:
    """A coordinate: two decimals, no trailing zeros (stable text for equal data)."""
    return f"{x:.2f}".rstrip("0").rstrip(".") or "0"


def nice_ticks(top: float) -> list[float]:
    """0 to at least top in 3-6 steps of 1, 2 or 5 times a power of ten (whole numbers: counts)."""
    top = max(float(top), 1.0)
    raw = top / 5
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    step = max(step, 1.0)
    return [i * step for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


class Chart:
    """One figure: its plot area maps x in [x0, x1] and y in [y0, y1]; parts are SVG element strings."""

    def __init__(self, name: str, x: tuple[float, float], y: tuple[float, float]):
        self.name, (self.x0, self.x1), (self.y0, self.y1) = name, x, y
        self.parts: list[str] = []

    def px(self, x) -> np.ndarray:
        return LEFT + (np.asarray(x, dtype=float) - self.x0) / (self.x1 - self.x0) * (RIGHT - LEFT)

    def py(self, y) -> np.ndarray:
        return BOTTOM - (np.asarray(y, dtype=float) - self.y0) / (self.y1 - self.y0) * (BOTTOM - TOP)

    def text(self, x: float, y: float, s: str, anchor: str = "middle", size: int = 8, extra: str = "") -> None:
        self.parts.append(f'<text x="{_num(x)}" y="{_num(y)}" font-size="{size}" text-anchor="{anchor}" '
                          f'fill="#1a1a1a"{extra}>{escape(s)}</text>')

    def axes(self, xlabel: str, ylabel: str, xticks: list[tuple[float, str]], yticks: list[tuple[float, str]]) -> None:
        """The left and bottom axes with their ticks and labels (no box: the top and right sides stay open)."""
        p = self.parts
        p.append(f'<path d="M{_num(LEFT)} {_num(TOP)}V{_num(BOTTOM)}H{_num(RIGHT)}" fill="none" stroke="{INK}" '
                 f'stroke-width="0.8"/>')
        for x, label in xticks:
            px = float(self.px(x))
            p.append(f'<path d="M{_num(px)} {_num(BOTTOM)}v3.5" stroke="{INK}" stroke-width="0.8"/>')
            self.text(px, BOTTOM + 12, label)
        for y, label in yticks:
            py = float(self.py(y))
            p.append(f'<path d="M{_num(LEFT)} {_num(py)}h-3.5" stroke="{INK}" stroke-width="0.8"/>')
            self.text(LEFT - 5, py + 3, label, "end")
        self.text((LEFT + RIGHT) / 2, HEIGHT - 9, xlabel)
        self.text(11, (TOP + BOTTOM) / 2, ylabel, extra=f' transform="rotate(-90 11 {_num((TOP + BOTTOM) / 2)})"')

    def vline(self, x: float) -> None:
        px = _num(float(self.px(x)))
        self.parts.append(f'<path d="M{px} {_num(TOP)}V{_num(BOTTOM)}" stroke="#444" stroke-width="1" '
                          f'stroke-dasharray="4 2"/>')

    def legend(self, entries: list[tuple[str, str]]) -> None:
        """Top left: each entry a swatch (an SVG element drawn at 0,0, 12 wide) and its label."""
        for i, (swatch, label) in enumerate(entries):
            y = TOP + 8 + 10 * i
            self.parts.append(f'<g transform="translate({_num(LEFT + 6)} {_num(y)})">{swatch}</g>')
            self.text(LEFT + 22, y + 2.5, label, "start", 7)

    def svg(self) -> str:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-labelledby="fig-{self.name}" '
                f'width="{_num(WIDTH)}pt" height="{_num(HEIGHT)}pt" viewBox="0 0 {_num(WIDTH)} {_num(HEIGHT)}" '
                f'font-family="system-ui, sans-serif">' + "".join(self.parts) + "</svg>")


def _unit_ticks() -> list[tuple[float, str]]:
    return [(t / 5, f"{t / 5:.1f}") for t in range(6)]


def _count_ticks(top: float) -> tuple[list[tuple[float, str]], float]:
    ticks = nice_ticks(top)
    return [(t, f"{int(t):,}") for t in ticks], ticks[-1]


def scurve(bands: int, rows: int, threshold: float | None, verified: np.ndarray) -> str:
    """P(s) = 1 - (1 - s^r)^b (lsh.s_curve) over [0, 1], the threshold, and the verified entries' Jaccard on the
    curve (rounded to 3 decimals and deduplicated: at most 1001 points however many pairs)."""
    c = Chart("scurve", (0, 1), (0, 1.02))
    c.axes("Jaccard similarity s", "probability of being a candidate", _unit_ticks(), _unit_ticks())
    s = np.linspace(0, 1, 201)
    xs, ys = c.px(s), c.py(lsh.s_curve(s, bands, rows))
    c.parts.append(f'<polyline fill="none" stroke="{BLUE}" stroke-width="1.5" points="'
                   + " ".join(f"{_num(x)},{_num(y)}" for x, y in zip(xs.tolist(), ys.tolist())) + '"/>')
    legend = [(f'<path d="M0 0h12" stroke="{BLUE}" stroke-width="1.5"/>', f"P(candidate) = 1 - (1 - s^{rows})^{bands}")]
    if threshold is not None:
        c.vline(threshold)
        legend.append(('<path d="M0 0h12" stroke="#444" stroke-dasharray="4 2"/>', f"threshold {threshold}"))
    if len(verified):
        x = np.unique(np.round(np.asarray(verified, dtype=float), 3))
        px, py = c.px(x).tolist(), c.py(lsh.s_curve(x, bands, rows)).tolist()
        c.parts.append(f'<g fill="{ORANGE}">' + "".join(f'<circle cx="{_num(a)}" cy="{_num(b)}" r="2"/>'
                                                         for a, b in zip(px, py)) + "</g>")
        legend.append((f'<circle cx="6" cy="0" r="2" fill="{ORANGE}"/>', "verified pairs"))
    c.legend(legend)
    return c.svg()


def histogram(edges: np.ndarray, rejected: np.ndarray, verified: np.ndarray, threshold: float | None,
              labels: tuple[str, str]) -> str:
    """Stacked bars of the pairs per bin: rejected (grey, hatched) below, verified (blue) on top. rejected and
    verified are the weighted counts per bin (np.histogram)."""
    c = Chart("jaccard", (0, 1), (0, 1))
    yticks, c.y1 = _count_ticks(float(np.max(rejected + verified, initial=0)))
    c.axes("exact Jaccard of candidate pairs", "pairs", _unit_ticks(), yticks)
    hatch = f"hatch-{c.name}"
    c.parts.append(f'<defs><pattern id="{hatch}" width="4" height="4" patternUnits="userSpaceOnUse" '
                   f'patternTransform="rotate(45)"><rect width="4" height="4" fill="{GREY}"/>'
                   f'<path d="M0 0V4" stroke="{INK}" stroke-width="0.8"/></pattern></defs>')
    fills = {"rejected": f"url(#{hatch})", "verified": BLUE}
    bars = []
    for i, (lo, hi) in enumerate(zip(edges[:-1].tolist(), edges[1:].tolist())):
        x0, x1 = float(c.px(lo)), float(c.px(hi))
        base = 0.0
        for kind, counts in (("rejected", rejected), ("verified", verified)):
            n = float(counts[i])
            if n <= 0:
                continue
            y0, y1 = float(c.py(base)), float(c.py(base + n))
            bars.append(f'<rect class="{kind}" x="{_num(x0)}" y="{_num(y1)}" width="{_num(x1 - x0)}" '
                        f'height="{_num(y0 - y1)}" fill="{fills[kind]}"><title>{lo:.2f}-{hi:.2f}: {n:,.0f} {kind}'
                        f'</title></rect>')
            base += n
    c.parts.append(f'<g stroke="{INK}" stroke-width="0.4">' + "".join(bars) + "</g>")
    if threshold is not None:
        c.vline(threshold)
    c.legend([(f'<rect y="-3.5" width="12" height="7" fill="url(#{hatch})" stroke="{INK}" stroke-width="0.4"/>',
               labels[0]),
              (f'<rect y="-3.5" width="12" height="7" fill="{BLUE}" stroke="{INK}" stroke-width="0.4"/>', labels[1])])
    return c.svg()


def bars(labels: list[str], counts: list[int]) -> str:
    """One bar per category with its count above it (the group sizes)."""
    c = Chart("sizes", (-0.5, len(labels) - 0.5), (0, 1))
    yticks, c.y1 = _count_ticks(max(counts, default=0) * 1.08)  # room for the count above the highest bar
    c.axes("documents in the group", "groups", list(enumerate(labels)), yticks)
    parts = []
    for i, (label, n) in enumerate(zip(labels, counts)):
        x0, x1 = float(c.px(i - 0.35)), float(c.px(i + 0.35))
        y = float(c.py(n))
        parts.append(f'<rect x="{_num(x0)}" y="{_num(y)}" width="{_num(x1 - x0)}" height="{_num(BOTTOM - y)}">'
                     f'<title>{escape(label)} documents: {n:,} groups</title></rect>')
        c.text((x0 + x1) / 2, y - 3, f"{n:,}", size=7)
    c.parts.append(f'<g fill="{BLUE}">' + "".join(parts) + "</g>")
    return c.svg()
