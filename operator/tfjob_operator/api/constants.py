"""Names shared by every part of the operator: the API group, label keys, annotations, ports.

Each key is a constant with a sentence saying what it holds, so a reader finds the contract in one place.
"""

from typing import Final

GROUP: Final = "tfjob.dev"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "TFJob"
PLURAL: Final = "tfjobs"
SINGULAR: Final = "tfjob"
SHORT_NAMES: Final = ("tfj",)

#: Kubeflow's API version; manifests written for it are read as ours (same field names).
KUBEFLOW_API_VERSION: Final = "kubeflow.org/v1"

#: Label on every pod and the Service: the name of the TFJob that owns it.
LABEL_JOB_NAME: Final = f"{GROUP}/job-name"
#: Label on every pod: its replica type, lowercased (chief, worker, ps, evaluator).
LABEL_REPLICA_TYPE: Final = f"{GROUP}/replica-type"
#: Label on every pod: its index within its replica type, as a decimal string.
LABEL_REPLICA_INDEX: Final = f"{GROUP}/replica-index"
#: Label on the one pod whose success decides the job: the chief, or worker 0 when there is no chief.
LABEL_JOB_ROLE: Final = f"{GROUP}/job-role"
#: Label on every pod: the gang attempt it belongs to ("0" first, +1 per whole-gang restart).
LABEL_ATTEMPT: Final = f"{GROUP}/attempt"
#: Value of LABEL_JOB_ROLE on the deciding pod.
ROLE_CHIEF: Final = "chief"

#: Scheduling gate the built-in gang backend puts on pods until the whole gang has a placement.
GANG_SCHEDULING_GATE: Final = f"{GROUP}/gang"
#: Annotation on a TFJob that overrides the operator's gang backend for that job.
ANNOTATION_GANG_BACKEND: Final = f"{GROUP}/gang-backend"

#: Name of the container that receives TF_CONFIG when a pod has several containers.
DEFAULT_CONTAINER_NAME: Final = "tensorflow"
#: Name of the container port peers use to reach each other.
DEFAULT_PORT_NAME: Final = "tfjob-port"
#: Port used when the tensorflow container declares no port named tfjob-port.
DEFAULT_PORT: Final = 2222

#: Name of the training container's port serving the worker runtime's Prometheus /metrics (PodMonitor, progress).
METRICS_PORT_NAME: Final = "tfjob-metrics"
#: Port used when the tensorflow container declares no port named tfjob-metrics.
DEFAULT_METRICS_PORT: Final = 9464
#: Suffix of a pod's metrics port key in ANNOTATION_LOOPBACK_PORTS (loopback mode: one port per pod and use).
LOOPBACK_METRICS_SUFFIX: Final = "/metrics"

#: Environment variables the operator injects into the training container.
ENV_TF_CONFIG: Final = "TF_CONFIG"
ENV_JOB_NAME: Final = "TFJOB_NAME"
ENV_ATTEMPT: Final = "TFJOB_ATTEMPT"
#: The port the worker runtime serves /metrics on (tfjob_worker.config reads it).
ENV_WORKER_METRICS_PORT: Final = "TFJOB_WORKER_METRICS_PORT"
#: runPolicy.stallTimeoutSeconds, for the worker runtime's stall watchdog (tfjob_worker.config reads it).
ENV_STALL_TIMEOUT: Final = "TFJOB_STALL_TIMEOUT_SECONDS"
#: Elastic jobs (the worker runtime applies them): the scaling policy, and N0, the width batch and LR were set for.
ENV_ELASTIC_SCALING: Final = "TFJOB_ELASTIC_SCALING"
ENV_ELASTIC_REFERENCE_WORKERS: Final = "TFJOB_ELASTIC_REFERENCE_WORKERS"
#: ...and the narrowest and widest widths it may run at (training processes), which the runtime checks at start.
ENV_ELASTIC_MIN_WORKERS: Final = "TFJOB_ELASTIC_MIN_WORKERS"
ENV_ELASTIC_MAX_WORKERS: Final = "TFJOB_ELASTIC_MAX_WORKERS"
#: The pod's terminationGracePeriodSeconds: the time the runtime has to save after SIGTERM.
ENV_TERMINATION_GRACE_SECONDS: Final = "TFJOB_TERMINATION_GRACE_SECONDS"
#: Kubernetes' terminationGracePeriodSeconds when a pod spec leaves it unset.
KUBE_DEFAULT_TERMINATION_GRACE_SECONDS: Final = 30
#: The container's terminationMessagePath, where the worker runtime leaves its last progress figures on exit 0
#: (tfjob_worker.termination reads it; a local process kubelet maps the path to a file of the pod).
ENV_TERMINATION_MESSAGE_PATH: Final = "TFJOB_TERMINATION_MESSAGE_PATH"

#: The taint the node lifecycle controller puts on a node it lost (no heartbeat for node-monitor-grace-period). An
#: elastic job's chief and worker pods tolerate it for 0 s (render.py), unless their template says otherwise: the
#: taint manager then evicts them as soon as their node is found lost, not after the 300 s that
#: DefaultTolerationSeconds admission gives every pod (docs/elastic.md, "Recovery timeline").
NODE_UNREACHABLE_TAINT: Final = "node.kubernetes.io/unreachable"
NODE_LOSS_TOLERATION_SECONDS: Final = 0

#: Longest DNS-1123 label: a pod hostname `<job>-<type>-<index>` must fit in it.
MAX_DNS_LABEL: Final = 63

#: Annotation on a TFJob, written by the operator before it creates a gang: the replicas per type
#: (JSON) the running pods were created with. A running MWMS gang cannot be resized, so a later
#: change of `replicas` is refused until the job is suspended (suspension clears it).
ANNOTATION_GANG_REPLICAS: Final = f"{GROUP}/gang-replicas"
#: Annotation on a TFJob in loopback addressing mode (`tfjob local`): pod name → 127.0.0.1 port (JSON),
#: written before the pods are created so the ports survive an operator restart mid-creation.
ANNOTATION_LOOPBACK_PORTS: Final = f"{GROUP}/loopback-ports"
#: Name the operator posts its Events and writes its objects as.
OPERATOR_COMPONENT: Final = "tfjob-operator"
