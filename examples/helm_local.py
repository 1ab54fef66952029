"""Install, upgrade or uninstall the chart with Helm 4 (helm-python-sdk: no `helm` binary needed) into the
cluster $KUBECONFIG names, e.g. `tfjob local up`'s, with the chart's default values: on the local plane's pod
network the workers find each other by cluster DNS, as on a cluster.
Usage: python examples/helm_local.py install|upgrade|uninstall"""

import os
import sys
from pathlib import Path

import helm_python as helm

CHART = Path(__file__).resolve().parents[1] / "deploy" / "helm" / "tfjob-operator"

action = sys.argv[1] if len(sys.argv) > 1 else ""
with helm.Config(kubeconfig_path=os.environ["KUBECONFIG"], namespace="tfjob-system") as cluster, \
        helm.Chart.load(CHART) as chart:
    if action == "install":
        cluster.install(chart, "tfjob-operator", namespace="tfjob-system", create_namespace=True,
                        wait="watcher", timeout=120)
    elif action == "upgrade":  # a changed value: the operator rolls
        cluster.upgrade(chart, "tfjob-operator", {"logLevel": "DEBUG"}, namespace="tfjob-system",
                        wait="watcher", timeout=120)
    elif action == "uninstall":
        cluster.uninstall("tfjob-operator", wait="watcher", timeout=120)
        print("release \"tfjob-operator\" uninstalled")
        sys.exit(0)
    else:
        sys.exit("usage: python examples/helm_local.py install|upgrade|uninstall")
    release = cluster.status("tfjob-operator")
    print(f"release {release['name']!r}: {release['status']}, revision {release['revision']}")
