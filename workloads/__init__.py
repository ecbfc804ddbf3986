"""PyTorch/CuPy programs that show one GPU performance pathology each (plus a fixed "twin"),
annotated with NVTX so that Nsight Systems traces of them can feed the ``analyzer``.

Run one: ``python -m workloads.<name> [--fixed] [--size smoke|full]``.
Profile: ``python -m workloads profile NAME... --tool nsys|ncu --out DIR``.
"""
from __future__ import annotations

#: Pathology modules, each with a ``--fixed`` twin (``healthy`` has none).
PATHOLOGIES: tuple[str, ...] = (
    "dataloader_starved",
    "tiny_kernels",
    "pageable_h2d",
    "host_sync",
    "naive_attention",
    "occupancy",
    "fp32_gemm",
    "alloc_churn",
)
#: Every runnable workload module.
WORKLOADS: tuple[str, ...] = PATHOLOGIES + ("healthy", "transformer")

__all__ = ["PATHOLOGIES", "WORKLOADS"]
