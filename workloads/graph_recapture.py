"""graph_recapture: an inference loop that captures a new CUDA graph for every request.

Pathology: a model server's inner loop (an MLP of 16 blocks of Linear(2048, 2048) + LayerNorm + GELU
and a head, bf16, ``torch.no_grad()``; 8 requests a step, each a fresh (4096, 2048) input tensor)
that wants CUDA graphs but writes the graph around each request's own input, as a first attempt
does when the input tensor changes every call: ``g = torch.cuda.CUDAGraph()``, ``with
torch.cuda.graph(g): out = model(x)``, ``g.replay()``. Each capture pays what a graph costs once:
``torch.cuda.graph`` synchronizes the device and empties the caching allocator on entry (older
PyTorch also runs ``gc.collect()`` there), the model's ~50 launches are recorded (nothing runs), the
graph is instantiated and uploaded, and the new graph's private memory pool (and, the cache emptied,
the next input) is allocated with ``cudaMalloc``; only then does the replay run. The GPU idles for
the whole capture, every request.
Twin (``--fixed``): the graph captured once at set-up on a static input buffer (after a warm-up on a
side stream, as PyTorch's CUDA-graph docs show); each request copies its input into the buffer
(``static_x.copy_(x)``) and replays the graph.
Without a GPU both variants run the model eagerly (capture needs CUDA).
Trace evidence: per ``step_N`` (8 ``request`` ranges): pathology: per request a
``cudaDeviceSynchronize``, ``cudaFree``/``cudaMalloc``, ``cudaStreamBeginCapture``, ~50 launch
calls with no kernel on the GPU, ``cudaStreamEndCapture`` and ``cudaGraphInstantiate``, ``cudaMalloc``,
then one ``cudaGraphLaunch``; twin: per request one copy kernel and one ``cudaGraphLaunch``, the GPU
busy most of the step.
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|nvjet|layer_norm"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch

    blocks, width, rows, classes, requests = c.pick(cfg, (2, 32, 64, 10, 2), (16, 2048, 4096, 1000, 8))
    dev = cfg.device
    dtype = torch.bfloat16 if cfg.cuda else torch.float32
    torch.manual_seed(0)
    model = c.mlp_stack(blocks, width, classes).to(device=dev, dtype=dtype).eval()
    static_x = torch.zeros(rows, width, device=dev, dtype=dtype)
    if cfg.cuda:  # warm up (cuBLAS handles, allocator) on a side stream before any capture
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):
                model(static_x)
        torch.cuda.current_stream().wait_stream(side)
    else:
        print("[graph_recapture] no GPU: both variants run the model eagerly (CUDA-graph capture "
              "needs CUDA)", flush=True)

    held: dict[str, object] = {}  # the last request's graph, replaced after the next capture

    def infer_recapture(x: torch.Tensor) -> torch.Tensor:
        if not cfg.cuda:
            return model(x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # synchronizes first: the previous graph is done
            out = model(x)
        graph.replay()
        held["graph"] = graph
        return out

    infer = infer_recapture
    if cfg.fixed and cfg.cuda:
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            static_out = model(static_x)

        def infer_replay(x: torch.Tensor) -> torch.Tensor:
            static_x.copy_(x)
            graph.replay()
            return static_out

        infer = infer_replay

    answers: list[torch.Tensor] = []

    def step(_i: int) -> None:
        answers.clear()
        with torch.no_grad():
            for _ in range(requests):
                with nv.range("request"):
                    x = torch.randn(rows, width, device=dev, dtype=dtype)  # the request's input
                    answers.append(infer(x).argmax(dim=-1))

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("graph_recapture", __doc__, build, argv, steps=(2, 30), warmup=(1, 3))


if __name__ == "__main__":
    raise SystemExit(main())
