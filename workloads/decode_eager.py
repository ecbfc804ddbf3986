"""decode_eager: token-by-token greedy decoding at batch 1, launched op by op (launch-bound).

Pathology: a small decoder-only transformer (8 layers, d_model 1024, 16 heads, bf16 on a GPU) with
a static KV cache decodes one token at a time at batch 1. Every token is ~130 tiny kernels (each
layer: norm, QKV GEMV, cache writes, attention, projection, MLP) launched one by one from Python;
each kernel runs for a few microseconds, so the GPU waits on the CPU's launches most of the time.
Twin (``--fixed``): the same per-token forward, on the same static input/cache buffers, captured
once in a ``torch.cuda.CUDAGraph`` (warmed up on a side stream, as PyTorch's CUDA-graph docs show)
and replayed per token: one graph launch instead of ~130 kernel launches. Sampling (argmax, the
next position) stays eager in both, so the two differ only in how the forward is launched.
Trace evidence: per ``step_N`` (``TOKENS`` tokens, each a ``token`` range holding ``forward`` and
``sample``): thousands of kernels of a few us with GPU busy well under half of the step while
``cudaLaunchKernel`` fills the CPU timeline; the twin shows one ``cudaGraphLaunch`` per token, GPU
busy high, and a step several times (up to ~10x) shorter on an H100: the floor is the graph's own
~130 kernels of a few us each. Without a GPU ``--fixed`` runs the same static-buffer
forward eagerly (graph capture needs CUDA), which keeps its non-graph logic testable on a CPU.
"""
from __future__ import annotations

import argparse
import math

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemv|gemm|softmax"
NCU_COUNT = 4
HAS_TWIN = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, default=None,
                        help="tokens decoded per measured step (default 2 smoke / 8 full)")


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F

    layers, d, heads, vocab = c.pick(cfg, (2, 64, 4, 256), (8, 1024, 16, 8192))
    tokens = cfg.options.tokens or c.pick(cfg, 2, 8)
    dev = cfg.device
    dtype = torch.bfloat16 if cfg.cuda else torch.float32
    dh = d // heads
    prompt = 1
    max_len = prompt + (cfg.warmup + cfg.steps) * tokens + 8  # graph warmup writes a few positions
    gen = torch.Generator(device="cpu").manual_seed(0)

    def w(*shape: int) -> torch.Tensor:
        t = torch.randn(*shape, generator=gen) / math.sqrt(shape[0])
        return t.to(device=dev, dtype=dtype)

    emb = w(vocab, d) * math.sqrt(d) / 8
    pos_emb = w(max_len, d)
    blocks = [dict(ln1=torch.ones(d, device=dev, dtype=dtype), wqkv=w(d, 3 * d), wo=w(d, d),
                   ln2=torch.ones(d, device=dev, dtype=dtype), w1=w(d, 4 * d), w2=w(4 * d, d))
              for _ in range(layers)]
    ln_f = torch.ones(d, device=dev, dtype=dtype)
    # static buffers: the KV cache, the current token and position, the key positions
    k_cache = torch.zeros(layers, heads, max_len, dh, device=dev, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    token = torch.zeros(1, dtype=torch.long, device=dev)
    pos = torch.zeros(1, dtype=torch.long, device=dev)
    key_pos = torch.arange(max_len, device=dev)
    scale = 1.0 / math.sqrt(dh)

    def forward() -> torch.Tensor:
        """One token's forward on the static buffers; returns the logits (1, vocab)."""
        x = emb.index_select(0, token) + pos_emb.index_select(0, pos)          # (1, d)
        masked = (key_pos > pos).view(1, 1, max_len)                           # future keys
        for i, b in enumerate(blocks):
            h = F.layer_norm(x, (d,), b["ln1"])
            q, k, v = (h @ b["wqkv"]).view(3, heads, 1, dh).unbind(0)        # (heads, 1, dh)
            k_cache[i].index_copy_(1, pos, k)
            v_cache[i].index_copy_(1, pos, v)
            s = (q @ k_cache[i].transpose(1, 2)) * scale                      # (heads, 1, max_len)
            p = torch.softmax(s.masked_fill(masked, float("-inf")), dim=-1)
            a = (p @ v_cache[i]).reshape(1, d)
            x = x + a @ b["wo"]
            h = F.layer_norm(x, (d,), b["ln2"])
            x = x + F.gelu(h @ b["w1"]) @ b["w2"]
        return F.layer_norm(x, (d,), ln_f) @ emb.t()

    forward_call = forward
    if cfg.fixed and cfg.cuda:
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm up (cuBLAS handles, allocator) off the capture
                for _ in range(3):
                    forward()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_logits = forward()
        pos.zero_()
        k_cache.zero_()
        v_cache.zero_()

        def forward_call() -> torch.Tensor:
            graph.replay()
            return static_logits
    elif cfg.fixed:
        print("[decode_eager] no GPU: --fixed runs the static-buffer forward eagerly "
              "(CUDA-graph capture needs CUDA)", flush=True)

    def step(_i: int) -> None:
        with torch.no_grad():
            for t in range(tokens):
                with nv.range(f"token_{t}"):
                    with nv.range("forward"):
                        logits = forward_call()
                    with nv.range("sample"):
                        token.copy_(logits.argmax(dim=-1))
                        pos.add_(1)

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("decode_eager", __doc__, build, argv, add_arguments=add_arguments,
                          steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
