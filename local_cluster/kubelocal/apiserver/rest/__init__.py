"""REST storage: what each verb family does to the store (kube-apiserver's `registry/generic/registry.Store`).

`read` (get, list), `create`, `update` (replace, patch, and the write path they share), `delete`
(delete, deletecollection). Each takes a `RestContext` and returns objects; encoding them for the
wire is the handler's job. Every write passes the admission chain (`admission.py`).
"""

from .context import RestContext

__all__ = ["RestContext"]
