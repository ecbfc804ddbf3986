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
``--fixed --dispatch loop`` keeps the pathology's loop over the experts (a gather, the expert and an
``index_add_`` each) on fixed-size slices of the same slots: the syncs removed, the launches kept,
which measures what removing the synchronizations alone buys.
Trace evidence: per ``step_N`` (a ``layer_N`` range per layer): 64 ``cudaStreamSynchronize`` (in
``aten::nonzero``) with GPU idle gaps after each, GPU busy well under the step; the twin shows none
and a shorter step.
"""
from __future__ import annotations

import argparse
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

    def slots(h: torch.Tensor, b: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Each (token, choice)'s slot in its expert's fixed-size buffer (the spare last row when the
        expert is full) and its routing weight (0 when dropped), with no host sync."""
        top_w, top_i = route(h, b)
        flat = top_i.reshape(-1)                                         # (n * top_k,)
        # each token's slot within its expert: a running count along the tokens, per expert. Scanned
        # along the inner dimension: PyTorch scans the outer dimension of a (tokens, 8) tensor with one
        # thread per column (``cumsum(0)``: 3 ms a layer on an H200, slower than the whole dispatch)
        onehot = F.one_hot(flat, experts).t().contiguous()              # (experts, n * top_k)
        pos = ((onehot.cumsum(1) - 1) * onehot).sum(0)
        fits = pos < capacity
        slot = torch.where(fits, flat * capacity + pos, experts * capacity)  # overflow: a spare row
        return slot, top_w.reshape(-1) * fits

    def moe_static(h: torch.Tensor, b: dict) -> torch.Tensor:
        """Capacity-based dispatch: fixed-size expert buffers, batched GEMMs, no host sync."""
        slot, weight = slots(h, b)
        n = h.shape[0]
        buf = h.new_zeros(experts * capacity + 1, d)
        buf.index_copy_(0, slot, h.repeat_interleave(top_k, dim=0))
        grouped = buf[:-1].view(experts, capacity, d)
        y = torch.bmm(F.gelu(torch.bmm(grouped, b["w1"])), b["w2"]).reshape(-1, d)
        y = torch.cat([y, y.new_zeros(1, d)])
        return (y[slot] * weight.unsqueeze(-1)).view(n, top_k, d).sum(1)

    def moe_static_loop(h: torch.Tensor, b: dict) -> torch.Tensor:
        """The pathology's loop over the experts on fixed-size slices of the same slots: its launches
        (a gather, the expert, a weighted ``index_add_`` per expert) without its host syncs."""
        slot, weight = slots(h, b)
        n = h.shape[0]
        token = torch.full((experts * capacity + 1,), n, device=h.device)  # n: a zero row (empty slot)
        token.index_copy_(0, slot, torch.arange(n * top_k, device=h.device) // top_k)
        w_slot = h.new_zeros(experts * capacity + 1)
        w_slot.index_copy_(0, slot, weight)
        h_pad = torch.cat([h, h.new_zeros(1, d)])
        out = torch.zeros_like(h_pad)
        for e in range(experts):
            rows = token[e * capacity:(e + 1) * capacity]
            y = F.gelu(h_pad[rows] @ b["w1"][e]) @ b["w2"][e]
            out.index_add_(0, rows, y * w_slot[e * capacity:(e + 1) * capacity, None])
        return out[:n]

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
                h = h + moe_twin(F.layer_norm(h, (d,), b["ln"]), b)
        return h

    moe_twin = moe_static_loop if cfg.options.dispatch == "loop" else moe_static
    forward = forward_static if cfg.fixed else forward_dynamic

    def step(_i: int) -> None:
        with torch.no_grad():
            out = forward()
            out.float().square().mean()  # a summary of the output, left on the device

    return step


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dispatch", choices=("grouped", "loop"), default="grouped",
                        help="the twin's dispatch: batched GEMMs over fixed-size expert buffers "
                             "(default), or the pathology's loop over the experts on fixed-size slices "
                             "(its launches without its syncs: what removing the syncs alone buys)")


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("mask_index_sync", __doc__, build, argv, add_arguments=add_arguments,
                          steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
