# Shared helpers for device_suite.sh / device_ncu.sh (sourced, not run).
# Expects: BUDGET_S, RESERVE_S, MIN_JOB_S, WORK; sets up PYTHONPATH/LD_LIBRARY_PATH.
SUITE_START=$SECONDS
SKIPPED=()

setup_env() {
    if compgen -G ".whl/nvtx-*.whl" >/dev/null; then
        python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvtx-*.whl \
            || echo "WARNING: nvtx wheel install failed; falling back to torch.cuda.nvtx"
    else
        echo "WARNING: no .whl/nvtx-*.whl; NVTX ranges come from torch.cuda.nvtx"
    fi
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    # nsys' importer needs libdw/libelf: the driver adds .devtools/libs (repairing its symlinks)
}

print_versions() {
    echo "== versions"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    local nsys; nsys="$(command -v nsys || ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)"
    [ -n "$nsys" ] && "$nsys" --version 2>&1 | tail -1
    command -v ncu >/dev/null && ncu --version 2>&1 | tail -1
    python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
    python3 -c 'import workloads._nvtx as n; print("nvtx backend:", n.BACKEND)'
}

elapsed() { echo $((SECONDS - SUITE_START)); }

# remaining seconds for profiling work (after keeping RESERVE_S for post-processing + packing)
remaining() { echo $((BUDGET_S - RESERVE_S - $(elapsed))); }

# run_job TIMEOUT_CAP TRACE_NAME POST_TOOL -- DRIVER ARGS...: profile one workload (sequential),
# then start its post-processing in the background (at most 3 at a time).
run_job() {
    local cap="$1" trace="$2" tool="$3"; shift 4
    local left; left=$(remaining)
    if (( left < MIN_JOB_S )); then
        SKIPPED+=("$trace"); echo "== SKIP $trace (only ${left}s left)"; return 0
    fi
    local t=$(( left < cap ? left : cap ))
    echo "== [$(elapsed)s] $trace (timeout ${t}s)"
    timeout -k 10 "$t" python3 -m workloads profile "$@" --tool "$tool" --out "$WORK" \
        --post none --timeout "$((t - 5))" 2>&1 | tr '\r' '\n' | grep -v -E '^\[1/1\]|^\s*$'
    local rc=${PIPESTATUS[0]}; (( rc )) && echo "   ($trace: driver exit $rc)"
    [[ $tool == torch ]] && return 0  # torch.profiler traces need no post-processing
    while (( $(jobs -rp | wc -l) >= 3 )); do sleep 0.5; done
    local pt=$(( $(remaining) + RESERVE_S - 45 )); (( pt < 30 )) && pt=30; (( pt > 240 )) && pt=240
    ( timeout -k 5 "$pt" python3 -m workloads post --tool "$tool" --out "$WORK" --timeout "$pt" \
        "$trace" >"$WORK/$trace.post.log" 2>&1 || echo "   (post $trace failed, see $trace.post.log)" ) &
}

finish() {  # finish PREFIX [--keep-rep NAME]...
    local prefix="$1"; shift
    echo "== [$(elapsed)s] waiting for background post-processing"
    while (( $(jobs -rp | wc -l) > 0 )); do sleep 0.5; done  # not `wait`: tee is a child too
    if (( ${#SKIPPED[@]} )); then
        echo "== SKIPPED for lack of time: ${SKIPPED[*]}"
        printf '%s\n' "${SKIPPED[@]}" > "$WORK/skipped.txt"
    fi
    find "$WORK" -name '*.post.log' -size 0 -delete
    du -sh "$WORK"; ls -la "$WORK" | head -80
    echo "== [$(elapsed)s] packing into $OUT"
    cp "$SUITE_LOG" "$WORK/$prefix.log"
    python3 -m workloads pack --src "$WORK" --dest "$OUT" --prefix "$prefix" "$@" || true
    ls -la "$OUT"
    echo "== done in $(elapsed)s"
}
