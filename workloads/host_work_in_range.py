"""host_work_in_range: each step deserialises its layer weights on the CPU while the GPU waits.

Pathology: every step "loads" the weights it needs from CPU memory: int8-quantised blobs (2 x
2048 x 2048) are decoded with numpy (``frombuffer`` + per-row dequantisation to fp32) into a
pinned staging buffer inside a ``load_weights`` range that makes no CUDA call, then uploaded
(``upload``), cast to bf16 and used by 128 bf16 GEMMs on Tensor Cores (``compute``). The GPU is
idle for the whole host phase, typically 40% of the step (the GEMMs take longer than the
host phase, so the twin can hide it even under a profiler).
Twin (``--fixed``): the same decoding runs in a background thread that prepares step i+1's weights
(into the other of two staging buffers) while step i launches and computes (submitted as soon as
step i's weights are ready), so the loop only uploads and computes.
Trace evidence: per ``step_N``: pathology: a ``load_weights`` range on the main thread with no
CUDA API call and no GPU activity, then ``upload`` (a HtoD memcpy) and ``compute`` (kernels);
twin: ``load_weights`` ranges on a second thread overlapping the previous step's kernels, and a
step shorter by about the host phase.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|sgemm"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import numpy as np
    import torch

    n_mats, side, rows, reps = c.pick(cfg, (2, 64, 32, 2), (2, 2048, 8192, 128))
    dev = cfg.device
    rng = np.random.default_rng(0)
    # "checkpoint" in CPU memory: 4 versions of the layer weights, int8 plus per-row fp32 scales
    blobs = [rng.integers(-127, 128, size=(n_mats, side, side), dtype=np.int8).tobytes()
             for _ in range(4)]
    scales = [(rng.random((n_mats, side, 1), dtype=np.float32) / 127).astype(np.float32)
              for _ in range(4)]
    staging = [torch.empty(n_mats, side, side, pin_memory=cfg.cuda) for _ in range(2)]
    uploaded = [torch.cuda.Event() if cfg.cuda else None for _ in range(2)]
    w_dev = torch.empty(n_mats, side, side, device=dev)
    dtype = torch.bfloat16  # the GEMMs on Tensor Cores, as models run: the host phase is the problem
    x0 = torch.randn(rows, side, device=dev, dtype=dtype)

    def load_weights(k: int) -> int:
        """Decode version ``k % 4`` into staging buffer ``k % 2`` (host only, no CUDA call)."""
        slot = k % 2
        with nv.range("load_weights"):
            q = np.frombuffer(blobs[k % 4], dtype=np.int8).reshape(n_mats, side, side)
            np.multiply(q, scales[k % 4], out=staging[slot].numpy())
        return slot

    def upload_and_compute(slot: int) -> None:
        with nv.range("upload"):
            w_dev.copy_(staging[slot], non_blocking=True)
            if uploaded[slot] is not None:
                uploaded[slot].record()
        with nv.range("compute"):
            w = w_dev.to(dtype)
            x = x0
            for r in range(reps):
                x = torch.tanh(x @ w[r % n_mats])
            x.sum()

    if not cfg.fixed:
        counter = [0]

        def step(_i: int) -> None:
            k = counter[0]
            counter[0] += 1
            upload_and_compute(load_weights(k))

        return step

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="weights")

    def prepare(k: int) -> int:
        ev = uploaded[k % 2]
        if ev is not None:
            ev.synchronize()  # the staging buffer's previous upload has finished
        return load_weights(k)

    state: dict[str, object] = {"k": 0, "next": pool.submit(prepare, 0)}

    def step_bg(_i: int) -> None:
        k = int(state["k"])  # type: ignore[call-overload]
        fut: Future[int] = state["next"]  # type: ignore[assignment]
        with nv.range("wait_weights"):
            slot = fut.result()
        # step k+1's weights go to the other staging buffer (prepare waits for that buffer's last
        # upload, step k-1's): start decoding them now, so the decode overlaps this step's launches
        # and its GPU work, not only the GPU's drain after the launches
        state["k"] = k + 1
        state["next"] = pool.submit(prepare, k + 1)
        upload_and_compute(slot)

    return step_bg


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("host_work_in_range", __doc__, build, argv, steps=(2, 10), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
