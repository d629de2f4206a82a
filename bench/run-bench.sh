#!/usr/bin/env bash
# Runs each benchmark program/script given as arguments.  A benchmark prints
# its figures on stdout (progress on stderr); the runner stores them in
# bench/results/<name>.txt behind a header naming the machine, the date, the
# commit and the command, so every number in the repo says where it came from.
set -u
export BUILD="${BUILD:-build}"
mkdir -p bench/results
cpu=$(awk -F: '/model name/ {gsub(/^ +/, "", $2); print $2; exit}' /proc/cpuinfo)
machine="$(uname -srm); ${cpu:-unknown cpu}; $(nproc) cores; $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM"
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
status=0
for b in "$@"; do
    name=$(basename "$b"); name=${name%.sh}; name=${name#bench_}
    out="bench/results/$name.txt"
    tmp="$out.tmp"
    echo "== bench $name" >&2
    {
        echo "# benchmark: $name"
        echo "# command:   make bench   (runs $b)"
        echo "# machine:   $machine"
        echo "# date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)   commit: $rev   build: $BUILD"
        echo
    } >"$tmp"
    if "$b" >>"$tmp"; then
        # A benchmark that cannot run here (not root, no cluster, no trace)
        # prints "SKIPPED: why" first: the last results stay as they were.
        if sed -n '6p' "$tmp" | grep -q '^SKIPPED'; then
            echo "bench $name $(sed -n '6p' "$tmp") (bench/results/$name.txt kept)" >&2
            rm -f "$tmp"
            continue
        fi
        mv "$tmp" "$out"
        cat "$out"
    else
        echo "bench $name FAILED (partial output kept in $tmp)" >&2
        status=1
    fi
done
exit $status
