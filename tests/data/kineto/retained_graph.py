"""The program behind kineto/retained_graph*.pt.trace.json.gz (torch.profiler, profile_memory=True).

A 7-layer MLP (2048 wide, batch 1024) trained with SGD. The pathology keeps every step's loss tensor in
a list and calls ``backward(retain_graph=True)``, so each step's activations stay alive (the allocator's
``memory_allocated()`` grows 100,705,280 B per step); the fixed twin keeps ``loss.item()`` and frees the
graph. Run on the GPU machine: ``OUT=DIR python3 retained_graph.py [--fixed]``; it writes the trace and
``<name>.allocated.json`` (``torch.cuda.memory_allocated()`` after each step, the reference the memory
facts are checked against).
"""
import gzip
import json
import os
import shutil
import sys
import torch
from torch.profiler import ProfilerActivity, profile, record_function
fixed = "--fixed" in sys.argv
name = "retained_graph_fixed" if fixed else "retained_graph"
out = os.environ.get("OUT", "/tmp")
torch.manual_seed(0)
dev = "cuda"
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.GELU()) for _ in range(6)],
                            torch.nn.Linear(2048, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(1024, 2048, device=dev)
y = torch.randint(0, 10, (1024,), device=dev)
losses = []
per_step = []
def step(i):
    with record_function(f"step_{i}"):
        with record_function("forward"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        with record_function("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward(retain_graph=not fixed)
            opt.step()
        losses.append(loss.item() if fixed else loss)
    torch.cuda.synchronize()
    per_step.append(torch.cuda.memory_allocated())
for i in range(3):
    step(i)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True) as prof:
    for i in range(3, 23):
        step(i)
path = f"{out}/{name}.pt.trace.json"
prof.export_chrome_trace(path)
with open(path, "rb") as f, gzip.open(path + ".gz", "wb", compresslevel=9) as g:
    shutil.copyfileobj(f, g)
os.remove(path)
d = [b - a for a, b in zip(per_step, per_step[1:])]
print(name, "allocated per step end:", per_step)
print(name, "diffs:", d)
json.dump({"allocated": per_step}, open(f"{out}/{name}.allocated.json", "w"))
