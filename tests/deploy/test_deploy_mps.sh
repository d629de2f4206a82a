#!/usr/bin/env bash
# deploy/mps (the MPS component, docs/node-agent.md "MPS"): rendered with
# `kubectl kustomize` (offline) over the base through an overlay, as an
# operator enables it.  Checks that the agent finds the MPS programs where
# the component mounts them from the host driver root: the --mps-control
# path is a read-only mount of the host's nvidia-cuda-mps-control, the
# server sits beside it on PATH, libcuda on LD_LIBRARY_PATH in a directory
# of driver files only, /dev/shm is the host's <state>/mps/shm, the daemon
# may switch users; and that the base stays without any of it.  The config
# snippet is checked by test_node_units (it parses, GPU 0 in mps mode).
set -u
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
. tests/deploy/render-prereqs.sh
tmp=$(mktemp -d "${GV_TEST_TMP:-/tmp}/deploy-mps.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
render_components "$tmp" mps

exec "$PY" - "$tmp/overlay.yaml" "$tmp/base.yaml" <<'PYEOF'
import sys

sys.path.insert(0, "tests/deploy")
from rendered import Tap, agent_spec  # noqa: E402

tap = Tap()
check = tap.check
agent = agent_spec
spec = agent(sys.argv[1])
base = agent(sys.argv[2])
check(spec is not None and base is not None, "the node agent's DaemonSet renders with and without deploy/mps")
spec = spec or {"containers": [{}], "volumes": []}
c = spec["containers"][0]
vols = {v["name"]: v for v in spec.get("volumes", [])}
mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
env = {e["name"]: e.get("value") for e in c.get("env", [])}
args = c.get("args", [])


def host_file(mount_path):
    """The host path mounted (read-only, one file of the driver) at mount_path, or None."""
    m = mounts.get(mount_path)
    v = vols.get(m["name"]) if m else None
    if not m or not m.get("readOnly") or not v or "hostPath" not in v or v["hostPath"].get("type") != "File":
        return None
    return v["hostPath"]["path"]


ctl = [a.split("=", 1)[1] for a in args if a.startswith("--mps-control=")]
check(len(ctl) == 1 and host_file(ctl[0]) == "/usr/bin/nvidia-cuda-mps-control",
      "--mps-control names the host driver's nvidia-cuda-mps-control, mounted read-only as a file",
      (ctl, mounts, vols))
d = ctl[0].rsplit("/", 1)[0] if ctl else "?"
check(host_file(d + "/nvidia-cuda-mps-server") == "/usr/bin/nvidia-cuda-mps-server" and
      d in (env.get("PATH") or "").split(":"),
      "nvidia-cuda-mps-server beside it, that directory on PATH (the control daemon starts the server)",
      (env, mounts))
lp = (env.get("LD_LIBRARY_PATH") or "").split(":")
check(len(lp) == 1 and host_file(lp[0] + "/libcuda.so.1") == "/usr/lib/x86_64-linux-gnu/libcuda.so.1" and
      not any(v.get("hostPath", {}).get("path", "").rstrip("/") in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/")
              for v in vols.values()),
      "libcuda.so.1 from the host on LD_LIBRARY_PATH, in a directory of driver files only "
      "(no host library directory: its glibc must not reach the agent)", (env, vols))
shm = mounts.get("/dev/shm")
check(shm is not None and not shm.get("readOnly") and
      vols.get(shm["name"], {}).get("hostPath", {}).get("path") == "/var/lib/gpuvisor/mps/shm",
      "/dev/shm is the host's <state>/mps/shm (shared with MPS clients)", shm)
caps = c.get("securityContext", {}).get("capabilities", {})
check(sorted(caps.get("add", [])) == ["SETGID", "SETUID"] and caps.get("drop") == ["ALL"],
      "the daemon may switch users (SETUID, SETGID), every other capability still dropped", caps)
b = base["containers"][0] if base else {}
check(not any(a.startswith("--mps-control") for a in b.get("args", [])) and
      not any("mps" in v["name"] for v in (base or {}).get("volumes", [])),
      "the base DaemonSet has none of it (MPS is opt-in)")
print("1..%d" % tap.n)
sys.exit(1 if tap.failed else 0)
PYEOF
