"""Nsight Compute metrics: load ``ncu`` exports into one normalized model and join them to nsys kernels.

nsys says where the time goes; ncu says why a kernel is slow. This module reads the three forms ncu
results come in and turns each into the same :class:`NcuReport`:

``ncu-raw-csv``      ``ncu --csv --page raw``: one row per profiled launch, one column per metric, a
                     second row of units.
``ncu-details-csv``  ``ncu --csv --page details`` (and plain ``ncu --csv --metrics ...`` console
                     output): one row per (launch, section, metric) with display names
                     ("Duration", "Achieved Occupancy") or raw counter names, plus rows carrying
                     ncu's own rule verdicts.
``ncu-rep``          the binary report, read through NVIDIA's ``ncu_report`` module (PyPI
                     ``ncu-report``, the ``ncu`` extra); without it the error says how to export CSV.

Real exports carry thousands separators (``13,485``), a unit per value that varies (``us``, ``msecond``,
``Mbyte``, ``Gbyte/s``, ``Ghz``, ``%``), ``n/a``, trailing commas, and console noise (``==PROF==`` lines,
the profiled program's own output) before the CSV header; all of that is handled here. Every value is
converted to SI base units (seconds, bytes, bytes/s, Hz, FLOP/s); percentages stay 0..100.

Public API: :func:`detect_ncu`, :func:`load_ncu`, :func:`join_ncu`, :class:`NcuReport`,
:func:`normalize_kernel_name`, :func:`kernel_base_name`, :func:`parse_unit`, :func:`parse_values`.
"""
from __future__ import annotations

import csv
import io
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from analyzer.boundedio import BoundedReadError, max_input_bytes, read_regular
from analyzer.errors import InputError, UnsupportedFormatError

if TYPE_CHECKING:
    from analyzer.loading.model import Trace

NCU_RAW_CSV = "ncu-raw-csv"
NCU_DETAILS_CSV = "ncu-details-csv"
NCU_REP = "ncu-rep"

# First bytes of every .ncu-rep seen so far (2023.1 report: "NVR\0" then a little-endian version word).
NCU_REP_MAGIC = b"NVR\x00"

_EXPORT_HINT_TEMPLATE = "export CSV instead: ncu --import {name} --csv --page raw > {stem}.raw.csv"

# --------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------

# Column -> one-line description (with unit). The fact layer re-uses these descriptions.
NCU_KERNEL_COLUMN_DOCS: dict[str, str] = {
    "id": "profiled launch id, unique in this report (ncu's ID; renumbered when several files are merged)",
    "ncu_id": "ncu's own ID column for the launch (as exported)",
    "source": "file the launch was read from",
    "name": "kernel name as ncu printed it (demangled where the export has it)",
    "short_name": "function name without namespace, template arguments, parameters or return type",
    "mangled": "mangled name (.ncu-rep only; '' otherwise)",
    "process_id": "profiled process id, -1 when unknown",
    "process_name": "profiled process name",
    "context": "CUDA context id, -1 when unknown",
    "stream": "CUDA stream id, -1 when unknown",
    "device": "CUDA device index, -1 when unknown",
    "device_name": "GPU name where the export has it (raw page and .ncu-rep), '' otherwise",
    "cc": "compute capability, e.g. '8.6'",
    "ncu_nvtx_path": "NVTX push/pop ranges open at the launch as ncu recorded them (--nvtx), outermost first, "
    "joined by '/' like nsys nvtx_path (e.g. 'step_0/attention/computing_softmax'); '' without --nvtx",
    "grid_x": "grid dimension x (blocks), -1 when unknown",
    "grid_y": "grid dimension y (blocks), -1 when unknown",
    "grid_z": "grid dimension z (blocks), -1 when unknown",
    "block_x": "block dimension x (threads), -1 when unknown",
    "block_y": "block dimension y (threads), -1 when unknown",
    "block_z": "block dimension z (threads), -1 when unknown",
    "block_size": "threads per block (block_x*block_y*block_z), -1 when unknown",
    "grid_size": "blocks per grid (grid_x*grid_y*grid_z), -1 when unknown",
    "duration_ns": "kernel duration under ncu (gpu__time_duration.sum / 'Duration'), ns; NaN if absent",
    "sm_frequency_hz": "SM clock during the measurement, Hz",
    "sm_count": "number of SMs on the device",
    "sm_throughput_pct": "Compute (SM) throughput, % of peak (sm__throughput.avg.pct_of_peak_sustained_elapsed)",
    "memory_throughput_pct": "Memory throughput, % of peak "
    "(gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed)",
    "dram_throughput_pct": "DRAM throughput, % of peak (dram__throughput.avg.pct_of_peak_sustained_elapsed)",
    "achieved_occupancy": "achieved occupancy, % of the SM's warp slots (0..100)",
    "theoretical_occupancy": "theoretical occupancy, % of the SM's warp slots (0..100)",
    "occupancy_limit_registers": "blocks per SM allowed by register use (launch__occupancy_limit_registers)",
    "occupancy_limit_shared_mem": "blocks per SM allowed by shared memory use",
    "occupancy_limit_warps": "blocks per SM allowed by the warp limit",
    "occupancy_limit_blocks": "blocks per SM allowed by the hardware block limit",
    "occupancy_limiter": "which of registers|shared_mem|warps|blocks allows the fewest blocks per SM, '' unknown",
    "registers_per_thread": "registers per thread",
    "static_smem": "static shared memory per block, bytes",
    "dynamic_smem": "dynamic shared memory per block, bytes",
    "smem_per_block": "static + dynamic shared memory per block, bytes",
    "waves_per_sm": "launch__waves_per_multiprocessor: blocks / (SMs * blocks per SM)",
    "small_grid": "True when the grid is less than one full wave (waves_per_sm < 1)",
    "tail_wave_fill_pct": "how full the last wave is, % (100 when the wave count is whole)",
    "tail_effect_pct": "share of SM capacity idle because of a partial last wave, % of the kernel's runtime "
    "(0 when waves_per_sm < 1 or whole)",
    "flop_count": "floating-point operations of flop_precision, the precision the roofline compares with its "
    "peak (ncu's roofline: add + mul + 2*fma for fp32/fp64; 2*hadd + 2*hmul + 4*hfma for fp16, whose SASS "
    "instructions are 2-wide)",
    "flop_count_all": "floating-point operations over fp16 + fp32 + fp64",
    "achieved_flops": "achieved FLOP/s of flop_precision (flop_count / duration; per-cycle counters x SM clock)",
    "flop_precision": "precision with the most FLOPs: fp16|fp32|fp64, '' when no FLOP counters",
    "dram_bytes": "bytes moved to/from DRAM (dram__bytes.sum, or read + write)",
    "dram_bandwidth": "achieved DRAM bandwidth, bytes/s",
    "arithmetic_intensity": "flop_count / dram_bytes, FLOP/byte",
    "peak_flops": "peak FLOP/s of flop_precision (fp32 when none) on this device",
    "peak_bandwidth": "peak DRAM bandwidth, bytes/s",
    "peak_source": "where the peaks came from: 'counters' (ncu peak_sustained metrics), "
    "'device-attributes' (clock x units), or ''",
    "stall_reason": "dominant warp stall reason (e.g. long_scoreboard), '' when the export has fewer than two "
    "stall reasons",
    "stall_share": "its share of the cycles between two issued instructions (all reasons + selected), % "
    "(0..100), as ncu's CPIStall rule states it; NaN when unknown",
    "global_ld_sectors": "L1TEX global load sectors (l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum)",
    "global_ld_requests": "L1TEX global load requests (l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum)",
    "sectors_per_request": "global load sectors per request (ideal: 4 for 4-byte loads by a full warp, 16 for "
    "16-byte vector loads, so it is no coalescing verdict by itself; uncoalesced_excess_pct is)",
    "uncoalesced_excess_pct": "global L2 sectors above ideal, % of sectors (memory_l2_theoretical_sectors_global"
    "[_ideal|_excessive])",
    "shared_bank_conflicts": "shared-memory bank conflicts, load + store "
    "(l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld/st.sum, as ncu's SharedMemoryConflicts rule; the "
    "all-ops aggregate ..._mem_shared.sum also counts other shared traffic and is used only without them)",
    "shared_wavefronts": "shared-memory wavefronts of the same operations "
    "(l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld/st.sum)",
    "bank_conflict_pct": "bank conflicts as % of shared wavefronts (load + store)",
    "shared_pipe_pct": "shared-memory data pipe utilization, % of peak "
    "(l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed)",
}
NCU_KERNEL_COLUMNS: tuple[str, ...] = tuple(NCU_KERNEL_COLUMN_DOCS)

NCU_JOIN_COLUMN_DOCS: dict[str, str] = {
    "matched": "True when the launch was matched to a kernel on the nsys timeline",
    "match_key": "how it matched: 'name+grid+block+nvtx' (same NVTX path too), 'name+grid+block', "
    "'base+grid+block', 'base' (name only), '' unmatched",
    "unmatched_reason": "why it did not match ('' when matched)",
    "nsys_index": "row index in trace.kernels of the matched launch, -1 when unmatched",
    "nvtx_path": "NVTX path of the matched nsys launch, '' when unmatched or none",
    "nvtx_range": "innermost NVTX range of the matched nsys launch, ''",
    "matched_ns": "total nsys time of this kernel configuration (same key) on the timeline, ns",
    "timeline_count": "nsys launches of this configuration on the timeline",
    "gpu_time_share": "matched_ns / total nsys kernel time (0..1)",
}
NCU_JOIN_COLUMNS: tuple[str, ...] = tuple(NCU_JOIN_COLUMN_DOCS)

NCU_RULE_COLUMN_DOCS: dict[str, str] = {
    "id": "profiled launch id (joins ncu_kernels.id)",
    "name": "kernel name",
    "section": "ncu section the rule belongs to (e.g. SpeedOfLight, Occupancy)",
    "rule": "ncu rule name (e.g. SOLBottleneck, TheoreticalOccupancy)",
    "type": "ncu rule type: OPT (optimization), WRN, INF, ERR, OK",
    "description": "ncu's rule text",
    "speedup_type": "'local' (this kernel) or 'global' (whole workload), '' when none",
    "speedup_pct": "ncu's estimated speed-up, %, NaN when none",
}
NCU_RULE_COLUMNS: tuple[str, ...] = tuple(NCU_RULE_COLUMN_DOCS)

NCU_STALL_COLUMN_DOCS: dict[str, str] = {
    "id": "profiled launch id (joins ncu_kernels.id)",
    "reason": "stall reason (long_scoreboard, barrier, mio_throttle, ...)",
    "value": "the metric's value (cycles per issued instruction, or samples for pcsamp metrics)",
    "share": "share of the cycles between two issued instructions (all reasons + selected), % (0..100), as ncu"
    "'s CPIStall rule states it; NaN for 'selected' (not a stall) and when "
    "the export has fewer than two stall reasons",
    "metric": "the ncu metric the value came from",
}
NCU_STALL_COLUMNS: tuple[str, ...] = tuple(NCU_STALL_COLUMN_DOCS)

_TEXT_COLUMNS = {
    "source", "name", "short_name", "mangled", "process_name", "device_name", "cc", "occupancy_limiter",
    "flop_precision", "peak_source", "stall_reason", "ncu_nvtx_path", "match_key", "unmatched_reason", "nvtx_path",
    "nvtx_range", "section", "rule", "type", "description", "speedup_type", "reason", "metric", "bound",
    "roofline_side", "time_label",
}
_INT_COLUMNS = {
    "id", "ncu_id", "process_id", "context", "stream", "device", "grid_x", "grid_y", "grid_z", "block_x",
    "block_y", "block_z", "block_size", "grid_size", "nsys_index", "timeline_count", "rank",
}
_BOOL_COLUMNS = {"small_grid", "matched"}


def empty_ncu_frame(columns: Iterable[str]) -> pd.DataFrame:
    """An empty frame with ``columns`` typed as the ncu frames type them (text object, ids int64,
    flags bool, metrics float64)."""

    def dtype(c: str) -> str:
        if c in _TEXT_COLUMNS:
            return "object"
        if c in _INT_COLUMNS:
            return "int64"
        if c in _BOOL_COLUMNS:
            return "bool"
        return "float64"

    return pd.DataFrame({c: pd.Series(dtype=dtype(c)) for c in columns})


@dataclass(frozen=True)
class NcuReport:
    """Nsight Compute results for a set of profiled launches, normalized.

    ``kernels``  one row per profiled launch, :data:`NCU_KERNEL_COLUMNS` (+ :data:`NCU_JOIN_COLUMNS`
                 once :func:`join_ncu` ran), ordered by ``id``.
    ``metrics``  every numeric metric of every launch, wide: index ``id``, one column per metric in SI
                 base units (raw counter names as ncu spells them; details-page display metrics as
                 ``"<Section>: <Metric>"``), for rules that need what the normalized columns lack.
    ``units``    metric column -> its SI base unit after conversion (``second``, ``byte``, ``%``, ...).
    ``rules``    ncu's own rule verdicts (:data:`NCU_RULE_COLUMNS`), empty when the export has none.
    ``stalls``   warp stall breakdown, one row per (launch, reason) (:data:`NCU_STALL_COLUMNS`).
    """

    source: tuple[Path, ...]
    format: str  # "ncu-raw-csv" | "ncu-details-csv" | "ncu-rep" (the first file's, when merged)
    kernels: pd.DataFrame
    metrics: pd.DataFrame
    rules: pd.DataFrame
    stalls: pd.DataFrame
    units: Mapping[str, str] = field(default_factory=dict)
    joined: bool = False

    @property
    def name(self) -> str:
        return ", ".join(p.name for p in self.source)

    def __len__(self) -> int:
        return len(self.kernels)


# --------------------------------------------------------------------------------------------------
# Units and values
# --------------------------------------------------------------------------------------------------

_PREFIXES: dict[str, float] = {
    "": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
    "m": 1e-3, "u": 1e-6, "\u00b5": 1e-6, "\u03bc": 1e-6, "n": 1e-9, "p": 1e-12,
    "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3, "Ti": 1024.0**4,
}
# Unit words that take an SI prefix -> their canonical base. Longest first when matching.
_BASES: dict[str, str] = {
    "second": "second", "sec": "second", "s": "second",
    "byte": "byte", "B": "byte",
    "hz": "hz", "Hz": "hz",
    "cycle": "cycle", "inst": "inst", "sector": "sector", "request": "request", "warp": "warp",
    "flop": "flop", "wavefront": "wavefront", "thread": "thread", "block": "block",
}
_BASES_BY_LENGTH = sorted(_BASES, key=len, reverse=True)


def _parse_unit_part(part: str) -> tuple[float, str]:
    part = part.strip()
    for base in _BASES_BY_LENGTH:
        if part.endswith(base):
            prefix = part[: -len(base)]
            if prefix in _PREFIXES:
                return _PREFIXES[prefix], _BASES[base]
    return 1.0, part


def parse_unit(unit: str | None) -> tuple[float, str]:
    """``(factor, base)`` such that ``value_in_unit * factor`` is in ``base``.

    ``"usecond" -> (1e-6, "second")``, ``"Gbyte/s" -> (1e9, "byte/second")``, ``"Ghz" -> (1e9, "hz")``,
    ``"cycle/nsecond" -> (1e9, "hz")``, ``"%" -> (1, "%")``; units without a known prefix pass through
    with factor 1 (``"register/thread"``, ``"block"``).
    """
    unit = (unit or "").strip()
    if not unit:
        return 1.0, ""
    if unit == "%":
        return 1.0, "%"
    parts = unit.split("/")
    factor, base = _parse_unit_part(parts[0])
    bases = [base]
    for part in parts[1:]:
        f, b = _parse_unit_part(part)
        factor /= f
        bases.append(b)
    canonical = "/".join(bases)
    if canonical == "cycle/second":
        canonical = "hz"
    return factor, canonical


_NUMBER_WITH_GROUPS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?$")


def parse_values(values: pd.Series, units: pd.Series | None = None) -> tuple[pd.Series, pd.Series]:
    """Vectorized: ncu value strings (``"13,485"``, ``"9,495.42"``, ``"n/a"``, ``""``) and their units ->
    ``(float values in SI base units, base unit strings)``. Unparseable values become NaN."""
    text = values.astype("string").str.strip()
    grouped = text.str.match(_NUMBER_WITH_GROUPS.pattern).fillna(False).astype(bool)
    text = text.where(~grouped, text.str.replace(",", "", regex=False))
    numbers = pd.to_numeric(text, errors="coerce").astype("float64")
    if units is None:
        return numbers, pd.Series("", index=values.index, dtype="object")
    unit_text = units.fillna("").astype(str)
    table = {u: parse_unit(u) for u in unit_text.unique()}
    factors = unit_text.map(lambda u: table[u][0]).astype("float64")
    bases = unit_text.map(lambda u: table[u][1]).astype("object")
    return numbers * factors, bases


# --------------------------------------------------------------------------------------------------
# Kernel names
# --------------------------------------------------------------------------------------------------

_CAST_BEFORE_NUMBER = re.compile(r"\((?:unsigned |signed )?(?:int|long|long long|short|char|bool|unsigned|"
                                 r"size_t|int64_t|uint64_t|int32_t|uint32_t)\)(?=-?\d)")
_SPACES = re.compile(r"\s+")
# Anonymous-namespace markers as the tools spell them. ncu 2025.3's CSV prints the name with every
# namespace qualifier dropped, and drops the ``at::native::<`` of ``at::native::<unnamed>::`` with them,
# leaving an unbalanced ``unnamed>::`` (real export: ``void unnamed>::cunn_SoftMaxForwardReg<BFloat16, ...,
# unnamed>::SoftMaxForwardEpilogue, long, 4>(T3 *, const T1 *, T5)`` where nsys has
# ``void at::native::<unnamed>::cunn_SoftMaxForwardReg<c10::BFloat16, ..., (int)4>(...)``).
_ANON_NS = re.compile(r"\(anonymous namespace\)::|<unnamed>::|\bunnamed>::")
_QUALIFIERS = re.compile(r"\b(?:[A-Za-z_]\w*::)+")


def _drop_anonymous(name: str) -> str:
    return _ANON_NS.sub("", name)


def normalize_kernel_name(name: str) -> str:
    """A comparison key for demangled names across tools: whitespace removed, a leading ``void``
    return type dropped, C-style casts on template constants removed (nsys prints ``kernel<(int)32>``
    where ncu prints ``kernel<32>``), and namespace qualifiers and anonymous-namespace markers removed
    (ncu's CSV drops qualifiers: ``at::native::vectorized_elementwise_kernel<...,
    std::array<char *, (unsigned long)2>>`` is ``vectorized_elementwise_kernel<..., array<char *, 2>>``
    there)."""
    s = str(name).strip()
    s = s.removeprefix("void ")
    s = _CAST_BEFORE_NUMBER.sub("", s)
    s = _QUALIFIERS.sub("", _drop_anonymous(s))
    return _SPACES.sub("", s)


def _strip_trailing_group(s: str, open_ch: str, close_ch: str) -> str:
    """Remove a balanced ``open_ch ... close_ch`` group that ends ``s`` (parameters, template args)."""
    if not s.endswith(close_ch):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        ch = s[i]
        if ch == close_ch:
            depth += 1
        elif ch == open_ch:
            depth -= 1
            if depth == 0:
                return s[:i].rstrip()
    return s


def _after_last_top_level(s: str, sep: str) -> str:
    depth = 0
    cut = 0
    i = 0
    while i < len(s):
        ch = s[i]
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth = max(0, depth - 1)
        elif depth == 0 and s.startswith(sep, i):
            cut = i + len(sep)
            i += len(sep)
            continue
        i += 1
    return s[cut:]


def kernel_base_name(name: str) -> str:
    """The bare function name: ``"void at::native::elementwise_kernel<128, 4>(int, F)"`` ->
    ``"elementwise_kernel"``; ``"enable_if<!T7, void>::type kernel<int, ...>(T13)"`` -> ``"kernel"``.
    This is what nsys exports as the short name."""
    s = _drop_anonymous(str(name).strip())
    s = _strip_trailing_group(s, "(", ")")
    s = _strip_trailing_group(s, "<", ">")
    s = _after_last_top_level(s, " ")
    s = _after_last_top_level(s, "::")
    return s.strip() or str(name).strip()


# --------------------------------------------------------------------------------------------------
# Detection
# --------------------------------------------------------------------------------------------------

_HEADER_RE = re.compile(r'^\s*"?ID"?\s*,\s*"?Process ID"?\s*,')
_NOISE_PREFIXES = ("==PROF==", "==WARNING==", "==ERROR==", "==INFO==", "==DEBUG==")
_SNIFF_BYTES = 1 << 20


def _split_header(line: str) -> list[str]:
    return [c.strip() for c in next(csv.reader([line]))]


def detect_ncu(path: str | Path) -> str | None:
    """``"ncu-raw-csv" | "ncu-details-csv" | "ncu-rep"`` by content, or None when ``path`` is not an ncu
    export (or cannot be read). CSVs are recognised by their header (``"ID","Process ID",...``) anywhere in
    the first MiB (console noise may precede it); raw vs details by whether ``Metric Name`` exists."""
    p = Path(path)
    try:
        if not stat.S_ISREG(p.stat().st_mode):  # a FIFO would block this read forever
            return None
        with p.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError:
        return None
    if head.startswith(NCU_REP_MAGIC):
        return NCU_REP
    if b"\x00" in head[:4096]:
        return None
    text = head.decode("utf-8", errors="replace")
    for line in text.splitlines():
        if _HEADER_RE.match(line):
            cols = _split_header(line)
            if "Kernel Name" not in cols:
                return None
            return NCU_DETAILS_CSV if "Metric Name" in cols else NCU_RAW_CSV
    return None


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------

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
    return _merge(parts)


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
    return _build(path, fmt, ident, long, rules)


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
    start = next((i for i, line in enumerate(lines) if _HEADER_RE.match(line)), None)
    if start is None:  # detect_ncu saw it in the first MiB, so this is unreachable for real files
        raise InputError(path, "no ncu CSV header found")
    header_line = lines[start].strip()
    body = [
        line for line in lines[start + 1:]
        if line.strip() and not line.lstrip().startswith(_NOISE_PREFIXES) and line.strip() != header_line
    ]
    header = _split_header(header_line)
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


# --------------------------------------------------------------------------------------------------
# Normalization: long metric rows -> the kernels frame
# --------------------------------------------------------------------------------------------------

# canonical column -> candidates, best first. A candidate is a raw metric name, or
# "Display Name|base unit" for details-page metrics (the unit disambiguates e.g. "Memory Throughput",
# which is a % in Speed Of Light and bytes/s in Memory Workload Analysis).
_CANON: dict[str, tuple[str, ...]] = {
    "duration": ("gpu__time_duration.sum", "gpu__time_duration.avg", "Duration|second"),
    "sm_frequency_hz": (
        "sm__cycles_elapsed.avg.per_second", "smsp__cycles_elapsed.avg.per_second",
        "gpc__cycles_elapsed.avg.per_second", "SM Frequency|hz",
    ),
    "sm_count": ("device__attribute_multiprocessor_count", "launch__sm_count", "# SMs|SM", "# SMs|"),
    "sm_throughput_pct": (
        "sm__throughput.avg.pct_of_peak_sustained_elapsed", "Compute (SM) Throughput|%", "SOL SM|%",
    ),
    "memory_throughput_pct": (
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "Memory Throughput|%",
        "SOL Memory|%",
    ),
    "dram_throughput_pct": (
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "DRAM Throughput|%", "SOL FB|%",
        "SOL DRAM|%",
    ),
    "achieved_occupancy": ("sm__warps_active.avg.pct_of_peak_sustained_active", "Achieved Occupancy|%"),
    "theoretical_occupancy": ("sm__maximum_warps_per_active_cycle_pct", "Theoretical Occupancy|%"),
    "occupancy_limit_registers": ("launch__occupancy_limit_registers", "Block Limit Registers|block"),
    "occupancy_limit_shared_mem": ("launch__occupancy_limit_shared_mem", "Block Limit Shared Mem|block"),
    "occupancy_limit_warps": ("launch__occupancy_limit_warps", "Block Limit Warps|block"),
    "occupancy_limit_blocks": ("launch__occupancy_limit_blocks", "Block Limit SM|block"),
    "registers_per_thread": ("launch__registers_per_thread", "Registers Per Thread|register/thread"),
    "static_smem": (
        "launch__shared_mem_per_block_static", "Static Shared Memory Per Block|byte/block",
    ),
    "dynamic_smem": (
        "launch__shared_mem_per_block_dynamic", "Dynamic Shared Memory Per Block|byte/block",
    ),
    "waves_per_sm": ("launch__waves_per_multiprocessor", "Waves Per SM|"),
    "grid_x": ("launch__grid_dim_x",),
    "grid_y": ("launch__grid_dim_y",),
    "grid_z": ("launch__grid_dim_z",),
    "block_x": ("launch__block_dim_x",),
    "block_y": ("launch__block_dim_y",),
    "block_z": ("launch__block_dim_z",),
    "grid_size_metric": ("launch__grid_size", "Grid Size|"),
    "block_size_metric": ("launch__block_size", "Block Size|"),
    "dram_bytes": ("dram__bytes.sum",),
    "dram_bytes_read": ("dram__bytes_read.sum",),
    "dram_bytes_write": ("dram__bytes_write.sum",),
    "dram_bandwidth": ("dram__bytes.sum.per_second", "Memory Throughput|byte/second"),
    "peak_dram_per_cycle": ("dram__bytes.sum.peak_sustained",),
    "dram_cycles_per_second": ("dram__cycles_elapsed.avg.per_second",),
    "global_ld_sectors": ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",),
    "global_ld_requests": ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",),
    "l2_sectors_global": ("memory_l2_theoretical_sectors_global",),
    "l2_sectors_global_ideal": ("memory_l2_theoretical_sectors_global_ideal",),
    "l2_sectors_global_excessive": (
        "derived__memory_l2_theoretical_sectors_global_excessive", "memory_l2_theoretical_sectors_global_excessive",
    ),
    "bank_conflicts_ld": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",),
    "bank_conflicts_st": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",),
    "bank_conflicts_all": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",),
    "wavefronts_ld": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",),
    "wavefronts_st": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",),
    "wavefronts_all": ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",),
    "shared_pipe_pct": ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed",),
    "cc_major": ("device__attribute_compute_capability_major",),
    "cc_minor": ("device__attribute_compute_capability_minor",),
    "clock_rate_khz": ("device__attribute_clock_rate",),
    "memory_clock_khz": ("device__attribute_memory_clock_rate",),
    "memory_bus_bits": ("device__attribute_global_memory_bus_width",),
    "device_id": ("launch__device_id",),
    "stream_id": ("launch__stream_id",),
    "context_id": ("launch__context_id",),
}
_PRECISIONS = (("fp16", "h"), ("fp32", "f"), ("fp64", "d"))
_FLOP_WEIGHTS = {"fp16": (2, 2, 4), "fp32": (1, 1, 2), "fp64": (1, 1, 2)}  # add, mul, fma
for _p, _l in _PRECISIONS:
    for _op in ("add", "mul", "fma"):
        for _unit in ("sm", "smsp"):
            _base = f"{_unit}__sass_thread_inst_executed_op_{_l}{_op}_pred_on.sum"
            _CANON.setdefault(f"{_p}_{_op}_count", ())
            _CANON[f"{_p}_{_op}_count"] += (_base,)
            _CANON.setdefault(f"{_p}_{_op}_per_cycle", ())
            _CANON[f"{_p}_{_op}_per_cycle"] += (_base + ".per_cycle_elapsed",)
    _CANON[f"{_p}_fma_peak_per_cycle"] = (
        f"sm__sass_thread_inst_executed_op_{_l}fma_pred_on.sum.peak_sustained",
        f"smsp__sass_thread_inst_executed_op_{_l}fma_pred_on.sum.peak_sustained",
    )
_CANON["cycles_per_second_smsp"] = ("smsp__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.avg.per_second")

_CANDIDATES = pd.DataFrame(
    [(cand, canon, prio) for canon, cands in _CANON.items() for prio, cand in enumerate(cands)],
    columns=["lookup", "canon", "prio"],
)

# FP32 lanes per SM by compute capability, for the device-attribute peak fallback (fp32 FMA = 2 FLOP).
_FP32_LANES_PER_SM = {
    (6, 0): 64, (6, 1): 128, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128,
    (8, 9): 128, (9, 0): 128, (10, 0): 128, (10, 3): 128, (12, 0): 128, (12, 1): 128,
}

_STALL_RE = re.compile(
    r"^smsp__(?P<family>average_warps_issue_stalled|average_warp_latency_issue_stalled|pcsamp_warps_issue_stalled|"
    r"warp_issue_stalled|warps_issue_stalled)_(?P<reason>[a-z0-9_]+?)"
    r"(?P<suffix>_per_issue_active|_per_warp_active|_not_issued)?(?:\.(?P<roll>ratio|pct|sum|avg))?$"
)
_WARP_LATENCY = "smsp__average_warp_latency_per_inst_issued.ratio"
# Preferred stall metric families (first present wins per launch), with the rollup to use.
_STALL_FAMILIES = (
    ("average_warps_issue_stalled", "_per_issue_active", "ratio"),
    ("average_warp_latency_issue_stalled", "", "ratio"),
    ("pcsamp_warps_issue_stalled", "", None),
    ("warp_issue_stalled", "_per_warp_active", "pct"),
    ("warps_issue_stalled", "", "avg"),
)


def _dims(text: pd.Series) -> pd.DataFrame:
    """``"(32, 4, 1)"`` strings -> three int columns (-1 where unparseable)."""
    parts = text.fillna("").astype(str).str.extract(r"^\s*\(?\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)?\s*$")
    return parts.apply(pd.to_numeric, errors="coerce")


def _ncu_ids(text: pd.Series) -> pd.Series:
    """ncu's ``ID`` column as float ids (``1,234`` grouping allowed); NaN where the cell is no whole number
    that int64 holds exactly (text, ``1e400``, ``inf``, fractions)."""
    ids = pd.to_numeric(text.astype(str).str.replace(",", "", regex=False), errors="coerce").astype("float64")
    whole = np.isfinite(ids) & (ids == np.floor(ids)) & (ids.abs() <= 2.0**53)
    return ids.where(whole)


def _build(path: Path, fmt: str, ident: pd.DataFrame, long: pd.DataFrame, rules: pd.DataFrame) -> NcuReport:
    ident = ident.fillna("").copy()
    ids = _ncu_ids(ident["ncu_id"])
    if ids.isna().any():
        bad = ident.loc[ids.isna(), "ncu_id"].iloc[0]
        raise InputError(path, f"ncu export has an ID that is not a kernel number ({bad!r}); the file looks corrupt")
    ident["id"] = ids.astype("int64")
    ident = ident.drop_duplicates("id").sort_values("id", kind="stable").reset_index(drop=True)

    long = long.copy()
    long["id"] = _ncu_ids(long["ncu_id"])
    long = long[long["id"].notna()]
    long["id"] = long["id"].astype("int64")
    value, base = parse_values(long["value"], long["unit"])
    long["value"] = value
    long["base_unit"] = base

    numeric = long[long["value"].notna()]
    dedup = numeric.drop_duplicates(["id", "key"], keep="first")
    metrics = dedup.pivot(index="id", columns="key", values="value").reindex(ident["id"])
    metrics.columns.name = None
    units = dict(zip(dedup["key"], dedup["base_unit"]))

    # Canonical values: match raw names by key, display names by "metric|unit".
    # as object text: pandas 3.0 refused str + object ("operation 'add' not supported") on a truncated export
    numeric = numeric.assign(display=_text(numeric["metric"]) + "|" + _text(numeric["base_unit"]))
    hits = pd.concat(
        [
            numeric.merge(_CANDIDATES, left_on="key", right_on="lookup"),
            numeric.merge(_CANDIDATES, left_on="display", right_on="lookup"),
        ],
        ignore_index=True,
    )
    hits = hits.sort_values(["id", "canon", "prio"], kind="stable").drop_duplicates(["id", "canon"])
    canon = hits.pivot(index="id", columns="canon", values="value").reindex(ident["id"])
    canon = canon.reindex(columns=list(_CANON)).reset_index(drop=True)

    stalls = _stalls(long)
    kernels = _kernels(ident, canon, stalls, path)
    rules = _rules_frame(rules, ident)
    stalls = stalls.reset_index(drop=True)
    return NcuReport(
        source=(path,), format=fmt, kernels=kernels, metrics=metrics, rules=rules, stalls=stalls, units=units
    )


def _text(series: pd.Series) -> pd.Series:
    """Object-dtype text with missing values as ``""`` (whatever dtype ``series`` had)."""
    return series.astype(object).where(series.notna(), "").astype(str).astype(object)


def _int_or(series: pd.Series, default: int = -1) -> pd.Series:
    """Whole numbers as int64; ``default`` for text, NaN, infinities (``1e400``) and values int64 cannot hold."""
    values = pd.to_numeric(series, errors="coerce").astype("float64")
    fits = np.isfinite(values) & (values.abs() < 2.0**62)
    return values.where(fits, default).round().astype("int64")


def _kernels(ident: pd.DataFrame, c: pd.DataFrame, stalls: pd.DataFrame, path: Path) -> pd.DataFrame:
    k = pd.DataFrame(index=ident.index)
    k["id"] = ident["id"]
    k["ncu_id"] = ident["id"]
    k["source"] = path.name
    k["name"] = ident["name"].astype(str)
    k["short_name"] = k["name"].map({n: kernel_base_name(n) for n in k["name"].unique()})
    k["mangled"] = ident["mangled"].astype(str) if "mangled" in ident else ""
    k["process_id"] = _int_or(ident["process_id"])
    k["process_name"] = ident["process_name"].astype(str)
    k["context"] = _int_or(ident["context"].where(ident["context"] != "", c["context_id"]))
    k["stream"] = _int_or(ident["stream"].where(ident["stream"] != "", c["stream_id"]))
    k["device"] = _int_or(ident["device"].where(ident["device"] != "", c["device_id"]))
    k["device_name"] = ident["device_name"].astype(str) if "device_name" in ident else ""
    # whole numbers only: a damaged attribute (9.5, 1e400) cannot be cast to Int64 ("non-equivalent object")
    cc_major, cc_minor = _int_or(c["cc_major"]), _int_or(c["cc_minor"])
    cc_attr = (cc_major.astype(str) + "." + cc_minor.astype(str)).astype(object)
    k["cc"] = ident["cc"].astype(str).where(ident["cc"].astype(str) != "",
                                            cc_attr.where((cc_major >= 0) & (cc_minor >= 0), ""))
    stacks = ident["nvtx_stack"].astype(str) if "nvtx_stack" in ident else pd.Series("", index=k.index)
    k["ncu_nvtx_path"] = stacks.map({t: _nvtx_path(t) for t in stacks.unique()}).astype(object)

    grid = _dims(ident["grid_dims"])
    block = _dims(ident["block_dims"])
    for i, axis in enumerate("xyz"):
        k[f"grid_{axis}"] = _int_or(grid[i].fillna(c[f"grid_{axis}"]))
        k[f"block_{axis}"] = _int_or(block[i].fillna(c[f"block_{axis}"]))
    have_grid = (k[["grid_x", "grid_y", "grid_z"]] >= 0).all(axis=1)
    have_block = (k[["block_x", "block_y", "block_z"]] >= 0).all(axis=1)
    k["block_size"] = (k["block_x"] * k["block_y"] * k["block_z"]).where(have_block, _int_or(c["block_size_metric"]))
    k["grid_size"] = (k["grid_x"] * k["grid_y"] * k["grid_z"]).where(have_grid, _int_or(c["grid_size_metric"]))

    duration_s = c["duration"]
    k["duration_ns"] = duration_s * 1e9
    clock = c["sm_frequency_hz"].fillna(c["clock_rate_khz"] * 1e3)
    k["sm_frequency_hz"] = clock
    k["sm_count"] = c["sm_count"]
    for col in ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "achieved_occupancy",
                "theoretical_occupancy", "occupancy_limit_registers", "occupancy_limit_shared_mem",
                "occupancy_limit_warps", "occupancy_limit_blocks", "registers_per_thread", "static_smem",
                "dynamic_smem", "shared_pipe_pct"):
        k[col] = c[col]
    limit_cols = ["occupancy_limit_registers", "occupancy_limit_shared_mem", "occupancy_limit_warps",
                  "occupancy_limit_blocks"]
    limits = c[limit_cols].astype("float64")
    blocks_per_sm = limits.min(axis=1, skipna=True)
    # Every resource that allows only the fewest blocks limits occupancy (ncu names them all: "limited by the
    # number of required registers, and the required amount of shared memory"); none does when the
    # theoretical occupancy is already the maximum (the real naive-attention softmax: registers and warps
    # both allow 2 blocks of 1024 threads = 100%).
    at_min = limits.eq(blocks_per_sm, axis=0) & limits.notna()
    limiter = pd.Series("", index=k.index, dtype=object)
    for col in limit_cols:
        name = col.removeprefix("occupancy_limit_")
        limiter = limiter.where(~at_min[col], limiter.where(limiter == "", limiter + "+") + name)
    k["occupancy_limiter"] = limiter.where(~(c["theoretical_occupancy"] >= 99.95), "")
    k["smem_per_block"] = c["static_smem"] + c["dynamic_smem"]

    # launch__waves_per_multiprocessor is printed with two decimals (4 blocks on 132 SMs read "0"); the
    # exact value is blocks / (SMs x blocks per SM), which we use whenever the launch limits are known.
    exact = k["grid_size"].where(k["grid_size"] > 0) / (c["sm_count"] * blocks_per_sm.where(blocks_per_sm > 0))
    waves = exact.fillna(c["waves_per_sm"]).astype("float64")
    k["waves_per_sm"] = waves
    few_blocks = (k["grid_size"] > 0) & (k["grid_size"] < c["sm_count"])
    k["small_grid"] = ((waves < 1) | few_blocks).fillna(False).astype(bool)
    frac = waves - np.floor(waves)
    whole = np.isclose(frac, 0.0) | np.isclose(frac, 1.0)
    k["tail_wave_fill_pct"] = np.where(whole, 100.0, frac * 100.0)
    k.loc[waves.isna(), "tail_wave_fill_pct"] = np.nan
    tail = np.where((waves >= 1) & ~whole, (1.0 - frac) / np.ceil(waves) * 100.0, 0.0)
    k["tail_effect_pct"] = pd.Series(tail, index=k.index).where(waves.notna())

    # FLOPs per precision from totals or per-cycle rates times the SM clock, weighted as ncu's roofline
    # weighs them (its derived__..._x2/_x4 metrics): fp32/fp64 add 1, mul 1, fma 2; fp16 SASS instructions
    # are 2-wide (HADD2/HMUL2/HFMA2), so 2, 2, 4.
    smsp_clock = c["cycles_per_second_smsp"].fillna(clock)
    flops_by_p = {}
    for p, _ in _PRECISIONS:
        w = _FLOP_WEIGHTS[p]
        count = (w[0] * c[f"{p}_add_count"].fillna(0) + w[1] * c[f"{p}_mul_count"].fillna(0)
                 + w[2] * c[f"{p}_fma_count"].fillna(0))
        has_count = c[[f"{p}_{op}_count" for op in ("add", "mul", "fma")]].notna().any(axis=1)
        rate = (w[0] * c[f"{p}_add_per_cycle"].fillna(0) + w[1] * c[f"{p}_mul_per_cycle"].fillna(0)
                + w[2] * c[f"{p}_fma_per_cycle"].fillna(0)) * smsp_clock
        has_rate = c[[f"{p}_{op}_per_cycle" for op in ("add", "mul", "fma")]].notna().any(axis=1)
        flops_by_p[p] = count.where(has_count, (rate * duration_s).where(has_rate))
    flops = pd.DataFrame(flops_by_p)
    any_flops = flops.notna().any(axis=1)
    dominant = flops.fillna(0).idxmax(axis=1) if len(flops) else pd.Series(dtype="object")
    k["flop_precision"] = dominant.where(any_flops & (flops.fillna(0).max(axis=1) > 0), "")
    # The roofline compares one precision with that precision's peak (ncu: "achieved 14% of this device's
    # FP32 peak" on the real softmax, whose fp16 HFMA2 work is not part of that 14%).
    k["flop_count_all"] = flops.sum(axis=1, min_count=1)
    mine = pd.Series(np.nan, index=k.index)
    for p, _ in _PRECISIONS:
        mine = mine.where(k["flop_precision"] != p, flops[p])
    k["flop_count"] = mine.where(k["flop_precision"] != "", k["flop_count_all"])
    k["achieved_flops"] = k["flop_count"] / duration_s

    rw = c["dram_bytes_read"].add(c["dram_bytes_write"], fill_value=0)
    k["dram_bytes"] = c["dram_bytes"].fillna(rw).fillna(c["dram_bandwidth"] * duration_s)
    k["dram_bandwidth"] = c["dram_bandwidth"].fillna(k["dram_bytes"] / duration_s)
    k["arithmetic_intensity"] = (k["flop_count"] / k["dram_bytes"]).where(k["dram_bytes"] > 0)

    # Peaks: from ncu's peak_sustained metrics where collected, else from device attributes.
    prec = k["flop_precision"].where(k["flop_precision"] != "", "fp32")
    peak_counter = pd.Series(np.nan, index=k.index)
    for p, _ in _PRECISIONS:
        peak_counter = peak_counter.where(prec != p, _FLOP_WEIGHTS[p][2] * c[f"{p}_fma_peak_per_cycle"] * smsp_clock)
    lanes = pd.Series(
        [_FP32_LANES_PER_SM.get((int(a), int(b)), np.nan) if pd.notna(a) and pd.notna(b) else np.nan
         for a, b in _cc_pairs(k["cc"])],
        index=k.index, dtype="float64",
    )
    attr_clock = c["clock_rate_khz"] * 1e3
    peak_attr = (c["sm_count"] * lanes * 2 * attr_clock).where(prec == "fp32")
    bw_counter = c["peak_dram_per_cycle"] * c["dram_cycles_per_second"]
    bw_attr = c["memory_clock_khz"] * 1e3 * 2 * c["memory_bus_bits"] / 8
    k["peak_flops"] = peak_counter.fillna(peak_attr)
    k["peak_bandwidth"] = bw_counter.fillna(bw_attr)
    from_counters = peak_counter.notna() | bw_counter.notna()
    from_attrs = peak_attr.notna() | bw_attr.notna()
    k["peak_source"] = np.where(from_counters, "counters", np.where(from_attrs, "device-attributes", ""))

    if len(stalls):
        top = stalls.dropna(subset=["share"]).sort_values(["id", "share"], ascending=[True, False])
        top = top.drop_duplicates("id").set_index("id")
        k["stall_reason"] = _text(k["id"].map(top["reason"]))
        k["stall_share"] = k["id"].map(top["share"]).astype("float64")
    else:
        k["stall_reason"] = ""
        k["stall_share"] = np.nan

    k["global_ld_sectors"] = c["global_ld_sectors"]
    k["global_ld_requests"] = c["global_ld_requests"]
    k["sectors_per_request"] = (c["global_ld_sectors"] / c["global_ld_requests"]).where(c["global_ld_requests"] > 0)
    excessive = c["l2_sectors_global_excessive"].fillna(c["l2_sectors_global"] - c["l2_sectors_global_ideal"])
    k["uncoalesced_excess_pct"] = (excessive / c["l2_sectors_global"] * 100).where(c["l2_sectors_global"] > 0)
    # ncu's SharedMemoryConflicts rule reads the load and store counters; the all-ops aggregate also counts
    # other shared traffic (7.1 M "conflicts" against 91 k load + store ones on the real softmax export).
    conflicts = c["bank_conflicts_ld"].add(c["bank_conflicts_st"], fill_value=0).fillna(c["bank_conflicts_all"])
    wavefronts = c["wavefronts_ld"].add(c["wavefronts_st"], fill_value=0).fillna(c["wavefronts_all"])
    k["shared_bank_conflicts"] = conflicts
    k["shared_wavefronts"] = wavefronts
    k["bank_conflict_pct"] = (conflicts / wavefronts * 100).where(wavefronts > 0)
    return k[list(NCU_KERNEL_COLUMNS)].reset_index(drop=True)


_NVTX_QUOTED = re.compile(r'"([^"]*)"')


def _nvtx_path(stack: str) -> str:
    """ncu's NVTX column (``544  "<default domain>:step_0:none:...:step_0"  "<default domain>:attention:..."``:
    a thread id, then one quoted ``Domain:Push/Pop_Range:PL_Type:...:Msg`` entry per open range, outermost
    first) -> ``"step_0/attention"``."""
    names = [q.split(":")[1] for q in _NVTX_QUOTED.findall(str(stack)) if q.count(":") >= 1]
    return "/".join(n for n in names if n)


def _cc_pairs(cc: pd.Series) -> list[tuple[float, float]]:
    parts = cc.astype(str).str.extract(r"^(\d+)\.(\d+)$").apply(pd.to_numeric, errors="coerce")
    return list(zip(parts[0], parts[1]))


def _stalls(long: pd.DataFrame) -> pd.DataFrame:
    """Warp stall rows (one per launch and reason) from whichever stall family each launch has."""
    keys = pd.Series(long["key"].unique())
    parsed = keys.str.extract(_STALL_RE)
    parsed["key"] = keys
    parsed = parsed.dropna(subset=["family"])
    if parsed.empty:
        return empty_ncu_frame(NCU_STALL_COLUMNS)
    parsed = parsed.fillna({"suffix": "", "roll": ""})
    chosen = []
    for prio, (family, suffix, roll) in enumerate(_STALL_FAMILIES):
        sel = parsed[(parsed["family"] == family) & (parsed["suffix"] == suffix)]
        if roll is not None:
            sel = sel[sel["roll"] == roll]
        else:
            sel = sel[sel["roll"] == ""]
        chosen.append(sel.assign(prio=prio))
    table = pd.concat(chosen, ignore_index=True)
    rows = long[["id", "key", "value"]].merge(table[["key", "reason", "prio"]], on="key")
    rows = rows[rows["value"].notna()]
    if rows.empty:
        return empty_ncu_frame(NCU_STALL_COLUMNS)
    best = rows.groupby("id")["prio"].transform("min")
    rows = rows[rows["prio"] == best]
    rows = rows.drop_duplicates(["id", "reason"])
    is_stall = rows["reason"] != "selected"
    # The total includes "selected" (the one cycle a warp issues): ncu's CPIStall rule states a reason's
    # share "of the total average of N cycles between issuing two instructions" that way (real softmax
    # export: not_selected 6.49 of 19.2 cycles = 33.8%, ncu prints 33.8%).
    total = rows["value"].groupby(rows["id"]).transform("sum")
    # ...and where ncu collected it, its denominator exactly: the average warp latency per issued instruction
    # (differs from the sum of the reasons on short kernels: 44.1 vs 37.4 cycles on the real tiny kernels).
    latency = long.loc[long["key"] == _WARP_LATENCY, ["id", "value"]].dropna().drop_duplicates("id")
    per_issue = rows["prio"] == 0  # the *_per_issue_active.ratio family shares that denominator
    total = total.where(~per_issue, rows["id"].map(latency.set_index("id")["value"]).fillna(total))
    reasons = is_stall.groupby(rows["id"]).transform("sum")
    # A share needs something to share with: one reason alone (a report that collected a single stall
    # metric) says nothing about dominance, so its share stays NaN.
    rows = rows.assign(share=(rows["value"] / total * 100).where(is_stall & (total > 0) & (reasons >= 2)))
    out = rows.rename(columns={"key": "metric"})[list(NCU_STALL_COLUMNS)]
    return out.sort_values(["id", "value"], ascending=[True, False], kind="stable").reset_index(drop=True)


def _rules_frame(rules: pd.DataFrame, ident: pd.DataFrame) -> pd.DataFrame:
    if rules is None or rules.empty:
        return empty_ncu_frame(NCU_RULE_COLUMNS)
    r = rules.copy()
    r["id"] = _ncu_ids(r["ncu_id"])
    r = r.loc[r["id"].notna()].copy()  # a rule row whose ID is damaged belongs to no kernel
    r["id"] = r["id"].astype("int64")
    r["name"] = r["id"].map(ident.set_index("id")["name"]).fillna("")
    speed, _ = parse_values(r["speedup_pct"].astype(str))
    r["speedup_pct"] = speed
    for col in ("section", "rule", "type", "description", "speedup_type"):
        r[col] = r[col].fillna("").astype(str)
    return r[list(NCU_RULE_COLUMNS)].reset_index(drop=True)


def _merge(parts: list[NcuReport]) -> NcuReport:
    """Concatenate reports, renumbering ``id`` so it stays unique (``ncu_id`` keeps ncu's value)."""
    kernels, metrics, rules, stalls = [], [], [], []
    units: dict[str, str] = {}
    offset = 0
    for part in parts:
        mapping = dict(zip(part.kernels["id"], part.kernels["id"].rank(method="first").astype("int64") - 1 + offset))
        kernels.append(part.kernels.assign(id=part.kernels["id"].map(mapping)))
        m = part.metrics.copy()
        m.index = m.index.map(mapping)
        metrics.append(m)
        rules.append(part.rules.assign(id=part.rules["id"].map(mapping)))
        stalls.append(part.stalls.assign(id=part.stalls["id"].map(mapping)))
        units.update(part.units)
        offset += len(part.kernels)
    return NcuReport(
        source=tuple(p for part in parts for p in part.source),
        format=parts[0].format,
        kernels=pd.concat(kernels, ignore_index=True),
        metrics=pd.concat(metrics),
        rules=pd.concat(rules, ignore_index=True),
        stalls=pd.concat(stalls, ignore_index=True),
        units=units,
    )


# --------------------------------------------------------------------------------------------------
# Joining to the nsys timeline
# --------------------------------------------------------------------------------------------------

_LEVELS = (  # (label, name column, with grid/block, with NVTX path)
    ("name+grid+block+nvtx", "full", True, True),
    ("name+grid+block", "full", True, False),
    ("base+grid+block", "base", True, False),
    ("base", "base", False, False),
)
_DIMS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


def join_ncu(
    report: NcuReport, trace: Trace, *, window: tuple[int, int] | None = None
) -> NcuReport:
    """Match profiled launches to nsys kernels and add :data:`NCU_JOIN_COLUMNS` to ``report.kernels``.

    The k-th profiled launch of a (name, grid, block) key is matched to the k-th nsys launch (by start
    time) with the same key: ``ncu -k/-c`` profile the first N launches, so order within a key is the
    only link between two separate runs. Keys are tried from strict to loose: the normalized demangled
    name with grid, block and the NVTX path ncu recorded (``--nvtx``: a launch profiled under
    ``--nvtx-include step_0/`` joins the nsys launch inside ``step_0``, not the first one of the run), the
    same without the NVTX path, then the bare function name with grid and block, then the bare name alone;
    each level sees only what earlier levels left unmatched. Unmatched launches stay, with
    ``matched=False`` and a reason.

    ``matched_ns``/``timeline_count``/``gpu_time_share`` describe the matched configuration (the key of
    the level that matched) over the kernels that start inside ``window`` (trace-relative ns, the whole
    trace when None).
    """
    k = report.kernels.drop(columns=[c for c in NCU_JOIN_COLUMNS if c in report.kernels.columns])
    k = k.reset_index(drop=True)
    nsys = trace.kernels
    out = pd.DataFrame(
        {
            "matched": False,
            "match_key": "",
            "unmatched_reason": "",
            "nsys_index": -1,
            "nvtx_path": "",
            "nvtx_range": "",
            "matched_ns": np.nan,
            "timeline_count": 0,
            "gpu_time_share": np.nan,
        },
        index=k.index,
    )
    if nsys is None or len(nsys) == 0:
        out["unmatched_reason"] = "the nsys trace has no kernels"
        return replace(report, kernels=pd.concat([k, out], axis=1), joined=True)

    ns = pd.DataFrame(index=nsys.index)
    names = nsys["name"].astype(str).where(nsys["name"].astype(str) != "", nsys["short_name"].astype(str))
    uniq = names.unique()
    ns["full"] = names.map(dict(zip(uniq, (normalize_kernel_name(n) for n in uniq))))
    ns["base"] = names.map(dict(zip(uniq, (kernel_base_name(n) for n in uniq))))
    for d in _DIMS:
        ns[d] = pd.to_numeric(nsys[d], errors="coerce").fillna(-1).astype("int64")
    ns["nvtx"] = _text(nsys["nvtx_path"]) if "nvtx_path" in nsys.columns else ""
    ns["start"] = nsys["start"].to_numpy()
    ns["duration"] = nsys["duration"].to_numpy()
    ns = ns.sort_values("start", kind="stable")
    if window is not None:
        in_window = (ns["start"] >= window[0]) & (ns["start"] < window[1])
    else:
        in_window = pd.Series(True, index=ns.index)
    total_ns = float(ns.loc[in_window, "duration"].sum())

    kk = pd.DataFrame(index=k.index)
    kuniq = k["name"].unique()
    kk["full"] = k["name"].map(dict(zip(kuniq, (normalize_kernel_name(n) for n in kuniq))))
    kk["base"] = k["name"].map(dict(zip(kuniq, (kernel_base_name(n) for n in kuniq))))
    for d in _DIMS:
        kk[d] = k[d]
    kk["nvtx"] = _text(k["ncu_nvtx_path"]) if "ncu_nvtx_path" in k.columns else ""
    kk["id"] = k["id"]
    kk = kk.sort_values("id", kind="stable")

    taken = pd.Series(False, index=ns.index)
    for label, name_col, with_dims, with_nvtx in _LEVELS:
        config = [name_col] + (list(_DIMS) if with_dims else [])
        key = config + (["nvtx"] if with_nvtx else [])
        left = kk[~out.loc[kk.index, "matched"]]
        if with_nvtx:
            left = left[left["nvtx"] != ""]
        if left.empty:
            continue
        right = ns[~taken]
        lk = left[key].assign(rank=left.groupby(key, sort=False).cumcount(), _k=left.index)
        rk = right[key].assign(rank=right.groupby(key, sort=False).cumcount(), _n=right.index)
        pairs = lk.merge(rk, on=key + ["rank"], how="inner")
        if pairs.empty:
            continue
        stats = ns[in_window].groupby(config, sort=False)["duration"].agg(["sum", "count"]).reset_index()
        pairs = pairs.merge(stats, on=config, how="left")
        idx = pairs["_k"].to_numpy()
        out.loc[idx, "matched"] = True
        out.loc[idx, "match_key"] = label
        out.loc[idx, "nsys_index"] = pairs["_n"].to_numpy()
        out.loc[idx, "matched_ns"] = pairs["sum"].fillna(0).to_numpy(dtype="float64")
        out.loc[idx, "timeline_count"] = pairs["count"].fillna(0).to_numpy(dtype="int64")
        taken.loc[pairs["_n"].to_numpy()] = True

    matched_idx = out.index[out["matched"]]
    src = out.loc[matched_idx, "nsys_index"].to_numpy()
    for col in ("nvtx_path", "nvtx_range"):
        if col in nsys.columns and len(src):
            out.loc[matched_idx, col] = nsys[col].reindex(src).fillna("").astype(str).to_numpy()
    out["gpu_time_share"] = (out["matched_ns"] / total_ns) if total_ns > 0 else np.nan
    out["nsys_index"] = out["nsys_index"].astype("int64")
    out["timeline_count"] = out["timeline_count"].astype("int64")
    out["matched"] = out["matched"].astype(bool)

    un = ~out["matched"]
    if un.any():
        bases_present = set(ns["base"])
        configs_present = set(map(tuple, ns[["base", *_DIMS]].drop_duplicates().to_numpy().tolist()))
        base = kk.loc[un[un].index, "base"]
        cfg = pd.Series(
            list(map(tuple, kk.loc[un[un].index, ["base", *_DIMS]].to_numpy().tolist())), index=base.index
        )
        reason = np.where(
            ~base.isin(bases_present),
            "no kernel with this name on the nsys timeline",
            np.where(
                cfg.isin(configs_present),
                "more profiled launches of this configuration than nsys launches",
                "more profiled launches of this name than nsys launches",
            ),
        )
        out.loc[base.index, "unmatched_reason"] = reason
    joined = pd.concat([k, out], axis=1)
    return replace(report, kernels=joined, joined=True)


# --------------------------------------------------------------------------------------------------
# An Nsight Compute report on its own (no nsys timeline)
# --------------------------------------------------------------------------------------------------

NO_TIMELINE_REASON = "no timeline: an Nsight Compute report analyzed on its own"


def profiled_totals(report: NcuReport) -> NcuReport:
    """The report with :data:`NCU_JOIN_COLUMNS` filled from the profiled launches themselves, for an ncu
    report analyzed without an nsys trace: ``matched_ns``/``timeline_count`` are the summed ncu durations
    and the count of the profiled launches of the same configuration (name, grid, block), ``nvtx_path`` the
    path ncu recorded (``--nvtx``), ``matched`` False with :data:`NO_TIMELINE_REASON`. Rules then estimate
    from what was profiled, and say so."""
    k = report.kernels.drop(columns=[c for c in NCU_JOIN_COLUMNS if c in report.kernels.columns])
    k = k.reset_index(drop=True)
    duration = pd.to_numeric(k["duration_ns"], errors="coerce").astype("float64")
    config = pd.DataFrame({"name": k["name"].astype(str).to_numpy()}
                          | {d: pd.to_numeric(k[d], errors="coerce").fillna(-1).to_numpy() for d in _DIMS})
    codes = config.groupby(list(config.columns), sort=False).ngroup().to_numpy() if len(k) else np.zeros(0, int)
    groups = pd.Series(duration.to_numpy(), index=k.index).groupby(codes, sort=False)
    total = float(np.nansum(duration.to_numpy())) if len(k) else 0.0
    nvtx = _text(k["ncu_nvtx_path"]) if "ncu_nvtx_path" in k.columns else pd.Series("", index=k.index)
    out = pd.DataFrame({
        "matched": False,
        "match_key": "",
        "unmatched_reason": NO_TIMELINE_REASON,
        "nsys_index": -1,
        "nvtx_path": nvtx.to_numpy(dtype=object),
        "nvtx_range": [p.rsplit("/", 1)[-1] if p else "" for p in nvtx],
        "matched_ns": groups.transform(lambda s: s.sum(min_count=1)).to_numpy(dtype="float64")
        if len(k) else np.zeros(0),
        "timeline_count": groups.transform("size").to_numpy(dtype="int64") if len(k) else np.zeros(0, "int64"),
    }, index=k.index)
    out["gpu_time_share"] = out["matched_ns"] / total if total > 0 else np.nan
    out["matched"] = out["matched"].astype(bool)
    out["nsys_index"] = out["nsys_index"].astype("int64")
    return replace(report, kernels=pd.concat([k, out], axis=1), joined=True)


def ncu_trace(report: NcuReport) -> Trace:
    """A trace model for an Nsight Compute report analyzed on its own: no timeline frames (every
    timeline fact is empty), the GPUs ncu recorded (name, SM count, compute capability), the profiled
    time as its duration, and the report (with :func:`profiled_totals`) in ``extras["ncu"]``;
    ``extras["ncu_only"]`` marks it."""
    from analyzer.loading.model import GPU_COLUMNS, Trace, TraceInfo, empty_frame

    report = profiled_totals(report)
    k = report.kernels
    duration = pd.to_numeric(k["duration_ns"], errors="coerce").fillna(0)
    gpus = empty_frame(GPU_COLUMNS)
    if len(k):
        rows = []
        devices = _int_or(k["device"], 0).clip(lower=0)
        for dev in sorted(set(devices.tolist())):
            sel = k[devices == dev]
            rec: dict[str, Any] = {c: 0 for c in GPU_COLUMNS}
            rec["device"] = int(dev)
            names = [n for n in _text(sel["device_name"]).tolist() if n]
            rec["name"] = names[0] if names else ""
            sms = pd.to_numeric(sel["sm_count"], errors="coerce").dropna()
            rec["sm_count"] = int(sms.iloc[0]) if len(sms) else 0
            cc = [c for c in _text(sel["cc"]).tolist() if c]
            if cc and re.fullmatch(r"\d+\.\d+", cc[0]):
                major, minor = cc[0].split(".")
                rec["compute_major"], rec["compute_minor"] = int(major), int(minor)
            bw = pd.to_numeric(sel["peak_bandwidth"], errors="coerce").dropna()
            rec["memory_bandwidth"] = int(bw.iloc[0]) if len(bw) and (sel["peak_source"] != "").any() else 0
            rows.append(rec)
        gpus = pd.DataFrame.from_records(rows, columns=list(GPU_COLUMNS))
        gpus = gpus.astype({c: "int64" for c in GPU_COLUMNS if c != "name"})
        gpus["name"] = gpus["name"].astype(object)
    info = TraceInfo(
        path=report.source[0] if report.source else Path("ncu"),
        source_format=report.format,
        nsys_version=None,
        schema_version=None,
        origin_ns=0,
        duration_ns=int(duration.sum()),
        export_schema="ncu",
    )
    trace = Trace.from_frames(info, gpus=gpus)
    trace.extras["ncu"] = report
    trace.extras["ncu_only"] = True
    return trace
