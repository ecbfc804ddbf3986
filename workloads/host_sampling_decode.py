"""host_sampling_decode: batched decoding that samples each next token with numpy on the host.

Pathology: a decoder-only transformer (8 layers, d_model 1024, 16 heads of 64, vocab 32000, bf16 on a
GPU, a static KV cache already holding a 512-token prompt) continues 8 sequences token by token,
eagerly, and samples each next token the way hand-written generation loops do: the temperature
softmax on the GPU, then ``probs.cpu().numpy()`` (a 1 MiB device-to-host copy that waits for the
forward), a renormalisation in float64 and ``rng.choice(vocab, p=row)`` for each of the 8 rows in
Python, and the chosen ids sent back with ``torch.tensor(ids).to(device)``. Each token the GPU drains
and idles while numpy samples and the host then launches the next forward.
Twin (``--fixed``): the same temperature softmax and ``torch.multinomial(probs, 1)`` on the GPU, the
next ids written into the token buffer on the device: no copy to the host, no synchronization.
Both variants run the same eager forward (~130 launches a token), so they differ only in sampling.
Trace evidence: per ``step_N`` (``TOKENS`` tokens, each a ``token_N`` range holding ``forward`` and
``sample``): pathology: one ``cudaMemcpyAsync`` DtoH (1 MiB) with its synchronization and a small
pageable HtoD copy per token in ``sample``, the GPU idle during numpy's sampling; twin: a few
sampling kernels (softmax, multinomial) per token and a shorter step.
"""
from __future__ import annotations

from . import _common as c
from . import _decoder

NCU_KERNEL_FILTER = "regex:gemv|gemm|softmax|multinomial"
NCU_COUNT = 4
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import numpy as np
    import torch

    layers, d, heads, vocab, batch, prompt = c.pick(cfg, (2, 64, 4, 256, 2, 8),
                                                    (8, 1024, 16, 32000, 8, 512))
    tokens = cfg.options.tokens or c.pick(cfg, 2, 8)
    dev = cfg.device
    dtype = torch.bfloat16 if cfg.cuda else torch.float32
    dh = d // heads
    max_len = prompt + (cfg.warmup + cfg.steps) * tokens + 8
    temperature = 0.8
    gen = torch.Generator(device="cpu").manual_seed(0)
    rng = np.random.default_rng(0)
    if cfg.cuda:
        torch.cuda.manual_seed(0)

    dec = _decoder.build_decoder(layers, d, heads, vocab, max_len, device=dev, dtype=dtype, gen=gen, batch=batch)
    # the KV cache, its first `prompt` positions filled (the prompt's prefill, done before the loop)
    k_cache = torch.zeros(layers, batch, heads, max_len, dh, device=dev, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    k_cache[:, :, :, :prompt] = (torch.randn(layers, batch, heads, prompt, dh, generator=gen) * 0.5).to(dev, dtype)
    v_cache[:, :, :, :prompt] = torch.randn(layers, batch, heads, prompt, dh, generator=gen).to(dev, dtype)
    token = torch.randint(0, vocab, (batch,), generator=gen).to(dev)
    pos = torch.full((1,), prompt, dtype=torch.long, device=dev)
    key_pos = torch.arange(max_len, device=dev)

    def forward() -> torch.Tensor:
        """One token of each sequence at ``pos``; returns the logits (batch, vocab)."""
        return dec.forward(token, pos, key_pos, k_cache, v_cache)

    def sample_host(logits: torch.Tensor) -> None:
        probs = torch.softmax(logits.float() / temperature, dim=-1).cpu().numpy().astype(np.float64)
        probs /= probs.sum(axis=1, keepdims=True)
        ids = [int(rng.choice(vocab, p=row)) for row in probs]
        token.copy_(torch.tensor(ids).to(dev))

    def sample_device(logits: torch.Tensor) -> None:
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        token.copy_(torch.multinomial(probs, 1).view(batch))

    sample = sample_device if cfg.fixed else sample_host

    return _decoder.decode_step(tokens, forward, sample, pos)


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("host_sampling_decode", __doc__, build, argv, add_arguments=_decoder.add_arguments,
                          steps=(2, 30), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
