"""ServiceAccount admission: a pod without `serviceAccountName` runs as `default`, and a pod naming a
ServiceAccount that does not exist is refused with 403 Forbidden, as kube-apiserver refuses it."""

from __future__ import annotations

from ..admission import AdmissionRequest, Operation
from ..errors import ApiError
from ..store import Key, Store

SA_KEY: Key = ("", "serviceaccounts")


class ServiceAccountAdmission:
    name = "ServiceAccount"

    def __init__(self, store: Store) -> None:
        self._store = store

    def handles(self, request: AdmissionRequest) -> bool:
        return (request.operation is Operation.CREATE and request.rt.key == ("", "pods")
                and request.subresource is None and request.obj is not None)

    def admit(self, request: AdmissionRequest) -> None:
        assert request.obj is not None and request.namespace is not None
        spec = request.obj.setdefault("spec", {})
        account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        spec["serviceAccountName"] = account
        spec["serviceAccount"] = account
        if self._store.get(SA_KEY, request.namespace, account) is None:
            meta = request.obj.get("metadata") or {}
            name = meta.get("name") or meta.get("generateName") or ""
            raise ApiError(
                403,
                f'pods "{name}" is forbidden: error looking up service account {request.namespace}/{account}: '
                f'serviceaccount "{account}" not found',
                details={"name": name, "kind": "pods"},
            )
