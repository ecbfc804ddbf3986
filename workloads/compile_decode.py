"""compile_decode: batch-1 greedy decoding under ``torch.compile`` (default mode): launch-bound.

Pathology: a small decoder-only transformer written as ``nn.Module`` s (6 layers, d_model 1024, 16
heads, vocab 8192, bf16 on a GPU) whose KV cache lives in module buffers, updated in place at the
current position (the gpt-fast layout, marked static as Hugging Face's static cache does); one function decodes one token (forward plus greedy argmax)
and is compiled with ``torch.compile(decode_one, mode="default")``. Inductor fuses the norms,
softmax and elementwise work into Triton kernels, but each token is still some tens of kernels
(Triton and cuBLAS GEMVs of a few us each) launched one by one by the compiled Python wrapper: the
GPU idles between launches, in no range of the program's own. Compilation happens in the first
warm-up step, outside the measured steps.
Twin (``--fixed``): the same function compiled with ``mode="reduce-overhead"``: Inductor records the
compiled token into a CUDA graph (cudagraph trees; ``torch.compiler.cudagraph_mark_step_begin()``
before each token) and replays it, one graph launch per token instead of the kernel launches.
Trace evidence: per measured step (``TOKENS`` tokens; with NVTX a ``step_N`` range and one
``token`` range per token): pathology: hundreds of short Triton/GEMV kernels with sub-millisecond
gaps, GPU busy well under half of the step, the CPU in Inductor's launch calls; twin: one
``cudaGraphLaunch`` (plus the small input copies) per token and a several times shorter step.
Without a GPU the workload compiles with the ``eager`` backend (Dynamo only; no Triton, no CUDA
graphs) and ``--fixed`` runs the same loop, so it stays testable on a CPU; ``--backend`` overrides.
"""
from __future__ import annotations

import argparse
import math

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:triton|gemv|gemm"
NCU_COUNT = 4
HAS_TWIN = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, default=None,
                        help="tokens decoded per measured step (default 2 smoke / 16 full)")
    c.add_backend_argument(parser)


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    from torch import nn

    n_layers, d, heads, vocab = c.pick(cfg, (2, 64, 4, 256), (6, 1024, 16, 8192))
    tokens = cfg.options.tokens or c.pick(cfg, 2, 16)
    dev = cfg.device
    dtype = torch.bfloat16 if cfg.cuda else torch.float32
    dh = d // heads
    # every position the run decodes (warm-up, cudagraph recording and measured tokens) + margin
    max_len = (cfg.warmup + cfg.steps) * tokens + 16
    torch.manual_seed(0)

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.out = nn.Linear(d, d, bias=False)
            self.register_buffer("k_cache", torch.zeros(1, heads, max_len, dh))
            self.register_buffer("v_cache", torch.zeros(1, heads, max_len, dh))

        def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).view(1, 1, 3, heads, dh).permute(2, 0, 3, 1, 4)  # (1, h, 1, dh)
            self.k_cache[:, :, pos] = k  # in place, at the current position
            self.v_cache[:, :, pos] = v
            s = (q @ self.k_cache.transpose(-1, -2)) / math.sqrt(dh)          # (1, h, 1, max_len)
            p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
            return self.out((p @ self.v_cache).transpose(1, 2).reshape(1, 1, d))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = Attention()
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.GELU(),
                                     nn.Linear(4 * d, d, bias=False))

        def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln1(x), pos, mask)
            return x + self.mlp(self.ln2(x))

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos_emb = nn.Embedding(max_len, d)
            self.blocks = nn.ModuleList(Block() for _ in range(n_layers))
            self.ln_f = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.register_buffer("key_pos", torch.arange(max_len))

        def forward(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            x = (self.emb(token) + self.pos_emb(pos)).view(1, 1, d)
            mask = (self.key_pos > pos).view(1, 1, 1, max_len)  # future keys
            for block in self.blocks:
                x = block(x, pos, mask)
            return self.head(self.ln_f(x)).view(1, vocab)

    model = Decoder().to(device=dev, dtype=dtype).eval()
    for block in model.blocks:  # the cache keeps its address: a graph replay may update it in place
        torch._dynamo.mark_static_address(block.attn.k_cache)
        torch._dynamo.mark_static_address(block.attn.v_cache)
    backend = c.compile_backend(cfg)
    mode = "reduce-overhead" if cfg.fixed and backend == "inductor" else "default"
    if cfg.fixed and mode == "default":
        print(f"[compile_decode] backend {backend}: --fixed compiles without mode='reduce-overhead' "
              "(CUDA graphs need inductor on a GPU)", flush=True)

    def decode_one(token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """One token: the forward at ``pos`` and the greedy next token, shape (1,)."""
        return model(token, pos).argmax(dim=-1)

    compiled = torch.compile(decode_one, backend=backend,
                             **({"mode": mode} if backend == "inductor" else {}))
    token = torch.zeros(1, dtype=torch.long, device=dev)
    pos = torch.zeros(1, dtype=torch.long, device=dev)
    print(f"[compile_decode] backend={backend} mode={mode} layers={n_layers} d={d} "
          f"tokens/step={tokens}", flush=True)

    def step(i: int) -> None:
        nonlocal token
        if i == 0:  # warm-up done: say whether Inductor kept its CUDA graphs
            print(f"[compile_decode] cudagraph skips: {_cudagraph_skips()}", flush=True)
        with torch.no_grad():
            for t in range(tokens):
                with nv.range(f"token_{t}"):
                    if mode == "reduce-overhead":
                        torch.compiler.cudagraph_mark_step_begin()
                    # clone: a graph replay overwrites its output, which the next token reads
                    token = compiled(token, pos).clone()
                    pos.add_(1)

    return step


def _cudagraph_skips() -> object:
    try:
        from torch._dynamo.utils import counters

        return counters["inductor"]["cudagraph_skips"]
    except Exception:  # pragma: no cover - private API of the installed torch
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    # warmup 3: the first token compiles; reduce-overhead warms up, then records its graph on the
    # next calls; the later warm-up tokens replay it
    return c.run_workload("compile_decode", __doc__, build, argv, add_arguments=add_arguments,
                          steps=(2, 10), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
