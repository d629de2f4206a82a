#!/usr/bin/env bash
# The images install only Debian's Essential set and the "runtime" group of
# scripts/debian-packages.txt (scripts/build-image.sh).  Every shared library
# the shipped binaries need (readelf -d NEEDED, resolved with ldd) must come
# from a package of that group (dpkg -S), or the image would not start.
# Also: a missing group is an error, not an empty list.  (How the Dockerfiles
# and `make images` build: tests/deploy/test_images.sh.)
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
pk="$here/scripts/packages.sh"
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
nok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }

runtime=" $("$pk" runtime | tr '\n' ' ') "
shipped=("$BUILD/bin/gpuvisor-node" "$BUILD/bin/gpuvisor-scheduler" "$BUILD/lib/libgpuvisor.so")
for bin in "${shipped[@]}"; do
    name=${bin#"$BUILD"/}
    if [ ! -e "$bin" ]; then
        nok "$name is built" "missing: $bin"
        continue
    fi
    if readelf -d "$bin" | grep -q 'NEEDED.*lib\(a\|ub\|t\)san'; then
        n=$((n + 1)); echo "ok $n - $name: runtime libraries # SKIP a sanitizer build (its runtime is not an image's)"
        continue
    fi
    missing=()
    while read -r lib; do
        # the path the loader picks for it here
        path=$(ldd "$bin" | awk -v l="$lib" '$1 == l && $3 ~ /^\// { print $3; exit }')
        [ -z "$path" ] && case $lib in ld-linux*) path=$(ldd "$bin" | awk -v l="$lib" '$1 ~ l { print $1; exit }') ;; esac
        pkg=""
        for p in "$path" "$(readlink -f "$path" 2>/dev/null)" "${path#/usr}" "/usr$path"; do
            [ -n "$p" ] && pkg=$(dpkg -S "$p" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$pkg" ] && break
        done
        if [ -z "$pkg" ]; then
            missing+=("$lib: no package owns ${path:-it} here")
        elif [[ $runtime != *" $pkg "* ]]; then
            missing+=("$lib comes from $pkg, which is not in the runtime group")
        fi
    done < <(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    if [ ${#missing[@]} -eq 0 ]; then
        ok "$name: every NEEDED library comes from a runtime-group package"
    else
        nok "$name: every NEEDED library comes from a runtime-group package" "${missing[@]}"
    fi
done

if "$pk" nosuchgroup >/dev/null 2>&1; then
    nok "packages.sh refuses an unknown group"
else
    ok "packages.sh refuses an unknown group"
fi
echo "1..$n"
