"""A local image table: an image repository maps to an installed command (its ENTRYPOINT), so a container
that sets only `args` runs as it would from the image; `tfjob local` maps the chart's operator image."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from kubelocal.containers import ContainerConfigError, ImageDefaults, defaults_for, image_repository, process_spec
from tfjob_operator.client.local.image import OPERATOR_IMAGE, local_images

ROOT = Path(__file__).resolve().parents[2]
POD = {"metadata": {"name": "op-0", "namespace": "tfjob-system"}, "spec": {}}


@pytest.mark.parametrize(("image", "repository"), [
    ("ghcr.io/tfjob-operator/tfjob-operator:0.1.0", "ghcr.io/tfjob-operator/tfjob-operator"),
    ("ghcr.io/tfjob-operator/tfjob-operator@sha256:abc", "ghcr.io/tfjob-operator/tfjob-operator"),
    ("localhost:5000/op:dev", "localhost:5000/op"),
    ("busybox", "busybox"),
])
def test_image_repository_drops_tag_and_digest(image: str, repository: str) -> None:
    assert image_repository(image) == repository


def test_args_follow_the_mapped_entrypoint_and_a_command_replaces_it(tmp_path: Path) -> None:
    images = {"reg/op": ImageDefaults(entrypoint=("/usr/bin/op-cli",))}
    fallback = ImageDefaults()
    only_args = {"name": "c", "image": "reg/op:1", "args": ["operator", "--verbose"]}
    spec = process_spec(POD, only_args, {}, [], tmp_path, defaults_for("reg/op:1", images, fallback))
    assert spec.argv == ["/usr/bin/op-cli", "operator", "--verbose"]
    own = {**only_args, "command": ["python", "-c", "pass"], "args": []}
    spec = process_spec(POD, own, {}, [], tmp_path, defaults_for("reg/op:1", images, fallback))
    assert spec.argv == [sys.executable, "-c", "pass"]


def test_an_unmapped_image_without_command_names_the_image(tmp_path: Path) -> None:
    with pytest.raises(ContainerConfigError, match="knows no entrypoint for image 'other/img:2'"):
        process_spec(POD, {"name": "c", "image": "other/img:2"}, {}, [], tmp_path,
                     defaults_for("other/img:2", {}, ImageDefaults()))


def test_the_charts_operator_image_runs_the_installed_tfjob_command(tmp_path: Path) -> None:
    values = yaml.safe_load((ROOT / "deploy/helm/tfjob-operator/values.yaml").read_text())
    assert values["image"]["repository"] == OPERATOR_IMAGE
    container = {"name": "operator", "image": f"{OPERATOR_IMAGE}:0.1.0", "args": ["operator"]}
    spec = process_spec(POD, container, {}, [], tmp_path,
                        defaults_for(container["image"], local_images(), ImageDefaults()))
    assert spec.argv == [sys.executable, "-m", "tfjob_operator", "operator"]
