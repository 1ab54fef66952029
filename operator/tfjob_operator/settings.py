"""Operator settings: one pydantic-settings object read once at start-up from `TFJOB_*` environment variables.

Example: `TFJOB_NAMESPACES=team-a,team-b TFJOB_ADDRESSING=loopback tfjob operator`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Addressing(StrEnum):
    """How TF_CONFIG addresses peers."""

    #: `<pod>.<job>.<ns>.svc[.<cluster domain>]:<port>` through the headless Service (a real cluster).
    DNS = "dns"
    #: `127.0.0.1:<distinct port per pod>`: every pod is a process on one machine (`tfjob local`).
    LOOPBACK = "loopback"


class GangBackendName(StrEnum):
    BUILTIN = "builtin"
    VOLCANO = "volcano"
    SCHEDULER_PLUGINS = "scheduler-plugins"
    KUEUE = "kueue"
    NONE = "none"


class OperatorSettings(BaseSettings):
    """Everything an operator deployment can tune; each field is the env var `TFJOB_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="TFJOB_", extra="ignore", frozen=True)

    namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Namespaces to watch, comma-separated; empty or '*' watches all namespaces.",
    )
    gang_backend: GangBackendName = Field(
        GangBackendName.NONE,
        description="Default gang backend; a job overrides it with the tfjob.dev/gang-backend annotation.",
    )
    scheduler_name: str | None = Field(
        None, description="schedulerName set on pods (e.g. volcano); empty keeps the template's or the default."
    )
    addressing: Addressing = Field(Addressing.DNS, description="dns (a cluster) or loopback (tfjob local).")
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
    terminating_timeout: float = Field(
        60.0, ge=0, description="Seconds past its grace period after which a pod stuck Terminating is force-deleted."
    )
    metrics_port: int = Field(9090, ge=0, le=65535, description="Port of the Prometheus /metrics endpoint; 0 disables.")
    metrics_host: str = Field("0.0.0.0", description="Address the /metrics endpoint binds to.")
    liveness_port: int = Field(
        8080, ge=0, le=65535, description="Port of kopf's liveness endpoint /healthz; 0 disables."
    )
    liveness_host: str = Field("0.0.0.0", description="Address the liveness endpoint binds to.")
    standalone: bool = Field(
        True, description="true: run alone; false: kopf peering (needs the KopfPeering CRD) so replicas take turns."
    )
    peering_name: str = Field("tfjob-operator", description="KopfPeering object shared by the operator replicas.")
    priority: int = Field(0, description="Peering priority: the highest-priority live replica is the active one.")
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR.")
    post_kopf_events: bool = Field(
        False, description="Let kopf post its own per-handler Events too (the operator posts lifecycle Events anyway)."
    )

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

    @field_validator("log_level")
    @classmethod
    def _upper_level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError(f"TFJOB_LOG_LEVEL: {value!r} is not one of DEBUG, INFO, WARNING, ERROR")
        return level

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces
