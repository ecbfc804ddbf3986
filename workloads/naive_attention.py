"""naive_attention: attention as matmul -> mask -> softmax -> matmul in bf16 at long sequence.

Pathology: causal self-attention (batch 4, 16 heads, seq 4096, head dim 64) materializes the
(4, 16, 4096, 4096) score matrix in HBM: ``Q @ K^T``, a scale, a ``masked_fill`` and a separate
``softmax`` each read and write ~2 GiB, so memory-bound elementwise/softmax kernels dwarf the
tensor-core matmuls.
Twin (``--fixed``): ``torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)``,
a fused flash-attention kernel that never writes the score matrix.
Trace evidence: in ``step_N``, softmax kernels (``cunn_SoftMaxForward`` / ``softmax``) plus the
mask/scale elementwise kernels take > 50% of GPU time, matmuls < 30%; the twin shows one
flash/fmha kernel per call and a step several times shorter. Under ncu the softmax kernel is
DRAM-bandwidth bound with low compute throughput.
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:[Ss]oft[Mm]ax"
NCU_KERNEL_FILTER_FIXED = "regex:flash|fmha|[Aa]ttention|sdpa|cudnn|sm90"
NCU_COUNT = 2
HAS_TWIN = True


def naive_attention(q: object, k: object, v: object, mask: object) -> object:
    """Causal attention with the score matrix materialized (NVTX ranges per phase)."""
    import torch

    with nv.range("attention"):
        with nv.range("computing_attention_scores"):
            scores = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
            scores = scores.masked_fill(mask, float("-inf"))
        with nv.range("computing_softmax"):
            probs = torch.softmax(scores, dim=-1)
        with nv.range("final_matmul"):
            return probs @ v


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F

    b, h, s, d = c.pick(cfg, (1, 2, 64, 16), (4, 16, 4096, 64))
    dev = cfg.device
    dtype = torch.bfloat16
    q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=dtype) for _ in range(3))
    mask = torch.ones(s, s, device=dev, dtype=torch.bool).triu(1)

    def step_naive(_i: int) -> None:
        naive_attention(q, k, v, mask)

    def step_fused(_i: int) -> None:
        with nv.range("attention"):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return step_fused if cfg.fixed else step_naive


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("naive_attention", __doc__, build, argv, steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
