"""Run the official Python client's e2e suite against a fresh local cluster:

    python tests/emulator/run_client_e2e.py CHECKOUT [pytest arguments]

CHECKOUT is a clone of kubernetes-client/python (the suite, `kubernetes/e2e_test`, ships in no package, so
the project cannot install it; its text stays out of this repository). The suite runs with the installed
client, as `kubernetes.e2e_test`, from CHECKOUT (its YAML paths are relative to it), its kubeconfig pointing
at the cluster. Its pods name images that do not exist here: busybox and python containers give their own
commands; nginx gets a stand-in serving nginx's welcome page on 127.0.0.1:80 (binding port 80 needs root),
which the port-forward test reads. Exits with pytest's code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kubelocal.apiserver import write_kubeconfig
from kubelocal.cluster import LocalClusterThread
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
http.server.ThreadingHTTPServer(("127.0.0.1", 80), Page).serve_forever()
"""

#: Imports the suite as `kubernetes.e2e_test` beside the installed client, then runs pytest.
BOOTSTRAP = (
    "import sys, kubernetes, pytest; kubernetes.__path__.append(sys.argv[1]); sys.exit(pytest.main(sys.argv[2:]))"
)


def main(argv: list[str]) -> int:
    if not argv or not (Path(argv[0]) / "kubernetes" / "e2e_test").is_dir():
        print(__doc__, file=sys.stderr)
        print("CHECKOUT must hold kubernetes/e2e_test (a clone of kubernetes-client/python)", file=sys.stderr)
        return 2
    checkout = Path(argv[0]).resolve()
    images = {"nginx": ImageDefaults(entrypoint=(sys.executable, "-c", NGINX_STAND_IN))}
    with tempfile.TemporaryDirectory(prefix="client-e2e-") as tmp, LocalClusterThread(
        workdir=Path(tmp) / "kubelocal", max_grace_seconds=1.0, images=images
    ) as cluster:
        config = Path(tmp) / "kubeconfig"
        write_kubeconfig(config, cluster.url)
        env = {**os.environ, "KUBECONFIG": str(config)}
        command = [sys.executable, "-c", BOOTSTRAP, str(checkout / "kubernetes"),
                   "-p", "no:cacheprovider", "-v", "kubernetes/e2e_test", *argv[1:]]
        return subprocess.run(command, env=env, cwd=checkout, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
