"""teacher_offload: knowledge distillation whose teacher is moved to the GPU and back to the CPU every step.

Pathology: a student MLP (6 blocks of Linear(2048, 2048) + LayerNorm + GELU and a 1000-class head, fp32
weights, bf16 autocast, fused AdamW, 16384-row batches on the GPU) distilled from a larger frozen teacher
(the same architecture: 27 M parameters, 104 MiB of fp32 weights) by a script that "saves GPU memory"
the way many distillation scripts do: ``teacher.to("cuda")`` before the teacher's forward and
``teacher.to("cpu")`` right after it, every step. Each step therefore uploads the teacher's weights from
pageable host memory (the host blocked while the driver stages them) and downloads them again into
freshly allocated pageable tensors (a synchronous device-to-host copy per parameter, after the GPU
has drained), with the GPU idle for both, for memory the 141 GB GPU does not need.
Twin (``--fixed``): the teacher is moved to the GPU once, before the loop, and stays there.
Trace evidence: per ``step_N`` (``teacher``, ``forward``, ``backward``, ``optimizer``): pathology: a
``teacher`` range opening with one pageable host-to-device ``cudaMemcpyAsync`` per teacher parameter (the
largest 16 MiB) and closing with as many pageable device-to-host copies, the GPU idle during both;
twin: a ``teacher`` range of the teacher's forward kernels only, no copy in the step.
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|nvjet|layer_norm"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F

    blocks, width, rows, classes = c.pick(cfg, (2, 32, 64, 10), (6, 2048, 16384, 1000))
    t = c.mlp_training(cfg, blocks, width, rows, classes)  # the student, its optimizer and the batch
    student, opt, amp, x, y = t.model, t.opt, t.amp, t.x, t.y
    teacher = c.mlp_stack(blocks, width, classes).requires_grad_(False).eval()  # "pretrained", on the CPU
    if cfg.fixed:
        teacher.to(cfg.device)
    size = sum(p.numel() * p.element_size() for p in teacher.parameters())
    print(f"[teacher_offload] teacher of {size / 2**20:.0f} MiB "
          f"{'kept on the GPU' if cfg.fixed else 'moved to the GPU and back every step'}", flush=True)
    temperature = 2.0

    def distill(logits: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
        kd = F.kl_div(F.log_softmax(logits.float() / temperature, dim=-1), soft, reduction="batchmean")
        return 0.5 * F.cross_entropy(logits.float(), y) + 0.5 * temperature ** 2 * kd

    def step(_i: int) -> None:
        with nv.range("teacher"):
            if not cfg.fixed:
                teacher.to(cfg.device)  # "only on the GPU while we need it"
            with torch.no_grad(), amp:
                soft = F.softmax(teacher(x).float() / temperature, dim=-1)
            if not cfg.fixed:
                teacher.to("cpu")
        loss = c.forward_backward(opt, lambda: distill(student(x), soft), amp=amp)
        c.optimizer_step(opt)
        del loss

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("teacher_offload", __doc__, build, argv, steps=(2, 20), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
