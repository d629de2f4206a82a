"""Shared by the deploy tests' Python checks (test_deploy_mps.sh,
test_deploy_readonly_root.sh): TAP lines and the node agent's pod spec in a
rendered manifest (render-prereqs.sh's render_components)."""
import yaml


class Tap:
    def __init__(self):
        self.n = self.failed = 0

    def check(self, cond, name, detail=""):
        self.n += 1
        print(("ok %d - %s" if cond else "not ok %d - %s") % (self.n, name))
        if not cond:
            self.failed += 1
            if detail:
                print("# %s" % str(detail)[:2000])


def agent_spec(path):
    """The gpuvisor-node DaemonSet's pod spec in the rendered file, or None."""
    for d in yaml.safe_load_all(open(path)):
        if d and d.get("kind") == "DaemonSet" and d["metadata"]["name"] == "gpuvisor-node":
            return d["spec"]["template"]["spec"]
    return None
