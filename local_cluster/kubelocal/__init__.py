"""kubelocal: a local Kubernetes control plane in one process, for tests and for trying an operator.

An API server (`kubelocal.apiserver`) that the official client, kopf and kubectl talk to over HTTP, a
scheduler stand-in (`kubelocal.scheduler`), a process kubelet that runs each pod's containers as local
subprocesses (`kubelocal.kubelet`), and `kubelocal.cluster.LocalCluster` wiring them together. It knows
nothing of TFJobs: CRDs are installed through the API like any cluster's, so any kopf operator can be
tested against it (see `tests/emulator/test_fixture_example.py`).
"""
