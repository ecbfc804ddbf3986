"""occupancy: a custom CUDA kernel launched with a configuration that caps occupancy.

Pathology: a 1-D stencil (radius 8, 64 Mi float32 points) as a CuPy ``RawKernel`` launched with
64-thread blocks and 160 KiB of dynamic shared memory per block ("sized for the worst case"),
although a block only needs (64 + 16) floats. At most one block (2 warps) fits on an SM:
theoretical occupancy ~3%, too few loads in flight to cover DRAM latency.
Twin (``--fixed``): the same kernel, 256-thread blocks and only the shared memory it needs
((256 + 16) * 4 bytes), so many blocks are resident per SM (occupancy limited by threads only).
Trace evidence: the ``stencil1d`` kernel takes ~10x+ longer per launch than in the twin; under
ncu "Theoretical Occupancy" ~3% with "Block Limit Shared Mem" = 1, versus ~100% in the twin.
On CPU (smoke, no CuPy) a numpy version of the same math runs and the launch configuration that
would be used is printed.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:stencil1d"
NCU_COUNT = 2
HAS_TWIN = True
RADIUS = 8

KERNEL_SOURCE = r"""
extern "C" __global__
void stencil1d(const float* __restrict__ x, float* __restrict__ y, long long n) {
    extern __shared__ float tile[];
    const int R = %(radius)d;
    long long base = (long long)blockIdx.x * blockDim.x;
    long long i = base + threadIdx.x;
    for (int t = threadIdx.x; t < blockDim.x + 2 * R; t += blockDim.x) {
        long long src = base + t - R;
        tile[t] = (src >= 0 && src < n) ? x[src] : 0.0f;
    }
    __syncthreads();
    if (i < n) {
        float acc = 0.0f;
        #pragma unroll
        for (int k = -R; k <= R; ++k) acc += tile[threadIdx.x + R + k];
        y[i] = acc * (1.0f / (2 * R + 1));
    }
}
""" % {"radius": RADIUS}


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """Block size and dynamic shared memory per block for ``stencil1d``."""

    threads: int
    shared_bytes: int

    def grid(self, n: int) -> int:
        return (n + self.threads - 1) // self.threads


def launch_config(fixed: bool) -> LaunchConfig:
    """The pathological (64 threads, 160 KiB) or the sane (256 threads, minimal) config."""
    if fixed:
        return LaunchConfig(threads=256, shared_bytes=(256 + 2 * RADIUS) * 4)
    return LaunchConfig(threads=64, shared_bytes=160 * 1024)


def stencil_numpy(x: np.ndarray) -> np.ndarray:
    """Reference: mean over a window of 2*RADIUS+1 with zero padding."""
    kernel = np.full(2 * RADIUS + 1, 1.0 / (2 * RADIUS + 1), dtype=np.float32)
    return np.convolve(x, kernel, mode="same").astype(np.float32)


def _cupy_or_none() -> object | None:
    try:
        import cupy

        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:
        return None


def build(cfg: c.RunConfig) -> c.Step:
    n = c.pick(cfg, 1 << 12, 1 << 26)
    launch = launch_config(cfg.fixed)
    print(f"[occupancy] stencil1d n={n} block={launch.threads} grid={launch.grid(n)} "
          f"dynamic_smem={launch.shared_bytes} B", flush=True)
    cp = _cupy_or_none() if cfg.cuda else None
    if cfg.cuda and cp is None:
        raise SystemExit("error: occupancy on CUDA needs CuPy (import cupy failed)")
    if cp is None:
        x_np = np.random.default_rng(0).standard_normal(n).astype(np.float32)

        def step_cpu(_i: int) -> None:
            with nv.range("compute"):
                stencil_numpy(x_np)
        return step_cpu

    kernel = cp.RawKernel(KERNEL_SOURCE, "stencil1d")
    kernel.max_dynamic_shared_size_bytes = launch.shared_bytes
    x = cp.random.standard_normal(n, dtype=cp.float32)
    y = cp.empty_like(x)
    ref = stencil_numpy(cp.asnumpy(x[:4096]))
    kernel((launch.grid(n),), (launch.threads,), (x, y, np.int64(n)), shared_mem=launch.shared_bytes)
    np.testing.assert_allclose(cp.asnumpy(y[RADIUS:4096 - RADIUS]), ref[RADIUS:4096 - RADIUS],
                               rtol=1e-4, atol=1e-5)
    launches = 4

    def step_gpu(_i: int) -> None:
        with nv.range("compute"):
            for _ in range(launches):
                kernel((launch.grid(n),), (launch.threads,), (x, y, np.int64(n)),
                       shared_mem=launch.shared_bytes)

    return step_gpu


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("occupancy", __doc__, build, argv, steps=(2, 8), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
