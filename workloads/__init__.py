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
    "decode_eager",
    "optimizer_loop",
    "copy_on_compute_stream",
    "host_work_in_range",
    "compile_train",
    "compile_decode",
    "compile_graph_break",
    "memory_leak",
    "memory_peak",
    "empty_cache_loop",
    "mask_index_sync",
    "per_sample_loop",
    "cpu_augment",
    "kv_cache_cat",
    "snapshot_to_host",
    "tensor_from_list",
    "ema_clip_loop",
    "layer_timing_sync",
    "head_loop_attention",
    "cpu_posenc_mask",
    "layout_copies",
    "host_sampling_decode",
    "cudnn_benchmark_shapes",
    "graph_recapture",
    "detect_anomaly",
    "compile_varlen",
    "checkpoint_everything",
    "host_noise_diffusion",
    "unfrozen_backbone",
    "launch_blocking_env",
    "deterministic_gnn",
    "teacher_offload",
    "pad_to_max_length",
)
#: Multi-GPU jobs (``DISTRIBUTED = True``, run under torchrun: see ``_ddp`` and ``_distributed``),
#: each a pathology with a ``--fixed`` twin; alone (no torchrun) each is the 1-GPU run.
DISTRIBUTED: tuple[str, ...] = (
    "ddp_straggler",
    "ddp_exposed_comm",
    "ddp_small_collectives",
    "fsdp_train",
)
#: Every runnable workload module.
WORKLOADS: tuple[str, ...] = PATHOLOGIES + ("healthy", "transformer") + DISTRIBUTED

__all__ = ["DISTRIBUTED", "PATHOLOGIES", "WORKLOADS"]
