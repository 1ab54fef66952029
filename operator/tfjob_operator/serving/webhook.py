"""Admission webhooks for TFJobs: refuse invalid jobs at `kubectl apply`, fill in defaults.

The validating webhook answers with the same field-named messages as `validation.parse_tfjob` (so the
words are the same whether a job is refused at apply time or marked Failed/InvalidSpec later). The mutating
webhook adds what the schema and `apply_defaults` would, and never rewrites what the user wrote.

Certificates: with cert-manager the chart mounts `tls.crt`/`tls.key` from a Secret and owns the webhook
configurations. Otherwise the operator makes a self-signed certificate at start and kopf's managed mode
writes the CA and endpoints into configurations named `config_name`. kopf's own self-signed path needs
certbuilder/oscrypto, which cannot read OpenSSL >= 3.0.10's version, hence `cryptography` here.

failurePolicy: `Fail` (default) refuses TFJob writes while no webhook answers (e.g. during an operator
restart); `Ignore` admits them and the operator marks invalid jobs Failed with reason InvalidSpec.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf

from tfjob_operator.api import REPLICA_TYPE_ALIASES, apigroups
from tfjob_operator.api.apigroups import KubeflowApi
from tfjob_operator.api.validation import InvalidSpec, parse_tfjob
from tfjob_operator.gang.backends import parse_job

#: Handler ids; kopf serves each at `/<id>` and the chart's configurations point there.
VALIDATE_ID = "validate-tfjob"
MUTATE_ID = "mutate-tfjob"
#: Kubeflow's `kubeflow.org/v1` TFJobs have their own webhooks (a webhook's name is its handler id).
KUBEFLOW_SUFFIX = "-kubeflow"
FAILURE_POLICIES = ("Fail", "Ignore")


def handler_ids(group: apigroups.ApiGroup) -> tuple[str, str]:
    """(validating, mutating) handler ids, hence webhook paths, for one served API."""
    suffix = KUBEFLOW_SUFFIX if group.kubeflow else ""
    return VALIDATE_ID + suffix, MUTATE_ID + suffix


def admission_messages(obj: Mapping[str, Any]) -> list[str]:
    """Why a TFJob must be refused (field-named, as parse_tfjob says it, and a gang backend that does not exist);
    empty when it is valid."""
    try:
        parse_job(obj)
    except InvalidSpec as exc:
        return exc.messages
    return []


def with_defaults(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The TFJob with schema defaults and `apply_defaults` filled into its spec; an invalid job is returned as is."""
    out = {k: _copy(v) for k, v in obj.items()}
    try:
        job = parse_tfjob(obj)
    except InvalidSpec:
        return out
    defaults = job.model_dump(mode="json", exclude_none=True, by_alias=True)["spec"]
    spec = out.setdefault("spec", {})
    _fill(spec, defaults, at_replica_specs=False)
    return out


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _fill(target: dict[str, Any], defaults: Mapping[str, Any], *, at_replica_specs: bool) -> None:
    """Add to `target` what `defaults` has and it lacks; never change a value that is there."""
    for key, value in target.items():
        # Replica-type keys keep the user's spelling (Master, worker); defaults are keyed Chief, Worker.
        default_key = REPLICA_TYPE_ALIASES[key.lower()].value if at_replica_specs and key.lower() in (
            REPLICA_TYPE_ALIASES) else key
        if default_key not in defaults:
            continue
        default = defaults[default_key]
        if isinstance(value, dict) and isinstance(default, Mapping):
            _fill(value, default, at_replica_specs=(key == "tfReplicaSpecs"))
        elif isinstance(value, list) and isinstance(default, list):
            _fill_list(value, default)
    if not at_replica_specs:
        for key, default in defaults.items():
            if key not in target:
                target[key] = _copy(default)


def _fill_list(target: list[Any], defaults: list[Any]) -> None:
    for item, default in zip(target, defaults, strict=False):
        if isinstance(item, dict) and isinstance(default, Mapping):
            _fill(item, default, at_replica_specs=False)
    if len(defaults) > len(target) and defaults[: len(target)] == target:
        target.extend(_copy(d) for d in defaults[len(target):])  # e.g. the tfjob-port appended to ports


def ours(obj: Mapping[str, Any], kubeflow_api: KubeflowApi) -> bool:
    """Does the webhook speak for this job? Jobs another controller manages are admitted untouched."""
    return apigroups.managed_here(apigroups.group_of(obj), apigroups.manager_of(obj), kubeflow_api)


def register(registry: kopf.OperatorRegistry | None = None, *, failure_policy: str = "Fail",
             kubeflow_api: KubeflowApi = KubeflowApi.OFF) -> None:
    """Register the validating and mutating handlers for every served TFJob API (in kopf's default registry
    unless one is given)."""
    if failure_policy not in FAILURE_POLICIES:
        raise ValueError(f"webhook failure policy: {failure_policy!r} is not one of {FAILURE_POLICIES}")
    common: dict[str, Any] = {
        "operations": ["CREATE", "UPDATE"],
        "ignore_failures": failure_policy == "Ignore",
        "registry": registry,
    }

    def validate_tfjob(body: kopf.Body, **_: Any) -> None:
        obj = dict(body)
        messages = admission_messages(obj) if ours(obj, kubeflow_api) else []
        if messages:
            raise kopf.AdmissionError("the TFJob is invalid: " + "; ".join(messages), code=422)

    def default_tfjob(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        if not ours(dict(body), kubeflow_api):
            return

        def fill(raw: Any) -> None:
            raw["spec"] = with_defaults(raw).get("spec", {})

        patch.fns.append(fill)

    for group in apigroups.served_groups(kubeflow_api):
        validate_id, mutate_id = handler_ids(group)
        kopf.on.validate(group.group, group.version, group.plural, id=validate_id, **common)(validate_tfjob)
        kopf.on.mutate(group.group, group.version, group.plural, id=mutate_id, **common)(default_tfjob)


# --- the server -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WebhookOptions:
    """Where and how the admission server listens (from the operator settings / the chart's TFJOB_WEBHOOK_*)."""

    port: int = 9443
    addr: str = "0.0.0.0"
    #: The Service in front of the operator; the API server reaches the webhook through it.
    service_name: str | None = None
    service_namespace: str | None = None
    #: cert-manager mode: a directory holding tls.crt and tls.key (and ca.crt); the chart owns the configurations.
    cert_dir: Path | None = None
    #: Self-signed mode: name of the Validating/MutatingWebhookConfiguration the operator fills in.
    config_name: str | None = None
    #: Plain HTTP (tests and local debugging only; the API server requires HTTPS).
    insecure: bool = False


class ServiceWebhookServer(kopf.WebhookServer):
    """kopf's server, but the webhook configurations reach it through a Service instead of a URL."""

    def __init__(self, *, service_name: str, service_namespace: str, service_port: int = 443,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.service = {"name": service_name, "namespace": service_namespace, "port": service_port, "path": ""}

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async for client_config in super().__call__(fn):
            config = {k: v for k, v in client_config.items() if k != "url"}
            config["service"] = dict(self.service)
            yield config


def self_signed_certificate(hostnames: list[str], *, days: int = 3650) -> tuple[bytes, bytes]:
    """A self-signed CA-capable server certificate for `hostnames` (DNS names or IPs) and its key, in PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])])
    sans: list[x509.GeneralName] = []
    for host in dict.fromkeys(hostnames):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def service_hostnames(service_name: str | None, namespace: str | None) -> list[str]:
    """Names the API server may use for the webhook Service, plus loopback."""
    names = []
    if service_name and namespace:
        names += [f"{service_name}.{namespace}.svc", f"{service_name}.{namespace}.svc.cluster.local",
                  f"{service_name}.{namespace}", service_name]
    return [*names, "localhost", "127.0.0.1"]


def build_server(options: WebhookOptions, *, workdir: Path | None = None) -> kopf.WebhookServer:
    """The admission server for `options`: mounted certificates, a fresh self-signed one, or plain HTTP."""
    kwargs: dict[str, Any] = {"addr": options.addr, "port": options.port}
    if options.insecure:
        kwargs["insecure"] = True
    elif options.cert_dir is not None:
        kwargs["certfile"] = options.cert_dir / "tls.crt"
        kwargs["pkeyfile"] = options.cert_dir / "tls.key"
        if (options.cert_dir / "ca.crt").exists():
            kwargs["cafile"] = options.cert_dir / "ca.crt"
    else:
        directory = Path(tempfile.mkdtemp(prefix="tfjob-webhook-", dir=workdir))
        cert, key = self_signed_certificate(service_hostnames(options.service_name, options.service_namespace))
        (directory / "tls.crt").write_bytes(cert)
        (directory / "tls.key").write_bytes(key)
        (directory / "tls.key").chmod(0o600)
        kwargs["certfile"] = directory / "tls.crt"
        kwargs["pkeyfile"] = directory / "tls.key"
    if options.service_name and options.service_namespace:
        return ServiceWebhookServer(service_name=options.service_name,
                                    service_namespace=options.service_namespace, **kwargs)
    return kopf.WebhookServer(**kwargs)


def configure_admission(settings: kopf.OperatorSettings, options: WebhookOptions, *,
                        workdir: Path | None = None) -> kopf.WebhookServer:
    """Point kopf's admission at our server; in self-signed mode let kopf manage the named configurations."""
    server = build_server(options, workdir=workdir)
    settings.admission.server = server
    settings.admission.managed = options.config_name if options.cert_dir is None else None
    return server
