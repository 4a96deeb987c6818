"""The HTML report's three figures as inline SVG, drawn by pygal (issue 21): the S-curve of the bands, the histogram
of the candidates' exact Jaccard and the group sizes.

pygal writes SVG from Python lists through xml.etree, without a renderer or fonts: importing it and drawing the three
figures costs a few hundredths of a CPU second, where matplotlib's 0.5-0.9 s were more than the 10% of a run the
report may cost (the choice, measured, is in the README). Its defaults are made fit for a page that works offline and
is byte-identical for the same data:
- js=[]: no tooltip script from its CDN (the page's Content-Security-Policy would block it anyway);
- an xml filter (pygal's documented hook on the finished tree) drops what changes from one call to the next or
  only serves that script: the comment with today's date, the chart's uuid4 (in its id and its CSS selectors,
  replaced by the figure's name, so three charts on one page keep their styles apart), the config <script> and the
  legends' ids; and it turns each value's label into a <title>, the tooltip a browser shows on hover and a screen
  reader reads, without a script;
- the standard library's xml.etree, whether or not lxml is installed (the two write different bytes).
Colours, a hatched fill for the rejected pairs, captions and a title per bar keep the figures readable without
colour.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..kernels import lsh

WIDTH, HEIGHT = 360, 290  # pixels: three side by side in 1280
INK, BLUE, ORANGE, GREY = "#333", "#1f4e8c", "#b35900", "#bbbbbb"


def nice_ticks(top: float) -> list[float]:
    """0 to at least top in 3-6 steps of 1, 2 or 5 times a power of ten (whole numbers: counts)."""
    top = max(float(top), 1.0)
    raw = top / 5
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    step = max(step, 1.0)
    return [i * step for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


def _chart(kind: str, name: str, colors: tuple[str, ...], **config):
    """A pygal chart of that kind with the report's look, and the filter that makes its SVG stable and inline."""
    import pygal
    from pygal.etree import etree
    from pygal.style import Style

    etree.to_etree()
    style = Style(background="transparent", plot_background="transparent", foreground="#1a1a1a",
                  foreground_strong="#1a1a1a", foreground_subtle="#d0d0d0", opacity="1", opacity_hover="1",
                  colors=colors, font_family="system-ui, sans-serif", label_font_size=11,
                  major_label_font_size=11, legend_font_size=11, title_font_size=12, value_font_size=10)
    chart = getattr(pygal, kind)(js=[], disable_xml_declaration=True, width=WIDTH, height=HEIGHT,
                                 explicit_size=True, style=style, legend_at_bottom=True, legend_at_bottom_columns=1,
                                 margin=6, margin_bottom=18, **config)
    chart.add_xml_filter(_stable(name, chart.uuid, etree.Comment))
    return chart


def _stable(name: str, uuid: str, comment) -> Callable:
    """The xml filter: the same data give the same bytes, and nothing is left that only pygal's script would use."""
    def clean(root):
        for child in list(root):
            if child.tag is comment or child.tag == "title":  # the date; "Pygal" (the caption names the figure)
                root.remove(child)
        defs = root.find("defs")
        for script in defs.findall("script"):
            defs.remove(script)
        style = defs.find("style")
        style.text = style.text.replace(uuid, name)
        root.set("id", f"chart-{name}")
        root.set("role", "img")
        root.set("aria-labelledby", f"fig-{name}")
        for element in root.iter():
            if element.get("id", "").startswith("activate-serie"):
                del element.attrib["id"]
            for desc in element.findall("desc[@class='label']"):
                desc.tag, desc.attrib = "title", {}
        return root
    return clean


def _count_labels(top: float) -> dict:
    """Whole-number ticks on the count axis (pygal's own may fall on halves)."""
    ticks = nice_ticks(top)
    return {"y_labels": ticks, "range": (0, ticks[-1]), "value_formatter": lambda n: f"{n:,.0f}"}


def scurve(bands: int, rows: int, threshold: float | None, verified: np.ndarray) -> str:
    """P(s) = 1 - (1 - s^r)^b (lsh.s_curve) over [0, 1], the threshold, and the verified entries' Jaccard on the
    curve (rounded to 3 decimals and deduplicated: at most 1001 points however many pairs)."""
    c = _chart("XY", "scurve", (BLUE, "#444", ORANGE), show_dots=False, xrange=(0, 1), range=(0, 1.02),
               x_labels=[t / 5 for t in range(6)], y_labels=[t / 5 for t in range(6)],
               x_title="Jaccard similarity s", y_title="probability of being a candidate",
               value_formatter=lambda p: f"{p:.1f}", x_value_formatter=lambda s: f"{s:.1f}")
    s = np.linspace(0, 1, 201)
    c.add(f"P(candidate) = 1 - (1 - s^{rows})^{bands}", list(zip(s.tolist(), lsh.s_curve(s, bands, rows).tolist())),
          stroke_style={"width": 1.5})
    if threshold is not None:
        c.add(f"threshold {threshold}", [(threshold, 0), (threshold, 1.02)], stroke_style={"dasharray": "4,2"})
    if len(verified):
        x = np.unique(np.round(np.asarray(verified, dtype=float), 3))
        c.add("verified pairs", [{"value": (s, p), "label": f"s = {s:.3f}: P = {p:.3f}"}
                                 for s, p in zip(x.tolist(), lsh.s_curve(x, bands, rows).tolist())],
              stroke=False, show_dots=True, dots_size=2)
    return c.render(is_unicode=True)


def histogram(edges: np.ndarray, rejected: np.ndarray, verified: np.ndarray, threshold: float | None,
              labels: tuple[str, str]) -> str:
    """Stacked bars of the pairs per bin: rejected (grey, hatched) below, verified (blue) on top. rejected and
    verified are the weighted counts per bin (np.histogram). pygal's histogram does not stack, so each verified bar
    is drawn from 0 to rejected + verified and the rejected bar over it; each bar's title gives its own count."""
    total = rejected + verified
    hatch = ('<pattern id="hatch-jaccard" width="4" height="4" patternUnits="userSpaceOnUse" '
             f'patternTransform="rotate(45)"><rect width="4" height="4" fill="{GREY}"/>'
             f'<path d="M0 0V4" stroke="{INK}" stroke-width="0.8"/></pattern>')
    axis = _count_labels(float(np.max(total, initial=0)))
    c = _chart("Histogram", "jaccard", (BLUE, "url(#hatch-jaccard)", "#444"), defs=[hatch], xrange=(0, 1),
               x_labels=[t / 5 for t in range(6)], x_title="exact Jaccard of candidate pairs", y_title="pairs", **axis)
    bins = list(zip(edges[:-1].tolist(), edges[1:].tolist()))
    for label, kind, heights, counts in ((labels[1], "verified", total, verified),
                                         (labels[0], "rejected", rejected, rejected)):
        c.add(label, [{"value": (h, lo, hi), "label": f"{lo:.2f}-{hi:.2f}: {n:,.0f} {kind}"}
                      for (lo, hi), h, n in zip(bins, heights.tolist(), counts.tolist()) if n > 0])
    if threshold is not None:  # a bar as thin as a line, as high as the axis
        c.add(f"threshold {threshold}", [(axis["range"][1], threshold, threshold + 0.002)])
    return c.render(is_unicode=True)


def bars(labels: list[str], counts: list[int]) -> str:
    """One bar per category with its count above it (the group sizes)."""
    c = _chart("Bar", "sizes", (BLUE,), x_labels=labels, x_title="documents in the group", y_title="groups",
               print_values=True, print_values_position="top", show_legend=False,
               **_count_labels(max(counts, default=0) * 1.08))  # room for the count above the highest bar
    c.add("groups", [{"value": n, "label": f"{label} documents: {n:,} groups"} for label, n in zip(labels, counts)])
    return c.render(is_unicode=True)
