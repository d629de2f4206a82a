#!/bin/sh
# Prints the packages of the given groups of scripts/debian-packages.txt
# ("## build", "## runtime", "## test"), one a line; no group = all.
# Used by the Dockerfiles so the images install from the one list.
set -eu
list="$(dirname "$0")/debian-packages.txt"
[ -r "$list" ] || { echo "packages.sh: cannot read $list" >&2; exit 1; }
for g in "$@"; do
    grep -qx "## $g" "$list" || { echo "packages.sh: no group '$g' in $list" >&2; exit 2; }
done
awk -v want=" $* " '
    /^## / { group = substr($0, 4); next }
    /^[ \t]*(#|$)/ { next }
    want == "  " || index(want, " " group " ") { print $1 }
' "$list"
