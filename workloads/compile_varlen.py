"""compile_varlen: ``torch.compile(model, dynamic=False)`` fed batches whose sequence length changes.

Pathology: batch inference of a BERT-style text classifier (8 pre-norm blocks, width 1024, 16 heads,
vocab 32000, bf16 on a GPU, ``torch.inference_mode()``; 64 sequences a step) compiled with
``torch.compile(model, dynamic=False)``, the setting speed guides recommend for "static, fastest
kernels". The collator pads each batch to its longest sequence rounded up to a multiple of 64
(``pad_to_multiple_of=64``), so batches come in 7 lengths, 256 to 640 tokens, in the order the data
brings them. ``dynamic=False`` specializes every graph on the input's shape, so the first batch of
each new length recompiles the whole model (Dynamo re-traces it, Inductor lowers it again and
generates and compiles new Triton kernels, specialised on the new sizes), seconds of host work
during which the GPU idles: 2 of the lengths are compiled in the warm-up, the other 5 in the measured
steps, each in the step that first sees it. Inductor's on-disk caches go to a fresh directory per run
(``TORCHINDUCTOR_CACHE_DIR``), as on a fresh node, so every recording pays the same cold compiles.
Twin (``--fixed``): the same model, batches and lengths, compiled with the default ``dynamic=None``
and the length dimension marked dynamic (``torch._dynamo.mark_dynamic(ids, 1)``): one compile, in
the warm-up, of kernels that take the length as an argument; no recompilation afterwards.
Without a GPU both variants use ``backend="eager"`` (Dynamo only: no Inductor, no Triton).
Trace evidence: per ``step_N`` (``batch``, ``forward``): pathology: 5 steps of seconds with no
kernel on the GPU while the host compiles (Python, the compile workers' processes, file writes),
then the new kernels' module loads and the forward; the other steps ~10-20 ms of GEMMs and
attention; twin: every step ~10-20 ms of the same GEMMs and attention and Triton kernels.
"""
from __future__ import annotations

import os
import random
import tempfile

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|nvjet|flash|triton"
NCU_COUNT = 2
HAS_TWIN = True


def add_arguments(parser) -> None:  # type: ignore[no-untyped-def]
    c.add_backend_argument(parser)


def build(cfg: c.RunConfig) -> c.Step:
    # a fresh on-disk cache per run (before Inductor first reads the variable): every recording
    # compiles cold, as the first run on a fresh node does
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="compile_varlen_inductor_")
    import torch

    layers, width, heads, vocab, batch, lengths = c.pick(
        cfg, (2, 32, 4, 100, 2, (16, 24, 32)), (8, 1024, 16, 32000, 64, tuple(range(256, 641, 64))))
    dev = cfg.device
    dtype = torch.bfloat16 if cfg.cuda else torch.float32
    torch.manual_seed(0)
    model = c.text_encoder(layers, width, heads, vocab, 2).to(device=dev, dtype=dtype).eval()
    backend = c.compile_backend(cfg)
    compiled = torch.compile(model, backend=backend, dynamic=None if cfg.fixed else False)
    # the lengths in the order the data brings them: the warm-up sees the first 2, each other one
    # first appears in a measured step (every few steps), the steps between repeat seen lengths
    rng = random.Random(0)
    seen = list(lengths[: max(1, min(2, cfg.warmup))])
    schedule = [seen[i % len(seen)] for i in range(cfg.warmup)]
    rest = [n for n in lengths if n not in seen]
    rng.shuffle(rest)
    gap = max(1, cfg.steps // max(1, len(rest)))
    for i in range(cfg.steps):
        if rest and i % gap == 0:
            seen.append(rest.pop())
            schedule.append(seen[-1])
        else:
            schedule.append(rng.choice(seen))
    seen_in_warmup = set(schedule[: cfg.warmup])
    new_in_steps = len(set(schedule[cfg.warmup:]) - seen_in_warmup)
    print(f"[compile_varlen] backend={backend} dynamic={'None + mark_dynamic' if cfg.fixed else False} "
          f"lengths {sorted(set(schedule))}, {new_in_steps} first seen in measured steps", flush=True)
    calls = iter(schedule)
    scores: list[torch.Tensor] = []

    def step(_i: int) -> None:
        length = next(calls, lengths[-1])
        with nv.range("batch"):
            ids = torch.randint(0, vocab, (batch, length), device=dev)
            if cfg.fixed:
                torch._dynamo.mark_dynamic(ids, 1)
        with nv.range("forward"), torch.inference_mode():
            scores.append(compiled(ids).softmax(-1)[:, 1])
        del scores[:-1]

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("compile_varlen", __doc__, build, argv, add_arguments=add_arguments,
                          steps=(3, 24), warmup=(2, 2))


if __name__ == "__main__":
    raise SystemExit(main())
