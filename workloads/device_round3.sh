#!/usr/bin/env bash
# Third-round campaign on one GPU (H100): the round's new pathologies and their twins (decode_eager,
# optimizer_loop, copy_on_compute_stream, host_work_in_range, compile_train, memory_leak,
# memory_peak), each recorded with nsys (cuda,nvtx,osrt; --cuda-memory-usage=true) and with
# torch.profiler (gzipped; profile_memory=True for the memory workloads); the CUDA-graph users
# (decode_eager --fixed, compile_train --fixed) also with `--cuda-graph-trace=node` (suffix _node);
# second runs (_run2) of decode_eager and optimizer_loop, both variants, for diff calibration.
# Run on the GPU machine from the repo root with $OUT set (.devtools/ and .whl/ present), in two
# parts of < 8 minutes each:
#     PART=a bash workloads/device_round3.sh    # nsys: decode_eager (+_node, _run2), optimizer_loop
#                                               # (+_run2), copy_on_compute_stream, host_work_in_range;
#                                               # torch.profiler: decode_eager, optimizer_loop
#     PART=b bash workloads/device_round3.sh    # nsys: memory_leak, memory_peak, compile_train
#                                               # (+_node); torch.profiler: those and copy/host work
#     PART=c bash workloads/device_round3.sh    # copy_on_compute_stream and host_work_in_range again
#                                               # (bf16 since 2026-11-27), nsys + torch.profiler
#     PART=d bash workloads/device_round3.sh    # host_sync --shape balanced and gpu (both variants,
#                                               # nsys, twice: _run2) and balanced with torch.profiler
#     PART=e bash workloads/device_round3.sh    # host_sync --graph (launch shape: the no-sync loop eager
#                                               # vs captured in a CUDA graph), nsys twice (+_node of the
#                                               # graphed one) and torch.profiler
#     PART=f bash workloads/device_round3.sh    # host_sync --graph --shape balanced, nsys and torch
#     PART=g bash workloads/device_round3.sh    # held-out recordings (issue 27): compile_decode with
#                                               # NVTX under nsys (+_node of the reduce-overhead twin),
#                                               # then programs recorded as people record them (--bare:
#                                               # no NVTX, one torch.profiler profile without steps,
#                                               # suffix _bare): compile_decode (torch), decode_eager,
#                                               # optimizer_loop, host_work_in_range, host_sync --shape
#                                               # balanced, nsys and torch.profiler of both variants
#     PART=h bash workloads/device_round3.sh    # compile_graph_break (reduce-overhead with a graph break
#                                               # per layer) and its twin: nsys, torch.profiler, nsys
#                                               # --cuda-graph-trace=node (_node), torch.profiler --bare
#                                               # (_bare); budget 540 s by default (one 600 s call)
#     PART=i bash workloads/device_round3.sh    # held-out programs (issue 27), never used to calibrate:
#                                               # empty_cache_loop, mask_index_sync, per_sample_loop,
#                                               # cpu_augment, each pathology and twin with nsys and
#                                               # torch.profiler, then --bare nsys pairs of
#                                               # mask_index_sync and cpu_augment (suffix _bare),
#                                               # and mask_index_sync's per-expert loop without its
#                                               # syncs (--dispatch loop, suffix _loop) with both
#                                               # tools; HELDOUT="NAME ..." records only those
#     PART=j bash workloads/device_round3.sh    # the second held-out batch (issue 27), never used to
#                                               # calibrate: kv_cache_cat, snapshot_to_host,
#                                               # tensor_from_list, ema_clip_loop, each pathology and
#                                               # twin with nsys, torch.profiler (--gzip, 8 steps), --bare
#                                               # nsys (suffix _bare); HELDOUT="NAME ..." records only
#                                               # those (two per call: each name takes ~80 s)
#     PART=k bash workloads/device_round3.sh    # the third held-out batch (issue 27), never used to
#                                               # calibrate: layer_timing_sync, head_loop_attention,
#                                               # cpu_posenc_mask, layout_copies, as PART=j: nsys,
#                                               # torch.profiler (--gzip, 8 steps), --bare nsys (_bare)
#                                               # pairs; HELDOUT="NAME ..." records only those (two
#                                               # per call)
#     PART=l bash workloads/device_round3.sh    # the fourth held-out batch (issue 27), never used to
#                                               # calibrate: host_sampling_decode, graph_recapture,
#                                               # cudnn_benchmark_shapes, detect_anomaly, as PART=k
#                                               # (nsys, torch.profiler --gzip 8 steps, --bare nsys
#                                               # pairs); two per call of 9 minutes:
#                                               # HELDOUT="host_sampling_decode graph_recapture", then
#                                               # HELDOUT="cudnn_benchmark_shapes detect_anomaly"
#     PART=m bash workloads/device_round3.sh    # the fifth held-out batch (issue 27), never used to
#                                               # calibrate: compile_varlen, checkpoint_everything,
#                                               # host_noise_diffusion, unfrozen_backbone, as PART=l
#                                               # (nsys, torch.profiler --gzip 8 steps, --bare nsys
#                                               # pairs; compile_varlen with longer job limits: it
#                                               # compiles in its measured steps); budget 540 s by
#                                               # default; two calls of 9 minutes:
#                                               # HELDOUT="compile_varlen checkpoint_everything", then
#                                               # HELDOUT="host_noise_diffusion unfrozen_backbone"
#     PART=n bash workloads/device_round3.sh    # the sixth held-out batch (issue 27), never used to
#                                               # calibrate: launch_blocking_env, deterministic_gnn,
#                                               # teacher_offload, pad_to_max_length, as PART=m (nsys,
#                                               # torch.profiler --gzip 8 steps, --bare nsys pairs: 24
#                                               # runs of ~17 s) in ONE call of 8 minutes: budget 450 s,
#                                               # reserve 30 s by default
# Every manifest.jsonl line holds the program's own measured step times (step_ms, mean_ms,
# median_ms). Jobs left when the budget BUDGET_S (default 450 s) runs out are listed in skipped.txt.
# Result: $OUT/round3_<PART>*.tar.xz (sqlite, analyze.txt, stats CSVs, torch traces, manifest, log),
# each < 16 MiB.
set -uo pipefail
: "${OUT:?set OUT to the output directory}"
PART=${PART:-a}
[[ $PART =~ ^[a-n]$ ]] || { echo "PART must be one of a-n" >&2; exit 2; }
[[ $PART == h || $PART == m ]] && BUDGET_S=${BUDGET_S:-540}
[[ $PART == n ]] && RESERVE_S=${RESERVE_S:-30}
BUDGET_S=${BUDGET_S:-450}; RESERVE_S=${RESERVE_S:-70}; MIN_JOB_S=${MIN_JOB_S:-20}
PREFIX=${PREFIX:-round3_$PART}
WORK=${WORK:-/tmp/wl_round3_$PART}
SUITE_LOG=/tmp/wl_round3_$PART.log
rm -rf "$WORK"; mkdir -p "$WORK" "$OUT"
exec > >(tee "$SUITE_LOG") 2>&1
cd "$(dirname "$0")/.."
source workloads/_suite_lib.sh
setup_env
print_versions

# pair CAP NAME [ARGS...]: nsys of the pathology and of its twin
pair() {
    local cap="$1" w="$2"; shift 2
    run_job "$cap" "$w" nsys -- "$w" "$@"
    run_job "$cap" "${w}_fixed" nsys -- "$w" --fixed "$@"
}
# torch_pair CAP NAME [ARGS...]: torch.profiler of both (gzipped)
torch_pair() {
    local cap="$1" w="$2"; shift 2
    run_job "$cap" "$w" torch -- "$w" --gzip "$@"
    run_job "$cap" "${w}_fixed" torch -- "$w" --fixed --gzip "$@"
}

if [[ $PART == a ]]; then
    pair 60 decode_eager
    run_job 60 decode_eager_fixed_node nsys -- decode_eager --fixed --cuda-graph-trace node --suffix _node
    pair 60 optimizer_loop
    pair 60 copy_on_compute_stream
    pair 60 host_work_in_range
    torch_pair 45 decode_eager --steps 5
    torch_pair 45 optimizer_loop --steps 5
    for w in decode_eager optimizer_loop; do  # repeated runs: a diff must find no change
        run_job 60 "${w}_run2" nsys -- "$w" --suffix _run2
        run_job 60 "${w}_fixed_run2" nsys -- "$w" --fixed --suffix _run2
    done
elif [[ $PART == d ]]; then
    for shape in balanced gpu; do
        for run in "" _run2; do
            run_job 50 "host_sync_${shape}$run" nsys -- host_sync --shape "$shape" --suffix "_${shape}$run"
            run_job 50 "host_sync_fixed_${shape}$run" nsys -- host_sync --fixed --shape "$shape" --suffix "_${shape}$run"
        done
    done
    run_job 45 host_sync_balanced torch -- host_sync --gzip --shape balanced --suffix _balanced
    run_job 45 host_sync_fixed_balanced torch -- host_sync --fixed --gzip --shape balanced --suffix _balanced
elif [[ $PART == e || $PART == f ]]; then
    shape=launch; tag=graph
    [[ $PART == f ]] && { shape=balanced; tag=graph_balanced; }
    for run in "" _run2; do
        [[ $PART == f && -n $run ]] && continue
        run_job 50 "host_sync_${tag}$run" nsys -- host_sync --graph --shape "$shape" --suffix "_${tag}$run"
        run_job 50 "host_sync_fixed_${tag}$run" nsys -- host_sync --graph --fixed --shape "$shape" --suffix "_${tag}$run"
    done
    run_job 50 "host_sync_fixed_${tag}_node" nsys -- host_sync --graph --fixed --shape "$shape" \
        --cuda-graph-trace node --suffix "_${tag}_node"
    run_job 45 "host_sync_${tag}" torch -- host_sync --graph --gzip --shape "$shape" --suffix "_${tag}"
    run_job 45 "host_sync_fixed_${tag}" torch -- host_sync --graph --fixed --gzip --shape "$shape" --suffix "_${tag}"
elif [[ $PART == g ]]; then
    # compile_decode's first compile fills Inductor's caches, which its later runs reuse; the
    # compilation is in the warm-up steps, outside the measured ones
    pair 120 compile_decode
    run_job 90 compile_decode_fixed_node nsys -- compile_decode --fixed --cuda-graph-trace node --suffix _node
    bare_pair() {  # bare_pair TOOL CAP NAME SUFFIX [ARGS...]: both variants without any range
        local tool="$1" cap="$2" w="$3" sfx="$4"; shift 4
        local opts=(--bare --suffix "${sfx}_bare"); [[ $tool == torch ]] && opts+=(--gzip)
        run_job "$cap" "${w}${sfx}_bare" "$tool" -- "$w" "${opts[@]}" "$@"
        run_job "$cap" "${w}_fixed${sfx}_bare" "$tool" -- "$w" --fixed "${opts[@]}" "$@"
    }
    bare_pair torch 60 compile_decode ""
    bare_pair nsys 45 decode_eager ""
    bare_pair nsys 45 optimizer_loop ""
    bare_pair nsys 45 host_work_in_range ""
    # named by shape, as in PART=d: host_sync_balanced_bare, host_sync_fixed_balanced_bare
    bare_pair nsys 45 host_sync _balanced --shape balanced
    bare_pair torch 40 decode_eager "" --steps 5
    bare_pair torch 40 optimizer_loop "" --steps 5
    bare_pair torch 40 host_work_in_range ""
    bare_pair torch 45 host_sync _balanced --shape balanced
elif [[ $PART == h ]]; then
    # the first compile fills Inductor's caches, which the later runs reuse; compilation and the
    # CUDA graph recordings are in the warm-up steps, outside the measured ones. Calibration pair
    # first, then the other recordings in order of use
    pair 120 compile_graph_break
    torch_pair 75 compile_graph_break
    run_job 75 compile_graph_break_node nsys -- compile_graph_break --cuda-graph-trace node --suffix _node
    run_job 75 compile_graph_break_fixed_node nsys -- compile_graph_break --fixed --cuda-graph-trace node --suffix _node
    run_job 60 compile_graph_break_bare torch -- compile_graph_break --bare --suffix _bare --gzip
    run_job 60 compile_graph_break_fixed_bare torch -- compile_graph_break --fixed --bare --suffix _bare --gzip
elif [[ $PART == i ]]; then
    # calibration pairs first (nsys, then torch.profiler), then the bare nsys pairs while time is left
    # HELDOUT="a b" records only those workloads (a re-recording after a change to one of them)
    read -ra held <<< "${HELDOUT:-empty_cache_loop mask_index_sync per_sample_loop cpu_augment}"
    for w in "${held[@]}"; do
        pair 50 "$w"
    done
    for w in "${held[@]}"; do
        torch_pair 40 "$w"
    done
    if [[ " ${held[*]} " == *" mask_index_sync "* ]]; then
        # the per-expert loop without its syncs: what removing the synchronizations alone buys (the
        # pathology recorded again beside it, suffix _loop)
        run_job 50 mask_index_sync_loop nsys -- mask_index_sync --suffix _loop
        run_job 50 mask_index_sync_fixed_loop nsys -- mask_index_sync --fixed --dispatch loop --suffix _loop
        run_job 40 mask_index_sync_loop torch -- mask_index_sync --gzip --suffix _loop
        run_job 40 mask_index_sync_fixed_loop torch -- mask_index_sync --fixed --dispatch loop --gzip --suffix _loop
    fi
    for w in mask_index_sync cpu_augment; do
        [[ " ${held[*]} " == *" $w "* ]] || continue
        run_job 45 "${w}_bare" nsys -- "$w" --bare --suffix _bare
        run_job 45 "${w}_fixed_bare" nsys -- "$w" --fixed --bare --suffix _bare
    done
elif [[ $PART == j || $PART == k || $PART == l ]]; then
    # per workload: the nsys pair, the torch.profiler pair, the bare nsys pair (a name's recordings
    # together, so that a budget cut leaves whole workloads)
    default_held="kv_cache_cat snapshot_to_host tensor_from_list ema_clip_loop"
    [[ $PART == k ]] && default_held="layer_timing_sync head_loop_attention cpu_posenc_mask layout_copies"
    [[ $PART == l ]] && default_held="host_sampling_decode graph_recapture cudnn_benchmark_shapes detect_anomaly"
    read -ra held <<< "${HELDOUT:-$default_held}"
    for w in "${held[@]}"; do
        pair 50 "$w"
        torch_pair 45 "$w" --steps 8  # smaller traces: the set stays under ~15 MB
        run_job 45 "${w}_bare" nsys -- "$w" --bare --suffix _bare
        run_job 45 "${w}_fixed_bare" nsys -- "$w" --fixed --bare --suffix _bare
    done
elif [[ $PART == m ]]; then
    # as PART=l, per workload: the nsys pair, the torch.profiler pair (8 steps), the bare nsys pair;
    # compile_varlen recompiles (cold caches, a fresh directory per run) in its measured steps: longer
    # limits
    read -ra held <<< "${HELDOUT:-compile_varlen checkpoint_everything host_noise_diffusion unfrozen_backbone}"
    for w in "${held[@]}"; do
        cap=50; tcap=45
        [[ $w == compile_varlen ]] && { cap=110; tcap=100; }
        pair "$cap" "$w"
        torch_pair "$tcap" "$w" --steps 8  # smaller traces: the set stays under ~15 MB
        run_job "$tcap" "${w}_bare" nsys -- "$w" --bare --suffix _bare
        run_job "$tcap" "${w}_fixed_bare" nsys -- "$w" --fixed --bare --suffix _bare
    done
elif [[ $PART == n ]]; then
    # as PART=m, per workload: the nsys pair, the torch.profiler pair (8 steps), the bare nsys pair;
    # 20 measured steps of 10-40 ms each: every run ~17 s, most of it start-up
    read -ra held <<< "${HELDOUT:-launch_blocking_env deterministic_gnn teacher_offload pad_to_max_length}"
    for w in "${held[@]}"; do
        pair 40 "$w"
        torch_pair 40 "$w" --steps 8  # smaller traces: the set stays under ~15 MB
        run_job 40 "${w}_bare" nsys -- "$w" --bare --suffix _bare
        run_job 40 "${w}_fixed_bare" nsys -- "$w" --fixed --bare --suffix _bare
    done
elif [[ $PART == c ]]; then
    pair 60 copy_on_compute_stream
    pair 60 host_work_in_range
    torch_pair 45 copy_on_compute_stream
    torch_pair 45 host_work_in_range
else
    pair 60 memory_leak
    pair 60 memory_peak
    # compile_train's first compile fills Inductor's caches (/tmp/torchinductor_$USER), which the
    # later compile_train runs reuse; compilation happens in the warmup steps, outside step_N
    pair 150 compile_train
    run_job 90 compile_train_fixed_node nsys -- compile_train --fixed --cuda-graph-trace node --suffix _node
    torch_pair 60 memory_leak --torch-memory
    torch_pair 60 memory_peak --torch-memory
    torch_pair 45 copy_on_compute_stream
    torch_pair 45 host_work_in_range
    torch_pair 90 compile_train
fi
finish "$PREFIX"
