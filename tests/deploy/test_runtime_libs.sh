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
if "$pk" --closure nosuchgroup >/dev/null 2>&1; then
    nok "packages.sh --closure refuses an unknown group"
else
    ok "packages.sh --closure refuses an unknown group"
fi

# The build group's dependency closure is what scripts/install-deps.sh keeps at
# the archive's versions and scripts/check-dockerfiles.sh compares with the
# Dockerfiles' build stage.  It must hold every header the sources compile
# against (one moved line in gnutls.h changed the scheduler's bytes), or a
# stale one here would go unnoticed.  gcc, as the images are built.
closure=" $("$pk" --closure build | tr '\n' ' ') "
mapfile -t srcs < <(git -C "$here" ls-files 'src/*.c')
cflags=$(pkg-config --cflags jansson yaml-0.1 libnghttp2 libprotobuf-c libmicrohttpd gnutls 2>/dev/null)
# shellcheck disable=SC2086
deps=$(cd "$here" && gcc -M -std=c11 -D_GNU_SOURCE -Isrc $(find "$BUILD/gen" -type d -printf '-I%p ' 2>/dev/null) \
    $cflags "${srcs[@]}" 2>&1)
if [ ${#srcs[@]} -lt 50 ] || [[ $closure == "  " ]] || grep -q 'error:' <<<"$deps"; then
    nok "every system header the sources include comes from the build group's closure" \
        "sources: ${#srcs[@]}; closure: $(wc -w <<<"$closure") packages; $(grep -m3 'error:' <<<"$deps")"
else
    mapfile -t hdrs < <(tr ' \\' '\n\n' <<<"$deps" | grep '^/usr' | sort -u)
    outside=()
    while read -r owner; do
        [[ $closure == *" $owner "* ]] || outside+=("$owner")
    done < <(dpkg -S "${hdrs[@]}" 2>/dev/null | cut -d: -f1 | tr ',' '\n' | sed 's/^ *//' | sort -u)
    owners=$(dpkg -S "${hdrs[@]}" 2>/dev/null | wc -l)
    if [ ${#outside[@]} -eq 0 ] && [ "$owners" -eq ${#hdrs[@]} ]; then
        ok "every system header the sources include comes from the build group's closure (${#hdrs[@]} headers)"
    else
        nok "every system header the sources include comes from the build group's closure" \
            "${#hdrs[@]} headers, $owners with an owner; owners outside the closure: ${outside[*]}"
    fi
fi
echo "1..$n"
