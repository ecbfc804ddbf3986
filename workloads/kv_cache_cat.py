"""kv_cache_cat: batched greedy decoding whose KV cache grows by ``torch.cat`` every token.

Pathology: a decoder-only transformer (8 layers, d_model 1024, 16 heads of 64, bf16 on a GPU)
continues 8 sequences whose prompts (4096 tokens) are already in the KV cache, decoding ``--tokens``
tokens a step, the way the legacy Hugging Face ``past_key_values`` tuples (and many hand-written
decoders) keep the cache: each layer appends the new token's key and value with
``k = torch.cat([k, k_new], dim=2)``. Every token therefore allocates a new cache one position longer
and copies the whole old one into it: per token and layer 2 x 64 MiB read and written (the cache is
1 GiB in all), several times the memory traffic the attention itself needs, and growing with the
length.
Twin (``--fixed``): a static cache preallocated once at the full length (prompt plus the step's
tokens), the new key and value written in place at the current position (``index_copy_``) and the
attention run on a view of the filled prefix: the same attention, the same GEMMs, no cache copies.
Each step restarts from the same prompt in both (the pathology drops its grown tensors, the twin
overwrites the positions after the prompt).
Trace evidence: per ``step_N`` (one ``token`` range per token): pathology: 16
``CatArrayBatchedCopy`` kernels per token, each moving 64 MiB, a large share of the GPU time (the
step is GPU-bound on copies); twin: small ``index_copy`` kernels instead and a step shorter by
about the copies' time.
"""
from __future__ import annotations

import argparse
import math

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:CatArray|index"
NCU_COUNT = 2
HAS_TWIN = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, default=None,
                        help="tokens decoded per measured step (default 2 smoke / 16 full)")


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F

    layers, d, heads, vocab, batch, prompt = c.pick(cfg, (2, 64, 4, 256, 2, 16),
                                                    (8, 1024, 16, 8192, 8, 4096))
    tokens = cfg.options.tokens or c.pick(cfg, 2, 16)
    dev = cfg.device
    dtype = torch.bfloat16 if cfg.cuda else torch.float32
    dh = d // heads
    gen = torch.Generator(device="cpu").manual_seed(0)
    torch.manual_seed(0)  # the prompt's cache is drawn on the device

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) / math.sqrt(shape[0])).to(dev, dtype)

    emb = w(vocab, d) * math.sqrt(d) / 8
    blocks = [dict(ln1=torch.ones(d, device=dev, dtype=dtype), wqkv=w(d, 3 * d), wo=w(d, d),
                   ln2=torch.ones(d, device=dev, dtype=dtype), w1=w(d, 4 * d), w2=w(4 * d, d))
              for _ in range(layers)]
    ln_f = torch.ones(d, device=dev, dtype=dtype)
    # the prompt's keys and values (as a prefill would leave them), one (batch, heads, len, dh) each
    prompt_kv = [(torch.randn(batch, heads, prompt, dh, device=dev, dtype=dtype),
                  torch.randn(batch, heads, prompt, dh, device=dev, dtype=dtype))
                 for _ in range(layers)]
    first = torch.randint(0, vocab, (batch,), generator=gen).to(dev)
    # the twin's static cache: the prompt copied once, room for the step's tokens after it
    full = prompt + tokens
    static_kv = []
    for k0, v0 in prompt_kv:
        k_buf = torch.zeros(batch, heads, full, dh, device=dev, dtype=dtype)
        v_buf = torch.zeros_like(k_buf)
        k_buf[:, :, :prompt].copy_(k0)
        v_buf[:, :, :prompt].copy_(v0)
        static_kv.append((k_buf, v_buf))
    positions = torch.arange(full, device=dev)  # the index tensors of index_copy_, made once

    def layer(x: torch.Tensor, b: dict, kv: list, i: int, pos: int) -> torch.Tensor:
        h = F.layer_norm(x, (d,), b["ln1"])
        q, k, v = (h @ b["wqkv"]).view(batch, 1, 3, heads, dh).permute(2, 0, 3, 1, 4)
        if cfg.fixed:
            k_buf, v_buf = kv[i]
            at = positions[pos:pos + 1]
            k_buf.index_copy_(2, at, k)
            v_buf.index_copy_(2, at, v)
            k_all, v_all = k_buf[:, :, :pos + 1], v_buf[:, :, :pos + 1]
        else:
            k_old, v_old = kv[i]
            k_all = torch.cat([k_old, k], dim=2)  # a new, one longer cache: the old one copied
            v_all = torch.cat([v_old, v], dim=2)
            kv[i] = (k_all, v_all)
        a = F.scaled_dot_product_attention(q, k_all, v_all)
        x = x + a.transpose(1, 2).reshape(batch, 1, d) @ b["wo"]
        h = F.layer_norm(x, (d,), b["ln2"])
        return x + F.gelu(h @ b["w1"]) @ b["w2"]

    def step(_i: int) -> None:
        kv = static_kv if cfg.fixed else list(prompt_kv)  # the pathology restarts from the prompt
        tok = first
        with torch.no_grad():
            for t in range(tokens):
                with nv.range("token"):
                    x = emb[tok].unsqueeze(1)
                    for i, b in enumerate(blocks):
                        x = layer(x, b, kv, i, prompt + t)
                    logits = F.layer_norm(x[:, -1], (d,), ln_f) @ emb.t()
                    tok = logits.argmax(-1)  # stays on the device: no host sync

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("kv_cache_cat", __doc__, build, argv, add_arguments=add_arguments,
                          steps=(2, 20), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
