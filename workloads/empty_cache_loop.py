"""empty_cache_loop: a training loop that empties the CUDA caching allocator after every micro-batch.

Pathology: an MLP (6 x Linear(4096, 4096) + GELU, bf16) trained with gradient accumulation (4
micro-batches of 4096 tokens a step, AdamW) the way many scripts "save memory": after each
micro-batch's backward the loop drops its references (``del out, loss``) and calls
``torch.cuda.empty_cache()``, and ``zero_grad()`` frees the gradients. Every activation, every
activation gradient and every weight gradient (32 MiB blocks) then goes back to the driver
(``cudaFree``, which waits for the device) and is re-obtained with ``cudaMalloc`` by the next
micro-batch, so the GPU idles while the host frees and re-allocates.
Twin (``--fixed``): the same loop without ``empty_cache()``: the caching allocator keeps the
blocks and reuses them; no ``cudaMalloc``/``cudaFree`` after the warm-up.
Trace evidence: per ``step_N`` (``micro_N`` ranges of ``forward``/``backward``, then
``optimizer``): tens of ``cudaFree`` and ``cudaMalloc`` calls per micro-batch with GPU gaps around
them; the twin's steps hold none and are shorter by about the time they took.
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|gelu"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F

    layers, d, tokens, micro = c.pick(cfg, (2, 64, 32, 2), (6, 4096, 4096, 4))
    dev = cfg.device
    dtype = torch.bfloat16 if cfg.cuda else torch.float32
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(layers)
                                  for m in (torch.nn.Linear(d, d), torch.nn.GELU())])
    model.to(device=dev, dtype=dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    # the "dataset": a few batches already on the device (input and regression target)
    data = [(torch.randn(tokens, d, device=dev, dtype=dtype),
             torch.randn(tokens, d, device=dev, dtype=dtype)) for _ in range(micro)]

    def step(_i: int) -> None:
        opt.zero_grad(set_to_none=True)
        for m, (x, y) in enumerate(data):
            with nv.range(f"micro_{m}"):
                with nv.range("forward"):
                    out = model(x)
                    loss = F.mse_loss(out, y) / micro
                with nv.range("backward"):
                    loss.backward()
                del out, loss
                if not cfg.fixed and cfg.cuda:
                    with nv.range("empty_cache"):
                        torch.cuda.empty_cache()
        with nv.range("optimizer"):
            opt.step()
        if not cfg.fixed and cfg.cuda:
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("empty_cache_loop", __doc__, build, argv, steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
