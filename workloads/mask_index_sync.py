"""mask_index_sync: a mixture-of-experts forward whose data-dependent shapes sync the host per expert.

Pathology: inference of an 8-layer top-2 mixture-of-experts MLP stack (8 experts of d_model 1024,
hidden 2048, bf16 on a GPU; 8192 tokens a step, some of them padding) written as the Hugging Face
Mixtral block is: the padding is dropped with ``x[mask]`` (boolean indexing), and in each layer the
router's top-2 choices are turned into a one-hot expert mask and a Python loop over the experts
takes ``idx, top_x = torch.where(expert_mask[e])``, skips an expert with ``if top_x.numel() == 0``,
gathers its tokens ``h[top_x]``, runs the expert and ``index_add_``s the weighted result back.
Every ``torch.where``/``x[mask]`` needs the number of selected elements on the host: the CPU waits
for the GPU (``cudaStreamSynchronize`` in a ``cudaMemcpyAsync`` DtoH) 8 times a layer, and the GPU
waits for the CPU to launch the next expert's kernels after each wait.
Twin (``--fixed``): static shapes: padding kept and zeroed by a masked multiply, and a
capacity-based dispatch (GShard/Switch style): each token's slot in its expert's fixed-size buffer
comes from a cumulative sum, the tokens are scattered into an (experts, capacity, d_model) buffer,
all experts run as two batched GEMMs, and the results are gathered back and weighted: no host sync.
Trace evidence: per ``step_N`` (a ``layer_N`` range per layer): 64 ``cudaStreamSynchronize`` (in
``aten::nonzero``) with GPU idle gaps after each, GPU busy well under the step; the twin shows none
and a shorter step.
"""
from __future__ import annotations

import math

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|index"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F

    layers, d, hidden, experts, tokens = c.pick(cfg, (2, 32, 64, 4, 64), (8, 1024, 2048, 8, 8192))
    top_k = 2
    capacity = math.ceil(tokens * top_k / experts * 1.25)  # the twin's per-expert buffer
    dev = cfg.device
    dtype = torch.bfloat16 if cfg.cuda else torch.float32
    gen = torch.Generator(device="cpu").manual_seed(0)

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) / math.sqrt(shape[-2])).to(dev, dtype)

    blocks = [dict(router=w(d, experts), w1=w(experts, d, hidden), w2=w(experts, hidden, d),
                   ln=torch.ones(d, device=dev, dtype=dtype)) for _ in range(layers)]
    x0 = torch.randn(tokens, d, generator=gen).to(dev, dtype)
    # about 1/8 of the batch is padding (variable-length sequences packed to a fixed length)
    keep = (torch.rand(tokens, generator=gen) > 0.125).to(dev)

    def route(h: torch.Tensor, b: dict) -> tuple[torch.Tensor, torch.Tensor]:
        probs = torch.softmax((h @ b["router"]).float(), dim=-1)
        top_w, top_i = probs.topk(top_k, dim=-1)
        return (top_w / top_w.sum(-1, keepdim=True)).to(h.dtype), top_i

    def moe_dynamic(h: torch.Tensor, b: dict) -> torch.Tensor:
        """Hugging Face Mixtral style: a loop over the experts, each taking its tokens."""
        top_w, top_i = route(h, b)
        out = torch.zeros_like(h)
        expert_mask = F.one_hot(top_i, experts).permute(2, 1, 0)       # (experts, top_k, tokens)
        for e in range(experts):
            idx, top_x = torch.where(expert_mask[e])                     # host sync
            if top_x.numel() == 0:
                continue
            cur = h[top_x]
            y = F.gelu(cur @ b["w1"][e]) @ b["w2"][e]
            out.index_add_(0, top_x, y * top_w[top_x, idx, None])
        return out

    def moe_static(h: torch.Tensor, b: dict) -> torch.Tensor:
        """Capacity-based dispatch: fixed-size expert buffers, batched GEMMs, no host sync."""
        top_w, top_i = route(h, b)
        n = h.shape[0]
        flat = top_i.reshape(-1)                                         # (n * top_k,)
        # (experts, n * top_k): the running count along the last, contiguous dimension (a scan down
        # the outer dimension of an (n * top_k, experts) tensor runs ~3 ms a layer on an H200)
        onehot = F.one_hot(flat, experts).t().contiguous()
        pos = ((onehot.cumsum(1) - 1) * onehot).sum(0)                   # slot within its expert
        fits = pos < capacity
        slot = torch.where(fits, flat * capacity + pos, experts * capacity)  # overflow: a spare row
        buf = h.new_zeros(experts * capacity + 1, d)
        buf.index_copy_(0, slot, h.repeat_interleave(top_k, dim=0))
        grouped = buf[:-1].view(experts, capacity, d)
        y = torch.bmm(F.gelu(torch.bmm(grouped, b["w1"])), b["w2"]).reshape(-1, d)
        y = torch.cat([y, y.new_zeros(1, d)])
        weight = (top_w.reshape(-1) * fits).unsqueeze(-1)
        return (y[slot] * weight).view(n, top_k, d).sum(1)

    def forward_dynamic() -> torch.Tensor:
        h = x0[keep]                                                     # host sync: drop padding
        for i, b in enumerate(blocks):
            with nv.range(f"layer_{i}"):
                h = h + moe_dynamic(F.layer_norm(h, (d,), b["ln"]), b)
        return h

    def forward_static() -> torch.Tensor:
        h = x0 * keep.unsqueeze(-1).to(x0.dtype)                         # padding zeroed, kept
        for i, b in enumerate(blocks):
            with nv.range(f"layer_{i}"):
                h = h + moe_static(F.layer_norm(h, (d,), b["ln"]), b)
        return h

    forward = forward_static if cfg.fixed else forward_dynamic

    def step(_i: int) -> None:
        with torch.no_grad():
            out = forward()
            out.float().square().mean()  # a summary of the output, left on the device

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("mask_index_sync", __doc__, build, argv, steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
