"""Operator settings: one pydantic-settings object read once at start-up from `TFJOB_*` environment variables.

Example: `TFJOB_NAMESPACES=team-a,team-b TFJOB_GANG_BACKEND=volcano tfjob operator`.
"""

from __future__ import annotations

import logging
import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from tfjob_operator.api.apigroups import KubeflowApi
from tfjob_operator.gang import backends
from tfjob_operator.gang.builtin import BuiltinBackend


class Addressing(StrEnum):
    """How TF_CONFIG addresses peers."""

    #: `<pod>.<job>.<ns>.svc[.<cluster domain>]:<port>` through the headless Service (a real cluster, or
    #: `tfjob local` on the plane's pod network).
    DNS = "dns"
    #: `127.0.0.1:<distinct port per pod>`: pods share one machine's network (`tfjob local` where the plane
    #: cannot make network namespaces).
    LOOPBACK = "loopback"


log = logging.getLogger(__name__)

#: Settings of kopf peering, which leader election replaced (see OperatorSettings._no_peering).
REMOVED_PEERING_SETTINGS = frozenset({"TFJOB_STANDALONE", "TFJOB_PEERING_NAME", "TFJOB_PRIORITY"})


class OperatorSettings(BaseSettings):
    """Everything an operator deployment can tune; each field is the env var `TFJOB_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="TFJOB_", extra="ignore", frozen=True)

    namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Namespaces to watch, comma-separated; empty or '*' watches all namespaces.",
    )
    gang_backend: str = Field(
        BuiltinBackend.name,
        description="Default gang backend; a job overrides it with the tfjob.dev/gang-backend annotation.",
    )
    scheduler_name: str | None = Field(
        None, description="schedulerName set on pods (e.g. volcano); empty keeps the template's or the default."
    )
    gang_priority_class: str | None = Field(
        None, description="PriorityClass the builtin backend puts on gang pods (the chart's, with preemptionPolicy "
        "Never); empty: none. A job's schedulingPolicy.priorityClass wins.",
    )
    kubeflow_api: KubeflowApi = Field(
        KubeflowApi.OFF,
        description="Serve Kubeflow's kubeflow.org/v1 TFJobs too: off; managed (only runPolicy.managedBy "
        "tfjob.dev/tfjob-operator); all (also no managedBy or kubeflow.org/training-operator). Jobs managed by "
        "anyone else (e.g. kueue.x-k8s.io/multikueue) are never touched.",
    )
    addressing: Addressing | None = Field(
        None, description="Leave unset: the operator follows the plane it runs against (a local plane publishes "
        "kube-public/pod-addressing; a cluster has none: dns). Set (dns or loopback), it must agree with the plane, "
        "or the operator refuses to start saying what to change.")
    cluster_domain: str | None = Field(
        None, description="DNS suffix after <ns>.svc in TF_CONFIG, e.g. cluster.local; empty keeps the short form."
    )
    watch_server_timeout: float = Field(
        300.0, gt=0, description="Seconds the API server keeps a watch open before kopf re-establishes it."
    )
    watch_client_timeout: float = Field(
        330.0, gt=0, description="Seconds the operator waits on a silent watch before reconnecting."
    )
    request_timeout: float = Field(30.0, gt=0, description="Seconds one API request may take.")
    retry_backoff: float = Field(
        0.5, gt=0, description="First back-off in seconds after a 429/5xx or connection error; doubles each try."
    )
    retry_max_backoff: float = Field(10.0, gt=0, description="Longest back-off between two retries, in seconds.")
    retry_attempts: int = Field(6, ge=1, description="Tries per API call before the reconcile is retried later.")
    resync_seconds: float = Field(
        60.0, gt=0, description="Every job is re-reconciled at least this often (safety net; no writes if unchanged)."
    )
    resync_jobs_per_second: float = Field(
        5.0, gt=0, description="Resync reconciles per second at most: with more jobs than one period's worth, they "
        "are spread one every 1/rate s and the resync comes further apart (2,100 jobs not settled: every 7 min).")
    terminating_timeout: float = Field(
        60.0, ge=0, description="Seconds past its grace period after which a pod stuck Terminating is force-deleted."
    )
    node_monitor_grace: float = Field(
        50.0, gt=0, description="The cluster's node-monitor-grace-period (kube-controller-manager: 50 s since "
        "Kubernetes 1.32, 40 s before): after this long without a heartbeat a node is found lost. An elastic gang "
        "whose survivors exited 'peer lost' waits this long plus 10 s for the lost node to show, then counts the "
        "exits as a failure.")
    reconcile_budget_bytes: int = Field(
        128 * 1024 * 1024, gt=0, description="Bytes of rendered pods one job may need (estimated from its spec "
        "before rendering); a job over it fails with reason ReconcileBudgetExceeded instead of stalling the operator.")
    reconcile_budget_seconds: float = Field(
        30.0, gt=0, description="Seconds one reconcile may spend deciding (API waits excluded); a job over it fails "
        "with reason ReconcileBudgetExceeded.")
    progress_interval: float = Field(
        30.0, ge=0, description="Seconds between reads of each Running job's chief /metrics into status.progress "
        "(one request per job per interval; status written only when a figure moved); 0 disables.")
    progress_reads_per_second: float = Field(
        10.0, gt=0, description="Chief reads per second at most, on average: with more running jobs than one "
        "interval's reads, the progress passes come further apart (2,000 running jobs at 10/s: every 200 s).")
    metrics_port: int = Field(9090, ge=0, le=65535, description="Port of the Prometheus /metrics endpoint; 0 disables.")
    metrics_host: str = Field("0.0.0.0", description="Address the /metrics endpoint binds to.")
    liveness_port: int = Field(
        8080, ge=0, le=65535, description="Port of kopf's liveness endpoint /healthz; 0 disables."
    )
    liveness_host: str = Field("0.0.0.0", description="Address the liveness endpoint binds to.")
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR.")
    post_kopf_events: bool = Field(
        False, description="Let kopf post its own per-handler Events too (the operator posts lifecycle Events anyway)."
    )

    leader_election: bool = Field(
        False, description="Act only while holding a coordination.k8s.io Lease, so several replicas are safe."
    )
    leader_election_lease_name: str = Field("tfjob-operator", description="Name of the Lease the replicas share.")
    leader_election_lease_duration: float = Field(
        15.0, gt=0, description="Seconds a Lease stays valid without renewal; a standby takes over after that."
    )
    leader_election_renew_deadline: float | None = Field(
        None, gt=0, description="Seconds the leader keeps trying to renew before it stops; empty: 2/3 of the duration."
    )
    leader_election_retry_period: float = Field(
        2.0, gt=0, description="Seconds between renewals by the leader and between attempts by standbys."
    )
    pod_name: str | None = Field(
        None, description="This replica's pod (downward API): its Lease identity; the leader labels it for the webhook."
    )
    pod_namespace: str | None = Field(
        None, description="This replica's namespace (downward API): holds the Lease and the webhook Service."
    )
    webhook_enabled: bool = Field(False, description="Serve the validating and mutating admission webhooks.")
    webhook_port: int = Field(9443, ge=1, le=65535, description="Port of the admission webhook server (HTTPS).")
    webhook_host: str = Field("0.0.0.0", description="Address the admission webhook server binds to.")
    webhook_service_name: str | None = Field(
        None, description="Service in front of the webhook (in the pod namespace); empty: the configurations use a URL."
    )
    webhook_failure_policy: Literal["Fail", "Ignore"] = Field(
        "Fail", description="failurePolicy of the webhooks: Fail refuses TFJob writes while no webhook answers."
    )
    webhook_cert_dir: Path | None = Field(
        None, description="Directory with tls.crt/tls.key (cert-manager); empty: a self-signed certificate at start."
    )
    webhook_config_name: str | None = Field(
        None, description="Webhook configurations the operator fills in (self-signed mode); empty: it writes none."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_peering(cls, data: Any) -> Any:
        """kopf peering is gone (a paused peer still ran the builtin gang's admission loop). Asking for it
        (TFJOB_STANDALONE=false) is refused; the settings that only tuned it are ignored with a warning, so a
        manifest from an older chart still starts."""
        given = {f"TFJOB_{k.upper()}": v for k, v in data.items()} if isinstance(data, dict) else {}
        given |= {k.upper(): v for k, v in os.environ.items() if k.upper() in REMOVED_PEERING_SETTINGS}
        standalone = str(given.get("TFJOB_STANDALONE", "true")).strip().lower()
        if standalone in {"false", "0", "no", "off"}:
            raise ValueError(f"TFJOB_STANDALONE={standalone}: kopf peering was removed; unset it. Run one replica, "
                             "or several with TFJOB_LEADER_ELECTION=true (a coordination.k8s.io Lease picks the "
                             "one acting replica)")
        ignored = sorted(REMOVED_PEERING_SETTINGS & given.keys())
        if ignored:
            log.warning("%s: kopf peering was removed, so %s nothing; unset it", ", ".join(ignored),
                        "this does" if len(ignored) == 1 else "these do")
        return data

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split_namespaces(cls, value: Any) -> Any:
        """`a,b` → [a, b]; `*` or empty → all namespaces."""
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",")]
        if isinstance(value, list | tuple):
            names = [str(v).strip() for v in value if str(v).strip()]
            return [] if names == ["*"] else names
        return value

    @field_validator("gang_backend")
    @classmethod
    def _registered_backend(cls, value: str) -> str:
        """One of the registered backends (`gang.backends`, the one list of them)."""
        name = value.strip()
        if name not in backends.backend_names():
            raise ValueError(backends.unknown_backend("TFJOB_GANG_BACKEND", name))
        return name

    @field_validator("log_level")
    @classmethod
    def _upper_level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError(f"TFJOB_LOG_LEVEL: {value!r} is not one of DEBUG, INFO, WARNING, ERROR")
        return level

    @field_validator("pod_name", "pod_namespace", "webhook_service_name", "webhook_cert_dir", "webhook_config_name",
                     "scheduler_name", "cluster_domain", "gang_priority_class", "addressing", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        """The chart passes empty strings for unset options."""
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _election_timings(self) -> OperatorSettings:
        if self.leader_election_renew_deadline is not None and (
                self.leader_election_renew_deadline >= self.leader_election_lease_duration):
            raise ValueError("TFJOB_LEADER_ELECTION_RENEW_DEADLINE must be shorter than "
                             "TFJOB_LEADER_ELECTION_LEASE_DURATION (a leader must stop before a standby may take over)")
        if self.leader_election_retry_period >= self.renew_deadline:
            raise ValueError("TFJOB_LEADER_ELECTION_RETRY_PERIOD must be shorter than the renew deadline "
                             "(TFJOB_LEADER_ELECTION_RENEW_DEADLINE, default 2/3 of the lease duration)")
        return self

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    @property
    def renew_deadline(self) -> float:
        """Seconds the leader may fail to renew before it stops acting."""
        return self.leader_election_renew_deadline or self.leader_election_lease_duration * 2 / 3
