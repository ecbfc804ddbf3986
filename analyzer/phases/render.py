"""Renderings of a :class:`~analyzer.phases.sweep.SweepResult`: Markdown, CSV, HTML.

View models first (:class:`TableView`: title, column labels, rows of display strings, a note), then
the formats only lay them out. CSV files carry the raw tables (full precision, one file per table);
Markdown and HTML carry the display tables. HTML goes through Jinja2 with autoescape on: kernel names
and NVTX texts from a trace are never trusted markup.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jinja2
import pandas as pd

from analyzer.errors import ParameterError
from analyzer.fileio import atomic_output, atomic_write
from analyzer.phases.sweep import FLAG_CHECKS, SweepResult
from analyzer.facts.phase_table import FLOPS_CONVENTION_SEP

FORMATS = ("md", "csv", "html", "json")
JSON_SCHEMA = "analyzer.sweep/1"
MD_NAME_WIDTH = 60


@dataclass(frozen=True)
class TableView:
    name: str  # file stem / anchor
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""


def _num(fmt: str) -> Callable[[object], str]:
    def show(v: object) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
            return "n/a"
        try:
            return format(float(v), fmt) if fmt else str(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return str(v)
    return show


MS, PCT, RATIO, INT = _num(".2f"), _num(".1f"), _num(".3f"), _num(".0f")


def _pct_share(v: object) -> str:
    return PCT(float(v) * 100) if isinstance(v, (int, float)) and not math.isnan(float(v)) else "n/a"


def _ctx(v: object) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _short(name: object, width: int | None) -> str:
    """Readable kernel name (no return type, parameters, deep templates) within ``width``."""
    from analyzer.facts.categories import shorten_kernel_name

    return str(name) if width is None else shorten_kernel_name(str(name), width)


def _pm(mean: object, std: object) -> str:
    return f"{MS(mean)} ± {MS(std)}"


_BY = {"GPU timeline": "[gpu]", "CPU wall": "[wall]", "mixed": "[mixed]"}


def _by(measured_by: object) -> str:
    return _BY.get(str(measured_by), "")


def _time_cell(ms: object, pct: object, measured_by: object) -> str:
    return f"{MS(ms)} ({PCT(pct)}%) {_by(measured_by)}".strip()


def _py(mean: object, std: object, n: object) -> str:
    if MS(mean) == "n/a":
        return "n/a"
    return f"{_pm(mean, std)} (n={INT(n)})"


def _pivot(frame: pd.DataFrame, value: Callable[[pd.Series], str], index: list[str],
           title: str, name: str, note: str = "") -> TableView:
    """Rows ``index`` (model, mode), columns ``ctx<N>`` in numeric order, cells ``value(row)``."""
    if frame.empty:
        return TableView(name, title, tuple(index), (), note or "no data")
    contexts = sorted({int(c) for c in frame["context"] if c is not None and not pd.isna(c)})
    cells: dict[tuple[object, ...], dict[object, str]] = {}
    order: list[tuple[object, ...]] = []
    for _, row in frame.iterrows():  # display tables are small: one row per configuration
        k = tuple(row[c] for c in index)
        if k not in cells:
            cells[k] = {}
            order.append(k)
        ctx = row["context"]
        cells[k][None if pd.isna(ctx) else int(ctx)] = value(row)
    keys: list[int | None] = [*contexts, None] if any(None in c for c in cells.values()) else list(contexts)
    cols = tuple(index) + tuple("no ctx" if c is None else f"ctx{c}" for c in keys)
    rows = tuple(tuple(str(x) for x in k) + tuple(cells[k].get(c, "") for c in keys) for k in order)
    return TableView(name, title, cols, rows, note)


def views(result: SweepResult, *, name_width: int | None = MD_NAME_WIDTH) -> list[TableView]:
    """Display tables for ``result`` (a SweepResult), in report order."""
    r = result
    out: list[TableView] = []
    fwd = r.forward
    out.append(_pivot(fwd, lambda x: f"{_pm(x['forward_ms'], x['forward_std_ms'])} {_by(x['measured_by'])}",
                      ["model", "mode"], "Forward pass time (ms per step, mean ± std)", "forward_time",
                      "The answer: what a timer synchronizing before and after `forward` measures, from the "
                      "trace. [wall]: the range's CPU wall time (it waited for its GPU work, or the GPU kept "
                      "up with the launches); [gpu]: read from the GPU timeline, from the range's start (or "
                      "the end of earlier work it queued behind) to the end of its GPU work, because the "
                      "range ended before its work and timed only the kernel launches; [mixed]: some steps "
                      "each way. The CPU wall, the GPU time and the synchronized Python time follow."))
    out.append(_pivot(fwd, lambda x: _pm(x["cpu_mean_ms"], x["cpu_std_ms"]), ["model", "mode"],
                      "Forward pass, CPU wall (ms per step, mean ± std)", "forward_cpu",
                      "From the `forward` NVTX ranges of the measured steps (warmup excluded): context for the "
                      "table above. Where the ranges end before their GPU work this is the time to launch the "
                      "kernels, not to run them (flag `async_range`)."))
    out.append(_pivot(fwd, lambda x: _pm(x["gpu_mean_ms"], x["gpu_std_ms"]), ["model", "mode"],
                      "Forward pass, GPU time launched inside (ms per step, mean ± std)", "forward_gpu",
                      "Sum of kernel, memcpy and memset durations launched inside `forward`."))
    tm = r.timing
    has_python = bool(len(tm)) and tm["python_ms"].notna().any()
    out.append(TableView(
        "timing", "nsys against Python (ms per step)",
        ("model", "mode", "ctx", "phase", "steps", "CPU wall", "GPU span", "phase time", "waited",
         "Python (sync)", "Python / phase time", "Python / CPU wall", "flags"),
        tuple((str(x.model), str(x.mode), _ctx(x.context), str(x.phase), INT(x.steps), MS(x.cpu_ms),
               MS(x.span_ms), f"{MS(x.time_ms)} {_by(x.measured_by)}".strip(), str(x.waited),
               _py(x.python_ms, x.python_std_ms, x.python_n), _num(".2f")(x.python_vs_time),
               _num(".2f")(x.python_vs_cpu), str(x.flags))
              for x in tm.itertuples(index=False)) if has_python else (),
        "Per configuration and phase: the NVTX ranges' CPU wall time, the GPU span of their work, the "
        "phase time (what a synchronized timer would measure, from the trace) and the run's own Python "
        "timings (`<trace>.pytime.json`: "
        "time.perf_counter() between torch.cuda.synchronize() calls before and after each phase, timed "
        "after the profiled steps; mean ± std, n). `step` is the whole step (synchronized in both)."
        if has_python else "No Python timings: no `<trace>.pytime.json` beside the traces."))
    t = r.top_kernel
    out.append(TableView(
        "top_kernel", "Top kernel per configuration (measured steps)",
        ("model", "mode", "ctx", "kernel", "category", "count", "total ms", "mean us", "share %", "flags"),
        tuple((str(x.model), str(x.mode), _ctx(x.context), _short(x.kernel, name_width), str(x.category),
               INT(x.count), MS(x.total_ms), _num(".1f")(x.mean_us), _pct_share(x.share), str(x.flags))
              for x in t.itertuples(index=False)),
        "Share is of all kernel time outside warmup."))
    tr = r.training
    out.append(TableView(
        "training", "Step breakdown (ms per step, % of step)",
        ("model", "mode", "ctx", "steps", "step CPU", "forward", "backward", "optimizer", "residual",
         "step GPU", "fwd GPU", "bwd GPU", "opt GPU", "flags"),
        tuple((str(x.model), str(x.mode), _ctx(x.context), INT(x.steps), MS(x.step_cpu_ms),
               f"{MS(x.forward_cpu_ms)} ({PCT(x.forward_cpu_pct)}%)",
               f"{MS(x.backward_cpu_ms)} ({PCT(x.backward_cpu_pct)}%)",
               f"{MS(x.optimizer_cpu_ms)} ({PCT(x.optimizer_cpu_pct)}%)",
               f"{MS(x.residual_cpu_ms)} ({PCT(x.residual_cpu_pct)}%)",
               MS(x.step_gpu_ms), MS(x.forward_gpu_ms), MS(x.backward_gpu_ms), MS(x.optimizer_gpu_ms),
               str(x.flags))
              for x in tr.itertuples(index=False)),
        "CPU: wall time of the ranges; GPU: kernel+copy+memset time launched inside them, from any "
        "thread of the process (backward kernels come from the autograd thread). Residual: step time "
        "outside the three phases. A phase range that ends before its GPU work shows its launch time "
        "here, and the step's final synchronization (in the residual) waits for its GPU work: see the "
        "next table."))
    out.append(TableView(
        "training_time", "Step breakdown by phase time (ms per step, % of step)",
        ("model", "mode", "ctx", "steps", "step", "forward", "backward", "optimizer", "residual",
         "residual in syncs", "flags"),
        tuple((str(x.model), str(x.mode), _ctx(x.context), INT(x.steps), MS(x.step_cpu_ms),
               _time_cell(x.forward_time_ms, x.forward_time_pct, x.forward_measured_by),
               _time_cell(x.backward_time_ms, x.backward_time_pct, x.backward_measured_by),
               _time_cell(x.optimizer_time_ms, x.optimizer_time_pct, x.optimizer_measured_by),
               f"{MS(x.residual_time_ms)} ({PCT(x.residual_time_pct)}%)",
               f"{MS(x.residual_sync_ms)} ({PCT(x.residual_sync_pct)}%)", str(x.flags))
              for x in tr.itertuples(index=False)),
        "Each phase by what a synchronized timer would measure: its CPU wall time [wall], or read from "
        "the GPU timeline [gpu] where the range ended before its GPU work (it timed the launches) or "
        "began behind earlier work (its CPU wall time includes that wait). The step ranges end with a "
        "synchronization, so the step is its CPU wall. Residual: step minus the three phase times; "
        "residual in syncs: the step's time in synchronizing calls outside the phases (the host waiting "
        "for the GPU to finish queued work)."))
    mix = r.kernel_mix
    if len(mix):
        cats = list(mix.groupby("category")["total_ms"].sum().sort_values(ascending=False).index)
        rows = []
        for (model, mode, ctx), g in mix.groupby(["model", "mode", "context"], sort=False, dropna=False):
            share = dict(zip(g["category"], g["share"]))
            rows.append((str(model), str(mode), _ctx(ctx), MS(g["total_ms"].sum()))
                        + tuple(_pct_share(share[c]) if c in share else "" for c in cats))
        out.append(TableView("kernel_mix", "Kernel mix inside forward (% of forward kernel time)",
                             ("model", "mode", "ctx", "kernel ms") + tuple(f"{c} %" for c in cats),
                             tuple(rows), "Exact: every kernel launched inside a `forward` range."))
    else:
        out.append(TableView("kernel_mix", "Kernel mix inside forward", ("model",), (), "no data"))
    a = r.attention
    out.append(TableView(
        "attention", "Attention: softmax vs matmul",
        ("model", "mode", "ctx", "calls", "softmax ms", "matmul ms", "other ms", "time ratio", "d_head",
         "FLOP ratio", "time/FLOP ratio", "FLOPs note", "flags"),
        tuple((str(x.model), str(x.mode), _ctx(x.context), INT(x.calls), MS(x.softmax_ms), MS(x.matmul_ms),
               MS(x.other_ms), RATIO(x.time_ratio), INT(x.d_head), _num(".4f")(x.flop_ratio),
               _num(".1f")(x.time_per_flop_ratio), str(x.flops_note).split(FLOPS_CONVENTION_SEP)[0],
               str(x.flags))
              for x in a.itertuples(index=False)),
        "Times (exact) are kernels launched inside computing_attention_scores, computing_softmax and "
        "final_matmul, split by kernel category. FLOPs are estimates (the trace has no shapes): "
        + (str(a["flops_note"].iloc[0]).split(FLOPS_CONVENTION_SEP)[-1] if len(a) else "")
        + ". FLOP ratio = 5 / (4 d_head); time/FLOP ratio = time ratio / FLOP ratio."))
    f = r.flags
    out.append(TableView(
        "flags", "Rows that cannot be right",
        ("model", "mode", "ctx", "check", "reason", "trace"),
        tuple((str(x.model), str(x.mode), _ctx(x.context), str(x.check), str(x.reason), Path(str(x.path)).name)
              for x in f.itertuples(index=False)),
        "none" if f.empty else "Checks: " + "; ".join(
            f"`{k}`: {v}" for k, v in FLAG_CHECKS.items() if k in set(f["check"]))))
    ru = r.runs
    out.append(TableView(
        "runs", "Runs", ("trace", "model", "mode", "ctx", "key from", "steps", "Python timings", "error"),
        tuple((Path(str(x.path)).name, str(x.model), str(x.mode), _ctx(x.context), str(x.key_source),
               INT(x.steps), str(x.python), str(x.error)) for x in ru.itertuples(index=False)),
        f"Keys from file names by `{r.key_pattern}`, else from NVTX texts and metadata."))
    return out


def to_markdown(tables: list[TableView]) -> str:
    """The display tables as GitHub Markdown. Cells hold names from the traces (kernels such as
    ``at::native::<unnamed>::...``, NVTX texts, file names): escaped as the reports escape them
    (:func:`analyzer.reports.markdown.md_text`: no HTML, emphasis, link or mention, backslash escapes
    only); notes keep their code spans (:func:`~analyzer.reports.markdown.md_prose`)."""
    from analyzer.reports.markdown import md_prose, md_text

    lines = ["# Profiling sweep", ""]
    for t in tables:
        lines += [f"## {md_text(t.title)}", ""]
        if t.rows:
            lines.append("| " + " | ".join(md_text(c) for c in t.columns) + " |")
            lines.append("|" + "|".join("---" for _ in t.columns) + "|")
            lines += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in t.rows]
            lines.append("")
        if t.note:
            lines += [md_prose(t.note), ""]
    return "\n".join(lines).rstrip() + "\n"


_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Profiling sweep</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f2f2f2}td.flag{color:#a00}p.note{color:#555;font-size:.9em}
td{max-width:40em;overflow-wrap:anywhere}
</style></head><body>
<h1>Profiling sweep</h1>
<nav>{% for t in tables %}<a href="#{{ t.name }}">{{ t.title }}</a>{% if not loop.last %} · {% endif %}{% endfor %}</nav>
{% for t in tables %}
<h2 id="{{ t.name }}">{{ t.title }}</h2>
{% if t.rows %}<table><thead><tr>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr></thead><tbody>
{% for row in t.rows %}<tr>{% for cell in row %}<td{% if t.columns[loop.index0] == 'flags' and cell %} class="flag"{% endif %}>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table>{% endif %}
{% if t.note %}<p class="note">{{ t.note }}</p>{% endif %}
{% endfor %}
</body></html>
"""


def to_html(tables: list[TableView]) -> str:
    from analyzer.reports.format import inert_output

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, finalize=inert_output)
    return env.from_string(_HTML).render(tables=tables)


def to_json(result: SweepResult) -> str:
    """Every raw table as records (times in ms, shares 0..1, NaN as null), the flag checks' meanings
    and the key pattern: ``{"schema", "key_pattern", "checks", "tables": {name: [row, ...]}}``."""
    import json

    def records(frame: pd.DataFrame) -> list[dict[str, object]]:
        return json.loads(frame.to_json(orient="records", double_precision=10))

    doc = {"schema": JSON_SCHEMA, "key_pattern": result.key_pattern, "checks": FLAG_CHECKS,
           "tables": {name: records(frame) for name, frame in result.tables().items()}}
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


#: first characters that make a spreadsheet (Excel, LibreOffice, Google Sheets) read a cell as a formula
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_inert(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell a spreadsheet would run as a formula (one starting with ``=``,
    ``+``, ``-``, ``@``, a tab or a carriage return: a kernel or NVTX name such as
    ``=HYPERLINK("http://...")`` read from a trace) behind a leading apostrophe, which spreadsheets
    show as the text itself (OWASP's advice on CSV injection). Numbers stay numbers, a negative
    residual included."""
    out = frame
    for col in frame.columns:
        values = frame[col]
        if values.dtype != object and not pd.api.types.is_string_dtype(values.dtype):
            continue
        if values.map(lambda v: isinstance(v, str) and v[:1] in _FORMULA_START).astype(bool).any():
            if out is frame:
                out = frame.copy()
            out[col] = pd.Series([f"'{v}" if isinstance(v, str) and v[:1] in _FORMULA_START else v for v in values],
                                 index=values.index, dtype=object)
    return out


def render_sweep(result: SweepResult, fmt: str = "md",
                 out_dir: Path | str | None = None) -> str:
    """Render ``result``. Returns the Markdown, HTML or JSON text (also written to
    ``out_dir/sweep.<fmt>`` when ``out_dir`` is given); for ``csv`` writes ``out_dir/<table>.csv`` per
    table (``out_dir`` required) and returns the list of files written, one per line."""
    if fmt not in FORMATS:
        raise ParameterError(f"unknown sweep format {fmt!r}", hint="use one of md, csv, html, json")
    folder = Path(out_dir) if out_dir is not None else None
    if folder is not None:
        if folder.exists() and not folder.is_dir():
            raise ParameterError(f"{folder} exists and is not a directory",
                                 hint="give a directory for --output, or a file name with md/html")
        folder.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        if folder is None:
            raise ParameterError("csv output needs a directory", hint="pass --output DIR")
        written = []
        for name, frame in result.tables().items():
            path = folder / f"{name}.csv"
            with atomic_output(path) as fh:
                csv_inert(frame).to_csv(fh, index=False)
            written.append(str(path))
        return "\n".join(written) + "\n"
    text = (to_markdown(views(result)) if fmt == "md" else to_json(result) if fmt == "json"
            else to_html(views(result, name_width=None)))
    if folder is not None:
        atomic_write(folder / f"sweep.{fmt}", text)
    return text
