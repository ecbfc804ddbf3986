"""memory_leak: a training loop that keeps every step's validation loss with its autograd graph.

Pathology: each step trains an MLP (4 layers of 4096, batch 2048, fp32: ``forward``,
``backward``, ``optimizer``) and then, in a ``validate`` range, computes a loss on a held-out batch
with autograd still on and appends that loss tensor to a history list. The training loss's graph
is freed by ``backward()``, but the validation loss is never backpropagated: each kept tensor pins
its whole graph and the activations saved for it (~260 MiB per step), so allocated memory grows
by the same amount every step until the program runs out of memory.
Twin (``--fixed``): ``history.append(val_loss.detach())``: the graph is freed when the step ends and
memory stays flat.
Trace evidence: nsys ``--cuda-memory-usage``: ``cudaMalloc`` of new blocks in every ``step_N`` and
device memory in use rising linearly; torch.profiler ``profile_memory``: allocations in
``validate`` never freed, ~260 MiB per step; the twin allocates only in the first steps. Each
step prints the allocator's numbers (``torch.cuda.memory_allocated``) for comparison.
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|sgemm"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    from torch import nn

    width, batch, n_layers = c.pick(cfg, (64, 32, 2), (4096, 2048, 4))
    dev = cfg.device
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(n_layers):
        layers += [nn.Linear(width, width), nn.GELU()]
    model = nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, x_val = torch.randn(batch, width, device=dev), torch.randn(batch, width, device=dev)
    history: list[torch.Tensor] = []
    last = [torch.cuda.memory_allocated(dev) if cfg.cuda else 0]

    def step(i: int) -> None:
        _loss = c.forward_backward(opt, lambda: model(x).pow(2).mean(), zero_grad=False)
        c.optimizer_step(opt, zero_grad=True)
        with nv.range("validate"):
            val_loss = model(x_val).pow(2).mean()  # autograd on: a graph with saved activations
            history.append(val_loss.detach() if cfg.fixed else val_loss)
        if cfg.cuda:
            now = torch.cuda.memory_allocated(dev)
            print(f"[memory_leak] step {i}: allocated {now / 2**20:.1f} MiB "
                  f"({(now - last[0]) / 2**20:+.1f} MiB), reserved "
                  f"{torch.cuda.memory_reserved(dev) / 2**20:.1f} MiB", flush=True)
            last[0] = now

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("memory_leak", __doc__, build, argv, steps=(2, 20), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
