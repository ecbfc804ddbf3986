"""Before/after: ``analyze diff BASE HEAD``.

    base = load_run(path_or_json, options)     # a RunSummary, from a trace (through the pipeline) or a JSON report
    result = diff_runs(base, head, settings)   # DiffResult: steps with significance, phases, kernels, findings
    render_diff(result, "md")                  # or "html", "json"

A diff consumes two analyses (or the ``baseline`` block of their JSON reports): it has no pipeline
of its own.
"""
from __future__ import annotations
