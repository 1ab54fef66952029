"""Run the official Python client's e2e suite against a fresh local cluster:

    python tests/emulator/run_client_e2e.py CHECKOUT [--control-plane kubelocal|upstream]
                                            [--pod-network auto|on|off] [pytest arguments]

CHECKOUT is a clone of kubernetes-client/python (the suite, `kubernetes/e2e_test`, ships in no package, so
the project cannot install it; its text stays out of this repository). The suite runs with the installed
client, as `kubernetes.e2e_test`, from CHECKOUT (its YAML paths are relative to it), its kubeconfig pointing
at the cluster: kubelocal, or the upstream plane (`--control-plane upstream` or TFJOB_CONTROL_PLANE, built with
`make upstream`), with the pod network where namespaces can be made (`--pod-network auto`, the default).
Its pods name images that do not exist here: busybox and python containers give their own commands (the host's
sh, gzip, cat; the kubelet maps `python` to this interpreter); nginx gets a stand-in serving nginx's welcome
page on port 80 of every address the pod has (its own IP on the pod network, this host's without one; binding
port 80 needs root), which the port-forward test reads. No nginx binary is needed. Exits with pytest's code.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kubelocal import planes
from kubelocal.containers import ImageDefaults

NGINX_STAND_IN = """
import http.server
PAGE = b"<!DOCTYPE html><html><body><h1>Welcome to nginx!</h1></body></html>\\n"
class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)
http.server.ThreadingHTTPServer(("", 80), Page).serve_forever()
"""

#: Imports the suite as `kubernetes.e2e_test` beside the installed client, then runs pytest.
BOOTSTRAP = (
    "import sys, kubernetes, pytest; kubernetes.__path__.append(sys.argv[1]); sys.exit(pytest.main(sys.argv[2:]))"
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(usage=__doc__, add_help=False)
    parser.add_argument("checkout", type=Path, nargs="?")
    parser.add_argument("--control-plane", choices=planes.CONTROL_PLANES, default=None)
    parser.add_argument("--pod-network", choices=("auto", "on", "off"), default="auto")
    args, pytest_args = parser.parse_known_args(argv)
    if args.checkout is None or not (args.checkout / "kubernetes" / "e2e_test").is_dir():
        print(__doc__, file=sys.stderr)
        print("CHECKOUT must hold kubernetes/e2e_test (a clone of kubernetes-client/python)", file=sys.stderr)
        return 2
    checkout = args.checkout.resolve()
    plane = planes.choose(args.control_plane)
    images = {"nginx": ImageDefaults(entrypoint=(sys.executable, "-c", NGINX_STAND_IN))}
    with tempfile.TemporaryDirectory(prefix="client-e2e-") as tmp, planes.cluster_thread(
        plane, workdir=Path(tmp) / "cluster", max_grace_seconds=1.0, images=images, pod_network=args.pod_network
    ) as cluster:
        config = Path(tmp) / "kubeconfig"
        cluster.write_kubeconfig(config)
        print(f"client e2e suite on the {plane} plane (pod network: {args.pod_network})", flush=True)
        env = {**os.environ, "KUBECONFIG": str(config)}
        command = [sys.executable, "-c", BOOTSTRAP, str(checkout / "kubernetes"),
                   "-p", "no:cacheprovider", "-v", "kubernetes/e2e_test", *pytest_args]
        return subprocess.run(command, env=env, cwd=checkout, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
