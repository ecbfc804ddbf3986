"""The job swimlanes: one lane per rank over one step, on the common clock (inline SVG, no script).

Each rank gets two rows: its main thread's NVTX ranges (host), and its GPU: compute kernels, and
communication kernels with the part spent waiting for another rank hatched in red. Every string goes
through :func:`analyzer.reports.svg.esc`.
"""
from __future__ import annotations

from typing import Any

from markupsafe import Markup

from analyzer.reports.format import fmt_duration
from analyzer.reports.svg import BLUE, GRID, INK, MUTED, ORANGE, SKY, TRACK, VERMILLION, coord, esc, svg_chart, svg_text

COLORS = {"host": SKY, "compute": BLUE, "comm": ORANGE, "wait": VERMILLION}
LANE_H, ROW_H, LEFT, WIDTH = 40.0, 14.0, 150.0, 960.0


def swimlanes_svg(job: Any) -> Markup:
    """Swimlanes of ``job`` (a :class:`analyzer.reports.jobview.JobSection`)."""
    if not job.lanes or job.lane_span is None:
        return Markup("")
    a, b = job.lane_span
    span = max(b - a, 1)
    plot = WIDTH - LEFT - 10
    height = 30 + LANE_H * len(job.lanes) + 34
    body = [f'<defs><pattern id="waithatch" width="4" height="4" patternUnits="userSpaceOnUse" '
            f'patternTransform="rotate(45)"><rect width="2" height="4" fill="{VERMILLION}"/></pattern></defs>']
    # time axis
    for i in range(5):
        x = LEFT + plot * i / 4
        body.append(f'<line x1="{coord(x)}" y1="18" x2="{coord(x)}" y2="{coord(height - 30)}" stroke="{GRID}"/>')
        body.append(svg_text(x, 14, "+" + fmt_duration(span * i / 4), anchor="middle", fill=MUTED, size=10))
    for n, lane in enumerate(job.lanes):
        y0 = 24 + LANE_H * n
        body.append(svg_text(6, y0 + 12, f"rank {lane.rank}", weight="600"))
        body.append(svg_text(6, y0 + 26, "host / GPU", fill=MUTED, size=10))
        for row, kinds in ((0, ("host",)), (1, ("compute", "comm", "wait"))):
            y = y0 + 2 + row * (ROW_H + 3)
            body.append(f'<rect x="{coord(LEFT)}" y="{coord(y)}" width="{coord(plot)}" height="{coord(ROW_H)}" fill="{TRACK}"/>')
            for item in lane.items:
                if item.kind not in kinds:
                    continue
                x1 = LEFT + plot * (item.start - a) / span
                x2 = LEFT + plot * (item.end - a) / span
                w = max(x2 - x1, 0.6)
                fill = "url(#waithatch)" if item.kind == "wait" else COLORS[item.kind]
                tip = f"rank {lane.rank} {item.kind}: {item.label} ({fmt_duration(item.end - item.start)})"
                body.append(f'<rect x="{coord(x1)}" y="{coord(y)}" width="{coord(w)}" height="{coord(ROW_H)}" fill="{fill}">'
                            f"<title>{esc(tip)}</title></rect>")
                if item.kind == "host" and w > 60:
                    body.append(svg_text(x1 + 3, y + 10.5, item.label[: int(w / 6)], fill=INK, size=9.5))
    # legend
    y = height - 14
    x = LEFT
    for kind, label in (("host", "host NVTX range"), ("compute", "compute kernels"),
                        ("comm", "communication kernels"), ("wait", "waiting for another rank")):
        fill = "url(#waithatch)" if kind == "wait" else COLORS[kind]
        body.append(f'<rect x="{coord(x)}" y="{coord(y - 9)}" width="12" height="10" fill="{fill}"/>')
        body.append(svg_text(x + 16, y, label, fill=MUTED, size=10))
        x += 30 + 6.2 * len(label)
    return svg_chart(WIDTH, height, f"Swimlanes of {len(job.lanes)} ranks over {fmt_duration(span)}", body,
                "swimlanes")


__all__ = ["swimlanes_svg"]
