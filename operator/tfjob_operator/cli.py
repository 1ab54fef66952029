"""The `tfjob` command: render, crd, operator, local, and job helpers."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tfjob_operator import constants
from tfjob_operator.api import TFJob
from tfjob_operator.render import RenderOptions, render
from tfjob_operator.validation import InvalidSpec, parse_tfjob

EXIT_INVALID = 2


def load_manifests(path: str) -> list[dict[str, Any]]:
    """YAML documents of a file (`-` for stdin), empty documents skipped."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]


def read_tfjobs(path: str, namespace: str | None = None) -> list[TFJob]:
    """Every TFJob in a file, validated; InvalidSpec carries all messages prefixed by the job's name."""
    jobs: list[TFJob] = []
    messages: list[str] = []
    for doc in load_manifests(path):
        if doc.get("apiVersion") == constants.KUBEFLOW_API_VERSION:
            print(f"note: {doc.get('metadata', {}).get('name')}: read {constants.KUBEFLOW_API_VERSION} "
                  f"as {constants.API_VERSION} (same fields)", file=sys.stderr)
        if namespace:
            doc.setdefault("metadata", {})["namespace"] = namespace
        try:
            jobs.append(parse_tfjob(doc))
        except InvalidSpec as exc:
            name = (doc.get("metadata") or {}).get("name") or "(unnamed)"
            messages.extend(f"{name}: {m}" for m in exc.messages)
    if messages:
        raise InvalidSpec(messages)
    if not jobs:
        raise InvalidSpec([f"{path}: no TFJob found in the file"])
    return jobs


def cmd_render(args: argparse.Namespace) -> int:
    try:
        jobs = read_tfjobs(args.file, args.namespace)
    except (InvalidSpec, OSError, yaml.YAMLError) as exc:
        return _refuse(exc)
    options = RenderOptions(cluster_domain=args.cluster_domain)
    objects: list[dict[str, Any]] = []
    for job in jobs:
        job.metadata.namespace = job.namespace
        objects.extend(render(job, options).objects())
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, width=110))
    return 0


def cmd_crd(args: argparse.Namespace) -> int:
    from tfjob_operator import crd

    sys.stdout.write(crd.to_yaml())
    return 0


def _refuse(exc: Exception) -> int:
    messages = exc.messages if isinstance(exc, InvalidSpec) else [str(exc)]
    print("error: the TFJob is invalid; nothing was created:", file=sys.stderr)
    for message in messages:
        print(f"  {message}", file=sys.stderr)
    return EXIT_INVALID


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tfjob", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("render", help="print the Service and Pods the operator would create (dry run)")
    p.add_argument("file", help="TFJob manifest (tfjob.dev/v1 or kubeflow.org/v1); - for stdin")
    p.add_argument("-n", "--namespace", help="namespace (default: the manifest's, else default)")
    p.add_argument("--cluster-domain", help="DNS suffix after <ns>.svc in TF_CONFIG, e.g. cluster.local")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("crd", help="print the TFJob CustomResourceDefinition")
    p.set_defaults(func=cmd_crd)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
