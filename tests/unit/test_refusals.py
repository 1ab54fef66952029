"""Which refusals of a pod create fail the job (the user must fix something) and which the operator
retries (the cluster is about to change): one table."""

from __future__ import annotations

import pytest

from tfjob_operator.kube import refusal_is_permanent

PENDING_DEFAULT = ('pods "j-worker-0" is forbidden: error looking up service account team/default: '
                   'serviceaccount "default" not found')
MISSING_ROBOT = ('pods "j-worker-0" is forbidden: error looking up service account team/robot: '
                 'serviceaccount "robot" not found')


@pytest.mark.parametrize(("status", "message", "permanent"), [
    (422, 'Pod "j-worker-0" is invalid: spec.containers[0].image: Required value', True),
    (403, MISSING_ROBOT, True),
    (403, PENDING_DEFAULT, False),  # the namespace is new: kube-controller-manager is about to create it
    (403, 'pods "j-worker-0" is forbidden: exceeded quota: compute', True),
    (429, "too many requests", False),
    (500, "etcdserver: request timed out", False),
    (409, 'pods "j-worker-0" already exists', True),
])
def test_refusal_is_permanent(status: int, message: str, permanent: bool) -> None:
    assert refusal_is_permanent(status, message) is permanent
