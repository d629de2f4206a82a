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
# field, ratio, isnum
. tests/gpu/gpu_lib.sh
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
    for p in gpu_burn gpu_mem gpu_start; do
        if ! "$NVCC" -O2 -std=c++17 -o "$OUT/$p" "tests/gpu/$p.cu" 2>"$TMP/nvcc.log"; then
            nok "nvcc builds tests/gpu/$p.cu: $(head -5 "$TMP/nvcc.log")"
            have_nvcc=0
        fi
    done
fi
BURN=$OUT/gpu_burn

if [ "$have_nvcc" = 1 ]; then
    tap_from "gpu_mem (1024 MiB slice)" < <(run --gpumem 1024 -- "$OUT/gpu_mem" 1024 2>&1)

    # Eight processes of one container starting at once on a region nobody has
    # created yet (torchrun's start), under the real driver: every one must start
    # and allocate.  `gpuvisor run` creates its region ahead, so the environment
    # is set here the way a container has it.
    trials=${GV_GPU_START_TRIALS:-40}
    sfail=0 sdetail=
    for t in $(seq 1 "$trials"); do
        pids=()
        for r in 1 2 3 4 5 6 7 8; do
            LD_PRELOAD=$LIB CUDA_DEVICE_MEMORY_SHARED_CACHE=$TMP/start-$t.cache \
                CUDA_DEVICE_MEMORY_LIMIT=8g CUDA_VISIBLE_DEVICES=$DEV \
                "$OUT/gpu_start" 64 >"$TMP/start.$r" 2>&1 &
            pids+=($!)
        done
        for r in 1 2 3 4 5 6 7 8; do
            if ! wait "${pids[$((r - 1))]}" || ! grep -q '^PASS start' "$TMP/start.$r"; then
                sfail=$((sfail + 1))
                [ -n "$sdetail" ] || sdetail="trial $t: $(head -c 300 "$TMP/start.$r" | tr '\n' ' ')"
            fi
        done
        rm -f "$TMP/start-$t.cache"
    done
    note "concurrent first start: $trials trials x 8 processes on a fresh region, $sfail failed starts${sdetail:+ (first: $sdetail)}"
    if [ "$sfail" = 0 ]; then
        ok "8 processes starting at once on a fresh region: $trials trials, every process started"
    else
        nok "8 processes starting at once on a fresh region: $sfail of $((trials * 8)) starts failed: $sdetail"
    fi

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
    lostms=$(awk -v k="$keep" -v t="$(field seconds "$high")" 'BEGIN { printf "%.0f", 10 * t * (100 - k) }')
    note "priority: high keeps ${keep}% of solo beside a low hog (${lostms} ms lost); hog averaged ${lowrate}% over its run"
    # The hog ran alone for a second before the high tenant arrived: what it
    # had queued then is the whole loss (tests/gpu/prio_probe.sh takes it apart).
    if atleast "$keep" 99; then
        ok "priority 0 keeps $keep% of its solo throughput beside a priority-2 hog (target >= 99%)"
    else
        nok "priority 0 keeps only $keep% of its solo throughput beside a priority-2 hog (target >= 99%)"
    fi
    # A level-0 tenant held to half the GPU by its own share, beside the hog,
    # both measured over the same interval: what it keeps of its solo at 50, and
    # the hog's share of the time it leaves (reported; tests/gpu/prio_probe.sh
    # has more cases).
    h50=$(field rate "$(run --priority 0 --gpucores 50 -- "$BURN" --seconds "$SECS")")
    t=$(($(date +%s) + 6))
    run --priority 0 --gpucores 50 -- "$BURN" --seconds "$SECS" --start-at "$t" >"$TMP/high" &
    hp=$!
    run --priority 2 -- "$BURN" --seconds "$SECS" --start-at "$t" >"$TMP/low2"
    wait $hp
    dkeep=$(ratio "$(field rate "$(cat "$TMP/high")")" "$h50")
    dh=$(ratio "$(field rate "$(cat "$TMP/high")")" "$base")
    dl=$(ratio "$(field rate "$(cat "$TMP/low2")")" "$base")
    dleft=$(awk -v h="$dh" -v l="$dl" 'BEGIN { if (100 - h >= 1) printf "%.1f", 100 * l / (100 - h); else print "nan" }')
    note "priority with a share: level 0 at gpucores 50 keeps ${dkeep}% of its solo at 50 beside a level-2 hog; the hog gets ${dl}% of unlimited, ${dleft}% of the time level 0 leaves"
    if isnum "$dkeep" && isnum "$dl"; then
        ok "level 0 at gpucores 50 keeps $dkeep% of its solo at 50; a level-2 hog fills $dleft% of what it leaves"
    else
        nok "priority with a share: no measurement ($(cat "$TMP/high" "$TMP/low2" | head -c 300))"
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

    # --- Time-sliced vs MPS on the same kernels (bf16 8192^3 products) ----------
    # Each tenant warms up, then all start at the same wall-clock second, so the
    # duel overlaps exactly.  "% of solo" = tenant throughput / one tenant alone.
    # Per-tenant GPU time share comes from NVML per-process utilisation
    # (nvidia-smi pmon, host view), side by side with throughput: gpucores limits
    # time (docs/compute-share.md), not throughput.
    MS=$((SECS + 2))
    at() { echo $(($(date +%s) + ${1:-20})); }
    pmon_start() {
        nvidia-smi pmon -i "$DEV" -s u -d 1 >"$TMP/pmon" 2>/dev/null &
        PMON_PID=$!
    }
    pmon_stop() { kill "$PMON_PID" 2>/dev/null; wait "$PMON_PID" 2>/dev/null; }
    pmon_sm() { # mean sm% of pid $1 over the samples where it appears
        awk -v p="$1" '$1 !~ /^#/ && $2 == p && $4 ~ /^[0-9]+$/ { s += $4; c++ }
            END { if (c) printf "%.1f", s / c; else print "nan" }' "$TMP/pmon"
    }
    mm_solo=$(CUDA_VISIBLE_DEVICES=$DEV "$PY" tests/gpu/torch_checks.py matmul "$MS")
    mm_base=$(field rate "$mm_solo")
    note "matmul solo (native): $mm_solo"
    duel() { # duel NAME PREFIX_A PREFIX_B: run two tenants, set DA DB (percent of solo)
        local start
        start=$(at 15)
        eval "$2 \"\$PY\" tests/gpu/torch_checks.py matmul $MS $start" >"$TMP/da" 2>&1 &
        local a=$!
        eval "$3 \"\$PY\" tests/gpu/torch_checks.py matmul $MS $start" >"$TMP/db" 2>&1 &
        local b=$!
        wait $a $b
        DA=$(ratio "$(field rate "$(cat "$TMP/da")")" "$mm_base")
        DB=$(ratio "$(field rate "$(cat "$TMP/db")")" "$mm_base")
        PA=$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' "$TMP/da")
        PB=$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' "$TMP/db")
    }
    pmon_start
    duel native "CUDA_VISIBLE_DEVICES=$DEV" "CUDA_VISIBLE_DEVICES=$DEV"
    pmon_stop
    note "time-sliced, no limits: ${DA}% + ${DB}% of solo = $(awk -v a="$DA" -v b="$DB" 'BEGIN{print a+b}')% (NVML time share $(pmon_sm "$PA")% / $(pmon_sm "$PB")%)"
    pmon_start
    duel gpuvisor "\"\$GV\" run --device $DEV --gpucores 30 --" "\"\$GV\" run --device $DEV --gpucores 70 --"
    pmon_stop
    ta=$(pmon_sm "$PA") tb=$(pmon_sm "$PB")
    note "gpuvisor gpucores 30/70: throughput ${DA}% / ${DB}% of solo (total $(awk -v a="$DA" -v b="$DB" 'BEGIN{print a+b}')%), NVML time share ${ta}% / ${tb}%"
    # Reported, not asserted: NVML's per-process samples (pmon) are taken once a
    # second from the driver's accounting and under time-slicing they do not add
    # up to the whole-GPU utilisation (seen on an H200: 40.6% / 13.9% for two equal
    # unlimited tenants).  The time-share claim is checked per target above, alone
    # on the GPU, where NVML's whole-GPU figure is the tenant's.
    if isnum "$DA" && isnum "$DB"; then
        ok "gpucores 30/70 duel ran: throughput ${DA}% / ${DB}% of solo, NVML per-process ${ta}% / ${tb}%"
    else
        nok "gpucores 30/70 duel: no measurement ($(cat "$TMP/da" "$TMP/db" | head -c 300))"
    fi

    MPSCTL=$(command -v nvidia-cuda-mps-control || true)
    if [ -n "$MPSCTL" ]; then
        export CUDA_MPS_PIPE_DIRECTORY=$TMP/mps-pipe CUDA_MPS_LOG_DIRECTORY=$TMP/mps-log
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
        if CUDA_VISIBLE_DEVICES=$DEV "$MPSCTL" -d; then
            msolo=$(ratio "$(field rate "$(CUDA_VISIBLE_DEVICES=$DEV "$PY" tests/gpu/torch_checks.py matmul "$MS")")" "$mm_base")
            note "MPS solo: ${msolo}% of native solo"
            duel mps "CUDA_VISIBLE_DEVICES=$DEV" "CUDA_VISIBLE_DEVICES=$DEV"
            note "MPS, no limits: ${DA}% + ${DB}% of solo = $(awk -v a="$DA" -v b="$DB" 'BEGIN{print a+b}')%"
            # What gpuvisor's MPS mode sets per client for gpucores 30 / 70: the
            # agent's own rule (whole TPCs of the SM count NVML gives it,
            # tests/node/mps_share.c), with the interposer kept for views and
            # accounting.  Without the helper: the shares themselves.
            share=$("$PWD/$BUILD/testbin/mps_share" "$DEV" 300 700 2>&1)
            qa=$(sed -n 's/.*pct=\([0-9]*\) [0-9]*$/\1/p' <<<"$share")
            qb=$(sed -n 's/.*pct=[0-9]* \([0-9]*\)$/\1/p' <<<"$share")
            note "MPS mode for gpucores 30 / 70 on this GPU: $share"
            if [ -z "$qa" ] || [ -z "$qb" ]; then qa=30 qb=70; fi
            duel mps3070 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$qa \"\$GV\" run --device $DEV --" \
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$qb \"\$GV\" run --device $DEV --"
            tot=$(awk -v a="$DA" -v b="$DB" 'BEGIN{print a+b}')
            fa=$(awk -v a="$DA" -v t="$tot" 'BEGIN{ if (t > 0) printf "%.1f", 100 * a / t; else print "nan" }')
            note "MPS gpucores 30/70 (active threads $qa/$qb) under libgpuvisor.so: ${DA}% / ${DB}% of solo (total ${tot}%; tenant A ${fa}% of the total)"
            if atleast "$tot" 97 && within "$fa" 30 5; then
                ok "MPS 30/70 duel: total ${tot}% of solo, shares ${fa}/$(awk -v f="$fa" 'BEGIN{print 100-f}')"
            else
                nok "MPS 30/70 duel: total ${tot}% of solo (target >= 97), tenant A ${fa}% of the total (target 30 +- 5)"
            fi
            # Other ways to split under MPS, reported for the MPS mode's design:
            # thread percentages summing over 100, and gpuvisor's time limiter
            # (gpucores) on clients with every SM available.
            duel mps4080 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40 \"\$GV\" run --device $DEV --" \
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=80 \"\$GV\" run --device $DEV --"
            note "MPS active threads 40/80 under libgpuvisor.so: ${DA}% / ${DB}% of solo (total $(awk -v a="$DA" -v b="$DB" 'BEGIN{print a+b}')%)"
            duel mpscores "\"\$GV\" run --device $DEV --gpucores 30 --" "\"\$GV\" run --device $DEV --gpucores 70 --"
            note "MPS, 100% threads, gpuvisor gpucores 30/70: ${DA}% / ${DB}% of solo (total $(awk -v a="$DA" -v b="$DB" 'BEGIN{print a+b}')%)"
            duel mpsmix "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 \"\$GV\" run --device $DEV --gpucores 30 --" \
                "\"\$GV\" run --device $DEV --"
            note "MPS, tenant A 30% threads + gpucores 30, tenant B unlimited: ${DA}% / ${DB}% of solo (total $(awk -v a="$DA" -v b="$DB" 'BEGIN{print a+b}')%)"
            # The SM count each percentage is granted and duels under other
            # splits (docs/compute-share.md, "MPS"): GV_GPU_MPS_SWEEP=1.
            if [ "${GV_GPU_MPS_SWEEP:-0}" = 1 ]; then
                echo quit | "$MPSCTL" >/dev/null 2>&1
                sleep 1
                while IFS= read -r l; do note "MPS sweep: $l"; done < <(bash tests/gpu/mps_sweep.sh 2>&1)
                CUDA_VISIBLE_DEVICES=$DEV "$MPSCTL" -d
            fi
            # The driver's own limit (no interposer): 1 GiB fits, 3 GiB does not.
            small=$(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=2048M" CUDA_VISIBLE_DEVICES=$DEV "$OUT/gpu_start" 1024 2>&1)
            big=$(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=2048M" CUDA_VISIBLE_DEVICES=$DEV "$OUT/gpu_start" 3072 2>&1)
            note "MPS pinned limit 2048M: 1024 MiB -> $small; 3072 MiB -> $big"
            if grep -q '^PASS' <<<"$small" && grep -q '^FAIL.*cudaMalloc' <<<"$big"; then
                ok "MPS pinned device memory limit is enforced by the driver (1 GiB fits, 3 GiB refused)"
            else
                nok "MPS pinned device memory limit 2048M: 1 GiB -> $small; 3 GiB -> $big"
            fi
            echo quit | "$MPSCTL" >/dev/null 2>&1
            sleep 1
        else
            nok "nvidia-cuda-mps-control -d failed to start"
        fi
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    else
        skip "no nvidia-cuda-mps-control: MPS duel"
    fi
else
    skip "no PyTorch with CUDA ($PY): PyTorch checks"
fi

echo "1..$n"
echo "# figures: $OUT/results.txt"
