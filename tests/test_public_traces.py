"""Traces as other people record them (issue 29): public torch.profiler traces from PARAM, HTA and
TraceLens (``tests/data/public/``, origin and trimming in ``tests/data/MANIFEST.md``).

Each test names what a new user met on that trace before the fix: steps built from operators, a
host stall filed as setup, a loop rule on a capture without a loop, a ROCm GPU left unnamed.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analyzer.facts.api import cuda_equivalent
from analyzer.findings import Severity
from analyzer.loading import load_trace
from analyzer.pipeline import AnalysisOptions, analyze_inputs, analyze_paths, load_rules
from analyzer.window import choose_window

PUBLIC = Path(__file__).resolve().parent / "data" / "public"


@pytest.fixture(scope="module")
def pack():
    return load_rules(AnalysisOptions())


def _analyze(name: str, pack):
    return analyze_paths([PUBLIC / name], AnalysisOptions(), pack=pack)[0]


def test_without_profilerstep_steps_never_come_from_operators():
    """PARAM's ResNet trace (no ProfilerStep, optimizer and data-loader annotations): the window was
    599 'steps' of aten::convolution_backward; now one ResNet iteration (335 GPU ops: forward, backward,
    optimizer) per step, from one of the optimizer's annotations to the next; without the annotations,
    the periodic steady state finds the same iteration."""
    trace = load_trace(PUBLIC / "param_resnet_no_profilerstep.pt.trace.json.xz")
    w = choose_window(trace)
    assert w.steps is not None and w.steps.source == "annotation", w.description
    assert w.steps.period == 335 and len(w.steps) >= 5
    assert "Optimizer" in w.description and "::" not in w.description
    trace.nvtx = trace.nvtx.iloc[0:0]
    w = choose_window(trace)
    assert w.steps is not None and w.steps.source == "periodic" and w.steps.period == 335, w.description


def test_iterations_between_annotations_are_timed(pack):
    """The steps fact times each annotation-marked iteration from completion to completion, and the
    report's step table reads it: as many durations as iterations, each about the GPU time of its ops
    or more."""
    a = _analyze("param_resnet_no_profilerstep.pt.trace.json.xz", pack)
    steps = a.facts.get("steps")
    assert len(steps) == len(a.window.steps) >= 5
    assert (steps["duration"] >= steps["gpu_ns"] * 0.9).all() and (steps["kernel_count"] > 0).all()
    assert set(a.facts.get("window_periods")["kind"]) == {"steps"}


def test_compiled_graph_and_aten_ranges_are_not_steps():
    """TraceLens' torch.compile trace on an MI300X: one CompiledFxGraph call and six aten::mm were
    '6 NVTX steps aten::mm..aten::mm'; it is one pass."""
    trace = load_trace(PUBLIC / "tracelens_torch_compile_mi300x.pt.trace.json.gz")
    w = choose_window(trace)
    assert w.source == "auto" and w.steps is None and w.description.startswith("one pass"), w.description


def test_stall_inside_the_programs_annotation_is_a_finding(pack):
    """TraceLens' SGLang prefill on an MI300X: the host blocks 493 ms in hipMemcpyWithStream inside
    SGLang's own 'execute_...' annotation while the GPU idles. It was one-time setup before the window
    ("No problems found; GPU busy 100%"); now the window holds it and gpu-idle-gaps names it."""
    a = _analyze("tracelens_sglang_prefill_mi300x.pt.trace.json.xz", pack)
    assert a.window.start_ns <= 100_000  # from the first GPU op (79 us), not after the stall
    gaps = [f for f in a.findings if f.rule == "gpu-idle-gaps"]
    assert gaps and gaps[0].impact_ns >= 490e6
    col = gaps[0].evidence_columns.index("host_api")
    assert "hipMemcpyWithStream" in {row[col] for row in gaps[0].evidence}


def test_decode_stall_inside_annotation_is_not_setup():
    """The SGLang decode step: the periodic steady state starts after a 460 ms host stall inside the
    step's annotation; the window starts where the annotation began, so the stall is judged."""
    trace = load_trace(PUBLIC / "tracelens_sglang_decode_mi300x.pt.trace.json.xz")
    w = choose_window(trace)
    assert w.steps is not None and w.setup_ns < 1_000_000, w.description
    assert "annotation" in w.description


def test_single_pass_gets_no_loop_rule(pack):
    """HTA's AlexNet benchmark capture (one warmup and one measured forward, cudaMalloc throughout):
    alloc-in-loop said 'inside the steady-state loop' of a capture without a loop; it is now judged
    as one pass and the rule is listed as not applicable, with the reason."""
    a = _analyze("hta_alexnet_single_pass.pt.trace.json.gz", pack)
    assert a.window.steps is None and a.window.description.startswith("one pass")
    assert "alloc-in-loop" not in {f.rule for f in a.findings}
    skipped = {n.rule: n for n in a.not_checked}
    assert "alloc-in-loop" in skipped and "no repeated GPU work" in skipped["alloc-in-loop"].reason


@pytest.mark.parametrize("name, device, gpu", [
    ("tracelens_sglang_prefill_mi300x.pt.trace.json.xz", 9, "AMD Instinct MI300X"),
    ("tracelens_torch_compile_mi300x.pt.trace.json.gz", 2, "AMD Instinct MI300X"),
])
def test_rocm_gpu_named_by_the_id_its_kernels_carry(name, device, gpu):
    """ROCm writes the physical index on each kernel (9, 2) while deviceProperties lists id 0: the GPU
    was 'unknown GPU (1 of 2 used)'."""
    trace = load_trace(PUBLIC / name)
    assert set(trace.kernels["device"].unique()) == {device}
    assert trace.gpus["device"].tolist() == [device] and trace.gpus["name"].tolist() == [gpu]
    assert int(trace.gpus["sm_count"].iloc[0]) == 304


def test_an_unnamed_rocm_gpu_is_named_from_its_properties():
    """TraceLens' vLLM piecewise-graph trace (ROCm 7.0, MI300X): deviceProperties name every GPU "", and
    the report said "unknown GPU (compute capability 9.4)", CUDA's words for a Hopper-like part. HIP's
    major.minor and CU count name it now, and CUDA's per-compute-capability limits stay unfilled."""
    import json
    import lzma

    name = "tracelens_vllm_piecewise_mi300x.pt.trace.json.xz"
    with lzma.open(PUBLIC / name, "rt") as f:
        props = json.load(f)["deviceProperties"]
    assert {p["name"] for p in props} == {""}
    want = {f"AMD GPU (HIP arch {p['computeMajor']}.{p['computeMinor']}, {p['numSms']} CUs)" for p in props}
    gpus = load_trace(PUBLIC / name).gpus
    assert set(gpus["name"]) == want == {"AMD GPU (HIP arch 9.4, 304 CUs)"}
    assert (gpus["max_blocks_per_sm"] == 0).all() and (gpus["threads_per_warp"] == 64).all()


def test_idle_between_graph_replays_with_the_replay_queued_is_not_the_hosts(pack):
    """HTA's 16-rank A100 training trace (rank 0, 62 CUDA graph replays in the window): the GPU runs
    nothing for 562 ms between replays, and host-bound-graph-loop led the verdict with "the host's work
    between replays now sets the loop's pace" (54.9%). Read with the json module, every replay's
    cudaGraphLaunch had returned before the GPU idle gap just before that replay began (HTA: no host wait
    on the compute stream): the replays were queued, waiting on other streams or ranks. Only the idle
    time the breakdown charges to the host counts now; the rule is silent and waiting-on-other-work
    leads."""
    import bisect
    import json
    import lzma

    import numpy as np

    name = "hta_graph_replays_16rank_rank0.pt.trace.json.xz"
    with lzma.open(PUBLIC / name, "rt") as f:
        events = json.load(f)["traceEvents"]
    returned = {e["args"]["correlation"]: e["ts"] + e["dur"] for e in events
                if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch"}
    ops = sorted((e["ts"], e["ts"] + e["dur"], e["args"].get("correlation")) for e in events
                 if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"].get("device") == 0)
    reach = np.maximum.accumulate([o[1] for o in ops])
    starts = [o[0] for o in ops]
    first: dict[int, float] = {}
    for s, _e, c in ops:
        if c in returned:
            first.setdefault(c, s)
    idle = queued = 0.0
    for c, s in first.items():
        i = bisect.bisect_left(starts, s) - 1
        if i >= 0 and reach[i] < s:
            idle += s - reach[i]
            queued += (s - reach[i]) if returned[c] <= reach[i] else 0.0
    assert len(first) >= 60 and idle > 400_000 and queued == idle  # us

    a = _analyze(name, pack)
    r = a.facts.get("graph_replays")
    assert np.nansum(r["idle_before_ns"]) > 0.5 * a.window.duration_ns
    assert np.nansum(r["host_idle_before_ns"]) < 0.02 * np.nansum(r["idle_before_ns"])
    rules = {f.rule for f in a.findings}
    assert "host-bound-graph-loop" not in rules and "waiting-on-other-work" in rules
    causes = [f for f in a.findings if f.kind == "cause" and f.severity >= Severity.WARNING and f.impact_ns]
    assert max(causes, key=lambda f: f.impact_ns).rule == "waiting-on-other-work"


def test_rocm_allocator_events_are_gpu_memory_of_the_kernels_device(pack):
    """Hugging Face BERT-small on an MI300X VF with profile_memory=True: PyTorch built for ROCm writes
    its GPU blocks with Device Type 6 (c10::DeviceType::HIP) and Device Id 0 (the index the process
    sees), the kernels device 2. Only type 1 was read as GPU memory, so the memory rules said "none
    that names its device" and were not run. Every GPU block is now device memory of device 2, the
    allocator's totals as written, and the memory rules run."""
    import json
    import lzma

    name = "tracelens_bert_small_mi300x.pt.trace.json.xz"
    with lzma.open(PUBLIC / name, "rt") as f:
        events = json.load(f)["traceEvents"]
    hip = [e["args"] for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 6
           and e["args"].get("Bytes")]
    kernel_devices = {e["args"]["device"] for e in events if e.get("cat") == "kernel"}
    assert len(hip) > 200 and {a["Device Id"] for a in hip} == {0} and kernel_devices == {2}
    mem = load_trace(PUBLIC / name).memory
    gpu = mem[mem["mem_kind"].astype(str) == "device"]
    assert len(gpu) == len(hip) and set(gpu["device"]) == {2}
    assert int(gpu["total_allocated"].max()) == max(a["Total Allocated"] for a in hip)
    a = _analyze(name, pack)
    skipped = {n.rule for n in a.not_checked}
    assert not {"memory-growth", "memory-near-capacity"} & skipped, skipped


def test_rccl_generic_kernels_take_the_collective_c10d_recorded(pack):
    """TraceLens' ResNet rank-0 MI300X trace: RCCL runs every collective as ncclDevKernel_Generic, so
    the breakdown's exposed communication was all "Generic" (55.6 ms) and comm_kernels' collective too.
    c10d writes the torch.distributed call on the kernel ("Collective name": allreduce, broadcast); the
    kernels that carry it now have that collective (read here with the json module), the others (queued
    before the profiler's CPU side started: no c10d record) stay Generic."""
    import json
    import lzma

    name = "tracelens_resnet_act_checkpoint_mi300x.pt.trace.json.xz"
    with lzma.open(PUBLIC / name, "rt") as f:
        events = json.load(f)["traceEvents"]
    want = {"allreduce": "AllReduce", "broadcast": "Broadcast"}
    recorded = {(e["args"]["device"], e["args"]["correlation"]): want[e["args"]["Collective name"]]
                for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_Generic")
                and "Collective name" in e["args"]}
    assert len(recorded) == 12
    a = _analyze(name, pack)
    comm = a.facts.get("comm_kernels")
    for row in comm.itertuples():
        assert row.collective == recorded.get((row.device, row.correlation_id), "Generic"), row
    seg = a.facts.get("timeline_segments")
    exposed = seg[seg["cause"].astype(str) == "exposed_comm"]
    per = exposed.groupby(exposed["detail"].astype(str))["duration"].sum()
    assert per["AllReduce"] > 30e6 and per.sum() == exposed["duration"].sum()


def test_c10d_collective_names():
    from analyzer.facts.comm import c10d_collective

    assert [c10d_collective(n) for n in ("allreduce", "_allgather_base", "all_gather_into_tensor_coalesced",
                                          "_reduce_scatter_base", "reduce_scatter_tensor_coalesced", "reduce",
                                          "broadcast", "alltoall_base", "send", "recv", "nccl:all_reduce", "")] \
        == ["AllReduce", "AllGather", "AllGather", "ReduceScatter", "ReduceScatter", "Reduce", "Broadcast",
            "AllToAll", "Send", "Recv", "", ""]


def test_hip_calls_read_as_their_cuda_equivalents():
    """One table: launches, copies, synchronization, allocation and graph launches."""
    assert cuda_equivalent("hipLaunchKernel") == "cudaLaunchKernel"
    assert cuda_equivalent("hipExtModuleLaunchKernel") == "cuLaunchKernel"
    assert cuda_equivalent("hipMemcpyWithStream") == "cudaMemcpy"
    assert cuda_equivalent("hipMemcpyAsync") == "cudaMemcpyAsync"
    assert cuda_equivalent("hipStreamSynchronize") == "cudaStreamSynchronize"
    assert cuda_equivalent("hipHostMalloc") == "cudaMallocHost"
    assert cuda_equivalent("hipGraphLaunch") == "cudaGraphLaunch"
    assert cuda_equivalent("cudaMalloc") == "cudaMalloc" and cuda_equivalent("hipify") == "hipify"


def test_every_hip_call_of_the_public_rocm_traces_is_classified():
    """Issue 27: every HIP call the 12 public torch.profiler ROCm traces record, classified through the one
    table (analyzer.loading.api_names): the launch calls (including AMD's hipExtModuleLaunchKernel and the
    graph replay), the blocking calls, the copies and the allocations are exactly these; HIP's driver-style
    calls (not in these traces) map to CUDA driver calls, not to ``cuda*`` names no table holds."""
    from analyzer.facts.api import sync_kind
    from analyzer.loading.api_names import ALLOC_APIS, GRAPH_LAUNCH_APIS, LAUNCH_APIS
    from analyzer.loading.common import strip_api_suffix

    names: set[str] = set()
    for p in sorted(PUBLIC.glob("*mi[0-9]*.pt.trace.json*")):
        names |= {strip_api_suffix(str(n)) for n in load_trace(p).api["name"].astype(str).unique()}
    assert len(names) == 29 and all(n.startswith("hip") for n in names)
    base = {n: cuda_equivalent(n) for n in names}
    assert {n for n, b in base.items() if b in LAUNCH_APIS} == {
        "hipLaunchKernel", "hipExtLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel",
        "hipGraphLaunch"}
    assert {n for n, b in base.items() if b in GRAPH_LAUNCH_APIS} == {"hipGraphLaunch"}
    assert {n: sync_kind(b) for n, b in base.items() if sync_kind(b)} == {
        "hipDeviceSynchronize": "device", "hipEventSynchronize": "event", "hipStreamWaitEvent": "stream_wait_event",
        "hipMemcpyWithStream": "memcpy", "hipMemcpyAsync": "async_copy"}
    assert {n: ALLOC_APIS[b] for n, b in base.items() if b in ALLOC_APIS} == {
        "hipMalloc": ("alloc", "device"), "hipFree": ("free", "device")}
    assert sync_kind(cuda_equivalent("hipCtxSynchronize")) == "device"
    assert sync_kind(cuda_equivalent("hipDrvMemcpy3D")) == "memcpy"
    assert sync_kind(cuda_equivalent("hipMemcpyParam2DAsync")) == "async_copy"
    assert ALLOC_APIS[cuda_equivalent("hipMemCreate")] == ("alloc", "virtual")
    assert ALLOC_APIS[cuda_equivalent("hipMemAllocPitch")] == ("alloc", "device")
    assert cuda_equivalent("hipLaunchByPtr") in LAUNCH_APIS


def _raw_launches(name: str) -> dict[int, tuple[str, list[int], list[int]]]:
    """correlation id -> (launching call, grid, block) of every kernel launch call, read from the
    trace's JSON with the json module (not our loader)."""
    import gzip
    import json
    import lzma

    opener = lzma.open if name.endswith(".xz") else gzip.open
    with opener(PUBLIC / name, "rt") as f:
        events = json.load(f)["traceEvents"]
    return {e["args"]["correlation"]: (e["name"], e["args"]["grid"], e["args"]["block"]) for e in events
            if e.get("cat") == "cuda_runtime" and "grid" in e.get("args", {})}


@pytest.mark.parametrize("name", ["tracelens_sglang_prefill_mi300x.pt.trace.json.xz",
                                  "tracelens_resnet_act_checkpoint_mi300x.pt.trace.json.xz",
                                  "hta_mi250_minitoy_rocm62.pt.trace.json.gz"])
def test_work_item_grids_of_hip_module_launches_are_read_in_blocks(name):
    """PyTorch's ROCm profiler writes hipExtModuleLaunchKernel's globalWorkSize (work-items) as the
    kernel's grid: a Tensile GEMM of 70 workgroups of 256 threads read as a grid of 17,920 blocks, so
    small-grid and low-occupancy judged hipBLASLt/MIOpen kernels 256x larger than they ran. Kernels
    of that call now have grid = ceil(work-items / block) in every dimension; every other launch call
    (hipLaunchKernel, hipModuleLaunchKernel: grids in blocks) keeps the grid the trace wrote."""
    raw = _raw_launches(name)
    k = load_trace(PUBLIC / name).kernels
    k = k[k["correlation_id"].isin(list(raw))]
    ext = k["api_name"].astype(str) == "hipExtModuleLaunchKernel"
    assert ext.sum() >= 2 and (~ext).sum() >= 2
    for row in k.itertuples():
        call, grid, block = raw[row.correlation_id]
        assert call == row.api_name
        want = [-(-g // b) for g, b in zip(grid, block)] if call == "hipExtModuleLaunchKernel" else grid
        assert [row.grid_x, row.grid_y, row.grid_z] == want, (row.short_name, grid, block)
        assert [row.block_x, row.block_y, row.block_z] == block


def test_small_grid_judges_miopen_kernels_by_their_workgroups(pack):
    """TraceLens' ResNet (activation checkpointing) rank-0 trace on an MI300X: MIOpen's
    igemm_fwd_gtcx3 convolution runs 256 workgroups (65,536 work-items / 256) on 304 CUs; read as
    65,536 blocks, small-grid left it and every hipExtModuleLaunchKernel kernel out (402 launches in
    23 configurations before, 618 in 43 now)."""
    a = _analyze("tracelens_resnet_act_checkpoint_mi300x.pt.trace.json.xz", pack)
    (f,) = [f for f in a.findings if f.rule == "small-grid"]
    cols = f.evidence_columns
    rows = {(r[cols.index("short_name")], r[cols.index("grid_blocks")]) for r in f.evidence}
    assert any(n.startswith("igemm_fwd_gtcx3") and g == 256 for n, g in rows), rows


def test_hip_launches_count_as_launches(pack):
    """HTA's MI250 ROCm 6.2 trace: its hipLaunchKernel calls are launch calls, so tiny-kernels can
    weigh launch cost against kernel time (it was silent for want of launch calls)."""
    a = _analyze("hta_mi250_minitoy_rocm62.pt.trace.json.gz", pack)
    fired = {f.rule for f in a.findings}
    assert "tiny-kernels" in fired, fired



def test_a_kernels_first_launch_loading_its_code_is_one_time_work(pack):
    """HTA's MI250 ROCm 6.2 trace (issue 27): one hipLaunchKernel takes 6.5 ms, the first launch of its
    kernel loading the code object; the other launches take 3-13 us. Under the 10 ms one-call threshold
    it was launch-bound and the verdict led with "launch-bound 84.7%" (LNC003), a fix (CUDA graphs)
    would not buy. A kernel's first launch far longer than its typical launch is setup; no other
    launch is, and the first launches picked are each the first of their kernel in their process."""
    import numpy as np

    from analyzer.facts.breakdown_firstlaunch import FIRST_LAUNCH_MIN_NS, first_launch_detail, first_launch_rows

    a = _analyze("hta_mi250_minitoy_rocm62.pt.trace.json.gz", pack)
    assert "launch-bound" not in {f.rule for f in a.findings}
    seg = a.facts.get("timeline_segments")
    setup = seg[seg["cause"].astype(str) == "setup"]
    per = setup.groupby(setup["detail"].astype(str))["duration"].sum()
    assert per[first_launch_detail("cudaLaunchKernel")] > 6_000_000
    launch = seg[seg["cause"].astype(str) == "launch_bound"]
    assert launch.groupby(launch["detail"].astype(str))["duration"].max().drop("dispatch").max() < 1_000_000
    for name in ("hta_mi250_minitoy_rocm62.pt.trace.json.gz", "hta_alexnet_single_pass.pt.trace.json.gz"):
        t = load_trace(PUBLIC / name)
        api, k = t.api, t.kernels
        rows = first_launch_rows(api, k, api["name"].astype(str).str.contains("LaunchKernel").to_numpy())
        assert len(rows) >= 1
        for r in rows.tolist():
            assert api["end"].iat[r] - api["start"].iat[r] >= FIRST_LAUNCH_MIN_NS
            me = k[(k["pid"] == api["pid"].iat[r]) & (k["correlation_id"] == api["correlation_id"].iat[r])]
            same = k[(k["pid"] == api["pid"].iat[r]) & (k["name"] == me["name"].iat[0])]
            assert np.all(same["api_start"][same["api_start"] >= 0] >= api["start"].iat[r])

# -- folders and jobs --------------------------------------------------------------------------------
KINETO_DDP = Path(__file__).resolve().parent / "data" / "ddp" / "kineto"


def test_a_folder_with_two_runs_is_never_one_job(tmp_path):
    """Two 2-rank DDP runs (the straggler and its fixed twin, torch.profiler, ranks 0 and 1 each) in one
    folder were one '4-rank job' numbered by input order, with the time between the runs as clock
    skew; rank 0 appearing twice says they are two runs: each trace is analyzed on its own."""
    for f in KINETO_DDP.glob("ddp_straggler*_2gpu_rank*.pt.trace.json.xz"):
        shutil.copy(f, tmp_path / f.name)
    assert len(list(tmp_path.iterdir())) == 4
    out = analyze_inputs([tmp_path], AnalysisOptions())
    assert out.job is None and len(out.analyses) == 4
    assert "2 runs" in out.reason and "ranks 0, 1 appear 2 times" in out.reason


def _job_numbers(out) -> tuple[str, dict]:
    from analyzer.reports.jobview import build_job_report

    view = build_job_report(out.job)
    ranks = out.job.tables.tables["job_ranks"].set_index("rank")
    return view.job.verdict, ranks


def test_verdict_table_and_straggler_finding_read_the_same_numbers(tmp_path):
    """One run in a folder is still one job. The verdict said '150 of 150 collectives reached last' where
    the straggler finding said 136 of 150 (it counted only arrivals 100 us or more behind): both now read
    job_ranks."""
    for f in KINETO_DDP.glob("ddp_straggler_2gpu_rank*.pt.trace.json.xz"):
        shutil.copy(f, tmp_path / f.name)
    out = analyze_inputs([tmp_path], AnalysisOptions())
    assert out.job is not None and out.job.world_size == 2
    verdict, ranks = _job_numbers(out)
    (finding,) = [f for f in out.job.findings if f.rule == "straggler"]
    row = ranks.loc[finding.scope.rank]
    said = f"{int(row['last_count'])} of {int(row['instances'])} collectives"
    assert said in verdict and f"reached {said} last" in finding.message
    assert f"rank {finding.scope.rank} holds it back" in verdict


def test_verdict_names_no_rank_the_rules_did_not():
    """PARAM's 8-rank DLRM job (torch.profiler, 8 V100s): rank 7 reached 5 of 8 collectives last,
    1.3 ms of a 12.4 ms window, under the straggler rule's bar; the verdict named it anyway while no
    straggler finding was emitted. Now the verdict names a rank only with a finding."""
    out = analyze_inputs([PUBLIC / "param_dlrm_8rank"], AnalysisOptions())
    assert out.job is not None and out.job.world_size == 8 and out.job.how == "torch.distributed"
    verdict, _ranks = _job_numbers(out)
    stragglers = [f for f in out.job.findings if f.rule in ("straggler", "rank-imbalance")]
    if stragglers:
        assert f"rank {stragglers[0].scope.rank} holds it back" in verdict
    else:
        assert "holds it back" not in verdict
    # its biggest cause is a cause: every rank's low utilization is a symptom (what the causes
    # explain), the verdict named it "biggest cause" over the ranks' launch-bound findings
    causes = [(res.rank, f) for res in out.job.ranks for f in res.findings
              if f.kind == "cause" and f.severity >= Severity.WARNING and f.counts and f.impact_ns]
    assert causes and "busy less than half" not in verdict
    rank, top = max(causes, key=lambda rf: rf[1].impact_ns)
    assert f"biggest cause: {top.title} on rank {rank}" in verdict


def test_a_folder_of_ncu_csvs_works_like_the_files(tmp_path, pack):
    """A folder holding only Nsight Compute CSVs was refused ('holds no trace file') though each CSV
    works alone; it now gives the same analyses as the files."""
    ncu = Path(__file__).resolve().parent / "data" / "ncu"
    names = ["occupancy.details.csv", "tiny_kernels.details.csv"]
    for n in names:
        shutil.copy(ncu / n, tmp_path / n)
    together = analyze_paths([tmp_path], AnalysisOptions(), pack=pack)
    alone = [analyze_paths([ncu / n], AnalysisOptions(), pack=pack)[0] for n in names]
    assert len(together) == 2
    for a, b in zip(together, alone):
        assert [(f.rule, f.message) for f in a.findings] == [(f.rule, f.message) for f in b.findings]
        assert a.findings


def test_ncu_report_whose_throughput_metrics_are_empty_is_not_no_problems(pack):
    """AveryClapp/ESMM-Research's profile.ncu-rep (ncu 2023.1.1, A10G): every throughput column is empty
    in all 12 launches, so the bound rules cannot judge a kernel. It said 'No problems found'; the rules
    are now listed as not run, naming the empty metrics, and the verdict says so."""
    from analyzer.loading.tests.test_nsys_public import PUBLIC as SHARED
    from analyzer.reports.build import build_report

    path = SHARED / "AveryClapp__ESMM-Research__profile.ncu-rep"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    (a,) = analyze_paths([path], AnalysisOptions(), pack=pack)
    skipped = {n.rule: n.reason for n in a.not_checked}
    for rule in ("memory-bound", "compute-bound", "latency-bound"):
        assert "sm_throughput_pct" in skipped[rule] and "memory_throughput_pct" in skipped[rule]
    verdict = build_report([a]).verdict
    assert not verdict.startswith("No problems found") and "5 rules not run" in verdict


@pytest.mark.parametrize("name", ["small_training_ctx128", "medium_forward_ctx128", "host_sync_fixed"])
def test_a_loop_without_nvtx_gets_its_iterations_from_the_periodic_steady_state(name):
    """A training loop recorded without NVTX (a library loop such as Hugging Face's Trainer): the
    transformer training traces got no steady state at all ('whole GPU activity span') and the forward
    ones got one layer (33 ops) as a 'step'. The iteration is now the op sequence between two
    occurrences of the rarest label even when it is no multiple of the layer's period: exactly the ops
    one NVTX step launches (1271 / 803 / 1222)."""
    from analyzer.testing import real_trace
    from analyzer.window import _launch_times, _ops

    trace = load_trace(real_trace(name))
    steps = choose_window(trace).steps
    ops = _ops(trace)
    launch = _launch_times(ops)
    per_step = {int(((launch >= a) & (launch < b)).sum()) for a, b in zip(steps.starts, steps.ends)}
    trace.nvtx = trace.nvtx.iloc[0:0]
    w = choose_window(trace)
    assert w.steps is not None and w.steps.source == "periodic"
    assert per_step == {w.steps.period} and len(w.steps) >= 3


def test_a_capture_too_small_for_a_loop_says_so():
    """HTA's simple-add capture: 4 kernels. The window says there is no loop to find and why."""
    w = choose_window(load_trace(PUBLIC / "hta_simple_add_setup_only.pt.trace.json.gz"))
    assert w.steps is None and w.description.startswith("setup or a single call (4 GPU ops, too few for a loop)")


def test_a_setup_only_capture_gets_no_idle_time_finding(pack):
    """HTA's simple-add capture: 4 GPU ops 100 ms apart. host-work-in-loop said "GPU 0 waited 92.1% of the
    time while the host ran its own code ... 1 problem worth 100 ms": the first call's one-time work, in
    a capture with nothing that repeats. The rules judging the time between GPU ops are not run on it,
    and say why."""
    a = _analyze("hta_simple_add_setup_only.pt.trace.json.gz", pack)
    judged = {"host-work-in-loop", "gpu-idle-gaps", "low-gpu-utilization", "launch-bound", "host-sync-in-loop"}
    assert not judged & {f.rule for f in a.findings}
    skipped = {n.rule: n.reason for n in a.not_checked}
    assert judged <= set(skipped) and "4 GPU ops, too few for a loop" in skipped["host-work-in-loop"]


def test_one_long_launch_is_one_time_work_not_launch_overhead(pack):
    """HTA's AlexNet capture: one cudaLaunchKernel takes 3.06 s (the first launch loading cuDNN's
    module) and a cudaStreamCreateWithFlags 0.73 s; the other 78 launches take 9 us (median). The
    breakdown counted both calls as launch-bound and the verdict led with "launch-bound: GPU 0 waited
    for the host to launch work 29.3% of the time", whose fix (CUDA graphs, larger batches) buys
    nothing here. Time inside one call issuing work for 10 ms or more is setup, detail naming the call."""
    from analyzer.facts.breakdown import ONE_TIME_CALL_NS, one_time_detail

    a = _analyze("hta_alexnet_single_pass.pt.trace.json.gz", pack)
    assert "launch-bound" not in {f.rule for f in a.findings}
    seg = a.facts.get("timeline_segments")
    setup = seg[seg["cause"].astype(str) == "setup"]
    per = setup.groupby(setup["detail"].astype(str))["duration"].sum()
    assert per[one_time_detail("cudaLaunchKernel")] > 3_000_000_000
    assert per[one_time_detail("cudaStreamCreateWithFlags")] > 700_000_000
    launch = seg[seg["cause"].astype(str) == "launch_bound"]
    assert launch["duration"].max() < ONE_TIME_CALL_NS  # every launch-bound piece is a short call or dispatch
