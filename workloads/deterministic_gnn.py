"""deterministic_gnn: ``torch.use_deterministic_algorithms(True)`` in a GNN trainer, from a reproducibility recipe.

Pathology: a 3-layer GraphSAGE-style network (mean aggregation, hidden width 64, fp32, fused AdamW) trained
full-batch on a random graph of 200,000 nodes and 3.2 M edges (in-degree 16), node regression (MSE), whose
script begins with the "make it reproducible" block copied from a recipe: seeds,
``os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"`` and ``torch.use_deterministic_algorithms(True)``.
Each layer gathers the neighbours' features with ``index_select`` and sums them into their destination
node with ``index_add_``: on a CUDA tensor, deterministic mode replaces ``index_add_``'s atomic
scatter-add kernel with ``index_put_(accumulate=True)``'s sort-based path (a radix sort of the 3.2 M
destination indices, a copy of the messages, then a kernel that sums each destination's run of rows in
order), and the backward of ``index_select`` is an ``index_add_`` too: six slow scatter-adds a step,
most of its GPU time.
Twin (``--fixed``): the same script without ``use_deterministic_algorithms(True)`` (the cuBLAS workspace
setting kept): the scatter-adds are the atomic kernels.
Trace evidence: per ``step_N`` (``forward``, ``backward``, ``optimizer``): pathology: in ``forward`` and
``backward``, per layer, cub radix-sort kernels (``DeviceRadixSort*``), ``indexing_backward_kernel`` and
the copies around them where the twin runs one ``index_add`` kernel (``indexFuncLargeIndex`` /
``indexFuncSmallIndex``); the GPU busy throughout, the kernels slower. No host-side difference.
"""
from __future__ import annotations

import os

from . import _common as c

NCU_KERNEL_FILTER = "regex:index|Radix|sort"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F
    from torch import nn

    # the recipe's reproducibility block (the cuBLAS setting in both: deterministic mode requires it)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(not cfg.fixed)
    print(f"[deterministic_gnn] deterministic algorithms: "
          f"{'on' if torch.are_deterministic_algorithms_enabled() else 'off'}", flush=True)

    nodes, degree, width, layers = c.pick(cfg, (64, 4, 8, 2), (200_000, 16, 64, 3))
    dev = cfg.device
    edges = nodes * degree
    src = torch.randint(0, nodes, (edges,), device=dev)
    dst = torch.arange(nodes, device=dev).repeat_interleave(degree)[torch.randperm(edges, device=dev)]
    inv_degree = 1.0 / torch.bincount(dst, minlength=nodes).clamp(min=1).float()[:, None]
    x = torch.randn(nodes, width, device=dev)
    target = torch.randn(nodes, 1, device=dev)

    class SageLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.self_lin, self.neigh_lin = nn.Linear(width, width), nn.Linear(width, width, bias=False)

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            messages = h.index_select(0, src)
            agg = torch.zeros_like(h).index_add_(0, dst, messages) * inv_degree
            return F.relu(self.self_lin(h) + self.neigh_lin(agg))

    class Sage(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(SageLayer() for _ in range(layers))
            self.out = nn.Linear(width, 1)

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                h = layer(h)
            return self.out(h)

    model = Sage().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cfg.cuda)
    return c.train_step(opt, lambda: F.mse_loss(model(x), target))


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("deterministic_gnn", __doc__, build, argv, steps=(2, 20), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
