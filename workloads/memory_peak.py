"""memory_peak: one phase of every step briefly needs nearly all of the GPU's free memory.

Pathology: a retrieval-style loop: ``encode`` (queries = inputs @ a projection), ``score`` (the
full query x key score matrix, fp16, then the best key per query) and ``update``. The score matrix
is sized at start-up from ``torch.cuda.mem_get_info()`` to ~90% of the memory free then (leaving at
least 2 GiB spare, so it never runs out); it is filled block by block (64 GEMMs of query rows, each
well under 2**31 elements), then reduced in one pass, and it exists only inside ``score``: the
step's peak is near the GPU's capacity while the rest of the step needs a few hundred MiB. After
``score`` the loop calls ``torch.cuda.empty_cache()`` (as programs sharing a GPU do), so the peak
is also visible at the driver level (``cudaMalloc``/``cudaFree``) in every step.
Twin (``--fixed``): each block of query rows is scored and reduced before the next one, one
block's matrix at a time: the same results and FLOPs with a peak ~64x smaller.
Trace evidence: nsys ``--cuda-memory-usage``: a ~70 GB ``cudaMalloc`` and its ``cudaFree`` per
``step_N`` (H100 80 GB) in the pathology, ~1/64 of it in the twin; torch.profiler
``profile_memory``: the allocator's peak per step ~90% of the device vs ~2%. Each run prints the
sizes and ``torch.cuda.max_memory_allocated`` per step.
"""
from __future__ import annotations

import argparse

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|reduce"
NCU_COUNT = 2
HAS_TWIN = True
CHUNKS = 64
SPARE_BYTES = 2 * 2**30


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--peak-fraction", type=float, default=0.9,
                        help="score matrix as a fraction of the free GPU memory (default 0.9, "
                             f"never leaving less than {SPARE_BYTES // 2**30} GiB)")


def n_queries(free_bytes: int, n_keys: int, dim: int, fraction: float) -> int:
    """Queries whose score matrix (fp16) is ``fraction`` of ``free_bytes``, at least SPARE_BYTES
    left over for the queries, inputs and everything else; a multiple of CHUNKS."""
    per_query = 2 * n_keys + 2 * dim + 2 * dim + 16  # scores, queries, inputs, results
    budget = min(fraction * free_bytes, free_bytes - SPARE_BYTES)
    n = int(budget // per_query) // CHUNKS * CHUNKS
    if n < CHUNKS:
        raise SystemExit(f"error: only {free_bytes / 2**30:.1f} GiB free on the GPU; "
                         "memory_peak needs several GiB")
    return n


def build(cfg: c.RunConfig) -> c.Step:
    import torch

    n_keys, dim = c.pick(cfg, (512, 16), (65536, 64))
    dev = cfg.device
    dtype = torch.float16 if cfg.cuda else torch.float32
    frac = cfg.options.peak_fraction
    if not 0 < frac <= 0.95:
        raise SystemExit("error: --peak-fraction must be in (0, 0.95]")
    torch.manual_seed(0)
    keys = torch.randn(n_keys, dim, device=dev, dtype=dtype)
    proj = torch.randn(dim, dim, device=dev, dtype=dtype) / dim ** 0.5
    if cfg.cuda:
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(dev)
        n = n_queries(free, n_keys, dim, frac)
    else:
        free = total = 0
        n = 256
    inputs = torch.randn(n, dim, device=dev, dtype=dtype)
    best = torch.empty(n, dtype=torch.long, device=dev)
    score_bytes = n * n_keys * torch.finfo(dtype).bits // 8
    print(f"[memory_peak] free {free / 2**30:.1f} of {total / 2**30:.1f} GiB; {n} queries x "
          f"{n_keys} keys: score matrix {score_bytes / 2**30:.2f} GiB"
          + (f", scored in {CHUNKS} blocks of {score_bytes / CHUNKS / 2**30:.2f} GiB" if cfg.fixed
             else ""),
          flush=True)

    def step(i: int) -> None:
        if cfg.cuda:
            torch.cuda.reset_peak_memory_stats(dev)
        with nv.range("encode"):
            q = inputs @ proj
        with nv.range("score"):
            if cfg.fixed:  # score and reduce one block of queries at a time
                for part, out in zip(q.chunk(CHUNKS), best.chunk(CHUNKS)):
                    torch.argmax(part @ keys.t(), dim=1, out=out)
            else:  # the whole (n, n_keys) matrix first, then the reduction: the peak
                scores = torch.empty(n, n_keys, device=dev, dtype=dtype)
                for part, rows in zip(q.chunk(CHUNKS), scores.chunk(CHUNKS)):
                    torch.matmul(part, keys.t(), out=rows)
                torch.argmax(scores, dim=1, out=best)
                del scores
            del q
            if cfg.cuda:
                torch.cuda.empty_cache()
        with nv.range("update"):
            inputs.add_(keys[best], alpha=1e-3)  # move each query towards its best key
        if cfg.cuda:
            print(f"[memory_peak] step {i}: peak allocated "
                  f"{torch.cuda.max_memory_allocated(dev) / 2**30:.2f} GiB", flush=True)

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("memory_peak", __doc__, build, argv, add_arguments=add_arguments,
                          steps=(2, 10), warmup=(1, 1))


if __name__ == "__main__":
    raise SystemExit(main())
