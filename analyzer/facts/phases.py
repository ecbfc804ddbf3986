"""The ``phases`` fact: :func:`analyzer.facts.phase_table.phase_table` for reports and rules.

Options read from the analysis options (the CLI's ``--exclude-ranges`` / ``--only-ranges``):

``phase_exclude``  patterns whose ranges and nested ranges are left out (default ``("warmup*",)``);
                   the pipeline's ``exclude_ranges`` is used when this is absent
``phase_include``  keep only ranges matching this pattern (default: all); else ``only_ranges``
``phase_by``       ``"name"`` (default) or ``"path"``
"""
from __future__ import annotations

import pandas as pd

from analyzer.facts.registry import FactContext, fact
from analyzer.facts.phase_index import phase_index
from analyzer.facts.range_patterns import DEFAULT_EXCLUDE
from analyzer.facts.phase_table import PHASE_COLUMNS, phase_table


@fact("phases", columns=PHASE_COLUMNS, scope_keys=("name", "path"))
def phases(ctx: FactContext) -> pd.DataFrame:
    """Per NVTX range name: instances, CPU wall time (total, mean, std, min, max, p50, p95), the GPU
    time of the kernels, copies and memsets launched inside it (nested ranges and other threads of
    the process included, from the loader's attribution), kernel time and count, GPU busy share
    (union of the instances' op intervals over their wall time), the top three kernels, the GPU span
    of the work (first op start to last op end), whether each instance waited for it (or timed only
    its launches) and which number measures the phase (``measure``, ``phase_ns``). Warmup
    ranges and everything nested in them are excluded by default. Instances intersecting the analysis
    window only."""
    opts = ctx.options
    exclude = opts["phase_exclude"] if "phase_exclude" in opts else opts.get("exclude_ranges", DEFAULT_EXCLUDE)
    include = opts["phase_include"] if "phase_include" in opts else opts.get("only_ranges")
    by = ctx.options.get("phase_by", "name")
    window = (ctx.window.start_ns, ctx.window.end_ns)
    return phase_table(ctx.trace, exclude=exclude, include=include, by=by, window=window,
                       index=phase_index(ctx.store))
