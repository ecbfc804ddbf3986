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

from . import _common as c
from . import _decoder

NCU_KERNEL_FILTER = "regex:gemv|gemm|softmax"
NCU_COUNT = 4
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch

    layers, d, heads, vocab = c.pick(cfg, (2, 64, 4, 256), (8, 1024, 16, 8192))
    tokens = cfg.options.tokens or c.pick(cfg, 2, 8)
    dev = cfg.device
    dtype = torch.bfloat16 if cfg.cuda else torch.float32
    dh = d // heads
    prompt = 1
    max_len = prompt + (cfg.warmup + cfg.steps) * tokens + 8  # graph warmup writes a few positions
    gen = torch.Generator(device="cpu").manual_seed(0)
    dec = _decoder.build_decoder(layers, d, heads, vocab, max_len, device=dev, dtype=dtype, gen=gen)
    # static buffers: the KV cache, the current token and position, the key positions
    k_cache = torch.zeros(layers, heads, max_len, dh, device=dev, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    token = torch.zeros(1, dtype=torch.long, device=dev)
    pos = torch.zeros(1, dtype=torch.long, device=dev)
    key_pos = torch.arange(max_len, device=dev)

    def forward() -> torch.Tensor:
        """One token's forward on the static buffers; returns the logits (1, vocab)."""
        return dec.forward(token, pos, key_pos, k_cache, v_cache)

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

    return _decoder.decode_step(tokens, forward_call, lambda logits: token.copy_(logits.argmax(dim=-1)), pos)


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("decode_eager", __doc__, build, argv, add_arguments=_decoder.add_arguments,
                          steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
