"""optimizer_loop: Adam stepping hundreds of small parameters one tensor at a time (launch-bound).

Pathology: a deep, narrow MLP (50 blocks of Linear(256, 256) + LayerNorm + GELU and a head: 202
parameter tensors, ~3.3 M parameters) trained at batch 64 with ``torch.optim.Adam(foreach=False)``:
the single-tensor implementation loops over the parameters in Python and launches ~7 tiny
elementwise kernels per tensor, ~1400 launches per step, so the ``optimizer`` range is launch-bound
and half or more of the step (forward and backward are ~500 launches).
Twin (``--fixed``): the same model, data and hyper-parameters with ``Adam(fused=True)``: a handful of
multi-tensor kernels for the whole update.
Trace evidence: per ``step_N``: ranges ``forward``, ``backward``, ``optimizer``; in the pathology the
``optimizer`` range holds ~1400 kernels of a few us with the GPU mostly idle between them; in the
twin it holds a few fused Adam kernels and the step is shorter by about that range (~50-60%). ``forward`` and
``backward`` are the same in both.
"""
from __future__ import annotations

from . import _common as c

NCU_KERNEL_FILTER = "regex:elementwise|adam"
NCU_COUNT = 4
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    from torch import nn

    blocks, width, batch = c.pick(cfg, (4, 32, 8), (50, 256, 64))
    dev = cfg.device
    torch.manual_seed(0)
    model = c.mlp_stack(blocks, width, 10).to(dev)
    n_params = sum(1 for _ in model.parameters())
    print(f"[optimizer_loop] {n_params} parameter tensors, "
          f"{sum(p.numel() for p in model.parameters())} parameters", flush=True)
    kind = {"fused": True} if cfg.fixed else {"foreach": False}
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, **kind)
    x = torch.randn(batch, width, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    loss_fn = nn.CrossEntropyLoss()

    return c.train_step(opt, lambda: loss_fn(model(x), y), zero_grad_last=True)


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("optimizer_loop", __doc__, build, argv, steps=(2, 10), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
