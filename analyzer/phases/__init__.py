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

from analyzer.facts.phase_index import DEFAULT_EXCLUDE, PhaseIndex, RangePattern, range_timing
from analyzer.facts.phase_table import (
    ModelConfig,
    attention_split,
    category_mix,
    kernel_categories,
    phase_table,
    step_split,
    top_kernels,
)

__all__ = [
    "DEFAULT_EXCLUDE", "ModelConfig", "PhaseIndex", "RangePattern", "attention_split", "category_mix",
    "kernel_categories", "phase_table", "range_timing", "step_split", "top_kernels",
]
