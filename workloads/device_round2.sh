#!/usr/bin/env bash
# Second-round campaign on one GPU (H100): torch.profiler traces of every pathology and twin, repeated
# runs for before/after diffs, nsys traces with call stacks, with GPU metrics and with a power log,
# and the seeds' whole transformer grid (5 sizes x 4 contexts x 3 modes, with Python timings and
# power). Run on the GPU machine from the repo root with $OUT set (.devtools/ and .whl/ present):
#     SECTIONS="kineto run2 backtrace gpumetrics power" bash workloads/device_round2.sh
#     SECTIONS=sweep SWEEP_MODELS="small medium" bash workloads/device_round2.sh
# SECTIONS (default all, in this order): kineto run2 backtrace gpumetrics power sweep.
# SWEEP_MODELS (small medium large xl 2.7B), SWEEP_CONTEXTS (128 256 512 1024),
# SWEEP_MODES (forward forward_backward training) select the part of the grid to run; a
# configuration that does not fit in GPU memory is recorded (exit 3, `status: oom` in its
# .pytime.json), not silently dropped. Jobs left when the budget BUDGET_S (default 540 s) runs out
# are listed in skipped.txt. Result: $OUT/<PREFIX>*.tar.xz, each < 16 MiB.
set -uo pipefail
: "${OUT:?set OUT to the output directory}"
BUDGET_S=${BUDGET_S:-540}; RESERVE_S=${RESERVE_S:-60}; MIN_JOB_S=${MIN_JOB_S:-20}
SECTIONS=${SECTIONS:-kineto run2 backtrace gpumetrics power sweep}
SWEEP_MODELS=${SWEEP_MODELS:-small medium large xl 2.7B}
SWEEP_CONTEXTS=${SWEEP_CONTEXTS:-128 256 512 1024}
SWEEP_MODES=${SWEEP_MODES:-forward forward_backward training}
PREFIX=${PREFIX:-round2}
WORK=${WORK:-/tmp/wl_round2}
SUITE_LOG=/tmp/wl_round2_suite.log
rm -rf "$WORK"; mkdir -p "$WORK" "$OUT"
exec > >(tee "$SUITE_LOG") 2>&1
cd "$(dirname "$0")/.."
source workloads/_suite_lib.sh
setup_env
print_versions
python3 -c 'import pynvml; print("pynvml", pynvml.__version__ if hasattr(pynvml, "__version__") else "ok")' \
    || echo "WARNING: no pynvml: --power has only the nvidia-smi log"
has() { [[ " $SECTIONS " == *" $1 "* ]]; }
PATHS="dataloader_starved tiny_kernels pageable_h2d host_sync naive_attention occupancy fp32_gemm alloc_churn"

if has kineto; then  # torch.profiler: every pathology and twin; every other one gzipped
    gz=""
    for w in $PATHS; do
        run_job 40 "$w" torch -- "$w" $gz
        run_job 40 "${w}_fixed" torch -- "$w" --fixed $gz
        [[ -z $gz ]] && gz=--gzip || gz=""
    done
    run_job 40 healthy torch -- healthy --gzip
    run_job 60 small_training_ctx128 torch -- transformer --model small --context 128 --mode training
fi
if has run2; then  # the same programs as the committed traces, run again: run-to-run noise for diffs
    for w in dataloader_starved healthy host_sync tiny_kernels; do
        run_job 60 "${w}_run2" nsys -- "$w" --suffix _run2
    done
    run_job 60 dataloader_starved_fixed_run2 nsys -- dataloader_starved --fixed --suffix _run2
fi
if has backtrace; then  # CUDA_CALLCHAINS (Python + C), SAMPLING_CALLCHAINS, OSRT_CALLCHAINS
    for w in host_sync dataloader_starved alloc_churn pageable_h2d; do
        run_job 75 "${w}_bt" nsys -- "$w" --backtrace --suffix _bt --steps 5
    done
    run_job 75 host_sync_fixed_bt nsys -- host_sync --fixed --backtrace --suffix _bt --steps 5
fi
if has gpumetrics; then  # GPU_METRICS at 2 kHz; short runs (the SQLite grows fast)
    for w in tiny_kernels fp32_gemm; do
        run_job 75 "${w}_gm" nsys -- "$w" --gpu-metrics --suffix _gm --steps 4
        run_job 75 "${w}_fixed_gm" nsys -- "$w" --fixed --gpu-metrics --suffix _gm --steps 4
    done
    run_job 75 healthy_gm nsys -- healthy --gpu-metrics --suffix _gm --steps 4
fi
if has power; then  # NVML (20 ms) and nvidia-smi (100 ms) power logs beside nsys traces
    run_job 60 healthy_pw nsys -- healthy --power --suffix _pw
    run_job 60 fp32_gemm_pw nsys -- fp32_gemm --power --suffix _pw
    run_job 60 fp32_gemm_fixed_pw nsys -- fp32_gemm --fixed --power --suffix _pw
fi
if has sweep; then  # the seeds' grid; timed phases (--pytime) and power for every configuration
    for model in $SWEEP_MODELS; do
        for ctx in $SWEEP_CONTEXTS; do
            for mode in $SWEEP_MODES; do
                run_job 120 "${model}_${mode}_ctx${ctx}" nsys -- transformer --power \
                    --model "$model" --context "$ctx" --mode "$mode" --pytime-reps 3
            done
        done
    done
fi
finish "$PREFIX"
