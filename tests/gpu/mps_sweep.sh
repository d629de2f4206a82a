#!/usr/bin/env bash
# MPS partition report (make test-gpu runs it with GV_GPU_MPS_SWEEP=1; also
# alone): the SM count an MPS client is granted per active-thread
# percentage, matmul throughput alone per percentage, and two-tenant duels
# under several splits (docs/compute-share.md, "MPS"); GV_MPS_RULES=1: the
# control daemon's options and duels of the rules for rounding gpucores to
# whole TPCs on two matrix sizes; GV_MPS_QUICK=1: the 31/70 duels.  Reports, asserts
# nothing: the MPS duel check itself is in run-gpu-tests.sh.
set -u
DEV=${GV_GPU_DEVICE:-0}
PY=${PYTHON:-python3}
SECS=${GV_GPU_SECONDS:-4}
MPSCTL=$(command -v nvidia-cuda-mps-control) || { echo "no nvidia-cuda-mps-control"; exit 0; }
TMP=$(mktemp -d)
trap 'echo quit | "$MPSCTL" >/dev/null 2>&1; rm -rf "$TMP"' EXIT
${CC:-cc} -O2 -o "$TMP/probe" tests/gpu/mps_sm_probe.c -ldl || exit 1
export CUDA_MPS_PIPE_DIRECTORY=$TMP/pipe CUDA_MPS_LOG_DIRECTORY=$TMP/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
rate() { sed -n 's/.*rate=\([0-9.]*\).*/\1/p' "$1"; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "nan"; else printf "%.1f", 100 * a / b }'; }
CUDA_VISIBLE_DEVICES=$DEV "$PY" tests/gpu/torch_checks.py matmul "$SECS" >"$TMP/native"
base=$(rate "$TMP/native")
echo "native solo: $(cat "$TMP/native")"
if [ "${GV_MPS_RULES:-0}" = 1 ]; then # a second kernel shape for the rule duels below
    GV_MATMUL_N=6144 CUDA_VISIBLE_DEVICES=$DEV "$PY" tests/gpu/torch_checks.py matmul "$SECS" >"$TMP/native6k"
    base6k=$(rate "$TMP/native6k")
    echo "native solo 6144^3: $(cat "$TMP/native6k")"
    # What this driver's control daemon offers for static SM partitioning
    echo "control daemon: $("$MPSCTL" -v 2>&1 | tr '\n' ' ' | head -c 200)"
    echo "control daemon strings: $(strings "$MPSCTL" 2>/dev/null | grep -i -E 'partition|chunk|static' | sort -u | head -40 | tr '\n' '|' | head -c 3000)"
    mkdir -p "$TMP/spipe" "$TMP/slog"
    # (580's daemon prints "Unrecognized option" and its usage for -S, and exits 0: ask it)
    CUDA_MPS_PIPE_DIRECTORY=$TMP/spipe CUDA_MPS_LOG_DIRECTORY=$TMP/slog CUDA_VISIBLE_DEVICES=$DEV \
        timeout 20 "$MPSCTL" -S -d >"$TMP/serr" 2>&1
    if echo get_default_active_thread_percentage |
        CUDA_MPS_PIPE_DIRECTORY=$TMP/spipe timeout 10 "$MPSCTL" >/dev/null 2>&1; then
        echo "-S -d: started"
        for c in "sm_partition list" "lspart" "help"; do
            echo "  '$c': $(echo "$c" | CUDA_MPS_PIPE_DIRECTORY=$TMP/spipe timeout 10 "$MPSCTL" 2>&1 | tr '\n' '|' | head -c 400)"
        done
        echo quit | CUDA_MPS_PIPE_DIRECTORY=$TMP/spipe timeout 10 "$MPSCTL" >/dev/null 2>&1
        sleep 1
        echo "  control log: $(tr '\n' '|' <"$TMP/slog/control.log" 2>/dev/null | head -c 800)"
    else
        echo "-S -d: refused: $(tr '\n' ' ' <"$TMP/serr" | head -c 300)"
    fi
fi
CUDA_VISIBLE_DEVICES=$DEV "$MPSCTL" -d || { echo "MPS daemon failed"; exit 1; }
echo "unlimited client: $(CUDA_VISIBLE_DEVICES=$DEV "$TMP/probe")"
duel() { # duel LABEL ENV_A ENV_B
    local start=$(($(date +%s) + 12))
    env $2 CUDA_VISIBLE_DEVICES=$DEV "$PY" tests/gpu/torch_checks.py matmul "$SECS" "$start" >"$TMP/a" 2>&1 &
    local a=$!
    env $3 CUDA_VISIBLE_DEVICES=$DEV "$PY" tests/gpu/torch_checks.py matmul "$SECS" "$start" >"$TMP/b" 2>&1 &
    local b=$!
    wait $a $b
    local ra rb
    ra=$(pct "$(rate "$TMP/a")" "$base")
    rb=$(pct "$(rate "$TMP/b")" "$base")
    echo "duel $1: $ra% + $rb% of native solo = $(awk -v a="$ra" -v b="$rb" 'BEGIN{print a+b}')% (A's share of the total $(awk -v a="$ra" -v b="$rb" 'BEGIN{ if (a+b>0) printf "%.1f", 100*a/(a+b); else print "nan"}')%)"
}
if [ "${GV_MPS_RULES:-0}" = 1 ]; then # candidate rules for turning gpucores 30/70 into percentages
    # 30/70: the share itself; 31/72: each client rounded up to whole TPCs
    # (per client, no knowledge of the others); 30/72: rounded down, the
    # spare TPC to the larger client (needs the other clients' shares).
    for shape in 8192 6144; do
        if [ "$shape" = 6144 ]; then base=$base6k; export GV_MATMUL_N=6144; fi
        for r in 30/70 31/72 30/72 31/70 31/72 30/70; do
            duel "$r n=$shape" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=${r%/*}" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=${r#*/}"
            [ "$shape" = 6144 ] && [ "$r" = 31/70 ] && break
        done
    done
    exit 0
fi
if [ "${GV_MPS_QUICK:-0}" = 1 ]; then # only the duels around 30/70
    duel "31/70 (every SM of 132 handed out)" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=31" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70"
    duel "30/70" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70"
    duel "31/70 again" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=31" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70"
    exit 0
fi
line=""
for p in 5 10 15 20 25 28 29 30 31 32 35 40 45 50 55 60 65 68 69 70 71 72 75 80 85 90 95 100; do
    s=$(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$p CUDA_VISIBLE_DEVICES=$DEV "$TMP/probe" |
        sed -n 's/.*attr_sms=\([-0-9]*\) affinity_sms=\([-0-9]*\).*/\1\/\2/p')
    line="$line $p:$s"
done
echo "SMs granted per percentage (pct:attribute/affinity):$line"
for p in 30 70 100; do
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$p CUDA_VISIBLE_DEVICES=$DEV "$PY" tests/gpu/torch_checks.py matmul "$SECS" >"$TMP/solo"
    echo "alone at $p%: $(pct "$(rate "$TMP/solo")" "$base")% of native solo"
done
duel "no limits" "" ""
duel "30/70" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70"
duel "30/72" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=72"
duel "32/70" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=32" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70"
duel "30/75" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=75"
duel "30 normal / 100 below-normal priority" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 CUDA_MPS_CLIENT_PRIORITY=0" "CUDA_MPS_CLIENT_PRIORITY=1"
duel "30/70 again" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70"
