#!/usr/bin/env bash
# Multi-GPU suite: the DDP/FSDP pathologies and their twins as 2-GPU torchrun jobs, profiled with
# nsys in both layouts (one report for the job; one report per rank), the 1-GPU runs of the twins
# (strong scaling, same global batch), and torch.profiler (Kineto) traces per rank.
# Run on a 2-GPU machine (kind nvidia-h200-x2) from the repo root with $OUT set:
#     bash workloads/device_ddp.sh
# Jobs run one at a time (each takes both GPUs), most important first; export/analyze/stats run in
# the background meanwhile. Time budget BUDGET_S (default 465 s): jobs that no longer fit are
# skipped and listed. Result in $OUT (at most 8 files, each < 16 MiB):
#   ddp*.tar.xz        nsys: <trace>.sqlite, .analyze.txt (nsys analyze), stats CSVs, manifest.jsonl
#                      (one line per trace file), ddp.log (this log), ddp_env.txt (GPUs, NVLink,
#                      NCCL), ddp_straggler_2gpu.nsys-rep
#   ddp_kineto.tar.xz  torch.profiler: <job>_rank<R>.pt.trace.json, manifest.jsonl
# Trace names: <workload>[_fixed]_2gpu (one report, both ranks), <workload>[_fixed]_2gpu_rank<R>
# (per-rank reports), <workload>_fixed_1gpu (alone).
set -uo pipefail
: "${OUT:?set OUT to the output directory}"
BUDGET_S=${BUDGET_S:-465}; RESERVE_S=${RESERVE_S:-70}; MIN_JOB_S=${MIN_JOB_S:-30}
WORK=${WORK:-/tmp/wl_ddp}
WORK_K=${WORK_K:-/tmp/wl_ddp_kineto}
SUITE_LOG=/tmp/wl_ddp_suite.log
NPROC=${NPROC:-2}
# DDP_ARGS: appended to every profile call (a CPU rehearsal: DDP_ARGS="--size smoke --device cpu")
read -r -a DDP_ARGS <<< "${DDP_ARGS:-}"
rm -rf "$WORK" "$WORK_K"; mkdir -p "$WORK" "$WORK_K" "$OUT"
exec > >(tee "$SUITE_LOG") 2>&1
cd "$(dirname "$0")/.."
source workloads/_suite_lib.sh
setup_env
# NVLink multicast (NVLS) off for every process; NCCL prints its version once per rank.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_DEBUG=${NCCL_DEBUG:-VERSION}
print_versions
{
    echo "== nvidia-smi"; nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,clocks.max.sm --format=csv
    echo "== topology"; nvidia-smi topo -m
    echo "== nvlink"; nvidia-smi nvlink -s
    echo "== torch / nccl"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpus", torch.cuda.device_count())'
    env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)' | sort
} > "$WORK/ddp_env.txt" 2>&1
head -40 "$WORK/ddp_env.txt"
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
(( GPUS < NPROC )) && echo "WARNING: $GPUS GPU(s) visible, the jobs need $NPROC"

# ddp_job CAP "REPORTS" -- DRIVER ARGS...: profile one job (sequential), then post-process each of
# its nsys reports (space-separated names) in the background, at most 3 at a time.
ddp_job() {
    local cap="$1" reports="$2"; shift 3
    local label="${reports%% *}"
    local left; left=$(remaining)
    if (( left < MIN_JOB_S )); then
        SKIPPED+=("$reports"); echo "== SKIP $reports (only ${left}s left)"; return 0
    fi
    local t=$(( left < cap ? left : cap ))
    echo "== [$(elapsed)s] $reports (timeout ${t}s)"
    timeout -k 10 "$t" python3 -m workloads profile "$@" "${DDP_ARGS[@]}" --tool nsys --out "$WORK" \
        --post none --timeout "$((t - 5))" 2>&1 | tr '\r' '\n' \
        | grep -v -E '^\[1/1\]|^\s*$|^W[0-9]{4} |^\*+$|OMP_NUM_THREADS'
    local rc=${PIPESTATUS[0]}; (( rc )) && echo "   ($label: driver exit $rc)"
    while (( $(jobs -rp | wc -l) >= 3 )); do sleep 0.5; done
    local pt=$(( $(remaining) + RESERVE_S - 45 )); (( pt < 30 )) && pt=30; (( pt > 240 )) && pt=240
    # shellcheck disable=SC2086  # $reports is a list of names
    ( timeout -k 5 "$pt" python3 -m workloads post --tool nsys --out "$WORK" --timeout "$pt" \
        $reports >"$WORK/$label.post.log" 2>&1 || echo "   (post $label failed, see $label.post.log)" ) &
}

# kineto_job CAP JOB -- DRIVER ARGS...: torch.profiler traces, one per rank (no nsys).
HAVE_TORCH_TOOL=0
python3 -m workloads profile --help 2>/dev/null | grep -q -- '{nsys,ncu,torch}' && HAVE_TORCH_TOOL=1
kineto_job() {
    local cap="$1" job="$2"; shift 3
    if (( ! HAVE_TORCH_TOOL )); then
        SKIPPED+=("kineto:$job"); echo "== SKIP kineto $job (this driver has no --tool torch)"; return 0
    fi
    local left; left=$(remaining)
    if (( left < MIN_JOB_S )); then
        SKIPPED+=("kineto:$job"); echo "== SKIP kineto $job (only ${left}s left)"; return 0
    fi
    local t=$(( left < cap ? left : cap ))
    echo "== [$(elapsed)s] kineto $job (timeout ${t}s)"
    timeout -k 10 "$t" python3 -m workloads profile "$@" "${DDP_ARGS[@]}" --tool torch --out "$WORK_K" \
        --timeout "$((t - 5))" 2>&1 | tr '\r' '\n' \
        | grep -v -E '^\s*$|^W[0-9]{4} |^\*+$|OMP_NUM_THREADS|^\[[a-z_]+\] step [0-9]+:'
    local rc=${PIPESTATUS[0]}; (( rc )) && echo "   (kineto $job: driver exit $rc)"
    ls "$WORK_K" | grep -F "$job" || echo "   (kineto $job: no trace files)"
}

R="_${NPROC}gpu_rank0"; for ((r = 1; r < NPROC; r++)); do R+=" _${NPROC}gpu_rank$r"; done
ranks() { local s=""; for x in $R; do s+=" $1$x"; done; echo "${s# }"; }  # ranks NAME -> NAME_2gpu_rank0 ...
N="--nproc $NPROC"

# 1. the straggler pair, both layouts (the job report's headline case)
ddp_job 75 "ddp_straggler_${NPROC}gpu" -- ddp_straggler $N --layout single
ddp_job 75 "ddp_straggler_fixed_${NPROC}gpu" -- ddp_straggler --fixed $N --layout single
ddp_job 75 "$(ranks ddp_straggler)" -- ddp_straggler $N --layout per-rank
ddp_job 75 "$(ranks ddp_straggler_fixed)" -- ddp_straggler --fixed $N --layout per-rank
# 2. exposed communication, both layouts
ddp_job 75 "ddp_exposed_comm_${NPROC}gpu" -- ddp_exposed_comm $N --layout single
ddp_job 75 "ddp_exposed_comm_fixed_${NPROC}gpu" -- ddp_exposed_comm --fixed $N --layout single
ddp_job 75 "$(ranks ddp_exposed_comm)" -- ddp_exposed_comm $N --layout per-rank
ddp_job 75 "$(ranks ddp_exposed_comm_fixed)" -- ddp_exposed_comm --fixed $N --layout per-rank
# 3. many small collectives (one report)
ddp_job 75 "ddp_small_collectives_${NPROC}gpu" -- ddp_small_collectives $N --layout single
ddp_job 75 "ddp_small_collectives_fixed_${NPROC}gpu" -- ddp_small_collectives --fixed $N --layout single
# 4. torch.profiler per rank: the straggler pair and the overlapped (healthy) DDP run
kineto_job 60 "ddp_straggler_${NPROC}gpu" -- ddp_straggler $N
kineto_job 60 "ddp_straggler_fixed_${NPROC}gpu" -- ddp_straggler --fixed $N
kineto_job 60 "ddp_exposed_comm_fixed_${NPROC}gpu" -- ddp_exposed_comm --fixed $N
# 5. strong scaling: the twins alone on one GPU, same global batch
ddp_job 60 "ddp_exposed_comm_fixed_1gpu" -- ddp_exposed_comm --fixed --nproc 1
ddp_job 60 "ddp_straggler_fixed_1gpu" -- ddp_straggler --fixed --nproc 1
# 6. FSDP (one unit vs per-layer units), then the small-collectives pair per rank
ddp_job 75 "fsdp_train_${NPROC}gpu" -- fsdp_train $N --layout single
ddp_job 75 "fsdp_train_fixed_${NPROC}gpu" -- fsdp_train --fixed $N --layout single
ddp_job 60 "ddp_small_collectives_fixed_1gpu" -- ddp_small_collectives --fixed --nproc 1
ddp_job 75 "$(ranks ddp_small_collectives)" -- ddp_small_collectives $N --layout per-rank
ddp_job 75 "$(ranks ddp_small_collectives_fixed)" -- ddp_small_collectives --fixed $N --layout per-rank

if compgen -G "$WORK_K/*" >/dev/null; then
    echo "== [$(elapsed)s] packing torch.profiler traces"
    python3 -m workloads pack --src "$WORK_K" --dest "$OUT" --prefix ddp_kineto --max-files 1 || true
fi
finish ddp --keep-rep "ddp_straggler_${NPROC}gpu.nsys-rep" --max-files 7
