"""Where kube-apiserver 1.33+ is exact, so are we: LIST resourceVersion rules and consistent pages, option
validation, dry-run answers, DELETE bodies per kind, Status bodies, uid preconditions, time fields."""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest
import requests

from kubelocal.apiserver import ApiServerThread
from kubelocal.apiserver.timefields import go_parse_error

pytestmark = pytest.mark.timeout(60)
CMS = "/api/v1/namespaces/default/configmaps"


def names(body: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in body["items"]]


def make(core, *names_: str) -> list[str]:
    """Create ConfigMaps; returns their resourceVersions."""
    return [core.create_namespaced_config_map("default", {"metadata": {"name": n}}).metadata.resource_version
            for n in names_]


# --- LIST resourceVersion ---------------------------------------------------------------------------------


def test_list_exact_reads_the_collection_as_it_was_at_that_version(http, core):
    rv_a, _ = make(core, "a", "b")
    core.delete_namespaced_config_map("b", "default")
    core.patch_namespaced_config_map("a", "default", {"data": {"x": "1"}})
    body = http("GET", f"{CMS}?resourceVersion={rv_a}&resourceVersionMatch=Exact").json()
    assert (names(body), body["metadata"]["resourceVersion"]) == (["a"], rv_a)
    assert "data" not in body["items"][0]
    assert names(http("GET", CMS).json()) == ["a"]


def test_list_not_older_than_a_reached_version_reads_the_current_state(http, core):
    rv_a, _ = make(core, "a", "b")
    body = http("GET", f"{CMS}?resourceVersion={rv_a}&resourceVersionMatch=NotOlderThan").json()
    assert names(body) == ["a", "b"] and int(body["metadata"]["resourceVersion"]) > int(rv_a)


def test_list_exact_of_a_compacted_version_is_410():
    with ApiServerThread(watch_cache_size=2) as api:
        first = requests.post(api.url + CMS, json={"metadata": {"name": "a"}}, timeout=10).json()
        for n in "bcd":
            requests.post(api.url + CMS, json={"metadata": {"name": n}}, timeout=10)
        resp = requests.get(
            api.url + CMS,
            params={"resourceVersion": first["metadata"]["resourceVersion"], "resourceVersionMatch": "Exact"},
            timeout=10,
        )
    assert resp.status_code == 410
    assert resp.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": "The resourceVersion for the provided list is too old.", "reason": "Expired",
                           "code": 410}


def test_a_paged_list_continues_consistently_after_more_writes_than_the_watch_history_holds():
    """As etcd serves a revision until compaction (5 minutes), not only while the watch cache reaches back: an
    informer paging through 10,000 objects during a burst of writes must not get 410 on its next page."""
    with ApiServerThread(watch_cache_size=2) as api:
        for n in "abc":
            requests.post(api.url + CMS, json={"metadata": {"name": n}}, timeout=10)
        first = requests.get(api.url + CMS, params={"limit": 1}, timeout=10).json()
        requests.delete(api.url + CMS + "/b", timeout=10)
        for n in ("bb", "d", "e", "f"):  # the history (2 events) no longer reaches back to the first page
            requests.post(api.url + CMS, json={"metadata": {"name": n}}, timeout=10)
        rest = requests.get(api.url + CMS, params={"limit": 10, "continue": first["metadata"]["continue"]},
                            timeout=10)
    assert rest.status_code == 200, rest.text
    assert names(first) + names(rest.json()) == ["a", "b", "c"]
    assert rest.json()["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def test_list_of_a_future_version_is_504_too_large_resource_version(http, core):
    (rv,) = make(core, "a")
    future = int(rv) + 1000
    resp = http("GET", f"{CMS}?resourceVersion={future}&resourceVersionMatch=NotOlderThan")
    assert resp.status_code == 504
    status = resp.json()
    assert status["reason"] == "Timeout"
    assert status["message"].startswith(f"Timeout: Too large resource version: {future}, current: ")
    assert status["details"] == {"causes": [{"reason": "ResourceVersionTooLarge",
                                             "message": "Too large resource version"}], "retryAfterSeconds": 1}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("resourceVersionMatch=Exact",
         "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"),
        ("resourceVersion=0&resourceVersionMatch=Exact",
         'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'),
        ("resourceVersion=1&resourceVersionMatch=Newest",
         'resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", ""'),
    ],
)
def test_bad_list_options_are_422_naming_the_option(http, query, message):
    resp = http("GET", f"{CMS}?{query}")
    assert resp.status_code == 422
    assert resp.json()["message"] == f'ListOptions.meta.k8s.io "" is invalid: {message}'


def test_pages_are_a_consistent_snapshot_of_the_first_page(http, core):
    make(core, "a", "b", "c")
    first = http("GET", f"{CMS}?limit=1").json()
    core.delete_namespaced_config_map("c", "default")
    make(core, "bb")
    rest = http("GET", f"{CMS}?limit=10&continue={first['metadata']['continue']}").json()
    assert names(first) + names(rest) == ["a", "b", "c"]
    assert rest["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


# --- dry run ------------------------------------------------------------------------------------------------


def test_an_unknown_dry_run_value_is_refused_and_writes_nothing(http, core):
    resp = http("POST", f"{CMS}?dryRun=Some", {"metadata": {"name": "a"}})
    assert resp.status_code == 422
    assert resp.json()["message"] == (
        'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Some"}: supported values: "All"'
    )
    assert core.list_namespaced_config_map("default").items == []


def test_dry_run_answers_carry_resource_versions_as_real(http, core):
    created = http("POST", f"{CMS}?dryRun=All", {"metadata": {"name": "a"}}).json()
    assert "resourceVersion" not in created["metadata"] and created["metadata"]["uid"]
    (rv,) = make(core, "a")
    updated = http("PATCH", f"{CMS}/a?dryRun=All", {"data": {"x": "1"}}, "application/merge-patch+json").json()
    assert (updated["data"], updated["metadata"]["resourceVersion"]) == ({"x": "1"}, rv)
    assert core.read_namespaced_config_map("a", "default").data is None


# --- DELETE bodies and Status bodies --------------------------------------------------------------------------


def test_deleting_a_service_returns_the_service_and_a_configmap_a_status(http, core):
    core.create_namespaced_service("default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    deleted = core.delete_namespaced_service("s", "default")
    assert (deleted.kind, deleted.metadata.name) == ("Service", "s")
    (_,) = make(core, "c")
    uid = core.read_namespaced_config_map("c", "default").metadata.uid
    assert http("DELETE", f"{CMS}/c").json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": "c", "kind": "configmaps", "uid": uid},
    }


def test_409_and_404_bodies_are_kube_apiservers(http, core):
    make(core, "a")
    exists = http("POST", CMS, {"metadata": {"name": "a"}}).json()
    assert exists == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": 'configmaps "a" already exists', "reason": "AlreadyExists",
                      "details": {"name": "a", "kind": "configmaps"}, "code": 409}
    missing = http("GET", f"{CMS}/zz").json()
    assert missing["details"] == {"name": "zz", "kind": "configmaps"}
    stale = http("PUT", f"{CMS}/a", {"metadata": {"name": "a", "resourceVersion": "1"}}).json()
    assert stale["message"] == ('Operation cannot be fulfilled on configmaps "a": the object has been modified; '
                                "please apply your changes to the latest version and try again")


def test_status_bodies_are_kube_apiservers_byte_for_byte(http, core, client):
    """Go writes Status in its struct's order (details before code) and ends the body with a newline; the
    official client's create_from_yaml puts that text into its error, and its e2e suite compares it."""
    make(core, "a")
    with pytest.raises(kubernetes.client.ApiException) as failed:
        core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    assert failed.value.body == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        '"message":"configmaps \\"a\\" already exists","reason":"AlreadyExists",'
        '"details":{"name":"a","kind":"configmaps"},"code":409}\n')
    with pytest.raises(kubernetes.client.ApiException) as failed:
        kubernetes.client.AppsV1Api(client).read_namespaced_deployment("zz", "default")
    assert failed.value.body == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        '"message":"deployments.apps \\"zz\\" not found","reason":"NotFound",'
        '"details":{"name":"zz","group":"apps","kind":"deployments"},"code":404}\n')
    uid = core.read_namespaced_config_map("a", "default").metadata.uid
    assert http("DELETE", f"{CMS}/a").text == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success",'
        f'"details":{{"name":"a","kind":"configmaps","uid":"{uid}"}}}}\n')


def test_a_failed_json_patch_test_is_kube_apiservers_generic_422(http, core):
    make(core, "a")
    ops = [{"op": "test", "path": "/data/x", "value": "2"}]
    resp = http("PATCH", f"{CMS}/a", ops, "application/json-patch+json")
    assert (resp.status_code, resp.json()) == (422, {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the server rejected our request due to an error in our request", "reason": "Invalid",
        "details": {}, "code": 422})


def test_put_with_another_uid_is_a_409_precondition_failure(http, core):
    make(core, "a")
    real = core.read_namespaced_config_map("a", "default").metadata.uid
    resp = http("PUT", f"{CMS}/a", {"metadata": {"name": "a", "uid": "other"}, "data": {"x": "1"}})
    assert resp.status_code == 409
    assert resp.json()["message"] == (
        f'Operation cannot be fulfilled on configmaps "a": Precondition failed: UID in precondition: other, '
        f"UID in object meta: {real}"
    )
    assert core.read_namespaced_config_map("a", "default").data is None


# --- time fields ----------------------------------------------------------------------------------------------


def test_a_lease_with_an_unparseable_renew_time_is_400(http):
    lease = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me", "renewTime": "yesterday"}}
    resp = http("POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", lease)
    assert resp.status_code == 400
    assert resp.json()["message"] == (
        'Lease in version "v1" cannot be handled as a Lease: parsing time "yesterday" as '
        '"2006-01-02T15:04:05.000000Z07:00": cannot parse "yesterday" as "2006"'
    )


@pytest.mark.parametrize(
    ("value", "micro", "error"),
    [
        ("2026-01-01T00:00:00Z", False, None),
        ("2026-01-01T00:00:00.5+02:00", False, None),
        ("2026-01-01T00:00:00.123456Z", True, None),
        ("2026-01-01T00:00:00Z", True, 'cannot parse "Z" as ".000000"'),
        ("2026-01-01 00:00:00Z", False, 'cannot parse " 00:00:00Z" as "T"'),
        ("2026-13-01T00:00:00Z", False, "month out of range"),
        ("2026-01-01T00:00:00Zjunk", False, 'extra text: "junk"'),
    ],
)
def test_time_fields_parse_as_go_parses_them(value, micro, error):
    found = go_parse_error(value, micro)
    assert (found is None) if error is None else (found is not None and found.endswith(error))
