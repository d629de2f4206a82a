# Sourced by the tests that render deploy/ with `kubectl kustomize` (offline)
# and read the result with Python's yaml: sets PY, or prints a TAP skip and
# exits when kubectl (not a Debian package) or python3-yaml is missing.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
if ! command -v kubectl >/dev/null 2>&1; then
    echo "1..1"
    echo "ok 1 # SKIP kubectl not installed (not packaged in Debian); cannot render deploy/"
    exit 0
fi
if ! "$PY" -c 'import yaml' 2>/dev/null; then
    echo "1..1"
    echo "ok 1 # SKIP python3-yaml not installed; cannot check the rendered manifests"
    exit 0
fi

# render_components DIR COMPONENT...: deploy/kubernetes/v1.34 with the given
# components (deploy/<name>), through an overlay as an operator adds them,
# into DIR/overlay.yaml, and v1.34 alone into DIR/base.yaml; on a rendering
# error, a TAP failure naming it and exit 1.
render_components() {
    local dir=$1; shift
    mkdir -p "$dir/overlay"
    {
        echo "apiVersion: kustomize.config.k8s.io/v1beta1"
        echo "kind: Kustomization"
        echo "resources:"
        echo "  - $(realpath --relative-to="$dir/overlay" deploy/kubernetes/v1.34)"
        echo "components:"
        for c in "$@"; do echo "  - $(realpath --relative-to="$dir/overlay" "deploy/$c")"; done
    } >"$dir/overlay/kustomization.yaml"
    local what src
    for what in overlay base; do
        src=$dir/overlay
        [ $what = base ] && src=deploy/kubernetes/v1.34
        if ! kubectl kustomize "$src" >"$dir/$what.yaml" 2>"$dir/err"; then
            echo "1..1"
            echo "not ok 1 - kubectl kustomize with deploy/{$*} ($what) failed"
            sed 's/^/# /' "$dir/err"
            exit 1
        fi
    done
}
