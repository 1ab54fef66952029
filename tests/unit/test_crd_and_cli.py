"""The generated CRD, the examples, Kubeflow compatibility, and `tfjob render` as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from shared_data import CRDS

from tfjob_operator.api import crd
from tfjob_operator.api.validation import InvalidSpec, parse_tfjob
from tfjob_operator.reconcile.render import render

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
KUBEFLOW_CRD = CRDS / "kubeflow.org_tfjobs.yaml"
K8S_VERSION = "1.37.0"


def tfjob_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfjob_operator", *args], input=stdin,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_checked_in_crd_matches_the_models() -> None:
    assert (ROOT / "crds" / "tfjob.yaml").read_text() == crd.to_yaml(), "run `make crd` and commit crds/tfjob.yaml"


def test_crd_is_a_valid_kubernetes_object() -> None:
    kubernetes_validate.validate(crd.generate(), K8S_VERSION, strict=True)


def _walk(schema: dict[str, Any], path: str = "") -> list[str]:
    """Structural-schema violations: every node typed (or preserving unknown fields); no $ref; no nullable."""
    problems = []
    if "$ref" in schema or "nullable" in schema:
        problems.append(path)
    if "type" not in schema and not schema.get("x-kubernetes-int-or-string") \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        problems.append(path or "(root)")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(path + " (properties and additionalProperties)")
    for name, prop in (schema.get("properties") or {}).items():
        problems += _walk(prop, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += _walk(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), dict):
        problems += _walk(schema["items"], f"{path}[]")
    return problems


def test_crd_schema_is_structural_and_documented() -> None:
    version = crd.generate()["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    assert _walk(schema) == []
    spec = schema["properties"]["spec"]["properties"]
    assert "Chief (or Master)" in spec["tfReplicaSpecs"]["description"]
    assert spec["runPolicy"]["properties"]["cleanPodPolicy"]["default"] == "Running"
    columns = version["additionalPrinterColumns"]
    assert [c["name"] for c in columns if not c.get("priority")] == ["State", "Workers", "Restarts", "Progress", "Age"]
    assert [c["name"] for c in columns if c.get("priority")] == ["Elastic"]  # kubectl get -o wide
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_renders_objects_valid_for_kubernetes(path: Path) -> None:
    for manifest in yaml.safe_load_all(path.read_text()):
        for obj in render(parse_tfjob(manifest)).objects():
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


#: Examples of what only tfjob.dev/v1 has (Kubeflow's TFJob has no elasticPolicy): the test below shows they are
#: refused as kubeflow.org/v1, naming the field.
TFJOB_DEV_ONLY = {"mnist-elastic"}
PORTABLE = [p for p in EXAMPLES if p.stem not in TFJOB_DEV_ONLY]


@pytest.mark.parametrize("path", PORTABLE, ids=[p.stem for p in PORTABLE])
def test_example_as_kubeflow_manifest_is_valid_for_both(path: Path) -> None:
    """Migration both ways: our examples with apiVersion kubeflow.org/v1 pass Kubeflow's own CRD schema."""
    kubeflow_crd = yaml.safe_load(KUBEFLOW_CRD.read_text())
    schema = kubeflow_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for manifest in yaml.safe_load_all(path.read_text()):
        manifest["apiVersion"] = "kubeflow.org/v1"
        jsonschema.validate(manifest, schema)
        parse_tfjob(manifest)


def test_an_elastic_example_as_a_kubeflow_manifest_is_refused_naming_the_field() -> None:
    for stem in TFJOB_DEV_ONLY:
        manifest = yaml.safe_load((ROOT / "examples" / f"{stem}.yaml").read_text())
        manifest["apiVersion"] = "kubeflow.org/v1"
        with pytest.raises(InvalidSpec, match=r"spec\.elasticPolicy: only on tfjob\.dev/v1"):
            parse_tfjob(manifest)


def test_render_prints_service_and_pods() -> None:
    result = tfjob_cli("render", "examples/ps-strategy.yaml", "-n", "team-a")
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Service", "ps-strategy"), ("Pod", "ps-strategy-chief-0"), ("Pod", "ps-strategy-worker-0"),
        ("Pod", "ps-strategy-worker-1"), ("Pod", "ps-strategy-ps-0")]
    assert {o["metadata"]["namespace"] for o in objects} == {"team-a"}


def test_render_refuses_invalid_job_on_stderr_and_prints_nothing() -> None:
    manifest = yaml.safe_load((ROOT / "examples" / "mnist-cpu.yaml").read_text())
    manifest["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = -2
    result = tfjob_cli("render", "-", stdin=yaml.safe_dump(manifest))
    assert result.returncode == 2
    assert result.stdout == ""
    assert "mnist-cpu: spec.tfReplicaSpecs.Worker.replicas: must be ≥ 0, got -2" in result.stderr


def test_render_reads_a_kubeflow_manifest_and_says_so() -> None:
    manifest = {
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "dist-mnist"},
        "spec": {"tfReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [
                {"name": "tensorflow", "image": "kubeflow/tf-dist-mnist-test:latest"}]}}},
            "Worker": {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [
                {"name": "tensorflow", "image": "kubeflow/tf-dist-mnist-test:latest"}]}}}}},
    }
    result = tfjob_cli("render", "-", stdin=yaml.safe_dump(manifest))
    assert result.returncode == 0, result.stderr
    assert "read kubeflow.org/v1 as tfjob.dev/v1" in result.stderr
    pods = [o for o in yaml.safe_load_all(result.stdout) if o["kind"] == "Pod"]
    assert [p["metadata"]["name"] for p in pods] == ["dist-mnist-chief-0", "dist-mnist-worker-0"]
    assert {p["metadata"]["ownerReferences"][0]["apiVersion"] for p in pods} == {"tfjob.dev/v1"}


def test_crd_command_prints_the_checked_in_crd() -> None:
    result = tfjob_cli("crd")
    assert result.returncode == 0
    assert result.stdout == (ROOT / "crds" / "tfjob.yaml").read_text()


def test_render_passes_other_kinds_through_first_and_says_so() -> None:
    """examples/kubeflow/mnist-mwms.yaml: a ConfigMap (the script), the workers' claim and the TFJob in one file."""
    path = ROOT / "examples" / "kubeflow" / "mnist-mwms.yaml"
    result = tfjob_cli("render", str(path))
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ConfigMap", "mnist-mwms-script"), ("PersistentVolumeClaim", "strategy-volume"), ("Service", "mnist-mwms"),
        ("Pod", "mnist-mwms-worker-0"), ("Pod", "mnist-mwms-worker-1")]
    assert objects[0] == next(yaml.safe_load_all(path.read_text()))  # as written, its script a block again
    assert "  train.py: |\n    import argparse\n" in result.stdout
    assert "note: ConfigMap mnist-mwms-script is not a TFJob: printed as it is" in result.stderr
    assert "note: PersistentVolumeClaim strategy-volume is not a TFJob: printed as it is" in result.stderr


def test_render_refuses_another_kind_without_a_name_and_a_tfjob_dev_kind_it_does_not_know() -> None:
    good = (ROOT / "examples" / "mnist-cpu.yaml").read_text()
    result = tfjob_cli("render", "-", stdin=good + "---\napiVersion: v1\nkind: ConfigMap\ndata: {a: b}\n---\n"
                       "apiVersion: tfjob.dev/v1\nkind: TFJobs\nmetadata: {name: typo}\n")
    assert (result.returncode, result.stdout) == (2, "")
    assert "(document 2): metadata.name: required (give the ConfigMap a name)" in result.stderr
    assert "typo: kind: 'TFJobs' is not a TFJob" in result.stderr


def test_submit_says_it_creates_tfjobs_only_for_a_file_with_other_kinds() -> None:
    result = tfjob_cli("submit", str(ROOT / "examples" / "kubeflow" / "mnist-mwms.yaml"))
    assert result.returncode == 2 and "mnist-mwms-script: kind: 'ConfigMap' is not a TFJob" in result.stderr
    assert "create the others with kubectl apply -f" in result.stderr


def test_the_crds_image_pattern_refuses_exactly_what_go_trims() -> None:
    """A pod's image is refused by kube-apiserver when strings.TrimSpace changes it or leaves nothing: the
    pattern's class is Go's unicode.IsSpace (podschema.GO_SPACE), read as Go reads it."""
    from kubelocal.apiserver.schema import go_regex
    from tfjob_operator.api.podschema import GO_SPACE

    pattern = go_regex(crd.IMAGE_PATTERN)
    for c in map(chr, range(0x3100)):
        assert pattern.search(f"tf{c}1"), repr(c)
        assert (pattern.search(c) is None) == (c in GO_SPACE) == (pattern.search(f"tf:1{c}") is None), repr(c)


QUANTITIES = ["0", "1", "-1", "-0", "+", "-", ".", "-.", "1.", ".5", "500m", "-500m", "4Gi", "-4Gi", "1e3", "1E3",
              "-1e-3", "1e", "1E", "1Ei", "1K", "1ki", "1.5.5", " 1", "1 ", "abc", "e3", "-e3", "0.0000000001",
              "-0.0000000001", "-0.000Ki", "1e-400", "-1e-400", "++1", "+-1", "1e+5", "99999999999999999999999"]


@pytest.mark.parametrize("value", QUANTITIES)
def test_the_crds_quantity_pattern_is_parse_quantity_not_negative(value: str) -> None:
    """A resource quantity in a pod template: the CRD's pattern accepts exactly the quantities Kubernetes'
    ParseQuantity reads as ≥ 0 (kubelocal.apiserver.quantity, its port of that code)."""
    from kubelocal.apiserver import quantity
    from kubelocal.apiserver.schema import go_regex

    schema = crd.generate()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["tfReplicaSpecs"]["additionalProperties"]["properties"]["template"]["properties"]["spec"][
        "properties"]["overhead"]["additionalProperties"]
    accepted = len(value) >= schema["minLength"] and bool(go_regex(schema["pattern"]).search(value))
    assert accepted == (quantity.is_quantity(value) and quantity.parse(value) >= 0)


def test_the_crd_files_tfjob_local_installs_are_the_repositorys() -> None:
    """`tfjob local` installs the CRD from the checkout it runs from (and Kubeflow's, with --kubeflow)."""
    root = Path(__file__).resolve().parents[2]
    assert crd.CRD_PATH == root / "crds" / "tfjob.yaml" and crd.CRD_PATH.is_file()
    assert crd.KUBEFLOW_CRD_PATH == root / "third_party" / "crds" / "kubeflow.org_tfjobs.yaml"
    assert crd.KUBEFLOW_CRD_PATH.is_file()
