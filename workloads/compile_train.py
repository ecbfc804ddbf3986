"""compile_train: a small transformer trained under ``torch.compile`` (default mode): launch-bound.

Pathology: a 2-layer transformer (d_model 256, 4 heads, sequence 64, batch 4, vocab 2048) trained
with AdamW (fused) under ``torch.compile(model)`` in the default mode. Inductor fuses the
elementwise work into Triton kernels, but the kernels are tiny and still launched one by one from
the compiled Python wrapper: the GPU idles in many sub-millisecond gaps between launches.
Compilation happens in the warmup steps (inside the ``warmup`` range), outside the measured steps.
Twin (``--fixed``): ``torch.compile(model, mode="reduce-overhead")``: the same compiled kernels
recorded into CUDA graphs (``torch.compiler.cudagraph_mark_step_begin()`` marks each iteration) and
replayed, one graph launch for the forward and one for the backward.
Trace evidence: per ``step_N`` (``forward``, ``backward``, ``optimizer``): pathology: ~100-200
short Triton/GEMM kernels with gaps between them, GPU busy well under half of the step; twin:
``cudaGraphLaunch`` calls instead of per-kernel launches and a shorter step. Without a GPU the
workload compiles with the ``eager`` backend (Dynamo only; no Triton, no CUDA graphs), so the loop
stays testable on a CPU; ``--backend`` overrides the choice.
"""
from __future__ import annotations

import argparse

from . import _common as c

NCU_KERNEL_FILTER = "regex:triton"
NCU_COUNT = 4
HAS_TWIN = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    c.add_backend_argument(parser)


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    from torch import nn

    d, heads, n_layers, seq, batch, vocab = c.pick(cfg, (32, 2, 1, 16, 2, 64),
                                                   (256, 4, 2, 64, 4, 2048))
    dev = cfg.device
    torch.manual_seed(0)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                               norm_first=True)
            self.layers = nn.ModuleList([layer] + [
                nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                           norm_first=True) for _ in range(n_layers - 1)])
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

        def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            x = self.emb(tokens) + self.pos
            for layer in self.layers:
                x = layer(x, src_mask=self.mask, is_causal=True)
            logits = self.head(self.norm(x))
            return nn.functional.cross_entropy(logits.view(-1, vocab), targets.view(-1))

    model = Model().to(dev)
    backend = c.compile_backend(cfg)
    mode = "reduce-overhead" if cfg.fixed and backend == "inductor" else None
    if cfg.fixed and mode is None:
        print(f"[compile_train] backend {backend}: --fixed compiles without mode='reduce-overhead' "
              "(CUDA graphs need inductor on a GPU)", flush=True)
    compiled = torch.compile(model, backend=backend, mode=mode)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, vocab, (batch, seq), device=dev)
    targets = torch.randint(0, vocab, (batch, seq), device=dev)
    print(f"[compile_train] backend={backend} mode={mode or 'default'}", flush=True)

    def step(_i: int) -> None:
        if mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        _loss = c.forward_backward(opt, compiled, tokens, targets, zero_grad=False)
        c.optimizer_step(opt, zero_grad=True)

    return step


def main(argv: list[str] | None = None) -> int:
    # warmup 3: compile (1st), recompiles/graph recording (2nd, reduce-overhead records on the
    # 2nd/3rd call), then steady state
    return c.run_workload("compile_train", __doc__, build, argv, add_arguments=add_arguments,
                          steps=(2, 10), warmup=(2, 4))


if __name__ == "__main__":
    raise SystemExit(main())
