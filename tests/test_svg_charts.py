"""The Overview's server-drawn SVG figures: values, scales, hover texts, escaping of store text."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lastgood.display import svg_charts
from lastgood.display.figures import STATUS_COLORS

NS = {"s": "http://www.w3.org/2000/svg"}


def parse(svg: str) -> ET.Element:
    assert "\n" not in svg  # one HTML block for the page's markdown
    return ET.fromstring(svg)  # well-formed: store text cannot break out of its element


def test_status_bars_are_as_tall_as_their_counts() -> None:
    root = parse(svg_charts.status_bars(pa.table({"status": ["ok", "corrupt", "incomplete"],
                                                   "checkpoints": [1000, 250, 0]})))
    bars = root.findall(".//s:rect[@class='mark']", NS)
    heights = [float(b.get("height")) for b in bars]
    assert heights[0] == 4 * heights[1] and heights[2] == 0
    assert [b.get("fill") for b in bars] == [STATUS_COLORS[s] for s in ("ok", "corrupt", "incomplete")]
    assert [b.find("s:title", NS).text for b in bars] == [
        "ok: 1,000 checkpoints", "corrupt: 250 checkpoints", "incomplete: 0 checkpoints"]
    labels = [t.text for t in root.iter(f"{{{NS['s']}}}text")]
    assert "1,000" in labels and "corrupt" in labels


def test_growth_areas_stack_the_agents_with_their_totals() -> None:
    growth = pa.table({"at_ms": [0.0, 60_000.0, 0.0, 60_000.0], "agent": ["a", "a", "b", "b"],
                       "total_bytes": [100, 1000, 0, 3000]})
    root = parse(svg_charts.growth_areas(growth))
    areas = root.findall(".//s:polygon[@class='mark']", NS)
    assert [a.find("s:title", NS).text for a in areas] == ["a: 1.0 KB", "b: 3.0 KB"]
    top_of_b = [float(p.split(",")[1]) for p in areas[1].get("points").split()[:2]]
    top_of_a = [float(p.split(",")[1]) for p in areas[0].get("points").split()[:2]]
    assert top_of_b[1] < top_of_a[1]  # b sits on a (SVG y grows downwards)
    labels = [t.text for t in root.iter(f"{{{NS['s']}}}text")]
    assert "a 1.0 KB" in labels and "b 3.0 KB" in labels  # the legend: each agent's total at the end
    assert "4 KB" in labels  # the byte axis in round units, reaching the top of the stack


def test_a_long_history_is_thinned_to_a_small_figure() -> None:
    moments = [float(i * 1000) for i in range(600)]
    growth = pa.table({"at_ms": moments * 2, "agent": ["a"] * 600 + ["b"] * 600,
                       "total_bytes": list(range(600)) + [2 * i for i in range(600)]})
    svg = svg_charts.growth_areas(growth)
    areas = parse(svg).findall(".//s:polygon[@class='mark']", NS)
    assert all(len(a.get("points").split()) == 2 * svg_charts.MAX_MOMENTS for a in areas)
    assert len(svg) < 8_000  # the browser parses it as HTML on the first screen
    assert areas[1].find("s:title", NS).text == "b: 1.2 KB"  # the last moment is always kept: 1,198 B


def test_store_text_stays_text() -> None:
    hostile = '</title></svg><script>alert(1)</script> $x$ :material/bolt: "q"'
    svg = svg_charts.growth_areas(pa.table({"at_ms": [0.0, 1.0], "agent": [hostile, hostile],
                                            "total_bytes": [1, 2]}))
    assert "<script" not in svg and "$" not in svg and ":material" not in svg
    root = parse(svg)
    assert any(hostile in (t.text or "") for t in root.iter(f"{{{NS['s']}}}title"))  # shown as written


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=0, max_value=1e15, allow_nan=False))
def test_axis_ticks_reach_the_top_in_round_steps(top: float) -> None:
    for ticks in (svg_charts.nice_ticks(top), svg_charts.byte_ticks(top)):
        assert ticks[0] == 0 and ticks[-1] >= top and len(ticks) <= 12
        steps = {round(b - a, 6) for a, b in zip(ticks, ticks[1:])}
        assert len(steps) == 1  # evenly spaced
    if top > 0:
        step = svg_charts.nice_ticks(top)[1]
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert any(math.isclose(mantissa, m) for m in (1, 2, 5, 10))  # 1, 2 or 5 × 10^k


def test_empty_and_single_moment_charts_still_draw() -> None:
    assert parse(svg_charts.status_bars(pa.table({"status": pa.array([], pa.string()),
                                                  "checkpoints": pa.array([], pa.int64())})))
    root = parse(svg_charts.growth_areas(pa.table({"at_ms": [5.0], "agent": ["a"], "total_bytes": [7]})))
    assert len(root.findall(".//s:polygon[@class='mark']", NS)) == 1


def test_the_legend_stays_inside_the_figure() -> None:
    agents = ["research-agent", "support-agent", "trading-agent", "a-rather-long-agent-name-x"]
    growth = pa.table({"at_ms": [0.0] * 4, "agent": agents, "total_bytes": [1_500_000, 1_400_000, 1_300_000, 10]})
    root = parse(svg_charts.growth_areas(growth))
    texts = {(t.get("x"), t.get("y")): t.text for t in root.findall("s:text", NS)}
    swatches = [r for r in root.findall("s:rect", NS) if r.get("width") == "10"]
    assert len(swatches) == 4 and len({r.get("y") for r in swatches}) == 2  # two rows
    for agent, swatch in zip(agents, swatches):
        x, y = float(swatch.get("x")), float(swatch.get("y"))
        label = texts[(f"{x + 14:.0f}", f"{y + 9:.0f}")]
        assert label.startswith(agent[:19])
        assert x + 14 + 6.3 * len(label) <= svg_charts.WIDTH  # inside the figure
        assert y + 10 < svg_charts.TOP  # above the plot


def test_byte_labels_fit_a_narrow_cell() -> None:
    """The growth axis and the Storage metric: at most three digits, no trailing ".0"."""
    from lastgood.cli.output import short_bytes

    mb, gb = 10**6, 10**9
    assert [short_bytes(n) for n in (0, 512, 4 * mb, 769.9 * mb, 800 * mb, 12.34 * mb, 1.19 * gb, 999.97 * mb)] == [
        "0 B", "512 B", "4 MB", "770 MB", "800 MB", "12.3 MB", "1.2 GB", "1 GB"]
    root = parse(svg_charts.growth_areas(pa.table({"at_ms": [0.0, 1.0], "agent": ["a", "a"],
                                                   "total_bytes": [0, 770 * mb]})))
    ticks = [t.text for t in root.iter(f"{{{NS['s']}}}text") if t.text and t.text[0].isdigit()]
    assert "800 MB" in ticks and not any(".0 " in t for t in ticks)
