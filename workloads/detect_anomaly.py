"""detect_anomaly: autograd's anomaly detection left switched on after a NaN hunt.

Pathology: an MLP (12 blocks of Linear(2048, 2048) + LayerNorm + GELU and a head, fp32 weights, bf16
autocast, fused AdamW, 8192-row batches) trained by a script that still starts with
``torch.autograd.set_detect_anomaly(True)``, added while chasing a NaN and never removed. Anomaly
mode costs on both sides of the step: in the forward every autograd node stores the Python stack
that created it (``traceback`` formatting, tens of microseconds of host time per op, so the host
falls behind the GPU), and in the backward the engine checks every gradient it produces with
``isnan(grad).any().item()``: a reduction kernel and a device-to-host read that waits for it, once per
output of each of the ~100 backward nodes, so the GPU drains and waits for the host's next launch
each time.
Twin (``--fixed``): the same script with ``set_detect_anomaly(False)`` (the default).
Trace evidence: per ``step_N`` (``forward``, ``backward``, ``optimizer``): pathology: ~100-150
``cudaMemcpyAsync`` DtoH with a synchronization and ``isnan``/``any`` reduction kernels in
``backward`` (on the autograd engine's thread), each followed by a GPU gap, and a ``forward`` whose
launches are spread out by host work; twin: no synchronization before the step's end, a dense
forward and backward, and a shorter step.
"""
from __future__ import annotations

from . import _common as c

NCU_KERNEL_FILTER = "regex:gemm|nvjet|layer_norm"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F

    blocks, width, rows, classes = c.pick(cfg, (3, 32, 64, 10), (12, 2048, 8192, 1000))
    torch.autograd.set_detect_anomaly(not cfg.fixed)
    t = c.mlp_training(cfg, blocks, width, rows, classes)
    model, opt, amp, x, y = t.model, t.opt, t.amp, t.x, t.y
    print(f"[detect_anomaly] anomaly detection {torch.is_anomaly_enabled()}", flush=True)

    return c.train_step(opt, lambda: F.cross_entropy(model(x), y), amp=amp)


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("detect_anomaly", __doc__, build, argv, steps=(2, 20), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
