"""Inline SVG charts generated from the view model: no JavaScript, no external resources.

Every text node and attribute value goes through :func:`esc` (trace strings are hostile input); every
coordinate is formatted with a fixed number of decimals so the output is byte-stable. The functions
return :class:`markupsafe.Markup` so Jinja's autoescape does not escape the SVG a second time.
"""
from __future__ import annotations

import html
import math
from collections.abc import Iterable

from markupsafe import Markup

from analyzer.reports.format import fmt_duration, fmt_float, fmt_impact_pct, fmt_pct, fmt_share, fmt_si, truncate
from analyzer.reports.viewmodel import (
    BREAKDOWN_CAUSES,
    BarChart,
    BreakdownBar,
    PairedBar,
    RooflineChart,
    UtilizationChart,
    cause_label,
)

# Okabe-Ito palette (distinguishable with the common colour-vision deficiencies).
BLUE, ORANGE, SKY, GREEN, YELLOW, NAVY, VERMILLION, PURPLE = (
    "#0072B2", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#1F4E79", "#D55E00", "#CC79A7",
)
PALETTE = (BLUE, ORANGE, GREEN, VERMILLION, SKY, PURPLE, YELLOW, NAVY)
INK, MUTED, GRID, TRACK = "#1b1f24", "#57606a", "#d0d7de", "#eef1f4"
FONT = "system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif"


def esc(value: object) -> str:
    """Escape text for an SVG text node or a double-quoted attribute."""
    return html.escape(str(value), quote=True)


def coord(x: float) -> str:
    """A coordinate with one decimal, no ``-0.0``."""
    text = f"{x:.1f}"
    return "0.0" if text == "-0.0" else text


def svg_chart(width: float, height: float, label: str, body: Iterable[str], cls: str) -> Markup:
    parts = [
        (f'<svg class="chart {cls}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {coord(width)} {coord(height)}" '
        f'width="100%" role="img" aria-label="{esc(label)}" font-family="{esc(FONT)}" font-size="11">'),
        f"<title>{esc(label)}</title>",
        *body,
        "</svg>",
    ]
    return Markup("".join(parts))


def svg_text(x: float, y: float, text: str, *, anchor: str = "start", cls: str = "", fill: str = INK,
          size: float | None = None, weight: str = "") -> str:
    attrs = f'x="{coord(x)}" y="{coord(y)}" fill="{fill}"'
    if anchor != "start":
        attrs += f' text-anchor="{anchor}"'
    if cls:
        attrs += f' class="{cls}"'
    if size:
        attrs += f' font-size="{coord(size)}"'
    if weight:
        attrs += f' font-weight="{weight}"'
    return f"<text {attrs}>{esc(text)}</text>"


def _rect(x: float, y: float, w: float, h: float, fill: str, *, title: str = "", cls: str = "",
          extra: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    e = f" {extra}" if extra else ""
    head = f'<rect{c} x="{coord(x)}" y="{coord(y)}" width="{coord(max(w, 0.0))}" height="{coord(max(h, 0.0))}" fill="{fill}"{e}'
    return f"{head}><title>{esc(title)}</title></rect>" if title else f"{head}/>"


def nice_step(span: float, target: int) -> float:
    """A 1-2-5 step that cuts ``span`` into about ``target`` intervals."""
    if span <= 0:
        return 1.0
    raw = span / max(1, target)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


# ---------------------------------------------------------------------------------------------------


def _metric_line(values: tuple, series: object, colour: str, what: str, x_of: object, y: float, bar_h: float,
                 t0: int) -> list[str]:
    """A measured GPU metric (0..1 per bin, None: no sample) as polylines over the bars."""
    out: list[str] = []
    run: list[str] = []
    starts, ends = series.bin_start, series.bin_end  # type: ignore[attr-defined]
    for a, b, v in zip(starts, ends, values):
        if v is None:
            if len(run) > 1:
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{" ".join(run)}"/>')
            run = []
            continue
        xm = (x_of(a) + x_of(b)) / 2  # type: ignore[operator]
        run.append(f"{coord(xm)},{coord(y + bar_h * (1 - min(max(v, 0.0), 1.0)))}")
    if len(run) > 1:
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{" ".join(run)}"/>')
    if out:
        mean = sum(v for v in values if v is not None) / max(1, sum(1 for v in values if v is not None))
        out.insert(0, f"<g class=\"metric\"><title>{esc(f'{what} (measured GPU metric), mean {fmt_share(mean)}')}</title>")
        out.append("</g>")
    return out


def _memory_row(s: object, x_of: object, left: float, plot_w: float, y: float, h: float) -> list[str]:
    """Device memory in use (highest level per bin) as a step line from 0 to the series' ``memory_top``."""
    top = max(int(s.memory_top), 1)  # type: ignore[attr-defined]
    body = [svg_text(left - 8, y + h / 2 + 4, "memory", anchor="end", fill=MUTED, size=10),
            _rect(left, y, plot_w, h, "#f6f8fa")]
    points: list[str] = []
    for a, b, v in zip(s.bin_start, s.bin_end, s.memory):  # type: ignore[attr-defined]
        yv = y + h * (1 - min(max(v / top, 0.0), 1.0))
        points += [f"{coord(x_of(a))},{coord(yv)}", f"{coord(x_of(b))},{coord(yv)}"]  # type: ignore[operator]
    label = str(s.memory_label)  # type: ignore[attr-defined]
    body.append(f'<g class="memory"><title>{esc(label)}</title><polyline fill="none" stroke="{PURPLE}" '
                f'stroke-width="1.6" points="{" ".join(points)}"/></g>')
    body.append(svg_text(left + plot_w - 4, y + 10, truncate(label, 90), anchor="end", fill=MUTED, size=9))
    return body


def utilization_svg(chart: UtilizationChart, width: float = 960.0) -> Markup:
    """Busy share per time bin per device (bars), idle gaps (marks under each device) and lanes of
    top-level NVTX ranges, over a shared time axis relative to the window start."""
    left, right, top = 170.0, 12.0, 8.0
    row_h, bar_h, gap_h, lane_h, mem_h = 62.0, 40.0, 7.0, 20.0, 26.0
    plot_w = width - left - right
    span = max(1, chart.end_ns - chart.start_ns)

    def x_of(ns: float) -> float:
        return left + plot_w * (min(max(ns, chart.start_ns), chart.end_ns) - chart.start_ns) / span

    body: list[str] = []
    y = top
    for s in chart.series:
        head, _, rest = s.label.partition(" \u00b7 ")
        body.append(svg_text(left - 8, y + bar_h / 2 - 2, truncate(head, 24), anchor="end", weight="600"))
        if rest:
            body.append(svg_text(left - 8, y + bar_h / 2 + 11, truncate(rest, 26), anchor="end", fill=MUTED, size=10))
        body.append(_rect(left, y, plot_w, bar_h, TRACK))
        for frac in (0.5,):
            gy = y + bar_h * (1 - frac)
            body.append(f'<line x1="{coord(left)}" x2="{coord(left + plot_w)}" y1="{coord(gy)}" y2="{coord(gy)}" '
                        f'stroke="{GRID}" stroke-dasharray="2 3"/>')
        for a, b, u in zip(s.bin_start, s.bin_end, s.util):
            x0, x1 = x_of(a), x_of(b)
            h = bar_h * min(max(u, 0.0), 1.0)
            tip = f"{s.label}: {fmt_duration(a - chart.start_ns)} to {fmt_duration(b - chart.start_ns)}, " \
                  f"{fmt_share(u)} busy"
            body.append(_rect(x0, y + bar_h - h, max(x1 - x0 - 0.3, 0.6), h, BLUE, title=tip, cls="bar"))
        for values, colour, what in ((s.sm_active, GREEN, "SMs active"), (s.tensor_active, ORANGE, "tensor pipes active")):
            body += _metric_line(values, s, colour, what, x_of, y, bar_h, chart.start_ns)
        gy = y + bar_h + 3
        body.append(_rect(left, gy, plot_w, gap_h, "#f6f8fa"))
        for g in s.gaps:
            x0, x1 = x_of(g.start), x_of(g.end)
            body.append(_rect(x0, gy, max(x1 - x0, 1.0), gap_h, VERMILLION, cls="gap",
                              title=f"{s.label}: {g.label} at {fmt_duration(g.start - chart.start_ns)}"))
        y += row_h
        if s.memory:
            body += _memory_row(s, x_of, left, plot_w, y, mem_h)
            y += mem_h + 8
    for lane_i, lane in enumerate(chart.lanes):
        body.append(svg_text(left - 8, y + 14, truncate(lane.label, 30), anchor="end", fill=MUTED, size=10))
        body.append(_rect(left, y, plot_w, lane_h - 2, "#f6f8fa"))
        for i, sp in enumerate(lane.spans):
            x0, x1 = x_of(sp.start), x_of(sp.end)
            w = max(x1 - x0, 1.0)
            fill = ("#cfe3f3", "#d7eedf")[(i + lane_i) % 2]
            tip = f"{sp.label}: {fmt_duration(sp.end - sp.start)} at {fmt_duration(sp.start - chart.start_ns)}"
            body.append(_rect(x0, y, w, lane_h - 2, fill, title=tip, cls="span", extra=f'stroke="{SKY}" stroke-width="0.5"'))
            chars = int((w - 6) / 6.2)
            if chars >= 3:
                body.append(svg_text(x0 + 3, y + 13, truncate(sp.label, chars), size=10))
        y += lane_h
    # time axis
    y += 4
    body.append(f'<line x1="{coord(left)}" x2="{coord(left + plot_w)}" y1="{coord(y)}" y2="{coord(y)}" stroke="{MUTED}"/>')
    step = nice_step(span, 8)
    t = 0.0
    while t <= span + 1e-9:
        x = left + plot_w * t / span
        body.append(f'<line x1="{coord(x)}" x2="{coord(x)}" y1="{coord(y)}" y2="{coord(y + 4)}" stroke="{MUTED}"/>')
        body.append(svg_text(x, y + 16, fmt_duration(t) if t else "0", anchor="middle", fill=MUTED, size=10))
        t += step
    body.append(svg_text(left + plot_w, y + 32, "time since the window start", anchor="end", fill=MUTED, size=10))
    height = y + 38
    label = f"GPU busy share over time for {len(chart.series)} device(s), idle gaps in red"
    return svg_chart(width, height, label, body, "util")


def bars_svg(chart: BarChart, width: float = 560.0) -> Markup:
    """Horizontal bars: one per category, length = GPU time, with time and share written out."""
    left, right, row = 190.0, 130.0, 24.0
    plot_w = width - left - right
    top = max((b.value for b in chart.bars), default=0.0) or 1.0
    body: list[str] = []
    for i, b in enumerate(chart.bars):
        y = 4 + i * row
        w = plot_w * b.value / top
        body.append(svg_text(left - 8, y + 14, truncate(b.label, 30), anchor="end"))
        body.append(_rect(left, y + 3, w, row - 8, PALETTE[i % len(PALETTE)], cls="bar",
                          title=f"{b.label}: {fmt_duration(b.value)} ({fmt_share(b.share)}), {b.count:,} kernels"))
        body.append(svg_text(left + w + 6, y + 14, f"{fmt_duration(b.value)} \u00b7 {fmt_share(b.share)}", fill=MUTED))
    height = 8 + row * max(1, len(chart.bars))
    return svg_chart(width, height, chart.title, body, "bars")


#: one colour per breakdown cause: busy time in blues/greens, what held the GPU back in warm colours
CAUSE_COLOURS = {
    "compute": BLUE, "exposed_comm": PURPLE, "exposed_copy": SKY, "launch_bound": ORANGE,
    "host_sync": VERMILLION, "host_work": YELLOW, "wait_other": GREEN, "setup": NAVY, "unknown": GRID,
    "autotune": "#882255",  # Tol's wine: a library timing candidate kernels (analyzer.facts.autotune)
    "compile": "#AA4499",  # Tol's purple: torch.compile compiling (analyzer.facts.graphs.compile_spans)
}


def cause_colour(cause: str) -> str:
    return CAUSE_COLOURS.get(cause, MUTED)


def breakdown_svg(bars: tuple[BreakdownBar, ...], title: str, width: float = 960.0) -> Markup:
    """Stacked horizontal bars of the timeline breakdown (one per step, NVTX range or the window), on one
    time scale, with a legend of the causes drawn; each part's tooltip gives its time and share."""
    left, right, row, top = 240.0, 90.0, 22.0, 24.0
    plot_w = width - left - right
    peak = max((b.total_ns for b in bars), default=0) or 1
    drawn = {c for b in bars for c, _ in b.parts}
    body: list[str] = []
    x = left
    for cause, label in [*BREAKDOWN_CAUSES, *((c, cause_label(c)) for c in sorted(drawn - set(CAUSE_COLOURS)))]:
        if cause not in drawn:
            continue
        body.append(_rect(x, 4, 10, 10, cause_colour(cause)))
        body.append(svg_text(x + 14, 13, label, fill=MUTED))
        x += 24 + 6.2 * len(label)
    for i, b in enumerate(bars):
        y = top + i * row
        body.append(svg_text(left - 8, y + 13, truncate(b.label, 38), anchor="end"))
        bx = left
        for cause, ns in b.parts:
            w = plot_w * ns / peak
            share = 100.0 * ns / b.total_ns if b.total_ns else 0.0
            body.append(_rect(bx, y + 3, w, row - 7, cause_colour(cause), cls="bar",
                              title=f"{b.label}: {cause_label(cause)} {fmt_duration(ns)} ({fmt_impact_pct(share)})"))
            bx += w
        body.append(svg_text(bx + 5, y + 13, fmt_duration(b.total_ns), fill=MUTED, size=10))
    height = top + row * max(1, len(bars))
    return svg_chart(width, height, title, body, "breakdown")


def paired_svg(pairs: tuple[PairedBar, ...], width: float = 960.0) -> Markup:
    """NVTX ranges: CPU time (orange) next to the GPU time of the work launched inside (blue)."""
    left, right, row, top = 300.0, 110.0, 30.0, 24.0
    plot_w = width - left - right
    peak = max((max(p.cpu_ns, p.gpu_ns) for p in pairs), default=0) or 1
    body: list[str] = [
        _rect(left, 4, 10, 10, ORANGE), svg_text(left + 14, 13, "CPU time in range", fill=MUTED),
        _rect(left + 130, 4, 10, 10, BLUE), svg_text(left + 144, 13, "GPU time of work launched in range", fill=MUTED),
    ]
    for i, p in enumerate(pairs):
        y = top + i * row
        body.append(svg_text(left - 8, y + 15, truncate(p.label, 46), anchor="end"))
        for j, (value, color, what) in enumerate(((p.cpu_ns, ORANGE, "CPU"), (p.gpu_ns, BLUE, "GPU"))):
            w = plot_w * value / peak
            by = y + 2 + j * 12
            body.append(_rect(left, by, w, 10, color, cls="bar", title=f"{p.label}: {what} {fmt_duration(value)}"))
            body.append(svg_text(left + w + 5, by + 9, fmt_duration(value), fill=MUTED, size=10))
    height = top + row * max(1, len(pairs))
    return svg_chart(width, height, "NVTX ranges: CPU time and GPU-projected time", body, "paired")


def roofline_svg(chart: RooflineChart, width: float = 640.0, height: float = 400.0) -> Markup:
    """Log-log roofline: memory roof (slope = peak bandwidth), compute roof (peak FLOP/s), the ridge
    point, and one dot per kernel at (arithmetic intensity, achieved FLOP/s)."""
    left, right, top, bottom = 78.0, 20.0, 16.0, 46.0
    pw, ph = width - left - right, height - top - bottom
    ridge = chart.ridge
    xs = [p.intensity for p in chart.points] + [ridge]
    ys = [p.flops for p in chart.points] + [chart.peak_flops]
    x_lo = math.floor(math.log10(min(xs) / 2))
    x_hi = math.ceil(math.log10(max(xs) * 4))
    y_lo = math.floor(math.log10(min(ys) / 2))
    y_hi = math.ceil(math.log10(chart.peak_flops * 2))
    if x_hi <= x_lo:
        x_hi = x_lo + 1
    if y_hi <= y_lo:
        y_hi = y_lo + 1

    def X(v: float) -> float:
        return left + pw * (math.log10(v) - x_lo) / (x_hi - x_lo)

    def Y(v: float) -> float:
        return top + ph * (1 - (math.log10(v) - y_lo) / (y_hi - y_lo))

    body: list[str] = [_rect(left, top, pw, ph, "#fbfcfd", extra=f'stroke="{GRID}"')]
    for k in range(x_lo, x_hi + 1):
        x = X(10.0 ** k)
        body.append(f'<line x1="{coord(x)}" x2="{coord(x)}" y1="{coord(top)}" y2="{coord(top + ph)}" stroke="{GRID}" stroke-width="0.6"/>')
        body.append(svg_text(x, top + ph + 15, fmt_float(10.0 ** k, 3), anchor="middle", fill=MUTED, size=10))
    for k in range(y_lo, y_hi + 1):
        y = Y(10.0 ** k)
        body.append(f'<line x1="{coord(left)}" x2="{coord(left + pw)}" y1="{coord(y)}" y2="{coord(y)}" stroke="{GRID}" stroke-width="0.6"/>')
        body.append(svg_text(left - 6, y + 4, fmt_si(10.0 ** k, "FLOP/s"), anchor="end", fill=MUTED, size=10))
    body.append(svg_text(left + pw / 2, height - 8, "arithmetic intensity (FLOP/byte, log)", anchor="middle", fill=MUTED))
    # roofs: from the left edge along the memory roof to the ridge, then flat
    x0 = 10.0 ** x_lo
    y0 = max(x0 * chart.peak_bandwidth, 10.0 ** y_lo)
    x0 = y0 / chart.peak_bandwidth
    x_end = 10.0 ** x_hi
    roof_tip = f"roofline: {fmt_si(chart.peak_bandwidth, 'B/s')} memory, {fmt_si(chart.peak_flops, 'FLOP/s')} compute"
    body.append(
        f'<polyline class="roof" fill="none" stroke="{INK}" stroke-width="2" points="'
        f'{coord(X(x0))},{coord(Y(y0))} {coord(X(ridge))},{coord(Y(chart.peak_flops))} {coord(X(x_end))},{coord(Y(chart.peak_flops))}">'
        f"<title>{esc(roof_tip)}</title></polyline>"
    )
    rx, ry = X(ridge), Y(chart.peak_flops)
    body.append(f'<line x1="{coord(rx)}" x2="{coord(rx)}" y1="{coord(ry)}" y2="{coord(top + ph)}" stroke="{MUTED}" stroke-dasharray="3 3"/>')
    body.append(f'<circle class="ridge" cx="{coord(rx)}" cy="{coord(ry)}" r="4" fill="{INK}">'
                f"<title>{esc('ridge point: ' + fmt_float(ridge, 3) + ' FLOP/byte')}</title></circle>")
    body.append(svg_text(rx + 5, top + ph - 6, f"ridge {fmt_float(ridge, 3)} FLOP/B", fill=MUTED, size=10))
    body.append(svg_text(left + pw - 4, ry - 6, f"peak {fmt_si(chart.peak_flops, 'FLOP/s')}", anchor="end", fill=MUTED, size=10))
    total = sum(p.duration_ns for p in chart.points) or 1.0
    for p in sorted(chart.points, key=lambda q: (-q.duration_ns, q.name)):
        r = 3.5 + 7.0 * math.sqrt(p.duration_ns / total)
        roof = min(chart.peak_flops, p.intensity * chart.peak_bandwidth)
        tip = (f"{p.name}: {fmt_float(p.intensity, 3)} FLOP/B, {fmt_si(p.flops, 'FLOP/s')} "
               f"({fmt_pct(100.0 * p.flops / roof) if roof > 0 else 'n/a'} of roof), {fmt_duration(p.duration_ns)}")
        body.append(f'<circle class="dot" cx="{coord(X(p.intensity))}" cy="{coord(Y(p.flops))}" r="{coord(r)}" '
                    f'fill="{BLUE}" fill-opacity="0.7" stroke="#fff" stroke-width="1"><title>{esc(tip)}</title></circle>')
    return svg_chart(width, height, "Roofline: achieved FLOP/s against arithmetic intensity", body, "roofline")


def steps_svg(step: object, width: float = 960.0, height: float = 300.0) -> Markup:
    """Step times of BASE (blue) and HEAD (orange): each step in run order on the left, and each run's
    distribution on the right (box from the 25th to the 75th percentile, median line, whiskers to the
    extremes). A log time axis when the runs differ by more than 10x."""
    base = [float(v) for v in getattr(step, "base_durations_ns", ())]
    head = [float(v) for v in getattr(step, "head_durations_ns", ())]
    runs = [(label, values, color) for label, values, color in (("BASE", base, BLUE), ("HEAD", head, ORANGE)) if values]
    label = "Step times of BASE and HEAD, per step and as distributions"
    if not runs:
        return svg_chart(width, 40.0, label, [svg_text(10, 24, "No step times to draw.", fill=MUTED)], "steps")
    left, right, top, bottom = 70.0, 16.0, 26.0, 40.0
    dist_w = 220.0
    series_w = width - left - right - dist_w - 30.0
    ph = height - top - bottom
    values = [v for _, vs, _ in runs for v in vs if v > 0]
    lo_v, hi_v = (min(values), max(values)) if values else (1.0, 2.0)
    log = hi_v / max(lo_v, 1.0) > 10.0
    if log:
        y_lo, y_hi = math.floor(math.log10(max(lo_v, 1.0))), math.ceil(math.log10(hi_v))
        y_hi = max(y_hi, y_lo + 1)

        def Y(v: float) -> float:
            return top + ph * (1 - (math.log10(max(v, 1.0)) - y_lo) / (y_hi - y_lo))

        ticks = [10.0 ** k for k in range(y_lo, y_hi + 1)]
    else:
        step_v = nice_step(hi_v, 5)
        top_v = step_v * math.ceil(hi_v * 1.05 / step_v)

        def Y(v: float) -> float:
            return top + ph * (1 - v / top_v)

        ticks = [i * step_v for i in range(round(top_v / step_v) + 1)]
    body: list[str] = []
    for t in ticks:
        y = Y(t)
        body.append(f'<line x1="{coord(left)}" x2="{coord(width - right)}" y1="{coord(y)}" y2="{coord(y)}" stroke="{GRID}" '
                    'stroke-width="0.6"/>')
        body.append(svg_text(left - 6, y + 4, fmt_duration(t) if t else "0", anchor="end", fill=MUTED, size=10))
    body.append(svg_text(left, top - 10, "time per step" + (" (log scale)" if log else ""), fill=MUTED, size=10))
    # legend
    lx = left + 190
    for name, _vs, color in runs:
        body.append(_rect(lx, top - 19, 10, 10, color))
        body.append(svg_text(lx + 14, top - 10, name, size=10, weight="600"))
        lx += 70
    # per-step series
    longest = max(len(vs) for _, vs, _ in runs)
    for name, vs, color in runs:
        def X(i: int) -> float:
            return left + 8 + (series_w - 16) * (i / max(1, longest - 1) if longest > 1 else 0.5)

        pts = " ".join(f"{coord(X(i))},{coord(Y(v))}" for i, v in enumerate(vs))
        body.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.5" stroke-opacity="0.6" '
                    f'points="{pts}"/>')
        for i, v in enumerate(vs[:2000]):
            body.append(f'<circle class="step" cx="{coord(X(i))}" cy="{coord(Y(v))}" r="2.6" fill="{color}">'
                        f"<title>{esc(f'{name} step {i + 1}: {fmt_duration(v)}')}</title></circle>")
    body.append(svg_text(left + series_w / 2, height - 10, f"steps in run order ({longest:,} at most)", anchor="middle",
                      fill=MUTED, size=10))
    # distributions
    dx = left + series_w + 30.0
    body.append(f'<line x1="{coord(dx - 15)}" x2="{coord(dx - 15)}" y1="{coord(top)}" y2="{coord(top + ph)}" stroke="{GRID}"/>')
    slot = dist_w / len(runs)
    for k, (name, vs, color) in enumerate(runs):
        s = sorted(vs)

        def q(p: float, s: list[float] = s) -> float:
            pos = p * (len(s) - 1)
            i = math.floor(pos)
            j = min(i + 1, len(s) - 1)
            return s[i] + (s[j] - s[i]) * (pos - i)

        cx = dx + slot * (k + 0.5)
        q1, med, q3 = q(0.25), q(0.5), q(0.75)
        body.append(f'<line x1="{coord(cx)}" x2="{coord(cx)}" y1="{coord(Y(s[-1]))}" y2="{coord(Y(s[0]))}" stroke="{color}"/>')
        tip = f"{name}: median {fmt_duration(med)}, 25-75% {fmt_duration(q1)} .. {fmt_duration(q3)}, " \
              f"range {fmt_duration(s[0])} .. {fmt_duration(s[-1])}, {len(s):,} steps"
        body.append(_rect(cx - 22, Y(q3), 44, max(Y(q1) - Y(q3), 1.5), color, cls="box", title=tip,
                          extra='fill-opacity="0.35" stroke="' + color + '"'))
        body.append(f'<line class="median" x1="{coord(cx - 24)}" x2="{coord(cx + 24)}" y1="{coord(Y(med))}" '
                    f'y2="{coord(Y(med))}" stroke="{INK}" stroke-width="2"/>')
        body.append(svg_text(cx, min(Y(q3), Y(med)) - 6, fmt_duration(med), anchor="middle", size=10, weight="600"))
        body.append(svg_text(cx, height - 10, f"{name} ({len(s):,})", anchor="middle", fill=MUTED, size=10))
    return svg_chart(width, height, label, body, "steps")
