"""`--nodes` specs become Node objects with the declared capacity, labels and taints."""

import pytest

from kubelocal.nodes import DEFAULT_CPU, DEFAULT_NODES, NodeSpecError, describe_nodes, parse_node_spec, split_labels
from tfjob_operator.gang.resources import GPU


def names(spec: str) -> list[str]:
    return [n["metadata"]["name"] for n in parse_node_spec(spec)]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("2x{gpu:4,cpu:16,memory:64Gi}", ["node-0", "node-1"]),
        ("node-a{cpu:8};node-b{gpu:2}", ["node-a", "node-b"]),
        ("gpu{gpu:1}", ["gpu"]),
        ("3xgpu{gpu:1}", ["gpu-0", "gpu-1", "gpu-2"]),
        ("{cpu:1};{cpu:2}; 2x{cpu:3}", ["node-0", "node-1", "node-2", "node-3"]),
    ],
)
def test_node_names_follow_counts_and_given_names(spec: str, expected: list[str]) -> None:
    assert names(spec) == expected


def test_capacity_and_allocatable_hold_the_declared_quantities() -> None:
    node = parse_node_spec("2x{gpu:4,cpu:16,memory:64Gi}")[0]
    expected = {"cpu": "16", "memory": "64Gi", GPU: "4", "pods": "1000"}
    assert node["status"]["capacity"] == expected
    assert node["status"]["allocatable"] == expected


def test_unset_quantities_take_the_local_defaults_and_no_gpu() -> None:
    node = parse_node_spec("{}")[0]
    assert node["status"]["capacity"] == {"cpu": str(DEFAULT_CPU), "memory": "64Gi", "pods": "1000"}


def test_labels_and_taints_are_declared_on_the_node() -> None:
    node = parse_node_spec("b{gpu:2,taint:gpu=true:NoSchedule,label:zone=a,label:tier=x,taint:dedicated:NoExecute}")[0]
    labels = node["metadata"]["labels"]
    assert labels["zone"] == "a" and labels["tier"] == "x"
    assert labels["kubernetes.io/hostname"] == "b"
    assert node["spec"]["taints"] == [
        {"key": "gpu", "value": "true", "effect": "NoSchedule"},
        {"key": "dedicated", "effect": "NoExecute"},
    ]


def test_default_nodes_is_one_node_with_four_cpus_per_core() -> None:
    nodes = parse_node_spec(DEFAULT_NODES)
    assert len(nodes) == 1
    assert nodes[0]["status"]["capacity"]["cpu"] == str(DEFAULT_CPU)
    assert nodes[0]["status"]["capacity"]["memory"] == "64Gi"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "declares no node"),
        ("2x[gpu:4]", "expected [COUNTx][NAME]{key:value,...}"),
        ("{gpus:4}", "unknown key 'gpus'"),
        ("{cpu:lots}", "cpu:lots is not a quantity"),
        ("{gpu:1.5}", "must be a non-negative whole number"),
        ("{cpu}", "needs a value"),
        ("{taint:gpu=true:Sometimes}", "taint:KEY=VALUE:EFFECT"),
        ("{label:zone}", "label:KEY=VALUE"),
        ("a{cpu:1};a{cpu:2}", "repeated: a"),
        ("0x{cpu:1}", "at least 1"),
    ],
)
def test_bad_specs_are_refused_with_what_to_write(spec: str, message: str) -> None:
    with pytest.raises(NodeSpecError, match="--nodes") as err:
        parse_node_spec(spec)
    assert message in str(err.value)


def test_description_lists_capacity_custom_labels_and_taints() -> None:
    text = describe_nodes(parse_node_spec("b{gpu:2,cpu:8,memory:32Gi,taint:gpu=true:NoSchedule,label:zone=a}"))
    assert text == "b: cpu=8 memory=32Gi nvidia.com/gpu=2 labels zone=a taints gpu=true:NoSchedule"


@pytest.mark.parametrize(("label", "own"), [
    ("kubernetes.io/hostname", True), ("topology.kubernetes.io/zone", True), ("kubelocal.dev/sim", True),
    ("node.kubernetes.io/instance-type", True), ("team.kubelet.kubernetes.io/x", True), ("zone", True),
    ("node-role.kubernetes.io/worker", False), ("example.k8s.io/x", False),
    ("node-restriction.kubernetes.io/pool", False), ("a.node-restriction.kubernetes.io/pool", False),
])
def test_a_kubelet_sets_only_the_labels_node_restriction_lets_it(label: str, own: bool) -> None:
    mine, administered = split_labels({label: "v"})
    assert (label in mine, label in administered) == (own, not own)
