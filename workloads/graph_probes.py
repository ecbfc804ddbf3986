"""Small torch.profiler probes of CUDA graphs and torch.compile: the traces
tests/data/kineto/decode_b1_{eager,cudagraph}_h200 and compile_train_default_h200 (tests/data/MANIFEST.md).
On a GPU machine: ``OUT=DIR python3 workloads/graph_probes.py``, then ``xz -9`` each trace.

* a batch-1 decode loop (12 pre-norm MLP blocks, fp16, 4 tokens a step) run eagerly (10 recorded steps),
  then the same loop captured once in a ``torch.cuda.CUDAGraph`` and replayed each step (30 steps);
* a small training loop under ``torch.compile`` (default mode), compiled inside the recording (12 steps,
  no schedule: the first step holds dynamo's and inductor's compilation).
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable

os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"  # compile inside the recording, not from a cache

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function, schedule  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
WARMUP = 5


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))


def record(name: str, fn: Callable[[], object], steps: int) -> None:
    """``steps`` steps of ``fn`` after WARMUP unrecorded ones, each in a ``step_N`` range."""
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                   schedule=schedule(wait=0, warmup=WARMUP, active=steps),
                   on_trace_ready=lambda p: p.export_chrome_trace(f"{OUT}/{name}.pt.trace.json"))
    t0 = time.perf_counter()
    with prof:
        for i in range(WARMUP + steps):
            with record_function(f"step_{i}"):
                fn()
            prof.step()
        torch.cuda.synchronize()
    print(name, "wall", round(time.perf_counter() - t0, 3), flush=True)


def decode() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(512) for _ in range(12)]).cuda().half().eval()
    x = torch.randn(1, 512, device="cuda", dtype=torch.half)

    def tokens(y: torch.Tensor) -> torch.Tensor:
        for _ in range(4):
            y = model(y)
        return y

    with torch.no_grad():
        record("graph_decode_eager", lambda: tokens(x), steps=10)
        static_in = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up on a side stream before capture, as PyTorch's docs do
            for _ in range(3):
                tokens(static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            tokens(static_in)
        record("graph_decode_cudagraph", graph.replay, steps=30)


def compiled_training() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(256) for _ in range(4)]).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    compiled = torch.compile(model)
    xb = torch.randn(64, 256, device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(12):
            with record_function(f"step_{i}"):
                opt.zero_grad(set_to_none=True)
                compiled(xb).float().pow(2).mean().backward()
                opt.step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(f"{OUT}/compile_train_default.pt.trace.json")


if __name__ == "__main__":
    decode()
    compiled_training()
