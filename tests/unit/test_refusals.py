"""Which refusals of a pod create fail the job (the user must fix something) and which the operator
retries (the cluster is about to change): one table."""

from __future__ import annotations

import pytest

from tfjob_operator.kube import not_authorized, refusal_is_permanent

PENDING_DEFAULT = ('pods "j-worker-0" is forbidden: error looking up service account team/default: '
                   'serviceaccount "default" not found')
RBAC_PODS = ('pods is forbidden: User "system:serviceaccount:tfjob-system:tfjob-operator" cannot create resource '
             '"pods" in API group "" in the namespace "team"')
MISSING_ROBOT = ('pods "j-worker-0" is forbidden: error looking up service account team/robot: '
                 'serviceaccount "robot" not found')


@pytest.mark.parametrize(("status", "message", "permanent"), [
    (422, 'Pod "j-worker-0" is invalid: spec.containers[0].image: Required value', True),
    (403, MISSING_ROBOT, True),
    (403, PENDING_DEFAULT, False),  # the namespace is new: kube-controller-manager is about to create it
    (403, RBAC_PODS, False),  # the operator's own RBAC: the job waits, saying so, until an admin grants it
    (403, 'pods "j-worker-0" is forbidden: exceeded quota: compute', True),
    (429, "too many requests", False),
    (500, "etcdserver: request timed out", False),
    (409, 'pods "j-worker-0" already exists', True),
])
def test_refusal_is_permanent(status: int, message: str, permanent: bool) -> None:
    assert refusal_is_permanent(status, message) is permanent


def test_the_authorizers_refusal_names_the_verb_resource_and_what_to_grant() -> None:
    assert not_authorized(403, RBAC_PODS) == (
        "forbidden: the operator (system:serviceaccount:tfjob-system:tfjob-operator) cannot create pods in namespace "
        "team: its ServiceAccount lacks 'create' on 'pods'; add it to the chart's ClusterRole (or the namespace's "
        "Role): re-applying the chart restores its rules (Helm 4: `helm upgrade --force-conflicts` if another tool "
        "edited them)")
    status = not_authorized(403, 'tfjobs.tfjob.dev "j" is forbidden: User "u" cannot patch resource "tfjobs/status" '
                                 'in API group "tfjob.dev" in the namespace "team"')
    assert status is not None and "lacks 'patch' on 'tfjobs/status' (API group tfjob.dev)" in status
    nodes = not_authorized(403, 'nodes is forbidden: User "u" cannot list resource "nodes" in API group "" at the '
                                'cluster scope')
    assert nodes is not None and "cannot list nodes at the cluster scope" in nodes


@pytest.mark.parametrize("status, message", [
    (403, MISSING_ROBOT), (403, 'pods "j-worker-0" is forbidden: exceeded quota: compute'),
    (403, 'pods "j-worker-0" is forbidden: violates PodSecurity "restricted:latest": privileged'),
    (422, RBAC_PODS),
])
def test_other_refusals_are_not_the_operators_permissions(status: int, message: str) -> None:
    assert not_authorized(status, message) is None
