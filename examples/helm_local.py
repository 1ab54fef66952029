"""Install, upgrade or uninstall the chart with Helm 4 (helm-python-sdk: no `helm` binary needed) into the
cluster $KUBECONFIG names, e.g. `tfjob local up`'s, with the chart's default values: on the local plane's pod
network the workers find each other by cluster DNS, as on a cluster.
Usage: python examples/helm_local.py install|upgrade|uninstall"""

import os
import sys
from pathlib import Path

import helm_python as helm

CHART = Path(__file__).resolve().parents[1] / "deploy" / "helm" / "tfjob-operator"
USAGE = "usage: python examples/helm_local.py install|upgrade|uninstall"

action = sys.argv[1] if len(sys.argv) > 1 else ""
if action not in ("install", "upgrade", "uninstall"):
    sys.exit(USAGE)
kubeconfig = os.environ.get("KUBECONFIG", "")
if not kubeconfig or not Path(kubeconfig).is_file():
    sys.exit(f"helm_local: KUBECONFIG={kubeconfig!r} is not a file: start a cluster first (`tfjob local up` prints "
             "the export to run) or point KUBECONFIG at one")
try:
    with helm.Config(kubeconfig_path=kubeconfig, namespace="tfjob-system") as cluster, \
            helm.Chart.load(CHART) as chart:
        if action == "install":
            cluster.install(chart, "tfjob-operator", namespace="tfjob-system", create_namespace=True,
                            wait="watcher", timeout=120)
        elif action == "upgrade":  # a changed value: the operator rolls
            cluster.upgrade(chart, "tfjob-operator", {"logLevel": "DEBUG"}, namespace="tfjob-system",
                            wait="watcher", timeout=120)
        else:
            cluster.uninstall("tfjob-operator", wait="watcher", timeout=120)
            print("release \"tfjob-operator\" uninstalled")
            sys.exit(0)
        release = cluster.status("tfjob-operator")
except helm.HelmError as e:
    sys.exit(f"helm_local: {action} failed: {e}")
print(f"release {release['name']!r}: {release['status']}, revision {release['revision']}")
