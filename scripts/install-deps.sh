#!/usr/bin/env bash
# Installs the Debian packages in scripts/debian-packages.txt that are missing
# and brings the build group's packages, with everything they depend on, up to
# the archive's current versions (as apt's lists know them; CI runs
# `apt-get update` first).
#
# Why the upgrade: deploy/docker/*.Dockerfile's build stage installs the
# archive's current packages, `make images` builds with this machine's, and
# `make images-docker-check` holds the two to the same bytes.  A header that
# only moved a declaration by two lines (libgnutls28-dev 3.7.9-2+deb12u6 ->
# u7, a security update) changes the debug info, so the stripped scheduler's
# build ID, and the check failed (CI, stop 35).
#
# Safe to re-run; does nothing (and needs no root) when all are present and
# current.  Without root, a missing package needs sudo; out-of-date ones are
# only reported (a developer's machine is not upgraded behind their back).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t pkgs < <(grep -vE '^\s*(#|$)' "$here/debian-packages.txt")
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# Installed packages of the build group's dependency closure (the compiler,
# the -dev packages' headers, libc's) older than the archive's candidate.
stale_packages() {
    local closure
    mapfile -t closure < <("$here/packages.sh" --closure build)
    [ ${#closure[@]} -gt 0 ] || return 0
    apt-cache policy "${closure[@]}" 2>/dev/null | awk '
        /^[^ ]/ { pkg = $1; sub(/:$/, "", pkg); inst = ""; next }
        $1 == "Installed:" { inst = $2 }
        $1 == "Candidate:" && inst != "" && inst != "(none)" && $2 != "(none)" && inst != $2 {
            print pkg, inst, $2 }' |
        while read -r p inst cand; do
            dpkg --compare-versions "$inst" lt "$cand" && echo "$p"
        done
}
mapfile -t stale < <(stale_packages)

if [ ${#missing[@]} -eq 0 ] && [ ${#stale[@]} -eq 0 ]; then
    echo "install-deps: all ${#pkgs[@]} packages present" >&2
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if [ ${#missing[@]} -eq 0 ]; then
        echo "install-deps: all ${#pkgs[@]} packages present; ${#stale[@]} the build uses are older" \
             "than the archive's (${stale[*]}): 'sudo $0' upgrades them (make images-docker-check" \
             "compares with a build from the archive's current packages)" >&2
        exit 0
    fi
    command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}" >&2
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
    mapfile -t stale < <(stale_packages)
fi
if [ ${#stale[@]} -gt 0 ]; then
    echo "install-deps: upgrading to the archive's current versions: ${stale[*]}" >&2
    # --only-upgrade installs nothing new; packages apt installed as
    # dependencies stay marked so (autoremove keeps working as before).
    mapfile -t auto < <(apt-mark showauto "${stale[@]}")
    $sudo apt-get install -y -qq --no-install-recommends --only-upgrade "${stale[@]}" >&2
    [ ${#auto[@]} -eq 0 ] || $sudo apt-mark auto "${auto[@]}" >/dev/null
fi
