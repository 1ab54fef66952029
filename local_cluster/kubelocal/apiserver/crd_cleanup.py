"""CRD cleanup, the one finalizer kube-apiserver itself runs (apiextensions' `customresourcecleanup`):
a deleted CRD's custom objects are deleted, then the finalizer is removed and the CRD goes.

Garbage collection of ownerReferences and the draining of deleted namespaces are not here: like on a
real cluster they are controllers beside the API server (`kubelocal.controllers`), talking to it over
HTTP. A bare `ApiServer` therefore leaves dependents in place and namespaces `Terminating`, as a
kube-apiserver without kube-controller-manager does."""

from __future__ import annotations

import contextlib
import copy
import logging
from typing import Any

from .admission import run_admitted
from .errors import ApiError
from .rest.context import RestContext
from .rest.delete import delete
from .rest.update import write_update
from .store import Event, Key
from .strategy import CRD_CLEANUP_FINALIZER, CRD_KEY

log = logging.getLogger(__name__)
BACKGROUND = {"propagationPolicy": "Background"}


class CrdCleanup:
    def __init__(self, ctx: RestContext) -> None:
        self.ctx = ctx

    def on_event(self, key: Key, event: Event) -> None:
        """Unserve a deleted CRD's kind; queue the cleanup of a CRD whose objects are going."""
        ctx = self.ctx
        meta = event.new.obj["metadata"]
        if ctx.stopping or event.type != "DELETED":
            return
        if key == CRD_KEY:
            ctx.registry.remove_crd(meta["name"])
            ctx.openapi_docs.clear()
        elif crd_name := next((rt.crd_name for rt in ctx.registry.by_uid_scope(*key) if rt.crd_name), None):
            ctx.gc_queue.put_nowait(("crd", crd_name))

    async def run(self) -> None:
        while True:
            job = await self.ctx.gc_queue.get()
            try:
                if job[0] == "crd":
                    await self._finalize_crd(job[1])
            except ApiError:
                pass
            except Exception:  # keep going; a bug shows up in the log and in tests that wait for cleanup
                log.exception("CRD cleanup failed on %r", job)

    async def _finalize_crd(self, crd_name: str) -> None:
        ctx = self.ctx
        crd = ctx.store.get(CRD_KEY, None, crd_name)
        if crd is None or not crd["metadata"].get("deletionTimestamp"):
            return
        key = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
        rt = ctx.rt_for_key(key)
        for stored in list(ctx.store.items(key)) if rt else []:
            m = stored.obj["metadata"]
            if rt and not m.get("deletionTimestamp"):
                # The storage's delete, as kube's finalizer calls it (DeleteCollection with every object
                # allowed): no admission, so no webhook can hold or refuse the CRD's deletion.
                with contextlib.suppress(ApiError):
                    delete(ctx, rt, m.get("namespace"), m["name"], BACKGROUND, admit=False)
        if rt is None or not list(ctx.store.items(key)):
            crd_rt = ctx.registry.get(CRD_KEY[0], "v1", CRD_KEY[1])
            assert crd_rt is not None

            def finalize() -> None:
                # kube's finalizer updates the CRD through the API, so admission applies; its webhook calls,
                # if any match, wait off the event loop (run_admitted), which keeps serving requests.
                current = ctx.store.get(CRD_KEY, None, crd_name)
                if current is None:
                    return
                new: dict[str, Any] = copy.deepcopy(current)
                new["metadata"]["finalizers"] = [
                    f for f in current["metadata"].get("finalizers") or [] if f != CRD_CLEANUP_FINALIZER
                ]
                write_update(ctx, crd_rt, current, new, None, {})

            await run_admitted(finalize)
