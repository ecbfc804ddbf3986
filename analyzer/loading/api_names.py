"""Names of CUDA (and HIP) API calls: which call is a kernel launch, a synchronization, an allocation, a
graph launch or a graph capture, and which CUDA call a HIP call stands for. The one place these tables
live, read by the loaders (what a capture without GPU activity still says about its host side, which
kernels a graph launch replayed) and by the facts (:mod:`analyzer.facts.api`, the timeline breakdown,
:mod:`analyzer.facts.graphs`): each classifies a name after :func:`cuda_equivalent`, so a HIP call
(``hipMemcpyWithStream``, ``hipExtModuleLaunchKernel``, ``hipMemCreate``) is what its CUDA equivalent is."""
from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

from analyzer.loading.common import strip_api_suffix

# host waits for the device: name -> kind
SYNC_APIS: dict[str, str] = {
    "cudaDeviceSynchronize": "device",
    "cudaThreadSynchronize": "device",
    "cuCtxSynchronize": "device",
    "cudaStreamSynchronize": "stream",
    "cuStreamSynchronize": "stream",
    "cudaEventSynchronize": "event",
    "cuEventSynchronize": "event",
    "cudaStreamWaitEvent": "stream_wait_event",  # device-side wait, does not block the host
    "cuStreamWaitEvent": "stream_wait_event",
}

LAUNCH_APIS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cudaLaunch", "cudaGraphLaunch",
    "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuLaunchGrid", "cuGraphLaunch",
})

#: the launch calls that replay a CUDA graph (runtime and driver; HIP's hipGraphLaunch and per-thread
#: variants map to them through :func:`cuda_equivalent` and strip_api_suffix)
GRAPH_LAUNCH_APIS: frozenset[str] = frozenset({"cudaGraphLaunch", "cuGraphLaunch"})

#: allocation APIs: name -> (op, memory)
ALLOC_APIS: dict[str, tuple[str, str]] = {
    "cudaMalloc": ("alloc", "device"),
    "cudaMallocPitch": ("alloc", "device"),
    "cudaMalloc3D": ("alloc", "device"),
    "cudaMallocArray": ("alloc", "device"),
    "cudaMalloc3DArray": ("alloc", "device"),
    "cudaMallocManaged": ("alloc", "managed"),
    "cudaMallocHost": ("alloc", "pinned"),
    "cudaHostAlloc": ("alloc", "pinned"),
    "cudaHostRegister": ("alloc", "pinned"),
    "cudaMallocAsync": ("alloc", "pool"),
    "cudaMallocFromPoolAsync": ("alloc", "pool"),
    "cudaFree": ("free", "device"),
    "cudaFreeArray": ("free", "device"),
    "cudaFreeHost": ("free", "pinned"),
    "cudaHostUnregister": ("free", "pinned"),
    "cudaFreeAsync": ("free", "pool"),
    "cuMemAlloc": ("alloc", "device"),
    "cuMemAllocPitch": ("alloc", "device"),
    "cuMemAllocManaged": ("alloc", "managed"),
    "cuMemAllocHost": ("alloc", "pinned"),
    "cuMemHostAlloc": ("alloc", "pinned"),
    "cuMemHostRegister": ("alloc", "pinned"),
    "cuMemAllocAsync": ("alloc", "pool"),
    "cuMemAllocFromPoolAsync": ("alloc", "pool"),
    "cuMemCreate": ("alloc", "virtual"),
    "cuMemMap": ("alloc", "virtual"),
    "cuMemAddressReserve": ("alloc", "virtual"),
    "cuMemFree": ("free", "device"),
    "cuMemFreeHost": ("free", "pinned"),
    "cuMemHostUnregister": ("free", "pinned"),
    "cuMemFreeAsync": ("free", "pool"),
    "cuMemRelease": ("free", "virtual"),
    "cuMemUnmap": ("free", "virtual"),
    "cuMemAddressFree": ("free", "virtual"),
}

#: CUDA graph capture (a span from BeginCapture to EndCapture on one thread) and instantiation calls
#: (CUDA names: HIP's map to them, :func:`cuda_equivalent`)
CAPTURE_BEGIN = frozenset({"cudaStreamBeginCapture", "cuStreamBeginCapture", "cudaStreamBeginCaptureToGraph"})
CAPTURE_END = frozenset({"cudaStreamEndCapture", "cuStreamEndCapture"})
GRAPH_SETUP_APIS = frozenset({"cudaGraphInstantiate", "cudaGraphInstantiateWithFlags",
                              "cudaGraphInstantiateWithParams", "cuGraphInstantiate", "cuGraphInstantiateWithFlags",
                              "cuGraphInstantiateWithParams", "cudaGraphUpload", "cuGraphUpload"})

#: HIP (ROCm) runtime calls whose CUDA equivalent is not their name with ``hip`` -> ``cuda``: the one
#: table every API classification reads through :func:`cuda_equivalent` (launch, copy, synchronize,
#: allocation, graph launch); the others map by prefix (``hipStreamSynchronize`` ->
#: ``cudaStreamSynchronize``, ``hipMalloc`` -> ``cudaMalloc``, ``hipMemcpyAsync`` -> ``cudaMemcpyAsync``,
#: ``hipGraphLaunch`` -> ``cudaGraphLaunch``)
HIP_TO_CUDA: dict[str, str] = {
    # kernel launches through the module API or AMD's extensions
    "hipModuleLaunchKernel": "cuLaunchKernel",
    "hipExtModuleLaunchKernel": "cuLaunchKernel",
    "hipHccModuleLaunchKernel": "cuLaunchKernel",
    "hipExtLaunchKernel": "cudaLaunchKernel",
    "hipLaunchKernelExC": "cudaLaunchKernelExC",
    "hipModuleLaunchCooperativeKernel": "cuLaunchCooperativeKernel",
    "hipExtLaunchMultiKernelMultiDevice": "cudaLaunchCooperativeKernelMultiDevice",
    # hipMemcpyWithStream: a copy ordered on a stream that returns when it is done (PyTorch's blocking
    # .to()/.item() on ROCm), i.e. cudaMemcpy on a stream
    "hipMemcpyWithStream": "cudaMemcpy",
    "hipMemcpyHtoD": "cuMemcpyHtoD", "hipMemcpyDtoH": "cuMemcpyDtoH", "hipMemcpyDtoD": "cuMemcpyDtoD",
    "hipMemcpyHtoDAsync": "cuMemcpyHtoDAsync", "hipMemcpyDtoHAsync": "cuMemcpyDtoHAsync",
    "hipMemcpyDtoDAsync": "cuMemcpyDtoDAsync",
    # pinned host memory and AMD's allocation extensions
    "hipHostMalloc": "cudaMallocHost", "hipMallocHost": "cudaMallocHost", "hipHostAlloc": "cudaHostAlloc",
    "hipHostFree": "cudaFreeHost", "hipFreeHost": "cudaFreeHost",
    "hipExtMallocWithFlags": "cudaMalloc", "hipMallocManaged": "cudaMallocManaged",
    # HIP's driver-style calls (``hipDrv*``, ``hipCtx*``, ``hipMem*`` of the virtual memory API): their CUDA
    # equivalents are driver calls (``cu*``), not ``cuda*``
    "hipCtxSynchronize": "cuCtxSynchronize", "hipDrvLaunchKernelEx": "cuLaunchKernelEx",
    "hipLaunchByPtr": "cudaLaunch",
    "hipMemAllocPitch": "cuMemAllocPitch", "hipMemAllocHost": "cuMemAllocHost",
    "hipMemCreate": "cuMemCreate", "hipMemRelease": "cuMemRelease", "hipMemMap": "cuMemMap",
    "hipMemUnmap": "cuMemUnmap", "hipMemAddressReserve": "cuMemAddressReserve",
    "hipMemAddressFree": "cuMemAddressFree",
    "hipMemcpyParam2D": "cuMemcpy2D", "hipMemcpyParam2DAsync": "cuMemcpy2DAsync",
    "hipDrvMemcpy2DUnaligned": "cuMemcpy2DUnaligned", "hipDrvMemcpy3D": "cuMemcpy3D",
    "hipDrvMemcpy3DAsync": "cuMemcpy3DAsync",
}
_HIP = re.compile(r"^hip(?=[A-Z])")
#: HIP launch calls whose grid argument counts work-items (threads), not blocks: ``hipExtModuleLaunchKernel``
#: and ``hipHccModuleLaunchKernel`` take ``globalWorkSizeX/Y/Z`` (HSA's grid size) where the other launch
#: calls take ``gridDim``. PyTorch's profiler on ROCm (roctracer and rocprofiler-sdk loggers alike) writes
#: that argument as the kernel's ``grid`` unchanged, so hipBLASLt/Tensile GEMMs and MIOpen kernels show a
#: grid ``blockDim`` times too large; the loaders divide it back (:func:`grid_in_blocks`)
WORK_ITEM_GRID_APIS = frozenset({"hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel"})


def cuda_equivalent(name: str) -> str:
    """The CUDA runtime/driver call a HIP call stands for (:data:`HIP_TO_CUDA`, else ``hip`` -> ``cuda``);
    any other name unchanged."""
    if not name.startswith("hip"):
        return name
    return HIP_TO_CUDA.get(name) or _HIP.sub("cuda", name)


def launch_calls(calls: Iterable[tuple[str, int, int]]) -> int:
    """Kernel launch calls among ``calls`` ((name, number of calls, total ns) per name)."""
    return sum(c for n, c, _ in calls if cuda_equivalent(strip_api_suffix(str(n))) in LAUNCH_APIS)


def host_side_summary(calls: Iterable[tuple[str, int, int]], span_ns: int) -> str:
    """One clause on what the host did through the CUDA API (calls, their time, launches per second,
    synchronizations): what a capture without GPU activity can still tell. ``calls``: (name, number of
    calls, their total time in ns) per name; names may carry version suffixes or be HIP names."""
    n_calls = launches = syncs = 0
    total = sync_ns = 0
    for raw, count, dur in calls:
        name = cuda_equivalent(strip_api_suffix(str(raw)))
        n_calls += count
        total += max(int(dur), 0)
        if name in LAUNCH_APIS:
            launches += count
        elif SYNC_APIS.get(name) in ("device", "stream", "event"):
            syncs += count
            sync_ns += max(int(dur), 0)
    if not n_calls:
        return "no CUDA API call either"
    rate = f", {launches / (span_ns / 1e9):,.0f} per second" if launches and span_ns > 0 else ""
    return (f"host side: {n_calls:,} CUDA API calls took {total / 1e9:,.3f} s; {launches:,} kernel launch calls"
            f"{rate}; {syncs:,} synchronizations took {sync_ns / 1e9:,.3f} s")


def grid_in_blocks(grid: np.ndarray, block: np.ndarray, api_codes: np.ndarray, api_labels: np.ndarray
                   ) -> np.ndarray:
    """Launch grids in blocks. ``grid`` and ``block``: (n, 3) arrays as the trace wrote them (``-1`` or
    ``0``: not recorded); ``api_codes``/``api_labels``: each kernel's launching call as codes into the
    call names (suffixes stripped; code ``-1``: no call in the trace). Rows launched by a
    :data:`WORK_ITEM_GRID_APIS` call with every dimension recorded get ``ceil(grid / block)`` per
    dimension (a partial block at the edge is still a block); the others keep their values. A new
    array when a row changes, else ``grid`` itself."""
    hit = np.isin(np.asarray(api_labels, dtype=object), list(WORK_ITEM_GRID_APIS))
    if not hit.any():
        return grid
    codes = np.asarray(api_codes)
    rows = (codes >= 0) & hit[np.maximum(codes, 0)]
    grid, block = np.asarray(grid), np.asarray(block)
    rows &= (grid > 0).all(axis=1) & (block > 0).all(axis=1)
    if not rows.any():
        return grid
    out = grid.copy()
    out[rows] = -(-out[rows] // block[rows])
    return out
