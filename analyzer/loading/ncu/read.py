"""Reading ncu exports (CSV pages, .ncu-rep through NVIDIA's ``ncu_report``) into long metric rows: :func:`load_ncu`."""
from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer.boundedio import BoundedReadError, max_input_bytes, read_regular
from analyzer.errors import InputError, UnsupportedFormatError
from analyzer.loading.ncu.build import build_ncu_report, merge_ncu_reports
from analyzer.loading.ncu.detect import HEADER_RE, NOISE_PREFIXES, detect_ncu, split_header
from analyzer.loading.ncu.model import NCU_RAW_CSV, NCU_REP, NCU_RULE_COLUMNS, NcuReport, empty_ncu_frame


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------

_EXPORT_HINT_TEMPLATE = "export CSV instead: ncu --import {name} --csv --page raw > {stem}.raw.csv"

# Leading identity columns of both CSV pages (which exist depends on the ncu version).
_IDENT = {
    "ID": "ncu_id",
    "Process ID": "process_id",
    "Process Name": "process_name",
    "Host Name": "host_name",
    "Kernel Name": "name",
    "Kernel Time": "kernel_time",
    "Context": "context",
    "Stream": "stream",
    "Block Size": "block_dims",
    "Grid Size": "grid_dims",
    "Device": "device",
    "CC": "cc",
    "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg": "nvtx_stack",
}
_DETAIL_COLS = {
    "Section Name": "section",
    "Metric Name": "metric",
    "Metric Unit": "unit",
    "Metric Value": "value",
    "Rule Name": "rule",
    "Rule Type": "type",
    "Rule Description": "description",
    "Estimated Speedup Type": "speedup_type",
    "Estimated Speedup": "speedup_pct",
}


def load_ncu(paths: str | Path | Sequence[str | Path]) -> NcuReport:
    """Load one ncu export (or several, merged in order) into an :class:`NcuReport`.

    Raises :class:`InputError` for a missing, empty or unrecognised file and
    :class:`UnsupportedFormatError` for a ``.ncu-rep`` this installation cannot read.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    parts = [_load_one(Path(p)) for p in paths]
    if not parts:
        raise InputError("<none>", "no ncu file given")
    if len(parts) == 1:
        return parts[0]
    return merge_ncu_reports(parts)


def _load_one(path: Path) -> NcuReport:
    if not path.exists():
        raise InputError(path, "no such file", hint="pass an ncu CSV export or a .ncu-rep report")
    if path.is_dir():
        raise InputError(path, "is a directory, not an ncu export")
    fmt = detect_ncu(path)
    if fmt is None:
        raise InputError(
            path,
            "not an Nsight Compute export (no '\"ID\",\"Process ID\",...,\"Kernel Name\"' CSV header "
            "and no .ncu-rep signature)",
            hint="export with: ncu --import X.ncu-rep --csv --page raw > X.raw.csv",
        )
    if fmt == NCU_REP:
        ident, long, rules = _read_rep(path)
    else:
        frame = _read_csv_frame(path)
        if fmt == NCU_RAW_CSV:
            ident, long, rules = _raw_to_long(path, frame)
        else:
            ident, long, rules = _details_to_long(path, frame)
    return build_ncu_report(path, fmt, ident, long, rules)


def _unique_names(header: list[str]) -> list[str]:
    """Column names made unique: a repeated name (an edited or concatenated export) keeps its first
    column under the name and the later ones as ``NAME#2``, ``NAME#3``..., which nothing reads."""
    seen: dict[str, int] = {}
    out = []
    for name in header:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out


def _read_csv_frame(path: Path) -> pd.DataFrame:
    """The CSV as a frame of strings with the header's columns. Console noise before the header,
    ``==PROF==`` lines and repeated headers (one per profiled process) are dropped; rows shorter than the
    header (trailing fields left off) are padded with ``""`` and empty trailing fields cut."""
    try:
        text = read_regular(path, max_input_bytes(), "ncu CSV").decode("utf-8", errors="replace")
    except BoundedReadError as exc:
        raise InputError(path, exc.reason, hint=exc.hint) from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if HEADER_RE.match(line)), None)
    if start is None:  # detect_ncu saw it in the first MiB, so this is unreachable for real files
        raise InputError(path, "no ncu CSV header found")
    header_line = lines[start].strip()
    body = [
        line for line in lines[start + 1:]
        if line.strip() and not line.lstrip().startswith(NOISE_PREFIXES) and line.strip() != header_line
    ]
    header = split_header(header_line)
    while header and header[-1] == "":  # trailing comma on the header line
        header.pop()
    header = _unique_names(header)
    if not body:
        raise InputError(path, "ncu CSV has a header but no rows (no kernel was profiled?)")
    spare = [f"__extra{i}" for i in range(4)]  # room for trailing commas
    try:
        frame = pd.read_csv(
            io.StringIO("\n".join(body)), header=None, names=header + spare, dtype=str,
            keep_default_na=False, na_filter=False, engine="c",
        )
    except (pd.errors.ParserError, ValueError):  # ragged beyond the spare columns: slow, tolerant path
        n = len(header)
        rows = csv.reader(io.StringIO("\n".join(body)))
        return pd.DataFrame([(r + [""] * n)[:n] for r in rows], columns=header, dtype="object")
    return frame[header].astype(object)


def _ident_frame(frame: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in _IDENT if c in frame.columns]
    ident = frame[cols].rename(columns=_IDENT)
    for c in _IDENT.values():
        if c not in ident.columns:
            ident[c] = ""
    return ident


def _raw_to_long(path: Path, frame: pd.DataFrame) -> tuple[pd.DataFrame, ...]:
    units: dict[str, str] = {}
    first = frame.iloc[0]
    if str(first.get("ID", "")).strip() == "":  # the units row
        units = {c: str(first[c]) for c in frame.columns}
        frame = frame.iloc[1:].reset_index(drop=True)
    if frame.empty:
        raise InputError(path, "ncu raw CSV has a header and units but no kernel rows")
    ident = _ident_frame(frame)
    metric_cols = [c for c in frame.columns if c not in _IDENT and c]
    long = frame[["ID"] + metric_cols].melt(id_vars="ID", var_name="key", value_name="value")
    long = long.rename(columns={"ID": "ncu_id"})
    long["unit"] = long["key"].map(units).fillna("")
    long["section"] = ""
    long["metric"] = long["key"]
    return ident, long, empty_ncu_frame(("ncu_id",) + NCU_RULE_COLUMNS[2:])


def _details_to_long(path: Path, frame: pd.DataFrame) -> tuple[pd.DataFrame, ...]:
    missing = [c for c in ("Metric Name", "Metric Value") if c not in frame.columns]
    if missing:
        raise InputError(path, f"ncu details CSV lacks columns {missing}")
    ident = _ident_frame(frame).drop_duplicates("ncu_id", keep="first")
    det = frame[["ID"] + [c for c in _DETAIL_COLS if c in frame.columns]].rename(
        columns={"ID": "ncu_id", **_DETAIL_COLS}
    )
    for c in _DETAIL_COLS.values():
        if c not in det.columns:
            det[c] = ""
    det = det.fillna("")
    metrics = det[det["metric"].str.strip() != ""]
    long = metrics[["ncu_id", "section", "metric", "unit", "value"]].copy()
    raw_like = long["metric"].str.contains("__", regex=False)
    long["key"] = long["metric"].where(raw_like, long["section"] + ": " + long["metric"])
    rules = det[det["rule"].str.strip() != ""][
        ["ncu_id", "section", "rule", "type", "description", "speedup_type", "speedup_pct"]
    ].copy()
    return ident, long, rules


def _read_rep(path: Path) -> tuple[pd.DataFrame, ...]:
    """Read a .ncu-rep through ``ncu_report`` into the same (ident, long, rules) frames as the CSVs."""
    hint = _EXPORT_HINT_TEMPLATE.format(name=path.name, stem=path.stem)
    try:
        import ncu_report  # type: ignore[import-not-found]
    except ImportError:
        raise UnsupportedFormatError(
            path, "reading .ncu-rep needs NVIDIA's ncu_report module", hint=f"pip install ncu-report, or {hint}"
        ) from None
    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as exc:  # noqa: BLE001 - the module raises plain exceptions for versions it cannot read
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsupportedFormatError(
            path, f"ncu_report {_module_version(ncu_report)} cannot read this report ({msg})", hint=hint
        ) from None
    if ctx is None:
        raise UnsupportedFormatError(
            path, f"ncu_report {_module_version(ncu_report)} cannot read this report", hint=hint
        )
    ident_rows: list[dict[str, Any]] = []
    long_rows: list[tuple[int, str, str, Any]] = []
    rule_rows: list[dict[str, Any]] = []
    text_metrics = {"device__attribute_display_name"}
    ncu_id = 0
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            values: dict[str, Any] = {}
            for name in action.metric_names():
                metric = action.metric_by_name(name)
                if metric is None or (metric.num_instances() or 0) > 0:
                    continue  # instanced metrics (per-SM, per-PC) have no single value
                try:
                    value = metric.value()
                except Exception:  # noqa: BLE001, S112 - a metric ncu_report cannot decode is skipped
                    continue
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    long_rows.append((ncu_id, name, metric.unit() or "", float(value)))
                elif name in text_metrics:
                    values[name] = value
            ident_rows.append(
                {
                    "ncu_id": str(ncu_id),
                    "name": action.name(action.NameBase_DEMANGLED) or action.name(),
                    "mangled": action.name(action.NameBase_MANGLED) or "",
                    "device_name": str(values.get("device__attribute_display_name") or ""),
                }
            )
            for res in _rep_rules(action):
                rule_rows.append({"ncu_id": str(ncu_id), **res})
            ncu_id += 1
    if not ident_rows:
        raise InputError(path, "the report holds no profiled kernel")
    ident = pd.DataFrame(ident_rows)
    for c in _IDENT.values():
        if c not in ident.columns:
            ident[c] = ""
    long = pd.DataFrame(long_rows, columns=["ncu_id", "key", "unit", "value"])
    long["ncu_id"] = long["ncu_id"].astype(str)
    long["section"] = ""
    long["metric"] = long["key"]
    rules = pd.DataFrame(
        rule_rows, columns=["ncu_id", "section", "rule", "type", "description", "speedup_type", "speedup_pct"]
    )
    return ident, long, rules


def _module_version(module: Any) -> str:
    try:
        from importlib.metadata import version

        return version("ncu-report")
    except Exception:  # noqa: BLE001 - version is only decoration for the message
        return str(getattr(module, "__version__", "")) or "(unknown version)"


# ncu_report's MsgType / SpeedupType codes -> the details page's spelling.
_MSG_TYPES = {0: "INF", 1: "OK", 2: "OPT", 3: "WRN", 4: "ERR"}
_SPEEDUP_TYPES = {1: "local", 2: "global"}


def _code(value: Any) -> int | None:
    """An enum member or int from ncu_report -> its int code (None when neither)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _rep_rules(action: Any) -> list[dict[str, Any]]:
    """ncu's rule results stored in the report, as rows like the details page's."""
    try:
        results = action.rule_results_as_dicts()
    except Exception:  # noqa: BLE001 - older reports or modules without rule data
        return []
    out = []
    for res in results or []:
        message = res.get("rule_message") or {}
        speedup = res.get("speedup_estimation") or {}
        stype = _SPEEDUP_TYPES.get(_code(speedup.get("type")) or 0, str(speedup.get("type", "")).lower())
        mtype = _code(message.get("type"))
        out.append(
            {
                "section": str(res.get("section_identifier", "")),
                "rule": str(res.get("rule_identifier", "") or res.get("name", "")),
                "type": _MSG_TYPES.get(mtype, "") if mtype is not None else str(message.get("type", "")),
                "description": str(message.get("message", "")),
                "speedup_type": "global" if "global" in stype else "local" if "local" in stype else "",
                "speedup_pct": speedup.get("speedup", np.nan),
            }
        )
    return out


