"""Record a 2021-generation torch.profiler trace on CPU, for the loader's tests of that format.

PyTorch 1.8.1 (the first release with ``torch.profiler``) writes the Kineto vocabulary of early 2021:
``Operator`` events instead of ``cpu_op``/``user_annotation``, integer microsecond timestamps, string
thread ids. No GPU machine we have runs that PyTorch (it predates the H100), so this records a small
CPU training loop shaped like the workloads (``ProfilerStep#N`` / ``step_N`` / ``forward`` / ``backward``
/ ``optimizer_step``); its GPU-side categories (``Runtime``/``Kernel``/``Memcpy``/``Memset``) are not in
it. Python 3.8 and ``pip install torch==1.8.1 numpy`` (PyPI's CUDA 10.2 build runs on CPU), then::

    python workloads/torch18_cpu_trace.py OUT_DIR

It deliberately imports nothing from this package: it runs under that old Python and PyTorch.
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler


def main(out_dir: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randn(16, 64, 256)
    target = torch.randint(0, 10, (16, 64))
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=4),
                 on_trace_ready=tensorboard_trace_handler(out_dir), record_shapes=True) as prof:
        for i in range(5):
            with record_function("step_%d" % i):
                with record_function("load_batch"):
                    x, y = data[i % 16].clone(), target[i % 16].clone()
                with record_function("forward"):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                with record_function("backward"):
                    loss.backward()
                with record_function("optimizer_step"):
                    opt.step()
                    opt.zero_grad()
            prof.step()
    print("torch", torch.__version__)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "torch18_trace")
