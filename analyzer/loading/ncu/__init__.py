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

Modules: :mod:`~analyzer.loading.ncu.detect` (which export a file is), :mod:`~analyzer.loading.ncu.read`
(decoding each form), :mod:`~analyzer.loading.ncu.units`, :mod:`~analyzer.loading.ncu.names`,
:mod:`~analyzer.loading.ncu.build` (the normalized frames), :mod:`~analyzer.loading.ncu.model`,
:mod:`~analyzer.loading.ncu.join` (to the nsys timeline), :mod:`~analyzer.loading.ncu.standalone`.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analyzer.loading.ncu.detect import detect_ncu
    from analyzer.loading.ncu.join import join_ncu
    from analyzer.loading.ncu.model import (
        NCU_DETAILS_CSV,
        NCU_JOIN_COLUMNS,
        NCU_JOIN_COLUMN_DOCS,
        NCU_KERNEL_COLUMNS,
        NCU_KERNEL_COLUMN_DOCS,
        NCU_RAW_CSV,
        NCU_REP,
        NCU_REP_MAGIC,
        NCU_RULE_COLUMNS,
        NCU_RULE_COLUMN_DOCS,
        NCU_STALL_COLUMNS,
        NCU_STALL_COLUMN_DOCS,
        NcuReport,
        empty_ncu_frame,
    )
    from analyzer.loading.ncu.names import kernel_base_name, normalize_kernel_name
    from analyzer.loading.ncu.read import load_ncu
    from analyzer.loading.ncu.standalone import NO_TIMELINE_REASON, ncu_trace, profiled_totals
    from analyzer.loading.ncu.units import parse_unit, parse_values

#: where each public name lives: the submodules are imported on first use (PEP 562), so a run on a
#: trace without Nsight Compute files does not pay for pandas frames built at import by ``build``
_WHERE = {
    "detect_ncu": "detect",
    "join_ncu": "join",
    **dict.fromkeys(("NCU_DETAILS_CSV", "NCU_JOIN_COLUMNS", "NCU_JOIN_COLUMN_DOCS", "NCU_KERNEL_COLUMNS",
                     "NCU_KERNEL_COLUMN_DOCS", "NCU_RAW_CSV", "NCU_REP", "NCU_REP_MAGIC", "NCU_RULE_COLUMNS",
                     "NCU_RULE_COLUMN_DOCS", "NCU_STALL_COLUMNS", "NCU_STALL_COLUMN_DOCS", "NcuReport",
                     "empty_ncu_frame"), "model"),
    "kernel_base_name": "names",
    "normalize_kernel_name": "names",
    "load_ncu": "read",
    **dict.fromkeys(("NO_TIMELINE_REASON", "ncu_trace", "profiled_totals"), "standalone"),
    "parse_unit": "units",
    "parse_values": "units",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "NCU_DETAILS_CSV",
    "NCU_JOIN_COLUMNS",
    "NCU_JOIN_COLUMN_DOCS",
    "NCU_KERNEL_COLUMNS",
    "NCU_KERNEL_COLUMN_DOCS",
    "NCU_RAW_CSV",
    "NCU_REP",
    "NCU_REP_MAGIC",
    "NCU_RULE_COLUMNS",
    "NCU_RULE_COLUMN_DOCS",
    "NCU_STALL_COLUMNS",
    "NCU_STALL_COLUMN_DOCS",
    "NO_TIMELINE_REASON",
    "NcuReport",
    "detect_ncu",
    "empty_ncu_frame",
    "join_ncu",
    "kernel_base_name",
    "load_ncu",
    "ncu_trace",
    "normalize_kernel_name",
    "parse_unit",
    "parse_values",
    "profiled_totals",
]
