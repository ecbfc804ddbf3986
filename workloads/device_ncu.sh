#!/usr/bin/env bash
# Nsight Compute runs (`--set full`, a few kernels each, inside the NVTX range step_0):
# naive_attention (softmax) and its twin (flash attention), occupancy and its twin (stencil1d),
# tiny_kernels and its twin (elementwise). Raw and details pages exported as CSV; .ncu-rep kept
# only when under 2 MB. Run on the GPU machine from the repo root with $OUT set:
#     bash workloads/device_ncu.sh
# Budget BUDGET_S (default 330 s). Result: $OUT/ncu.tar.xz.
set -uo pipefail
: "${OUT:?set OUT to the output directory}"
BUDGET_S=${BUDGET_S:-330}; RESERVE_S=${RESERVE_S:-40}; MIN_JOB_S=${MIN_JOB_S:-30}
WORK=${WORK:-/tmp/wl_ncu}
SUITE_LOG=/tmp/wl_ncu_suite.log
rm -rf "$WORK"; mkdir -p "$WORK" "$OUT"
exec > >(tee "$SUITE_LOG") 2>&1
cd "$(dirname "$0")/.."
source workloads/_suite_lib.sh
setup_env
print_versions

for w in naive_attention occupancy tiny_kernels; do
    run_job 90 "$w" ncu -- "$w" --steps 1 --warmup 1
    run_job 90 "${w}_fixed" ncu -- "$w" --fixed --steps 1 --warmup 1
done
keep=()
while IFS= read -r f; do keep+=(--keep-rep "$(basename "$f")"); done \
    < <(find "$WORK" -maxdepth 1 -name '*.ncu-rep' -size -2M)
finish ncu "${keep[@]}"
