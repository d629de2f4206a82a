#!/usr/bin/env bash
# The node agent's MPS and CDI modes under the DaemonSet's read-only root
# (readOnlyRootFilesystem: true): every path the agent writes in those modes
# must be a writable mount of its container, and every host path it reads a
# mount at all.
# 1. Rendered (kubectl kustomize, offline): deploy/kubernetes/v1.34 with the
#    components deploy/mps and deploy/cdi.  The agent's write paths: its
#    state dir (MPS pipe/log dirs live in <state>/mps), the device-plugin
#    dir, /dev/shm for MPS, cdiSpecDir for CDI (from deploy/cdi's example
#    config); its read paths: containerDriverRoot and /etc/cdi.  The base
#    alone mounts no /var/run/cdi: CDI without the component would write
#    into the read-only root.
# 2. Run (root, unshare): the MPS scenarios (tests/node/test_node_modes.py,
#    fake nvidia-cuda-mps-control) and the CDI / no-runtime scenarios
#    (tests/node/test_node_direct.py) with every mount of the machine
#    read-only except the tests' own directory (their state, plugin, CDI
#    dirs), /proc, /sys and /dev: the agent writes nowhere else.  Part 1
#    maps those directories to the DaemonSet's mounts.
set -u
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
BUILD=${BUILD:-build}
export BUILD
tmp=$(mktemp -d "${GV_TEST_TMP:-/tmp}/deploy-ro.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Part 1 needs kubectl (not a Debian package) and python3-yaml; part 2 runs
# without them.
if command -v kubectl >/dev/null 2>&1 && /usr/bin/python3 -c 'import yaml' 2>/dev/null; then
. tests/deploy/render-prereqs.sh
render_components "$tmp" mps cdi

# The agent's own defaults, from its --help (not restated here).
help=$("$BUILD/bin/gpuvisor-node" --help 2>&1)
state=$(sed -n 's/.*--state-dir DIR .*(default \([^)]*\)).*/\1/p' <<<"$help")
plugin=$(sed -n 's/.*--plugin-dir DIR .*(default \([^)]*\)).*/\1/p' <<<"$help")

"$PY" - "$tmp/overlay.yaml" "$tmp/base.yaml" "$state" "$plugin" deploy/cdi/node-config-cdi.json >"$tmp/tap" <<'PYEOF'
import json, sys

sys.path.insert(0, "tests/deploy")
from rendered import Tap, agent_spec  # noqa: E402

tap = Tap()
check = tap.check


def agent(path):
    spec = agent_spec(path)
    return spec["containers"][0] if spec else None


c, base = agent(sys.argv[1]), agent(sys.argv[2])
state, plugin, cfg = sys.argv[3], sys.argv[4], json.load(open(sys.argv[5]))
check(c is not None and base is not None and state.startswith("/") and plugin.startswith("/"),
      "the agent renders with deploy/mps + deploy/cdi and without; its default dirs read from --help",
      (state, plugin))
c, base = c or {}, base or {}
check(c.get("securityContext", {}).get("readOnlyRootFilesystem") is True,
      "the agent's root file system stays read-only with both components")


def mount_of(ctr, path):
    """The volumeMount holding path (longest mountPath prefix), or None."""
    best = None
    for m in ctr.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/") or "/"
        if (path == mp or path.startswith(mp + "/") or mp == "/") and \
                (best is None or len(mp) > len(best["mountPath"])):
            best = m
    return best


def writable(ctr, path):
    m = mount_of(ctr, path)
    return m is not None and not m.get("readOnly")


writes = {"state dir (per-container dirs, MPS pipe and log dirs in <state>/mps)": state + "/mps/GPU-x/pipe",
          "device-plugin dir (the agent's socket)": plugin + "/gpuvisor.sock",
          "MPS shared memory (/dev/shm)": "/dev/shm",
          "cdiSpecDir of deploy/cdi's config": cfg["cdiSpecDir"] + "/gpuvisor-gpuvisor.io_gpu.json"}
for what, p in writes.items():
    check(writable(c, p), "writes %s: %s is on a writable mount" % (what, p), mount_of(c, p))
for what, p in {"containerDriverRoot of deploy/cdi's config": cfg["containerDriverRoot"] + "/usr/lib",
                "/etc/cdi (other specs claiming the kind)": "/etc/cdi"}.items():
    check(mount_of(c, p) is not None and mount_of(c, p)["mountPath"] != "/",
          "reads %s: %s is mounted from the host" % (what, p), mount_of(c, p))
check(cfg.get("cdi") is True and cfg.get("driverRoot") == "/" and
      mount_of(c, cfg["containerDriverRoot"]) is not None and
      mount_of(c, cfg["containerDriverRoot"])["mountPath"] == cfg["containerDriverRoot"],
      "deploy/cdi's example config turns CDI on and looks for the driver where the host's / is mounted")
check(not writable(base, cfg["cdiSpecDir"] + "/x") and mount_of(base, cfg["cdiSpecDir"]) is None,
      "without deploy/cdi the base mounts no %s (CDI needs the component)" % cfg["cdiSpecDir"])
print("N %d" % tap.n)
sys.exit(1 if tap.failed else 0)
PYEOF
static_rc=$?
n=$(sed -n 's/^N //p' "$tmp/tap")
grep -v '^N ' "$tmp/tap"
[ -n "$n" ] || { n=1; echo "not ok 1 - the rendered checks ran"; static_rc=1; }
failed=$static_rc
else
    PY=/usr/bin/python3
    n=1 failed=0
    echo "ok 1 - the rendered agent mounts what MPS and CDI write and read # SKIP kubectl not installed (not packaged in Debian); cannot render deploy/"
fi

# ---- 2. the agent itself with everything else read-only ----------------------
ro() { # WRITABLE CMD...: CMD in a mount namespace where only WRITABLE, /proc, /sys, /dev are writable
    unshare -m sh -ec '
        w=$1; shift
        mount --make-rprivate /
        mount --bind "$w" "$w"
        awk "{print \$5}" /proc/self/mountinfo | sort -u | while read -r mp; do
            mp=$(printf "%b" "$mp")
            case $mp in "$w"|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue ;; esac
            mount -o remount,bind,ro "$mp" 2>/dev/null || echo "could not make $mp read-only" >&2
        done
        touch /var/tmp/.gv-ro-probe 2>/dev/null && { echo "/var/tmp still writable" >&2; exit 9; }
        exec "$@"' sh "$@"
}
for t in "tests/node/test_node_modes.py MPS and sharing modes" "tests/node/test_node_direct.py CDI and no-runtime allocation"; do
    script=${t%% *} what=${t#* }
    n=$((n + 1))
    if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null 2>&1; then
        echo "ok $n - $what with a read-only root # SKIP needs root and unshare (mount namespace)"
        continue
    fi
    # short: gvtest.scratch() falls back to /tmp (read-only here) when
    # GV_TEST_TMP is too long for unix socket paths
    w=$(mktemp -d /tmp/gvro.XXXXXX)
    out=$(ro "$w" env TMPDIR="$w" GV_TEST_TMP="$w" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 "$script" 2>&1)
    rc=$?
    rm -rf "$w"
    plan=$(grep -c '^ok ' <<<"$out")
    bad=$(grep -c '^not ok' <<<"$out")
    if [ $rc -eq 0 ] && [ "$bad" -eq 0 ] && [ "$plan" -gt 0 ] && ! grep -q '# SKIP' <<<"$out"; then
        echo "ok $n - $what with every mount read-only but the tests' own dirs: $script $plan/$plan"
    else
        failed=1
        echo "not ok $n - $what with every mount read-only but the tests' own dirs: $script rc $rc, $bad failed"
        grep -E '^not ok|SKIP|Read-only|EROFS' <<<"$out" | head -20 | sed 's/^/# /'
    fi
done
echo "1..$n"
exit $failed
