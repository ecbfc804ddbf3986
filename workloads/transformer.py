"""transformer: the seeds' profiling campaign, a pre-norm Transformer LM with NVTX ranges.

Reproduces a typical assignment sweep (model size x context length x forward / forward+backward
/ full AdamW training step): token + learned positional embeddings, N pre-norm blocks
(RMSNorm -> causal multi-head attention -> residual -> RMSNorm -> SwiGLU FFN -> residual), a
final norm and an LM head; vocab 10000, batch 4, fp32 by default. Attention is the naive
(annotated) one: ``computing_attention_scores`` (QK^T, scale, mask), ``computing_softmax``,
``final_matmul`` inside a ``scaled_dot_product_attention`` range, so kernel time can be split
per phase; ``--attention sdpa`` uses the fused kernel instead.
Not a pathology workload: no twin (``--fixed`` is ignored). What the traces show: in fp32 the
GEMMs run without Tensor Cores (TF32 off); at small sizes / short contexts elementwise kernels
and launch overhead rival GEMM time; the optimizer step is a large share of a training step.
NVTX: ``warmup`` then ``step_N`` each containing ``forward``, ``backward``, ``optimizer_step``.
The phase ranges end without a synchronization (as in the seeds' profiling script), so on a large
model they time the kernel launches, not the GPU work; each ``step_N`` ends with one.

Python timings (the seeds' benchmarking script, question (a) "nsys vs Python"): after the measured
steps, inside a ``python_timing`` range, ``--pytime-reps`` more steps are timed phase by phase the
timeit way, ``torch.cuda.synchronize()`` before and after each phase, and written as JSON to
``--pytime FILE`` (the profiling driver passes ``<trace>.pytime.json``): schema
``workloads.pytime/1`` with ``config``, ``method`` and per phase (forward, backward,
optimizer_step, step) ``n, mean_ms, std_ms, median_ms, min_ms, samples_ms``.
A run that does not fit in GPU memory prints one line to stderr, writes ``{"status": "oom", ...}``
to the ``--pytime`` file, and exits with code 3.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:[Ss]oft[Mm]ax"
NCU_COUNT = 2
HAS_TWIN = False
MODES = ("forward", "forward_backward", "training")
DTYPES = ("fp32", "bf16", "fp16")
PYTIME_SCHEMA = "workloads.pytime/1"
#: The profiling driver asks for the Python timings next to the trace (``{base}`` = trace path stem).
SIDECAR_ARGS = ("--pytime", "{base}.pytime.json")
PYTIME_METHOD = ("timeit-style: after the NVTX-annotated steps, each phase of --pytime-reps more steps "
                 "timed with time.perf_counter() between torch.cuda.synchronize() calls placed before "
                 "and after the phase")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Transformer hyper-parameters."""

    d_model: int
    num_layers: int
    num_heads: int
    d_ff: int
    vocab_size: int = 10000


MODELS: dict[str, ModelConfig] = {
    "small": ModelConfig(768, 12, 12, 3072),
    "medium": ModelConfig(1024, 24, 16, 4096),
    "large": ModelConfig(1280, 36, 20, 5120),
    "xl": ModelConfig(1600, 48, 25, 6400),
    "2.7B": ModelConfig(2560, 32, 32, 10240),
}
SMOKE_MODEL = ModelConfig(64, 2, 4, 128, vocab_size=256)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Transformer-specific options (the common ones come from ``_common``)."""
    parser.add_argument("--model", choices=tuple(MODELS), default="small")
    parser.add_argument("--context", type=int, default=128, help="128|256|512|1024 (any > 0 works)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--mode", choices=MODES, default="forward")
    parser.add_argument("--dtype", choices=DTYPES, default="fp32",
                        help="parameter/activation dtype (default fp32, TF32 off)")
    parser.add_argument("--attention", choices=("naive", "sdpa"), default="naive")
    parser.add_argument("--pytime", default=None, metavar="FILE",
                        help="write the synchronized Python phase timings here (JSON)")
    parser.add_argument("--pytime-reps", type=int, default=None,
                        help="steps timed for --pytime (default 1 smoke / 5 full; 0 = none)")


def trace_name(argv: Sequence[str]) -> str:
    """Trace name the driver uses: ``<model>_<mode>_ctx<context>`` (e.g. small_forward_ctx128)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    ns, _ = parser.parse_known_args(list(argv))
    return f"{ns.model}_{ns.mode}_ctx{ns.context}"


def build_model(cfg: ModelConfig, context: int, attention: str) -> object:
    """Return an ``nn.Module`` LM; imported lazily so ``--help`` needs no torch."""
    import torch
    from torch import nn

    class RMSNorm(nn.Module):
        def __init__(self, d: int, eps: float = 1e-5) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))
            self.eps = eps

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.h = cfg.num_heads
            self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
            self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
            mask = torch.ones(context, context, dtype=torch.bool).triu(1)
            self.register_buffer("mask", mask, persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, d = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            with nv.range("scaled_dot_product_attention"):
                if attention == "sdpa":
                    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                else:
                    with nv.range("computing_attention_scores"):
                        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
                        scores = scores.masked_fill(self.mask[:s, :s], float("-inf"))
                    with nv.range("computing_softmax"):
                        probs = torch.softmax(scores, dim=-1)
                    with nv.range("final_matmul"):
                        o = probs @ v
            return self.out(o.transpose(1, 2).reshape(b, s, d))

    class SwiGLU(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
            self.w3 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
            self.w2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.attn = RMSNorm(cfg.d_model), Attention()
            self.ln2, self.ffn = RMSNorm(cfg.d_model), SwiGLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln1(x))
            return x + self.ffn(self.ln2(x))

    class TransformerLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.pos = nn.Embedding(context, cfg.d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.num_layers))
            self.ln_f = RMSNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            pos = torch.arange(ids.shape[1], device=ids.device)
            x = self.tok(ids) + self.pos(pos)
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    return TransformerLM()


def build(cfg: c.RunConfig) -> c.Step:
    import torch

    opts = cfg.options
    mcfg = SMOKE_MODEL if cfg.smoke else MODELS[opts.model]
    context = min(opts.context, 32) if cfg.smoke else opts.context
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[opts.dtype]
    torch.backends.cuda.matmul.allow_tf32 = False
    n_params_note = f"d_model={mcfg.d_model} layers={mcfg.num_layers} heads={mcfg.num_heads}"
    print(f"[transformer] model={opts.model}{' (smoke config)' if cfg.smoke else ''} {n_params_note}"
          f" context={context} batch={opts.batch} mode={opts.mode} dtype={opts.dtype}", flush=True)
    with torch.device(cfg.device):  # initialise on the GPU: a 2.7B model is slow to init on a CPU
        model = build_model(mcfg, context, opts.attention).to(dtype=dtype)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"[transformer] parameters: {n_params / 1e6:.1f} M", flush=True)
    ids = torch.randint(0, mcfg.vocab_size, (opts.batch, context), device=cfg.device)
    targets = torch.randint(0, mcfg.vocab_size, (opts.batch, context), device=cfg.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4) if opts.mode == "training" else None

    def forward() -> object:
        if opts.mode == "forward":
            with torch.no_grad():
                return model(ids)
        logits = model(ids)
        return torch.nn.functional.cross_entropy(
            logits.view(-1, mcfg.vocab_size).float(), targets.view(-1))

    phases: list[tuple[str, Callable[[dict], None]]] = [
        ("forward", lambda st: st.__setitem__("loss", forward()))]
    if opts.mode != "forward":
        phases.append(("backward", lambda st: st["loss"].backward()))
    if opt is not None:
        phases.append(("optimizer_step", lambda st: opt.step()))

    def step(_i: int) -> None:
        state: dict = {}
        for name, run in phases:
            with nv.range(name):
                run(state)
        model.zero_grad(set_to_none=True)

    def timed_step() -> dict[str, float]:
        """One step, each phase between two synchronizations; milliseconds per phase and in all."""
        state: dict = {}
        out: dict[str, float] = {}
        c.synchronize(cfg.device)
        begin = time.perf_counter()
        for name, run in phases:
            t0 = time.perf_counter()
            run(state)
            c.synchronize(cfg.device)
            out[name] = (time.perf_counter() - t0) * 1e3
        out["step"] = (time.perf_counter() - begin) * 1e3
        model.zero_grad(set_to_none=True)
        return out

    step.timed = timed_step  # type: ignore[attr-defined]
    return step


def python_timings(cfg: c.RunConfig, step: c.Step, reps: int) -> dict[str, dict]:
    """Time ``reps`` more steps phase by phase (synchronized); summary per phase."""
    samples: dict[str, list[float]] = {}
    with nv.range("python_timing"):
        for _ in range(reps):
            for name, ms in step.timed().items():  # type: ignore[attr-defined]
                samples.setdefault(name, []).append(ms)
    return {
        name: {"n": len(v), "mean_ms": round(statistics.fmean(v), 4),
               "std_ms": round(statistics.stdev(v), 4) if len(v) > 1 else 0.0,
               "median_ms": round(statistics.median(v), 4), "min_ms": round(min(v), 4),
               "samples_ms": [round(x, 4) for x in v]}
        for name, v in samples.items()
    }


def write_pytime(path: str | None, cfg: c.RunConfig, **fields: object) -> None:
    if not path:
        return
    opts = cfg.options
    record = {"schema": PYTIME_SCHEMA, "workload": "transformer",
              "config": {"model": opts.model, "context": opts.context, "batch": opts.batch,
                         "mode": opts.mode, "dtype": opts.dtype, "attention": opts.attention,
                         "size": cfg.size, "device": str(cfg.device)},
              "method": PYTIME_METHOD, **fields}
    Path(path).write_text(json.dumps(record, indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = c.make_parser("transformer", __doc__, steps=(1, 3), warmup=(1, 2), has_twin=False)
    add_arguments(parser)
    cfg = c.parse_config("transformer", parser, argv)
    if cfg.options.context < 1 or cfg.options.batch < 1:
        parser.error("--context and --batch must be positive")
    import torch

    reps = cfg.options.pytime_reps
    if reps is None:
        reps = c.pick(cfg, 1, 5) if cfg.options.pytime else 0
    oom_types: tuple[type[BaseException], ...] = (torch.cuda.OutOfMemoryError,)
    try:
        with nv.range("setup"):
            step = build(cfg)
            c.synchronize(cfg.device)
        times = c.run_steps(cfg, step)
        timings = python_timings(cfg, step, reps) if reps > 0 else {}
    except oom_types as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"transformer: out of GPU memory (model={cfg.options.model} "
              f"context={cfg.options.context} mode={cfg.options.mode} dtype={cfg.options.dtype}): "
              f"{first[:200]}", file=sys.stderr, flush=True)
        write_pytime(cfg.options.pytime, cfg, status="oom", error=first[:500])
        return c.EXIT_OOM
    write_pytime(cfg.options.pytime, cfg, status="ok", nvtx_step_ms=[round(t, 4) for t in times],
                 phases=timings)
    c.report(cfg, times, model=cfg.options.model, context=cfg.options.context,
             mode=cfg.options.mode, dtype=cfg.options.dtype,
             python_ms={k: v["mean_ms"] for k, v in timings.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
