"""checkpoint_everything: activation checkpointing switched on for a model that fits without it.

Pathology: an MLP (12 blocks of Linear(2048, 2048) + LayerNorm + GELU and a head, fp32 weights,
bf16 autocast, fused AdamW, 16384-row batches: ~5 GB of activations on an 80 GB GPU) trained by a
script that runs its forward through ``torch.utils.checkpoint.checkpoint_sequential(model, 12, x,
use_reentrant=False)``, the "save memory" switch copied from a large-model recipe (as
``gradient_checkpointing_enable()`` is left on in fine-tuning scripts). Checkpointing keeps only each
segment's input; the backward runs every segment's forward again (its GEMMs, LayerNorms and GELUs)
right before that segment's gradients, so each step computes the forward twice: about a third more
GPU work, for memory the run does not need.
Twin (``--fixed``): the same model, data and optimizer with a plain ``model(x)`` forward.
Trace evidence: per ``step_N`` (``forward``, ``backward``, ``optimizer``): pathology: ``backward``
holds, besides the gradient GEMMs, a second copy of the forward's kernels (one forward GEMM, one
LayerNorm forward, one GELU forward per block but the last segment), the step longer by about the
forward's time; twin: ``backward`` holds only gradient kernels.
"""
from __future__ import annotations

from . import _common as c

NCU_KERNEL_FILTER = "regex:gemm|nvjet|layer_norm"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint_sequential

    blocks, width, rows, classes = c.pick(cfg, (3, 32, 64, 10), (12, 2048, 16384, 1000))
    t = c.mlp_training(cfg, blocks, width, rows, classes)
    model, opt, amp, x, y = t.model, t.opt, t.amp, t.x, t.y
    print(f"[checkpoint_everything] activation checkpointing {'off' if cfg.fixed else 'on'} "
          f"({blocks} segments)", flush=True)

    def forward(inputs: torch.Tensor) -> torch.Tensor:
        if cfg.fixed:
            return model(inputs)
        return checkpoint_sequential(model, blocks, inputs, use_reentrant=False)

    return c.train_step(opt, lambda: F.cross_entropy(forward(x), y), amp=amp)


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("checkpoint_everything", __doc__, build, argv, steps=(2, 30), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
