#!/usr/bin/env bash
# Nsight Systems suite: every pathology and its twin, `healthy`, and the transformer sweep
# (small+medium x ctx 128,256 x forward/forward_backward/training), profiled one at a time.
# Run on the GPU machine from the repo root with $OUT set (.devtools/ and .whl/ present):
#     bash workloads/device_suite.sh
# Profiling is sequential (one GPU); export/analyze/stats run in the background meanwhile.
# Time budget BUDGET_S (default 510 s): remaining jobs are skipped, and listed, when it runs out.
# Result: $OUT/nsys_traces*.tar.xz (sqlite, analyze.txt, stats CSVs, manifest.jsonl, log and
# healthy.nsys-rep), each < 16 MiB; nothing else is left in $OUT.
set -uo pipefail
: "${OUT:?set OUT to the output directory}"
BUDGET_S=${BUDGET_S:-510}; RESERVE_S=${RESERVE_S:-75}; MIN_JOB_S=${MIN_JOB_S:-25}
WORK=${WORK:-/tmp/wl_nsys}
SUITE_LOG=/tmp/wl_nsys_suite.log
rm -rf "$WORK"; mkdir -p "$WORK" "$OUT"
exec > >(tee "$SUITE_LOG") 2>&1
cd "$(dirname "$0")/.."
source workloads/_suite_lib.sh
setup_env
print_versions

# PART=pathologies|transformer|all (default all) selects a half, for two shorter device calls.
PART=${PART:-all}
if [[ $PART != transformer ]]; then
run_job 60 healthy nsys -- healthy
for w in dataloader_starved tiny_kernels pageable_h2d host_sync naive_attention occupancy \
         fp32_gemm alloc_churn; do
    run_job 60 "$w" nsys -- "$w"
    run_job 60 "${w}_fixed" nsys -- "$w" --fixed
done
fi
if [[ $PART != pathologies ]]; then
for model in small medium; do
    for ctx in 128 256; do
        for mode in forward forward_backward training; do
            run_job 90 "${model}_${mode}_ctx${ctx}" nsys -- transformer \
                --model "$model" --context "$ctx" --mode "$mode"
        done
    done
done
fi
finish "nsys_${PART}" --keep-rep healthy.nsys-rep
