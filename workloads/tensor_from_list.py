"""tensor_from_list: a model whose layers rebuild their constants from Python lists on every call.

Pathology: inference of a 12-layer residual MLP stack (d_model 2048, hidden 8192, bf16 on a GPU,
``no_grad``) over 8 micro-batches of 1024 tokens a step, written as ported research code often is:
each layer keeps its per-channel layer scale (LayerScale, CaiT-style) and its residual gate as
Python lists of floats (loaded from a config) and turns them into tensors in ``forward``:
``torch.tensor(self.scale, device=x.device, dtype=x.dtype)``, and the head does the same with its
per-class logit bias. Each ``torch.tensor(list, device="cuda")`` converts the list on the host, then
copies it from pageable memory with a synchronous ``cudaMemcpy`` (``cudaMemcpyAsync`` plus
``cudaStreamSynchronize``): the host waits for every queued kernel to finish, and the GPU then waits
for the host to convert the next list (2048 floats: a tenth of a millisecond or more) and launch the
next kernels. Host and GPU take turns, two times a layer.
Twin (``--fixed``): the same constants turned into device tensors once, when the model is built;
``forward`` only uses them: no copies, no synchronization, the host runs ahead of the GPU.
Trace evidence: per ``step_N`` (``micro_N`` ranges, a ``layer_N`` range per layer): pathology:
2 x 12 + 1 pageable HtoD memcpys of a few KiB per micro-batch, each followed by a
``cudaStreamSynchronize``, and a GPU gap after each; twin: kernels only (GEMMs of ~0.1 ms back to
back) and a shorter step.
"""
from __future__ import annotations

import random

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|nvjet"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F

    layers, d, hidden, tokens, micro, classes = c.pick(cfg, (2, 32, 64, 16, 2, 10),
                                                       (12, 2048, 8192, 1024, 8, 1000))
    dev = cfg.device
    dtype = torch.bfloat16 if cfg.cuda else torch.float32
    gen = torch.Generator(device="cpu").manual_seed(0)
    rng = random.Random(0)

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) / shape[0] ** 0.5).to(dev, dtype)

    # the "config": plain Python floats, as a checkpoint's JSON would give them
    cfg_layers = [dict(scale=[rng.uniform(0.05, 0.15) for _ in range(d)], gate=rng.uniform(0.5, 1.0))
                  for _ in range(layers)]
    logit_bias = [rng.gauss(0.0, 0.1) for _ in range(classes)]
    weights = [dict(ln=torch.ones(d, device=dev, dtype=dtype), w1=w(d, hidden), w2=w(hidden, d))
               for _ in range(layers)]
    head = w(d, classes)
    # the twin's constants, made once on the device
    const = [dict(scale=torch.tensor(lc["scale"], device=dev, dtype=dtype),
                  gate=torch.tensor(lc["gate"], device=dev, dtype=dtype)) for lc in cfg_layers]
    bias_dev = torch.tensor(logit_bias, device=dev, dtype=dtype)
    batches = [torch.randn(tokens, d, generator=gen).to(dev, dtype) for _ in range(micro)]

    def layer(x: torch.Tensor, i: int) -> torch.Tensor:
        wt = weights[i]
        if cfg.fixed:
            scale, gate = const[i]["scale"], const[i]["gate"]
        else:  # each a host conversion, a pageable copy and a synchronization
            gate = torch.tensor(cfg_layers[i]["gate"], device=x.device, dtype=x.dtype)
            scale = torch.tensor(cfg_layers[i]["scale"], device=x.device, dtype=x.dtype)
        h = F.gelu(F.layer_norm(x, (d,), wt["ln"]) @ wt["w1"]) @ wt["w2"]
        return x + gate * (scale * h)

    def forward(x: torch.Tensor) -> torch.Tensor:
        for i in range(layers):
            with nv.range(f"layer_{i}"):
                x = layer(x, i)
        bias = bias_dev if cfg.fixed else torch.tensor(logit_bias, device=x.device, dtype=x.dtype)
        return (x @ head + bias).argmax(-1)

    def step(_i: int) -> None:
        with torch.no_grad():
            preds = []
            for m, x in enumerate(batches):
                with nv.range(f"micro_{m}"):
                    preds.append(forward(x))
            torch.cat(preds)  # the step's predictions, left on the device

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("tensor_from_list", __doc__, build, argv, steps=(2, 20), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
