# Helpers shared by the real-GPU scripts (run-gpu-tests.sh, prio_probe.sh);
# sourced, not run.

# field NAME TEXT: the number after NAME= on the last line that has one.
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2" | tail -1; }
# ratio A B: 100 * A / B with one decimal, "nan" when B is not positive.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", 100 * a / b; else print "nan" }'; }
isnum() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
