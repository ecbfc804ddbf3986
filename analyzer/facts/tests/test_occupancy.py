"""Occupancy calculation against known CUDA Occupancy Calculator / Nsight Compute results."""
from __future__ import annotations

import numpy as np
import pytest

from analyzer.facts.occupancy import CC_LIMITS, occupancy_arrays
from analyzer.facts.tests._build import store, trace


def occ(cc, threads, regs, smem):
    tps, bps, rps, sps, tpb, rpb = CC_LIMITS[cc]
    res = occupancy_arrays(
        np.array([threads]), np.array([regs]), np.array([smem]), cc_major=np.array([cc[0]]),
        cc_minor=np.array([cc[1]]), warp_size=np.array([32]), max_threads_per_sm=np.array([tps]),
        max_blocks_per_sm=np.array([bps]), regs_per_sm=np.array([rps]), regs_per_block=np.array([rpb]),
        smem_per_sm=np.array([sps]), max_threads_per_block=np.array([tpb]),
    )
    return int(res["blocks_per_sm"][0]), float(res["occupancy"][0]), str(res["limiter"][0])


@pytest.mark.parametrize(
    "cc, threads, regs, smem, blocks, occupancy, limiter",
    [
        ((9, 0), 256, 32, 0, 8, 1.0, "warps"),  # full occupancy
        ((9, 0), 64, 32, 100 * 1024, 2, 0.0625, "shared_memory"),  # (100 KiB + 1 KiB reserved) x 2
        ((8, 0), 256, 128, 0, 2, 0.25, "registers"),  # 128 regs: 4 warps per sub-partition
        ((8, 0), 256, 64, 0, 4, 0.5, "registers"),
        ((8, 6), 32, 16, 0, 16, 16 / 48, "blocks_per_sm"),  # 16 block slots of 1 warp
        ((8, 6), 1024, 32, 0, 1, 32 / 48, "warps"),  # a 1024-thread block leaves 16 warps unused
        ((8, 6), 128, 166, 65536, 1, 4 / 48, "shared_memory"),  # sm80_xmma conv of the public export
        ((7, 5), 256, 255, 0, 1, 0.25, "registers"),  # 255 regs -> 8192/warp -> 8 warps
        ((9, 0), 2048, 32, 0, 0, 0.0, "warps"),  # larger than max threads per block: cannot launch
    ],
)
def test_known_occupancies(cc, threads, regs, smem, blocks, occupancy, limiter):
    assert occ(cc, threads, regs, smem) == (blocks, pytest.approx(occupancy), limiter)


def test_occupancy_fact_groups_launch_configs_and_counts_waves():
    ks = [
        {"start": i * 100, "end": i * 100 + 50, "short_name": "big", "grid_x": 1056, "block_x": 256,
         "registers_per_thread": 32} for i in range(3)
    ] + [{"start": 1000, "end": 1100, "short_name": "smem", "grid_x": 10, "block_x": 64,
          "dynamic_smem": 100 * 1024}]
    out = store(trace(kernels=ks)).get("occupancy").set_index("short_name")
    assert out.loc["big", "count"] == 3 and out.loc["big", "total_ns"] == 150
    assert out.loc["big", "waves"] == pytest.approx(1056 / (8 * 132))
    assert out.loc["smem", "limiter"] == "shared_memory"
    assert out.loc["smem", "theoretical_occupancy"] == pytest.approx(0.0625)


def test_missing_gpu_limits_fall_back_to_compute_capability():
    gpus = [{"device": 0, "compute_major": 8, "compute_minor": 6, "sm_count": 82}]  # rest 0
    ks = [{"start": 0, "end": 10, "block_x": 1024, "registers_per_thread": 32}]
    out = store(trace(kernels=ks, gpus=gpus)).get("occupancy")
    assert out["theoretical_occupancy"].iat[0] == pytest.approx(32 / 48)
