"""compile_graph_break: ``torch.compile(mode="reduce-overhead")`` with a graph break in every layer.

Pathology: a stack of 8 residual blocks (d_model 2048, 16 heads, a batch of 2048 rows, bf16 on a GPU)
run under ``torch.no_grad()`` and compiled with ``torch.compile(model, mode="reduce-overhead")``. Each
block gates its heads with a soft-capped sigmoid of a small per-head logit (Gemma-style
``cap * tanh(x / cap)``, one cap per head), written as a Python loop over the heads in a helper that
Dynamo is told to skip (``torch.compiler.disable``, as it skips code it cannot trace: an unsupported
op, a third-party call). The helper breaks every block's graph in two (and, being inside the loop over
the blocks, makes Dynamo compile each block's forward as its own frame): Inductor records the compiled
pieces (norm, projections, MLP) into CUDA graphs and replays them, two per block, but each block's
gate runs eagerly between the replays: 16 heads x 4 elementwise kernels on a column of 2048 values
plus a ``stack``, about 65 kernels of a microsecond or two each, launched one by one by Python. The
GPU drains each before the next arrives: the eager remainder between the replays is launch-bound,
while most of the kernel time is in the graphs.
Twin (``--fixed``): the same math with the helper left to Dynamo: the loop is traced, Inductor fuses
the gate into a kernel or two and the whole step is one CUDA graph replay.
Trace evidence: per measured step (with NVTX a ``step_N`` range and a ``forward`` range around the
compiled call): pathology: 16 graph launches with about 500 short eager kernels
(``div``/``tanh``/``mul``/``sigmoid``/``stack``) and sub-millisecond gaps between them; twin: one
``cudaGraphLaunch`` per step and a shorter step. Without a GPU the workload compiles with the
``eager`` backend (Dynamo only; no Triton, no CUDA graphs): both variants run the same loop and stay
testable on a CPU; ``--backend`` overrides.
"""
from __future__ import annotations

import argparse

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:tanh|triton"
NCU_COUNT = 4
HAS_TWIN = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    c.add_backend_argument(parser)
    parser.add_argument("--rows", type=int, default=None,
                        help="rows (tokens) per step (default 8 smoke / 2048 full)")


def head_gates(logits: object, caps: object, heads: int) -> object:
    """Per-head gates ``sigmoid(cap_h * tanh(logit_h / cap_h))`` of ``logits`` (rows, heads), one head
    at a time: four kernels per head when run eagerly, plus the ``stack``."""
    import torch

    gates = []
    for h in range(heads):
        cap = caps[h]  # type: ignore[index]
        gates.append(torch.sigmoid(torch.tanh(logits[:, h] / cap) * cap))  # type: ignore[index]
    return torch.stack(gates, dim=-1)


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    from torch import nn

    n_layers, d, heads = c.pick(cfg, (2, 64, 4), (8, 2048, 16))
    rows = cfg.options.rows or c.pick(cfg, 8, 2048)
    dev = cfg.device
    dtype = torch.bfloat16 if cfg.cuda else torch.float32
    torch.manual_seed(0)
    dh = d // heads
    # the pathology's helper is opaque to Dynamo: a graph break, its loop runs eagerly
    gate_fn = head_gates if cfg.fixed else torch.compiler.disable(head_gates, recursive=True)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.proj_in = nn.Linear(d, d, bias=False)
            self.gate = nn.Linear(d, heads, bias=False)
            self.proj_out = nn.Linear(d, d, bias=False)
            self.caps = nn.Parameter(torch.linspace(2.0, 8.0, heads))
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.GELU(),
                                     nn.Linear(4 * d, d, bias=False))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.ln1(x)
            g = gate_fn(self.gate(y), self.caps, heads)  # (rows, heads)
            u = (self.proj_in(y).view(-1, heads, dh) * g.unsqueeze(-1)).view(-1, d)
            x = x + self.proj_out(u)
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(n_layers))
            self.norm = nn.LayerNorm(d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                x = block(x)
            return self.norm(x)

    model = Model().to(device=dev, dtype=dtype).eval()
    backend = c.compile_backend(cfg)
    mode = "reduce-overhead" if backend == "inductor" else None
    compiled = torch.compile(model, backend=backend, mode=mode)
    x = torch.randn(rows, d, device=dev, dtype=dtype)
    print(f"[compile_graph_break] backend={backend} mode={mode or 'default'} layers={n_layers} "
          f"d={d} heads={heads} rows={rows} gates={'compiled' if cfg.fixed else 'eager (graph break)'}",
          flush=True)

    def step(i: int) -> None:
        if i == 0:  # warm-up done: how many graphs Dynamo made, and whether Inductor kept its CUDA graphs
            print(f"[compile_graph_break] graphs: {_counter('stats', 'unique_graphs')}, "
                  f"graph breaks: {sum(_counters('graph_break').values())}, "
                  f"cudagraph skips: {_counters('inductor').get('cudagraph_skips', 0)}", flush=True)
        with torch.no_grad(), nv.range("forward"):
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            compiled(x)

    return step


def _counters(group: str) -> dict[str, int]:
    try:
        from torch._dynamo.utils import counters

        return dict(counters[group])
    except Exception:  # pragma: no cover - private API of the installed torch
        return {}


def _counter(group: str, name: str) -> object:
    return _counters(group).get(name, "unknown")


def main(argv: list[str] | None = None) -> int:
    # warmup 3: the first step compiles; reduce-overhead warms up, then records its graphs on the
    # next calls; the last warm-up step replays them
    return c.run_workload("compile_graph_break", __doc__, build, argv, add_arguments=add_arguments,
                          steps=(2, 10), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
