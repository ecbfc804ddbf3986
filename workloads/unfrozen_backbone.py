"""unfrozen_backbone: training a classifier head on a "frozen" encoder that nobody froze.

Pathology: a linear probe: a BERT-style text encoder (8 pre-norm blocks, width 1024, 16 heads, vocab
32000, fp32 weights, bf16 autocast; 32 sequences of 512 tokens a step, on the GPU) whose pretrained
backbone should stay fixed while a new 2-class head is trained, written as many fine-tuning scripts
write it: the optimizer only gets the head (``AdamW(model.head.parameters())``) but the backbone's
parameters still have ``requires_grad=True``. Autograd therefore saves the backbone's activations in
the forward and the backward runs through the whole encoder, computing every weight's gradient (and
every activation's) to accumulate them into ``.grad`` tensors the optimizer never reads (and
``zero_grad`` of the head's optimizer never clears, so they grow step after step): the backward, two
thirds of the step's GPU work, serves only the head's few thousand weights.
Twin (``--fixed``): ``model.backbone.requires_grad_(False)`` before training: the forward keeps no
backbone activations and the backward is the head's alone.
Trace evidence: per ``step_N`` (``forward``, ``backward``, ``optimizer``): pathology: a ``backward``
with the encoder's gradient GEMMs (two per forward GEMM), attention backward and LayerNorm/GELU
backward kernels and gradient accumulation (``add``) kernels, longer than the forward; twin: a
``backward`` of a few small kernels, the step about the forward's length.
"""
from __future__ import annotations

from . import _common as c

NCU_KERNEL_FILTER = "regex:gemm|nvjet|flash"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F

    layers, width, heads, vocab, batch, length = c.pick(cfg, (2, 32, 4, 100, 2, 16),
                                                        (8, 1024, 16, 32000, 32, 512))
    dev = cfg.device
    torch.manual_seed(0)
    model = c.text_encoder(layers, width, heads, vocab, 2).to(dev)  # the "pretrained" encoder
    if cfg.fixed:
        model.backbone.requires_grad_(False)
    opt = torch.optim.AdamW(model.head.parameters(), lr=1e-3, fused=cfg.cuda)
    amp = c.bf16_autocast(cfg)
    ids = torch.randint(0, vocab, (batch, length), device=dev)
    labels = torch.randint(0, 2, (batch,), device=dev)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"[unfrozen_backbone] parameters with requires_grad: {trainable:,} "
          f"(the optimizer updates {sum(p.numel() for p in model.head.parameters()):,})", flush=True)

    return c.train_step(opt, lambda: F.cross_entropy(model(ids), labels), amp=amp)


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("unfrozen_backbone", __doc__, build, argv, steps=(2, 30), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
