#!/bin/sh
# Prints the packages of the given groups of scripts/debian-packages.txt
# ("## build", "## runtime", "## test"), one a line; no group = all.
# Used by the Dockerfiles so the images install from the one list.
#   packages.sh --closure GROUP...   those packages and everything they depend
#       on (Depends and Pre-Depends, recursively, as apt's lists say; virtual
#       names left out), sorted: what a build from the group compiles with
#       (scripts/install-deps.sh keeps it current, check-dockerfiles.sh
#       compares it with the Dockerfiles' build stage)
set -eu
list="$(dirname "$0")/debian-packages.txt"
if [ "${1:-}" = --closure ]; then
    shift
    pkgs=$("$0" "$@")
    # shellcheck disable=SC2086  # one package name a word
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
        --no-replaces --no-enhances $pkgs 2>/dev/null | grep -v '^[ <]' | sort -u
    exit 0
fi
[ -r "$list" ] || { echo "packages.sh: cannot read $list" >&2; exit 1; }
for g in "$@"; do
    grep -qx "## $g" "$list" || { echo "packages.sh: no group '$g' in $list" >&2; exit 2; }
done
awk -v want=" $* " '
    /^## / { group = substr($0, 4); next }
    /^[ \t]*(#|$)/ { next }
    want == "  " || index(want, " " group " ") { print $1 }
' "$list"
