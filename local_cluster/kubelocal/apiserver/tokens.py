"""ServiceAccount tokens: the TokenRequest API (`serviceaccounts/{name}/token`) issues them, and the bearer
token authenticator verifies them on every request, as kube-apiserver's `serviceaccount` authenticator does.

A token is a JWT (PyJWT, ES256) signed by the server's own key. It names the ServiceAccount (and, when bound,
the Pod or Secret) by name and uid; a token is valid while its signature, issuer, audience and expiry hold and
those objects still exist with the same uids (a deleted or recreated ServiceAccount or Pod ends it). The caller
becomes `system:serviceaccount:NS:NAME` in `system:serviceaccounts`, `system:serviceaccounts:NS` and
`system:authenticated`. Legacy token Secrets (`kubernetes.io/service-account-token`) are verified too when a
client brings one; the plane has no tokens controller that fills them.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import time
import uuid
from collections.abc import Mapping
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from . import objects
from .authorization import UserInfo
from .errors import ApiError, invalid, not_found
from .store import Store

ISSUER = "https://kubernetes.default.svc.cluster.local"
LEGACY_ISSUER = "kubernetes/serviceaccount"
#: kube-apiserver's --api-audiences default: the issuer.
AUDIENCES = (ISSUER,)
ALGORITHM = "ES256"
#: TokenRequest's default and bounds (ValidateTokenRequest).
DEFAULT_EXPIRATION = 3600
MIN_EXPIRATION = 600
MAX_EXPIRATION = 1 << 32
#: The kubelet asks for this lifetime; kube-apiserver (--service-account-extend-token-expiration, on by
#: default) makes such a pod-bound token last a year and marks when a client should have refreshed it.
KUBELET_EXPIRATION = 3607
EXTENDED_EXPIRATION = 365 * 24 * 3600
#: Clock skew allowed on exp/nbf (the serviceaccount authenticator's leeway).
LEEWAY = 60
#: Verified tokens remembered (kube-apiserver caches token authentication too).
VERIFIED_CACHE = 4096

SA = ("", "serviceaccounts")
PODS = ("", "pods")
SECRETS = ("", "secrets")
NODES = ("", "nodes")
LEGACY_TOKEN_TYPE = "kubernetes.io/service-account-token"
EXTRA = "authentication.kubernetes.io/"


class Unauthorized(ApiError):
    """401: the credentials were presented and are not valid. kube-apiserver's body says only "Unauthorized"
    (the reason stays in its log), so a client learns nothing about which check failed."""

    def __init__(self, why: str) -> None:
        super().__init__(401, "Unauthorized", reason="Unauthorized")
        self.why = why


class ServiceAccountTokens:
    """The server's token signer and verifier over its store."""

    def __init__(self, store: Store, *, key: ec.EllipticCurvePrivateKey | None = None,
                 audiences: tuple[str, ...] = AUDIENCES) -> None:
        self.store = store
        self.key = key or ec.generate_private_key(ec.SECP256R1())
        self.public_key = self.key.public_key()
        self.audiences = audiences
        der = self.public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        #: Claims of tokens whose signature was verified (PyJWT's decoding costs milliseconds a request).
        self._verified: dict[str, dict[str, Any]] = {}
        #: The key id kube-apiserver puts in each token's header: base64url(sha256(DER public key)).
        self.kid = base64.urlsafe_b64encode(hashlib.sha256(der).digest()).decode().rstrip("=")

    # -- issuing --------------------------------------------------------------------------------------------

    def sign(self, claims: Mapping[str, Any]) -> str:
        return jwt.encode(dict(claims), self.key, algorithm=ALGORITHM, headers={"kid": self.kid})

    def issue(self, namespace: str, account: Mapping[str, Any], *, audiences: tuple[str, ...] | None = None,
              expiration: int = DEFAULT_EXPIRATION, pod: Mapping[str, Any] | None = None,
              secret: Mapping[str, Any] | None = None, node: Mapping[str, Any] | None = None,
              now: float | None = None) -> tuple[str, int]:
        """A bound token for this ServiceAccount object and its expiry (seconds since the epoch)."""
        issued = int(time.time() if now is None else now)
        private: dict[str, Any] = {"namespace": namespace,
                                   "serviceaccount": _ref(account)}
        lifetime = expiration
        if pod is not None:
            private["pod"] = _ref(pod)
            if expiration == KUBELET_EXPIRATION:
                lifetime = EXTENDED_EXPIRATION
                private["warnafter"] = issued + expiration
        if secret is not None:
            private["secret"] = _ref(secret)
        if node is not None:
            private["node"] = _ref(node)
        name = account["metadata"]["name"]
        claims = {"aud": list(audiences or self.audiences), "exp": issued + lifetime, "iat": issued,
                  "iss": ISSUER, "jti": str(uuid.uuid4()), "kubernetes.io": private, "nbf": issued,
                  "sub": f"system:serviceaccount:{namespace}:{name}"}
        return self.sign(claims), issued + lifetime

    def legacy_token(self, secret: Mapping[str, Any], account: Mapping[str, Any]) -> str:
        """The token the tokens controller writes into a `kubernetes.io/service-account-token` Secret."""
        meta, sa_meta = secret["metadata"], account["metadata"]
        ns = meta["namespace"]
        return self.sign({
            "iss": LEGACY_ISSUER,
            "kubernetes.io/serviceaccount/namespace": ns,
            "kubernetes.io/serviceaccount/secret.name": meta["name"],
            "kubernetes.io/serviceaccount/service-account.name": sa_meta["name"],
            "kubernetes.io/serviceaccount/service-account.uid": sa_meta["uid"],
            "sub": f"system:serviceaccount:{ns}:{sa_meta['name']}",
        })

    # -- verifying ------------------------------------------------------------------------------------------

    def authenticate(self, token: str, *, now: float | None = None) -> UserInfo:
        """The caller a bearer token names, or Unauthorized."""
        at = time.time() if now is None else now
        claims = self._verified.get(token)
        if claims is None:
            claims = self._verify(token)
            self._verified[token] = claims
            if len(self._verified) > VERIFIED_CACHE:
                del self._verified[next(iter(self._verified))]  # the oldest
        legacy = claims.get("iss") == LEGACY_ISSUER
        if "exp" in claims and at > claims["exp"] + LEEWAY:
            raise Unauthorized("service account token has expired")
        if "nbf" in claims and at < claims["nbf"] - LEEWAY:
            raise Unauthorized("service account token is not valid yet")
        return self._legacy_user(token, claims) if legacy else self._bound_user(claims, at)

    def _verify(self, token: str) -> dict[str, Any]:
        """Signature, issuer, audience and required claims by PyJWT. The times are checked by the caller
        against its clock, with the leeway: a verified token's claims are cached, its times are not."""
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
            legacy = unverified.get("iss") == LEGACY_ISSUER
            claims: dict[str, Any] = jwt.decode(
                token, self.public_key, algorithms=[ALGORITHM], issuer=LEGACY_ISSUER if legacy else ISSUER,
                audience=None if legacy else list(self.audiences),
                options={"verify_exp": False, "verify_nbf": False, "verify_iat": False, "verify_aud": not legacy,
                         "require": ["iss", "sub"] if legacy else ["iss", "sub", "exp", "aud"]})
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"invalid service account token: {exc}") from None
        return claims

    def _bound_user(self, claims: Mapping[str, Any], now: float) -> UserInfo:
        private = claims.get("kubernetes.io")
        if not isinstance(private, Mapping):
            raise Unauthorized("token has no kubernetes.io claims")
        ns = private.get("namespace") or ""
        sa_ref = private.get("serviceaccount") or {}
        account = self._live(SA, ns, sa_ref, "service account")
        extra: dict[str, tuple[str, ...]] = {}
        pod_ref = private.get("pod")
        if pod_ref:
            pod = self._live(PODS, ns, pod_ref, "pod")
            deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
            if deleting and objects.parse_timestamp(deleting) < dt.datetime.fromtimestamp(now, dt.UTC):
                raise Unauthorized(f"pod {ns}/{pod_ref.get('name')} has been deleted")
            extra[EXTRA + "pod-name"] = (str(pod_ref.get("name")),)
            extra[EXTRA + "pod-uid"] = (str(pod_ref.get("uid")),)
        secret_ref = private.get("secret")
        if secret_ref:
            self._live(SECRETS, ns, secret_ref, "secret")
        node_ref = private.get("node")
        if node_ref:
            extra[EXTRA + "node-name"] = (str(node_ref.get("name")),)
            extra[EXTRA + "node-uid"] = (str(node_ref.get("uid")),)
        if claims.get("jti"):
            extra[EXTRA + "credential-id"] = (f"JTI={claims['jti']}",)
        return service_account_user(ns, account["metadata"]["name"], extra)

    def _legacy_user(self, token: str, claims: Mapping[str, Any]) -> UserInfo:
        prefix = "kubernetes.io/serviceaccount/"
        ns = str(claims.get(prefix + "namespace") or "")
        name = str(claims.get(prefix + "service-account.name") or "")
        account = self._live(SA, ns, {"name": name, "uid": claims.get(prefix + "service-account.uid")},
                             "service account")
        secret = self.store.get(SECRETS, ns, str(claims.get(prefix + "secret.name") or ""))
        if secret is None:
            raise Unauthorized("the token's secret no longer exists")
        stored = (secret.get("data") or {}).get("token")
        if stored is None or base64.b64decode(stored).decode() != token:
            raise Unauthorized("the token does not match its secret")
        return service_account_user(ns, account["metadata"]["name"])

    def _live(self, key: tuple[str, str], ns: str, ref: Mapping[str, Any], what: str) -> dict[str, Any]:
        obj = self.store.get(key, ns, str(ref.get("name") or ""))
        if obj is None:
            raise Unauthorized(f"{what} {ns}/{ref.get('name')} has been deleted")
        if ref.get("uid") and obj["metadata"].get("uid") != ref.get("uid"):
            raise Unauthorized(f"{what} UID ({ref.get('uid')}) does not match {what} in storage")
        return obj


def service_account_user(namespace: str, name: str, extra: Mapping[str, tuple[str, ...]] | None = None) -> UserInfo:
    return UserInfo(f"system:serviceaccount:{namespace}:{name}",
                    ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
                    dict(extra or {}))


def _ref(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    return {"name": meta.get("name", ""), "uid": meta.get("uid", "")}


# -- the TokenRequest subresource -----------------------------------------------------------------------------

_BOUND_KINDS = {"Pod": PODS, "Secret": SECRETS, "Node": NODES}


def token_request(tokens: ServiceAccountTokens, namespace: str, name: str, body: Any) -> dict[str, Any]:
    """POST serviceaccounts/{name}/token: the TokenRequest back with `status.token` (kube's TokenREST)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the body of the request was not a TokenRequest", reason="BadRequest")
    spec = dict(body.get("spec") or {})
    seconds = spec.get("expirationSeconds")
    seconds = DEFAULT_EXPIRATION if seconds is None else seconds
    if not isinstance(seconds, int) or seconds < MIN_EXPIRATION:
        raise _invalid(name, "spec.expirationSeconds",
                       f"Invalid value: {seconds}: may not specify a duration less than 10 minutes")
    if seconds > MAX_EXPIRATION:
        raise _invalid(name, "spec.expirationSeconds",
                       f"Invalid value: {seconds}: may not specify a duration larger than 2^32 seconds")
    account = tokens.store.get(SA, namespace, name)
    if account is None:
        raise not_found("", "serviceaccounts", name)
    bound: dict[str, Mapping[str, Any]] = {}
    ref = spec.get("boundObjectRef")
    if ref:
        kind = ref.get("kind")
        if kind not in _BOUND_KINDS:
            raise ApiError(400, f"cannot bind token to object of type {ref.get('apiVersion', 'v1')}, Kind={kind}",
                           reason="BadRequest")
        target = tokens.store.get(_BOUND_KINDS[kind], None if kind == "Node" else namespace, ref.get("name") or "")
        if target is None:
            raise not_found("", _BOUND_KINDS[kind][1], ref.get("name") or "")
        if ref.get("uid") and ref["uid"] != target["metadata"].get("uid"):
            raise ApiError(409, f'Operation cannot be fulfilled on {kind} "{ref.get("name")}": the UID in the bound '
                                f'object reference ({ref["uid"]}) does not match the UID in record. The object might '
                                "have been deleted and then recreated", reason="Conflict",
                           details={"name": ref.get("name"), "kind": kind})
        if kind == "Pod" and (target.get("spec") or {}).get("serviceAccountName") != name:
            raise ApiError(400, f'cannot bind token for serviceaccount "{name}" to pod running with different '
                                "serviceaccount name.", reason="BadRequest")
        bound[kind.lower()] = target
        node = (target.get("spec") or {}).get("nodeName") if kind == "Pod" else None
        if node and (node_obj := tokens.store.get(NODES, None, node)) is not None:
            bound["node"] = node_obj
        spec["boundObjectRef"] = {"kind": kind, "apiVersion": "v1", "name": ref.get("name"),
                                  "uid": target["metadata"].get("uid")}
    audiences = tuple(spec.get("audiences") or tokens.audiences)
    token, expires = tokens.issue(namespace, account, audiences=audiences, expiration=seconds, pod=bound.get("pod"),
                                  secret=bound.get("secret"), node=bound.get("node"))
    spec.update(audiences=list(audiences), expirationSeconds=seconds)
    return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": spec,
            "status": {"token": token,
                       "expirationTimestamp": objects.timestamp(dt.datetime.fromtimestamp(expires, dt.UTC))}}


def _invalid(name: str, field: str, message: str) -> ApiError:
    return invalid("TokenRequest", "authentication.k8s.io", name, [(field, "FieldValueInvalid", message)])
