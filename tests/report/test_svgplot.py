"""nanodata.report.svgplot: the hand-written bar charts are valid SVG and scale their bars."""

import xml.etree.ElementTree as ET

import pytest

from nanodata.report.svgplot import bar_chart, grouped_bar_chart, nice_ticks

SVG = "{http://www.w3.org/2000/svg}"


def test_nice_ticks_cover_the_maximum():
    assert nice_ticks(0) == [0.0, 1.0]
    assert nice_ticks(100) == [0, 20, 40, 60, 80, 100]
    for vmax in (0.003, 7, 13.5, 999, 123456):
        ticks = nice_ticks(vmax)
        assert ticks[0] == 0 and ticks[-1] >= vmax and len(ticks) <= 7


def test_bar_chart_is_valid_xml_and_escapes_labels():
    svg = bar_chart('a <title> & "quotes"', ["<b>", "x&y", "z"], [10, 5, 0], xlabel="x<", ylabel="y>")
    root = ET.fromstring(svg)
    bars = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    heights = [float(b.get("height")) for b in bars]
    assert heights[0] == pytest.approx(2 * heights[1]) and heights[2] == 0
    assert bars[0].find(f"{SVG}title").text == "<b>: 10"
    with pytest.raises(ValueError):
        bar_chart("t", ["a"], [1, 2], xlabel="", ylabel="")


def test_grouped_bars_side_by_side_with_a_legend():
    svg = grouped_bar_chart("shares", ["file", "chunk"], {"% of docs": [40, 60], "% of tokens": [10, 90]},
                            xlabel="kind", ylabel="%")
    root = ET.fromstring(svg)
    bars = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert [b.find(f"{SVG}title").text for b in bars] == ["file, % of docs: 40", "chunk, % of docs: 60",
                                                          "file, % of tokens: 10", "chunk, % of tokens: 90"]
    x = [float(b.get("x")) for b in bars]
    assert x[0] < x[2] < x[1] < x[3]  # each label's bars side by side
    assert {b.get("fill") for b in bars[:2]} != {b.get("fill") for b in bars[2:]}
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "% of docs" in texts and "% of tokens" in texts  # the legend
    one_series = ET.fromstring(bar_chart("t", ["a"], [1], xlabel="", ylabel=""))
    assert len(list(one_series.iter(f"{SVG}rect"))) == 2  # the background and the bar: no legend
    with pytest.raises(ValueError, match="series '% of tokens'"):
        grouped_bar_chart("t", ["a"], {"% of docs": [1], "% of tokens": [1, 2]}, xlabel="", ylabel="")
