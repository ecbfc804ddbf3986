"""The small decoder-only transformer of the decoding workloads (``decode_eager``, ``host_sampling_decode``).

One implementation of what both programs set up the same way: the ``--tokens`` option, the weights
(token and position embeddings, ``layers`` pre-norm blocks of fused QKV attention and a GELU MLP, drawn
from one CPU generator in a fixed order), the one-token forward on a static KV cache, and the decoding
step (``token_N`` ranges, each a ``forward`` and a ``sample``). Each program keeps its own KV cache,
token and position buffers (their shapes and starting contents differ) and its own sampling.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import _nvtx as nv

if TYPE_CHECKING:
    import torch

    from ._common import Step


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tokens``: tokens decoded per measured step."""
    parser.add_argument("--tokens", type=int, default=None,
                        help="tokens decoded per measured step (default 2 smoke / 8 full)")


@dataclasses.dataclass(frozen=True)
class Decoder:
    """The weights and shape of the decoder; :meth:`forward` runs one token on a static KV cache."""

    d: int
    heads: int
    max_len: int
    emb: torch.Tensor
    pos_emb: torch.Tensor
    blocks: list[dict[str, torch.Tensor]]
    ln_f: torch.Tensor
    #: rows decoded at once; None: one sequence, its tensors without a batch dimension
    batch: int | None = None

    @property
    def dh(self) -> int:
        return self.d // self.heads

    def forward(self, token: torch.Tensor, pos: torch.Tensor, key_pos: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """One token of each sequence at ``pos``; writes its keys and values into the caches
        (``(layers, [batch,] heads, max_len, dh)``) and returns the logits (``(batch or 1, vocab)``)."""
        import torch
        import torch.nn.functional as F

        d, heads, dh, batch = self.d, self.heads, self.dh, self.batch
        rows = 1 if batch is None else batch
        # the two layouts' own view, cache dimension and transpose, as each program wrote them
        qkv_shape = (3, heads, 1, dh) if batch is None else (batch, 3, heads, 1, dh)
        qkv_dim, cache_dim = (0, 1) if batch is None else (1, 2)
        key_dims = (1, 2) if batch is None else (-1, -2)
        mask_shape = (1, 1, self.max_len) if batch is None else (1, 1, 1, self.max_len)
        scale = 1.0 / math.sqrt(dh)
        x = self.emb.index_select(0, token) + self.pos_emb.index_select(0, pos)   # (rows, d)
        masked = (key_pos > pos).view(*mask_shape)                                  # future keys
        for i, b in enumerate(self.blocks):
            h = F.layer_norm(x, (d,), b["ln1"])
            q, k, v = (h @ b["wqkv"]).view(*qkv_shape).unbind(qkv_dim)              # ([batch,] heads, 1, dh)
            k_cache[i].index_copy_(cache_dim, pos, k)
            v_cache[i].index_copy_(cache_dim, pos, v)
            s = (q @ k_cache[i].transpose(*key_dims)) * scale                        # ([batch,] heads, 1, max_len)
            p = torch.softmax(s.masked_fill(masked, float("-inf")), dim=-1)
            a = (p @ v_cache[i]).reshape(rows, d)
            x = x + a @ b["wo"]
            h = F.layer_norm(x, (d,), b["ln2"])
            x = x + F.gelu(h @ b["w1"]) @ b["w2"]
        return F.layer_norm(x, (d,), self.ln_f) @ self.emb.t()


def build_decoder(layers: int, d: int, heads: int, vocab: int, max_len: int, *, device: object,
                  dtype: torch.dtype, gen: torch.Generator, batch: int | None = None) -> Decoder:
    """The decoder's weights on ``device``, drawn from ``gen`` (embeddings, then each block's)."""
    import torch

    def w(*shape: int) -> torch.Tensor:
        t = torch.randn(*shape, generator=gen) / math.sqrt(shape[0])
        return t.to(device=device, dtype=dtype)

    emb = w(vocab, d) * math.sqrt(d) / 8
    pos_emb = w(max_len, d)
    blocks = [dict(ln1=torch.ones(d, device=device, dtype=dtype), wqkv=w(d, 3 * d), wo=w(d, d),
                   ln2=torch.ones(d, device=device, dtype=dtype), w1=w(d, 4 * d), w2=w(4 * d, d))
              for _ in range(layers)]
    ln_f = torch.ones(d, device=device, dtype=dtype)
    return Decoder(d=d, heads=heads, max_len=max_len, emb=emb, pos_emb=pos_emb, blocks=blocks, ln_f=ln_f,
                   batch=batch)


def decode_step(tokens: int, forward: Callable[[], torch.Tensor], sample: Callable[[torch.Tensor], object],
                pos: torch.Tensor) -> Step:
    """A measured step: ``tokens`` tokens without autograd, each a ``token_N`` range holding ``forward``
    (``forward()``: the logits) and ``sample`` (``sample(logits)``, then the position moves on)."""
    import torch

    def step(_i: int) -> None:
        with torch.no_grad():
            for t in range(tokens):
                with nv.range(f"token_{t}"):
                    with nv.range("forward"):
                        logits = forward()
                    with nv.range("sample"):
                        sample(logits)
                        pos.add_(1)

    return step
