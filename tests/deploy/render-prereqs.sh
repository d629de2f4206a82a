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
