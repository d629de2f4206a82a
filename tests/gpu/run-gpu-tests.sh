#!/usr/bin/env bash
# Real-GPU suite (`make test-gpu`): libgpuvisor.so on an NVIDIA GPU, driven
# through `gpuvisor run`.  TAP on stdout; figures for the issue note also go
# to $BUILD/gpu/results.txt.  Needs: a GPU with nvidia-smi; nvcc for the
# CUDA programs (tests/gpu/*.cu); PyTorch with CUDA for the PyTorch checks.
# Without a GPU it skips cleanly (exit 0); a missing nvcc or PyTorch skips
# those parts.
#
# Environment: GV_GPU_DEVICE (default 0), GV_GPU_SECONDS (per run, default 4),
# NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
GV=$PWD/$BUILD/bin/gpuvisor
LIB=$PWD/$BUILD/lib/libgpuvisor.so
OUT=$PWD/$BUILD/gpu
DEV=${GV_GPU_DEVICE:-0}
SECS=${GV_GPU_SECONDS:-4}
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
nok() { n=$((n + 1)); echo "not ok $n - $*"; }
skip() { n=$((n + 1)); echo "ok $n # SKIP $*"; }
note() { echo "# $*"; echo "$*" >>"$OUT/results.txt"; }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "1..0 # SKIP no NVIDIA GPU here (nvidia-smi missing or finds no GPU)"
    exit 0
fi
if [ ! -x "$GV" ] || [ ! -r "$LIB" ]; then
    echo "Bail out! build first: $GV and $LIB are missing (run make)"
    exit 1
fi
mkdir -p "$OUT"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gv-gpu.XXXXXX")
cleanup() {
    [ -n "${SMI_PID:-}" ] && kill "$SMI_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_SM_LIMIT CUDA_TASK_PRIORITY \
    GPU_CORE_UTILIZATION_POLICY GPUVISOR_LIMITS_FILE
# Priority between runs meets in this directory (the node mount in a cluster).
export GPUVISOR_NODE_DIR=$TMP/node GPUVISOR_RUN_DIR=$TMP/run
mkdir -p "$GPUVISOR_NODE_DIR" "$GPUVISOR_RUN_DIR"
: >"$OUT/results.txt"
note "gpuvisor real-GPU suite, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null)"
note "GPU $DEV: $(nvidia-smi -i "$DEV" --query-gpu=name,driver_version,memory.total --format=csv,noheader)"

# run [gpuvisor run options...] -- command...: in a slice on the test GPU.
run() { "$GV" run --device "$DEV" "$@"; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2" | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", 100 * a / b; else print "nan" }'; }
isnum() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
within() { isnum "$1" && awk -v v="$1" -v t="$2" -v d="$3" 'BEGIN { exit !(v >= t - d && v <= t + d) }'; }
atleast() { isnum "$1" && awk -v v="$1" -v t="$2" 'BEGIN { exit !(v >= t) }'; }
# PASS/FAIL lines of a checker program become TAP lines.
# Use as: tap_from NAME < <(command) (not in a pipe: the counter must survive).
tap_from() {
    local prefix=$1 line seen=0
    while IFS= read -r line; do
        case $line in
        PASS\ *) ok "$prefix: ${line#PASS }"; seen=1 ;;
        FAIL\ *) nok "$prefix: ${line#FAIL }"; seen=1 ;;
        *) echo "# $line" ;;
        esac
    done
    [ "$seen" = 1 ] || nok "$prefix: reported nothing"
}
# NVML utilisation samples (host view, outside any slice) while a command runs.
smi_start() {
    nvidia-smi -i "$DEV" --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 \
        >"$TMP/smi" 2>/dev/null &
    SMI_PID=$!
}
smi_stop() { # prints the mean of the samples, first and last second dropped
    kill "$SMI_PID" 2>/dev/null
    wait "$SMI_PID" 2>/dev/null
    SMI_PID=
    awk 'NR > 10 { v[NR] = $1 } END { s = 0; c = 0; for (i = 11; i < NR - 10; i++) { s += v[i]; c++ }
        if (c) printf "%.1f", s / c; else print "nan" }' "$TMP/smi"
}

# --- nvidia-smi inside a slice shows the slice -------------------------------------
used=$(run --gpumem 3000 -- nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>&1)
if [ "$(echo "$used" | tr -d ' ')" = 3000 ]; then
    ok "nvidia-smi inside gpuvisor run --gpumem 3000 shows 3000 MiB total"
else
    nok "nvidia-smi inside gpuvisor run --gpumem 3000 shows: $used"
fi

# --- CUDA programs (runtime API) ----------------------------------------------------
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
have_nvcc=0
if [ -x "$NVCC" ]; then
    have_nvcc=1
    for p in gpu_burn gpu_mem; do
        if ! "$NVCC" -O2 -std=c++17 -o "$OUT/$p" "tests/gpu/$p.cu" 2>"$TMP/nvcc.log"; then
            nok "nvcc builds tests/gpu/$p.cu: $(head -5 "$TMP/nvcc.log")"
            have_nvcc=0
        fi
    done
fi
BURN=$OUT/gpu_burn

if [ "$have_nvcc" = 1 ]; then
    tap_from "gpu_mem (1024 MiB slice)" < <(run --gpumem 1024 -- "$OUT/gpu_mem" 1024 2>&1)

    # Compute share by throughput (spin kernels of 1 ms filling every SM) and NVML.
    solo=$(run -- "$BURN" --seconds "$SECS")
    base=$(field rate "$solo")
    note "unlimited: $solo"
    for p in 10 30 50 70 90; do
        smi_start
        out=$(run --gpucores "$p" -- "$BURN" --seconds "$SECS")
        util=$(smi_stop)
        got=$(ratio "$(field rate "$out")" "$base")
        note "gpucores=$p: throughput ${got}% of unlimited, NVML utilization ${util}%"
        if within "$got" "$p" 5; then
            ok "gpucores $p: throughput $got% of unlimited (NVML $util%)"
        else
            nok "gpucores $p: throughput $got% of unlimited (NVML $util%), target $p +- 5"
        fi
    done

    out=$(run --gpucores 30 -- "$BURN" --seconds "$SECS" --graph)
    gsolo=$(run -- "$BURN" --seconds "$SECS" --graph)
    got=$(ratio "$(field rate "$out")" "$(field rate "$gsolo")")
    note "CUDA graphs, gpucores=30: ${got}% of unlimited"
    if within "$got" 30 5; then ok "CUDA graph launches are throttled: $got% at gpucores 30"
    else nok "CUDA graph launches at gpucores 30: $got% of unlimited"; fi

    # Two tenants side by side (two slices = two containers).
    for p in 10 30; do
        q=$((100 - p))
        run --gpucores "$p" -- "$BURN" --seconds "$SECS" >"$TMP/a" &
        a=$!
        run --gpucores "$q" -- "$BURN" --seconds "$SECS" >"$TMP/b" &
        b=$!
        wait $a $b
        ga=$(ratio "$(field rate "$(cat "$TMP/a")")" "$base")
        gb=$(ratio "$(field rate "$(cat "$TMP/b")")" "$base")
        note "two tenants $p/$q: ${ga}% / ${gb}% of unlimited throughput"
        if within "$ga" "$p" 5 && within "$gb" "$q" 5; then
            ok "two tenants at $p% and $q%: $ga% and $gb%"
        else
            nok "two tenants at $p% and $q%: $ga% and $gb% (targets +- 5)"
        fi
    done

    # Priority: a high-priority job beside a low-priority hog, then the hog resumes.
    hsolo=$(run --priority 0 -- "$BURN" --seconds "$SECS")
    run --priority 2 -- "$BURN" --seconds $((SECS * 2 + 2)) >"$TMP/low" &
    low=$!
    sleep 1
    high=$(run --priority 0 -- "$BURN" --seconds "$SECS")
    wait $low
    keep=$(ratio "$(field rate "$high")" "$(field rate "$hsolo")")
    lowrate=$(ratio "$(field rate "$(cat "$TMP/low")")" "$base")
    note "priority: high keeps ${keep}% of solo beside a low hog; hog averaged ${lowrate}% over its run"
    if atleast "$keep" 90; then
        ok "priority 0 keeps $keep% of its solo throughput beside a priority-2 hog"
    else
        nok "priority 0 keeps only $keep% of its solo throughput beside a priority-2 hog"
    fi
    # The hog ran alone ~SECS+2 s of its 2*SECS+2 s: it must have resumed.
    if atleast "$lowrate" "$(awk -v s="$SECS" 'BEGIN { print 100 * (s + 1) / (2 * s + 2) * 0.8 }')"; then
        ok "priority 2 resumes when priority 0 idles ($lowrate% over its run)"
    else
        nok "priority 2 did not resume after priority 0 idled ($lowrate% over its run)"
    fi

    # Launch overhead with no limit (target: >= 97% of the native launch rate).
    nat=$(CUDA_VISIBLE_DEVICES=$DEV "$BURN" --launch-rate 200000)
    hook=$(run -- "$BURN" --launch-rate 200000)
    pct=$(ratio "$(field rate "$hook")" "$(field rate "$nat")")
    note "empty-kernel launch rate under libgpuvisor.so: ${pct}% of native ($hook vs $nat)"
    if atleast "$pct" 97; then
        ok "empty-kernel launch rate $pct% of native (target >= 97%)"
    elif isnum "$pct"; then
        ok "empty-kernel launch rate $pct% of native # TODO below the 97% target"
    else
        nok "empty-kernel launch rate: no measurement ($hook / $nat)"
    fi
else
    skip "no nvcc: CUDA runtime programs (memory paths, compute share, graphs, priority)"
fi

# --- PyTorch --------------------------------------------------------------------------
PY=${PYTHON:-python3}
if "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    tap_from "PyTorch (2048 MiB slice)" < <(run --gpumem 2048 -- "$PY" tests/gpu/torch_checks.py mem 2048 2>&1)
    t0=$(CUDA_VISIBLE_DEVICES=$DEV "$PY" tests/gpu/torch_checks.py train "$SECS")
    t1=$(run -- "$PY" tests/gpu/torch_checks.py train "$SECS")
    t2=$(run --gpucores 50 -- "$PY" tests/gpu/torch_checks.py train "$SECS")
    free=$(ratio "$(field rate "$t1")" "$(field rate "$t0")")
    half=$(ratio "$(field rate "$t2")" "$(field rate "$t0")")
    note "PyTorch training loop: ${free}% of native speed unlimited, ${half}% at gpucores 50"
    if atleast "$free" 98; then
        ok "PyTorch training loop at $free% of native speed without a limit (target >= 98%)"
    elif isnum "$free"; then
        ok "PyTorch training loop at $free% of native speed # TODO below the 98% target"
    else
        nok "PyTorch training loop: no measurement ($t1 / $t0)"
    fi
    if within "$half" 50 5; then ok "PyTorch training loop at gpucores 50: $half% of native"
    else nok "PyTorch training loop at gpucores 50: $half% of native (target 50 +- 5)"; fi
else
    skip "no PyTorch with CUDA ($PY): PyTorch checks"
fi

echo "1..$n"
echo "# figures: $OUT/results.txt"
