"""Pod fields kube-apiserver refuses beyond the schema, refused by the local API server with the same words:
a negative resource quantity, an image with surrounding whitespace."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import requests

pytestmark = pytest.mark.timeout(60)


def _pod(**container: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "main", "image": "busybox", **container}]}}


@pytest.mark.parametrize(("container", "cause"), [
    ({"resources": {"limits": {"nvidia.com/gpu": -1}}},
     {"field": "spec.containers[0].resources.limits[nvidia.com/gpu]", "reason": "FieldValueInvalid",
      "message": 'Invalid value: "-1": must be greater than or equal to 0'}),
    ({"resources": {"requests": {"memory": "-1Gi"}}},
     {"field": "spec.containers[0].resources.requests[memory]", "reason": "FieldValueInvalid",
      "message": 'Invalid value: "-1Gi": must be greater than or equal to 0'}),
    ({"image": " busybox"},
     {"field": "spec.containers[0].image", "reason": "FieldValueInvalid",
      "message": 'Invalid value: " busybox": must not have leading or trailing whitespace'}),
])
def test_a_pod_kube_apiserver_refuses_is_422_naming_the_field(http: Callable[..., requests.Response],
                                                               container: dict[str, Any],
                                                               cause: dict[str, str]) -> None:
    response = http("POST", "/api/v1/namespaces/default/pods", _pod(**container))
    assert response.status_code == 422, response.text
    body = json.loads(response.text)
    assert cause in body["details"]["causes"]
    assert f"{cause['field']}: {cause['message']}" in body["message"]


def test_zero_and_positive_quantities_are_stored(http: Callable[..., requests.Response]) -> None:
    response = http("POST", "/api/v1/namespaces/default/pods",
                    _pod(resources={"limits": {"nvidia.com/gpu": 0, "cpu": "500m"}}))
    assert response.status_code == 201, response.text
