"""Phase analysis over NVTX ranges, and sweep tables over many traces.

- :func:`phase_table`     per range name/path: CPU time, GPU time launched inside, busy share, top kernels,
                          GPU span, waited, which number measures the phase (:func:`range_timing`)
- :func:`step_split`      per training step: forward / backward / optimizer_step CPU and GPU time
- :func:`category_mix`    kernel category mix inside a phase
- :func:`attention_split` softmax vs matmul time (exact) and FLOPs (from a model config) in attention
- :mod:`analyzer.phases.scaling` ``strong_scaling(paths)``: one training loop on 1 and N GPUs
- :mod:`analyzer.phases.sweep`  ``build_sweep(paths)``; :mod:`analyzer.phases.render` ``render_sweep``
  (both imported lazily: Jinja2)
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from analyzer.lazyimport import lazy_attributes

if TYPE_CHECKING:  # imported on first use: ``analyze sweep --help`` reads no pandas
    from analyzer.facts.phase_index import PhaseIndex, range_timing
    from analyzer.facts.phase_table import (
        ModelConfig,
        attention_split,
        category_mix,
        kernel_categories,
        phase_table,
        step_split,
        top_kernels,
    )
    from analyzer.facts.range_patterns import DEFAULT_EXCLUDE, RangePattern

__all__ = [
    "DEFAULT_EXCLUDE", "ModelConfig", "PhaseIndex", "RangePattern", "attention_split", "category_mix",
    "kernel_categories", "phase_table", "range_timing", "step_split", "top_kernels",
]
if not TYPE_CHECKING:  # type checkers read the imports above (see analyzer.lazyimport)
    __getattr__ = lazy_attributes(__name__, globals(), {
        "DEFAULT_EXCLUDE": "analyzer.facts.range_patterns", "RangePattern": "analyzer.facts.range_patterns",
        "PhaseIndex": "analyzer.facts.phase_index", "range_timing": "analyzer.facts.phase_index",
        **{name: "analyzer.facts.phase_table" for name in ("ModelConfig", "attention_split", "category_mix",
                                                           "kernel_categories", "phase_table", "step_split",
                                                           "top_kernels")},
    })
