"""The local kubelet, split along the real kubelet's own lines.

- `rules`: pure decisions (exit codes, restart policy and back-off, pod phase);
- `container`: a container's runs and state, and the process that carries a run; `prober`: readiness probes;
- `pod_worker`: what the kubelet does for one pod, from first sync to teardown; `pod_status`: the status
  it reports and the writer that sends it;
- `node_status`: node registration, conditions and Lease heartbeats;
- `logs`: container logs and termination messages;
- `sim`: simulated pods (kwok's stages) on nodes labelled `kubelocal.dev/sim=true`;
- `faults`: test controls (eviction, a killed container, node loss, a pod's link cut or shaped);
- `network`: the pod network's per-pod side (namespace, IP, files, commands entering the namespace);
- `kubelet`: `ProcessKubelet`, the agent that dispatches pods to workers and serves logs and exec.

The names other code imports from `kubelocal.kubelet` are re-exported here.
"""

from .container import Container, Run
from .faults import DEFAULT_EVICTION_MESSAGE
from .kubelet import COMPONENT, USER_AGENT, ProcessKubelet
from .logs import fallback_message, tail_offset, termination_message
from .network import PodNetworking
from .node_status import LEASE_NAMESPACE, ready_conditions
from .pod_worker import PodRuntime, PodWorker
from .prober import run_probe
from .rules import START_ERROR_EXIT, backoff_delay, exit_code, pod_phase, should_restart
from .sim import SimPod

__all__ = [
    "COMPONENT", "DEFAULT_EVICTION_MESSAGE", "LEASE_NAMESPACE", "START_ERROR_EXIT", "USER_AGENT", "Container",
    "PodNetworking", "PodRuntime", "PodWorker", "ProcessKubelet", "Run", "SimPod", "backoff_delay", "exit_code",
    "fallback_message", "pod_phase", "ready_conditions", "run_probe", "should_restart", "tail_offset",
    "termination_message",
]
