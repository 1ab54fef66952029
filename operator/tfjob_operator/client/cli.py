"""The `tfjob` command: render, crd, operator, local, and job helpers."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tfjob_operator.api import TFJob, constants, kubeyaml
from tfjob_operator.api.limits import MAX_DEPTH
from tfjob_operator.api.validation import InvalidSpec, parse_tfjob
from tfjob_operator.gang.backends import backend_for, backend_names, parse_job, unknown_backend
from tfjob_operator.reconcile.render import RenderOptions, render

EXIT_INVALID = 2
#: Exit code of the job helpers when the cluster refused or could not be reached.
EXIT_CLUSTER = 1
#: Exit code of a command whose libraries this installation lacks (`tfjob local` without the extra `[local]`).
EXIT_NOT_INSTALLED = 1
#: Largest manifest file read; the API server refuses request bodies over 3 MiB anyway.
MAX_FILE_BYTES = 3 * 1024 * 1024


def load_manifests(path: str) -> list[Any]:
    """YAML documents of a file (`-` for stdin), empty documents skipped; InvalidSpec when it cannot be read."""
    return [doc for doc in parse_manifests(*read_manifest_text(path)) if doc is not None]


def read_manifest_text(path: str) -> tuple[str, str]:
    """(the text of a file, `-` for stdin; how messages name it); InvalidSpec when it cannot be read as text."""
    where = "(stdin)" if path == "-" else path
    try:
        with (open(sys.stdin.fileno(), "rb", closefd=False) if path == "-" else open(path, "rb")) as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InvalidSpec([f"{where}: cannot read the file ({exc.strerror or exc})"]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise InvalidSpec([f"{where}: larger than {MAX_FILE_BYTES // 2**20} MiB (the API server's request limit)"])
    try:
        return raw.decode("utf-8"), where
    except UnicodeDecodeError as exc:
        raise InvalidSpec([f"{where}: not UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x}); "
                           "save the file as UTF-8"]) from None


def parse_manifests(text: str, where: str) -> list[Any]:
    """Every YAML document of `text`, empty ones as None, read as kubectl reads them; InvalidSpec naming the line."""
    try:
        if _nested_deeper_than(text, MAX_DEPTH):
            raise RecursionError  # refused before PyYAML's recursive composer meets it
        return kubeyaml.load_all(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidSpec([f"{where}: not valid YAML{at}: {problem}"]) from None
    except RecursionError:
        raise InvalidSpec([f"{where}: nested too deeply to read (a TFJob needs about 15 levels)"]) from None


_OPENS = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken, yaml.FlowMappingStartToken,
          yaml.FlowSequenceStartToken)
_CLOSES = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


def _nested_deeper_than(text: str, limit: int) -> bool:
    """Whether collections nest deeper than `limit`, from PyYAML's scanner, which is iterative: whether the
    recursive composer could read the text depends on the interpreter's recursion limit, this does not."""
    depth = 0
    for token in yaml.scan(text):
        if isinstance(token, _OPENS):
            depth += 1
            if depth > limit:
                return True
        elif isinstance(token, _CLOSES):
            depth -= 1
    return False


def _doc_name(doc: Any, index: int) -> str:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    # A name that is not one (blank, odd characters) would make a confusing prefix: the document's number is clearer.
    readable = isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,62}", name)
    return str(name) if readable else f"(document {index + 1})"


@dataclass
class Manifests:
    """A file's TFJobs, validated, and its objects of other kinds (a ConfigMap with the script), as written."""

    jobs: list[TFJob]
    others: list[dict[str, Any]]


def is_tfjob_document(doc: dict[str, Any]) -> bool:
    """A document read as a TFJob (and refused if it is not one): kind TFJob, no kind, or a tfjob.dev apiVersion."""
    kind, api_version = doc.get("kind"), doc.get("apiVersion")
    return (not isinstance(kind, str) or not kind or kind == constants.KIND
            or (isinstance(api_version, str) and api_version.split("/")[0] == constants.GROUP))


def _other_kind_messages(name: str, doc: dict[str, Any]) -> list[str]:
    # What kubectl itself refuses before sending: no apiVersion, no name.
    meta = doc.get("metadata")
    messages = []
    if not isinstance(doc.get("apiVersion"), str) or not doc["apiVersion"]:
        messages.append(f"{name}: apiVersion: required (a {doc['kind']} needs one, e.g. v1)")
    if not isinstance(meta, dict) or not (isinstance(meta.get("name"), str) and meta["name"]):
        messages.append(f"{name}: metadata.name: required (give the {doc['kind']} a name)")
    return messages


def read_manifests(path: str, namespace: str | None = None) -> Manifests:
    """Every document of a file: TFJobs validated, other kinds kept as kubectl would send them; InvalidSpec
    carries all messages prefixed by the document's name."""
    jobs: list[TFJob] = []
    others: list[dict[str, Any]] = []
    messages: list[str] = []
    seen: dict[tuple[str, str], int] = {}
    for index, doc in enumerate(load_manifests(path)):
        name = _doc_name(doc, index)
        if not isinstance(doc, dict):
            what = type(doc).__name__.replace("str", "string").replace("dict", "mapping")
            messages.append(f"{name}: a TFJob must be a YAML mapping, got a {what}")
            continue
        if not is_tfjob_document(doc):
            messages.extend(problems := _other_kind_messages(name, doc))
            if not problems:
                others.append(doc)
            continue
        if doc.get("apiVersion") == constants.KUBEFLOW_API_VERSION:
            print(f"note: {name}: read {constants.KUBEFLOW_API_VERSION} "
                  f"as {constants.API_VERSION} (same fields)", file=sys.stderr)
        if namespace and isinstance(doc.get("metadata", {}), dict):
            doc.setdefault("metadata", {})["namespace"] = namespace
        try:
            job = parse_job(doc)
            job.apiVersion = constants.API_VERSION
        except InvalidSpec as exc:
            messages.extend(f"{name}: {m}" for m in exc.messages)
            continue
        key = (job.namespace, job.name)
        if key in seen:
            messages.append(f"{name}: metadata.name: documents {seen[key] + 1} and {index + 1} are the same TFJob "
                            f"{job.namespace}/{job.name} (keep one, or rename one)")
            continue
        seen[key] = index
        jobs.append(job)
    if messages:
        raise InvalidSpec(messages)
    if not jobs:
        raise InvalidSpec([f"{path}: no TFJob found in the file"])
    return Manifests(jobs, others)


def read_tfjobs(path: str, namespace: str | None = None) -> list[TFJob]:
    """Every TFJob in a file, validated, for the commands that take TFJobs only (`tfjob submit`)."""
    found = read_manifests(path, namespace)
    if found.others:
        raise InvalidSpec([f"{_doc_name(doc, 0)}: kind: {doc['kind']!r} is not a TFJob; this command creates "
                           "TFJobs only (create the others with kubectl apply -f)" for doc in found.others])
    return found.jobs


def cmd_render(args: argparse.Namespace) -> int:
    try:
        found = read_manifests(args.file, args.namespace)
    except InvalidSpec as exc:
        return _refuse(exc)
    jobs = found.jobs
    if args.gang is not None:
        if args.gang not in backend_names():
            print(f"error: {unknown_backend('--gang', args.gang)}", file=sys.stderr)
            return EXIT_INVALID
    options = RenderOptions(cluster_domain=args.cluster_domain)
    objects: list[dict[str, Any]] = list(found.others)  # first, as `tfjob local` creates them before the jobs
    for index, doc in enumerate(found.others):
        print(f"note: {doc['kind']} {_doc_name(doc, index)} is not a TFJob: printed as it is, before the "
              "rendered objects", file=sys.stderr)
    for job in jobs:
        job.metadata.namespace = job.namespace
        rendered = render(job, options)
        if args.gang is None:
            objects.extend(rendered.objects())
            continue
        from tfjob_operator.gang.base import ChecksJobs, GangBackendError, apply_backend

        try:
            # --gang plays the operator setting: the job's own annotation still wins, as in the operator.
            backend = backend_for(job, args.gang)
            problems = backend.validate(job) if isinstance(backend, ChecksJobs) else []
            if problems:
                raise InvalidSpec([f"{job.name}: {m}" for m in problems])
        except (GangBackendError, InvalidSpec) as exc:
            return _refuse(exc)
        gang = apply_backend(backend, job, rendered.pods)
        objects.extend([rendered.service, *gang.groups, *gang.pods])
    # libyaml's emitter (kubeyaml's dumper): the pure-Python one takes ~40 s for a 1000-pod job (46 MB of TF_CONFIG).
    sys.stdout.write(kubeyaml.dump_all(objects))
    return 0


def cmd_crd(args: argparse.Namespace) -> int:
    from tfjob_operator.api import crd

    sys.stdout.write(crd.to_yaml())
    return 0


def local_pod_network(args: argparse.Namespace) -> str:
    """--pod-network, else $TFJOB_LOCAL_POD_NETWORK, else `auto`, for a job and for `up` alike: one addressing
    (cluster DNS, the chart's default) wherever namespaces can be made."""
    return str(args.pod_network or os.environ.get("TFJOB_LOCAL_POD_NETWORK") or "auto")


def cmd_local(args: argparse.Namespace) -> int:
    try:  # the local control plane and its libraries: the extra `[local]` (not in the operator's image)
        import tfjob_operator.client.local.run
        import tfjob_operator.client.local.up  # noqa: F401
    except ModuleNotFoundError as exc:
        print(f"error: tfjob local needs the local control plane ({exc.name} is not installed): "
              "pip install 'tfjob-operator[local]'", file=sys.stderr)
        return EXIT_NOT_INSTALLED
    args.pod_network = local_pod_network(args)
    if args.pod_network not in ("auto", "on", "off"):
        print(f"error: TFJOB_LOCAL_POD_NETWORK={args.pod_network!r}: expected auto, on or off", file=sys.stderr)
        return EXIT_INVALID
    from kubelocal.planes import choose

    try:
        args.control_plane = choose(args.control_plane)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if args.target == "up":
        from tfjob_operator.client.local.up import run_local_up

        kubeconfig = Path(args.kubeconfig or Path(args.workdir) / "kubeconfig")
        return int(run_local_up(port=args.port, kubeconfig=kubeconfig, nodes=args.nodes, workdir=Path(args.workdir),
                                kubeflow=args.kubeflow, sim_speed=args.sim_speed, pod_network=args.pod_network,
                                control_plane=args.control_plane))
    try:
        found = read_manifests(args.target)
    except InvalidSpec as exc:
        return _refuse(exc)
    jobs = found.jobs
    from tfjob_operator.client.local.run import LocalRunOptions, run_local, stall_needs_a_timeout
    from tfjob_operator.kube import KubeError

    if args.restore_node_after is not None and args.lose_node_after is None:
        print("error: --restore-node-after needs --lose-node-after (it brings the lost node back)", file=sys.stderr)
        return EXIT_INVALID
    if args.stall_worker_after is not None and (problems := stall_needs_a_timeout(jobs)):
        print("error: --stall-worker-after: " + "; ".join(problems), file=sys.stderr)
        return EXIT_INVALID
    if args.partition_worker_after is not None and args.pod_network == "off":
        print("error: --partition-worker-after: cutting a worker's link needs the pod network "
              "(--pod-network on, or auto as root on Linux)", file=sys.stderr)
        return EXIT_INVALID
    options = LocalRunOptions(workdir=Path(args.workdir), nodes=args.nodes, timeout=args.timeout,
                              kill_worker_after=args.kill_worker_after, stall_worker_after=args.stall_worker_after,
                              partition_worker_after=args.partition_worker_after,
                              heal_partition_after=args.heal_partition_after, pod_network=args.pod_network,
                              lose_node_after=args.lose_node_after, restore_node_after=args.restore_node_after,
                              preempt_worker_after=args.preempt_worker_after, control_plane=args.control_plane,
                              port=args.port, live=False if args.plain else None, objects=found.others)
    try:
        return run_local(jobs, options)
    except ValueError as exc:  # no pod network where one is needed (--pod-network on, --partition-worker-after)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except KubeError as exc:  # the plane refused an object of the file (a ConfigMap, the TFJob)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CLUSTER


def cmd_migrate(args: argparse.Namespace) -> int:
    """Print the files' manifests as tfjob.dev/v1; changes and differences to stderr. Nothing printed if any is bad."""
    from tfjob_operator.api.migrate import migrate_file

    out: list[str] = []
    notes: list[str] = []
    problems: list[str] = []
    for path in args.files:
        try:
            text, where = read_manifest_text(path)
            docs = parse_manifests(text, where)
        except InvalidSpec as exc:
            problems.extend(exc.messages)
            continue
        names = [f"{path}: {_doc_name(doc, index)}" for index, doc in enumerate(docs)]
        migrated, file_notes, file_problems = migrate_file(text, docs, names)
        problems += file_problems
        notes += file_notes
        if out and not re.match(r"(\s*#.*\n|\s*\n)*---", migrated):
            out.append("---\n")  # the next file's first document, in one stream
        out.append(migrated if migrated.endswith("\n") or not migrated else migrated + "\n")
    if problems:
        print("error: nothing was migrated:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_INVALID
    for note in notes:
        print(note, file=sys.stderr)
    sys.stdout.write("".join(out))
    return 0


def cmd_operator(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from tfjob_operator.controller.settings import OperatorSettings
    from tfjob_operator.serving.runner import limit_malloc_arenas, run_operator

    limit_malloc_arenas()  # the operator's own process, before any of its threads

    try:
        settings = OperatorSettings()
    except ValidationError as exc:  # a bad TFJOB_* variable: say which and why, without a traceback
        for error in exc.errors():
            where = "TFJOB_" + "_".join(str(p) for p in error["loc"]).upper() if error["loc"] else "settings"
            print(f"tfjob operator: {where}: {error['msg']}", file=sys.stderr)
        return 2
    return int(run_operator(settings))


def _clients(args: argparse.Namespace) -> Any:
    from tfjob_operator.client.jobs import connect

    return connect(args.kubeconfig, args.namespace, args.context)


def cmd_submit(args: argparse.Namespace) -> int:
    from tfjob_operator.client.jobs import submit
    from tfjob_operator.kube import KubeError

    try:
        jobs = read_tfjobs(args.file, args.namespace)
    except InvalidSpec as exc:
        return _refuse(exc)
    clients = _clients(args)
    failed = 0
    for job in jobs:  # each job is reported: one refused does not hide (or stop) the others
        try:
            stored = submit(clients, job)
        except KubeError as exc:
            failed += 1
            print(f"error: {exc}", file=sys.stderr)
            continue
        print(f"tfjob.{constants.GROUP}/{stored['metadata']['name']} created "
              f"(namespace {stored['metadata']['namespace']})", flush=True)
    if failed and len(jobs) > 1:
        print(f"error: {failed} of {len(jobs)} TFJobs were not created", file=sys.stderr)
    return EXIT_CLUSTER if failed else 0


def _api(args: argparse.Namespace) -> Any:
    from tfjob_operator.client.jobs import API_CHOICES

    return API_CHOICES[args.api] if args.api else None


def cmd_status(args: argparse.Namespace) -> int:
    from tfjob_operator.client.jobs import describe, get_job, job_pods

    clients = _clients(args)
    job = get_job(clients, args.name, _api(args))
    print(describe(job, job_pods(clients, args.name, job["metadata"].get("uid"))))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from tfjob_operator.client.jobs import pick_pod, stream_logs

    clients = _clients(args)
    try:
        pod = pick_pod(clients, args.name, args.replica, _api(args))
    except LookupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    stream_logs(clients, pod, follow=args.follow)
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    from tfjob_operator.client.jobs import wait_for

    code, message = wait_for(_clients(args), args.name, args.condition, args.timeout, _api(args))
    print(message, file=sys.stdout if code == 0 else sys.stderr)
    return code


def _cluster_command(command: Any) -> Any:
    """Run a job helper; an API error or an unreachable server becomes one line on stderr and exit 1."""
    def run(args: argparse.Namespace) -> int:
        from tfjob_operator.kube import KubeError

        try:
            return int(command(args))
        except KubeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_CLUSTER

    return run


def cmd_tensorboard(args: argparse.Namespace) -> int:
    import os
    import shlex

    from tfjob_operator.client import tensorboard
    from tfjob_operator.client.jobs import get_job

    clients = _clients(args)
    obj = get_job(clients, args.name, _api(args))
    try:
        location = tensorboard.chief_logdir(parse_tfjob({k: v for k, v in obj.items() if k != "status"}))
    except (tensorboard.NoLogs, InvalidSpec) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    workdir = Path(args.workdir) if args.workdir else None
    kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG")
    if workdir is None and kubeconfig and (Path(kubeconfig).parent / "volumes").is_dir():
        workdir = Path(kubeconfig).parent  # tfjob local keeps its kubeconfig in its workdir
    path = tensorboard.local_path(location, workdir) if workdir is not None else None
    if path is None:
        image = location.pod["spec"]["containers"][0].get("image", "")
        try:
            commands = tensorboard.cluster_commands(location, image, f"tensorboard-{args.name}")
        except tensorboard.NoLogs as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"# {location.path} is in volume {location.volume and location.volume.get('name')} of the chief; "
              "serve it from a pod that mounts the volume:")
        print("\n".join(commands))
        return 0
    if not path.is_dir():
        print(f"error: no TensorBoard logs yet at {path} (the chief writes them from its first epoch)",
              file=sys.stderr)
        return 1
    if args.print:
        print(shlex.join(["tensorboard", "--logdir", str(path), "--port", str(args.port)]))
        return 0
    tensorboard.serve(path, args.port)
    return 0  # not reached: serve() replaces the process


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
    p.add_argument("--gang", metavar="BACKEND",
                   help="also show what this gang backend adds (PodGroup, gates, labels, schedulerName): "
                        f"{', '.join(backend_names())}; a job's tfjob.dev/gang-backend annotation wins")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("migrate", help="print Kubeflow kubeflow.org/v1 TFJob manifests as tfjob.dev/v1; "
                                       "each change and each field that means something else here go to stderr")
    p.add_argument("files", nargs="+", metavar="FILE", help="manifest files (- for stdin)")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("crd", help="print the TFJob CustomResourceDefinition")
    p.set_defaults(func=cmd_crd)

    p = sub.add_parser(
        "local", help="run a TFJob on this machine (tfjob local FILE), or only the control plane (tfjob local up)")
    p.add_argument("target", help="a TFJob manifest, or `up` to start the local control plane alone")
    p.add_argument("--workdir", default=".tfjob-local", help="where pods run and write (default .tfjob-local)")
    p.add_argument("--nodes", help="node spec, e.g. '2x{gpu:4,cpu:16,memory:64Gi}' (default: one node)")
    p.add_argument("--timeout", type=float, default=1800, help="give up after this many seconds (default 1800)")
    p.add_argument("--kill-worker-after", type=float, metavar="SECONDS",
                   help="SIGKILL one worker this long after training starts, to watch a gang restart and resume")
    p.add_argument("--stall-worker-after", type=float, metavar="SECONDS",
                   help="hang one worker's training loop this long after training starts (SIGUSR2 to its trainer), "
                        "to watch the stall watchdog restart the gang (needs runPolicy.stallTimeoutSeconds)")
    p.add_argument("--partition-worker-after", type=float, metavar="SECONDS",
                   help="cut one worker's network link this long after training starts (it keeps running; its "
                        "peers' peer-loss timeout notices), to watch a gang restart; needs the pod network")
    p.add_argument("--heal-partition-after", type=float, metavar="SECONDS",
                   help="restore the cut link this long after the cut (default: never)")
    p.add_argument("--pod-network", choices=("auto", "on", "off"),
                   help="give each pod its own network namespace, IP and cluster DNS (TF_CONFIG as on a cluster); "
                        "auto: where namespaces can be made (root on Linux), else loopback ports; off: loopback "
                        "ports (default $TFJOB_LOCAL_POD_NETWORK, else auto)")
    p.add_argument("--lose-node-after", type=float, metavar="SECONDS",
                   help="lose the node of one worker this long after the chief's first epoch (its processes die, "
                        "its kubelet goes silent), to watch an elastic gang shrink and resume narrower")
    p.add_argument("--restore-node-after", type=float, metavar="SECONDS",
                   help="with --lose-node-after: bring the lost node back this long after the gang trains again "
                        "(after the loss, while the job waits for room), to watch it widen again after its cooldown")
    p.add_argument("--preempt-worker-after", type=float, metavar="SECONDS",
                   help="delete one worker's pod with its grace period this long after the chief's first epoch, as a "
                        "drain does (SIGTERM: the workers finish the step, the chief saves), to watch a graceful stop")
    p.add_argument("--control-plane", choices=("kubelocal", "upstream"),
                   help="kubelocal: the Python control plane (pip only, starts in seconds); upstream: etcd, "
                        "kube-apiserver, kube-controller-manager and kube-scheduler v1.37 built with `make upstream` "
                        "(default $TFJOB_CONTROL_PLANE, else kubelocal)")
    p.add_argument("--port", type=int, default=0, help="API server port (default: a free one)")
    p.add_argument("--kubeconfig", help="`up`: where to write the kubeconfig (default WORKDIR/kubeconfig)")
    p.add_argument("--plain", action="store_true", help="plain lines instead of the live view")
    p.add_argument("--sim-speed", type=float, default=1.0, metavar="N",
                   help="`up`: simulated seconds per wall second for pods on sim:true nodes (default 1)")
    p.add_argument("--kubeflow", action="store_true",
                   help="`up`: also install Kubeflow's TFJob CRD (tfjobs.kubeflow.org), for an operator run with "
                        "TFJOB_KUBEFLOW_API=all and Kubeflow's manifests or SDK")
    p.set_defaults(func=cmd_local)

    p = sub.add_parser("operator", help="run the operator (settings from TFJOB_* environment variables)")
    p.set_defaults(func=cmd_operator)

    def cluster_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG or ~/.kube/config)")
        p.add_argument("--context", help="kubeconfig context")
        p.add_argument("-n", "--namespace", help="namespace (default: the context's)")

    def api_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--api", choices=["tfjob.dev", "kubeflow.org"],
                       help="the TFJob API the name is in (default: tfjob.dev/v1, else Kubeflow's kubeflow.org/v1 "
                            "when the operator serves it; a name taken in both is tfjob.dev's unless "
                            "--api kubeflow.org)")

    p = sub.add_parser("submit", help="create the TFJobs of a file (validated first, like the webhook)")
    p.add_argument("file")
    cluster_args(p)
    p.set_defaults(func=_cluster_command(cmd_submit))

    p = sub.add_parser("status", help="a job's state, conditions and pods")
    p.add_argument("name")
    cluster_args(p)
    api_arg(p)
    p.set_defaults(func=_cluster_command(cmd_status))

    p = sub.add_parser("logs", help="a job's logs: the chief by default, or --replica worker-1")
    p.add_argument("name")
    p.add_argument("--replica", help="replica as <type>-<index>, e.g. worker-1, ps-0")
    p.add_argument("-f", "--follow", action="store_true", help="keep streaming as lines arrive")
    cluster_args(p)
    api_arg(p)
    p.set_defaults(func=_cluster_command(cmd_logs))

    p = sub.add_parser(
        "wait", help="wait until a job reaches a condition (exit 0), ends otherwise (1) or times out (124)")
    p.add_argument("name")
    p.add_argument("--for", dest="condition", default="succeeded",
                   choices=["created", "queued", "running", "restarting", "suspended", "succeeded", "failed"])
    p.add_argument("--timeout", type=float, default=600)
    cluster_args(p)
    api_arg(p)
    p.set_defaults(func=_cluster_command(cmd_wait))

    p = sub.add_parser("tensorboard", help="serve the chief's TensorBoard logs of a job run by tfjob local "
                                           "(on a cluster: print the commands that serve them)")
    p.add_argument("name")
    p.add_argument("--workdir", help="tfjob local's workdir (default: the kubeconfig's directory, when tfjob local "
                                     "wrote it)")
    p.add_argument("--port", type=int, default=6006, help="TensorBoard's port (default 6006)")
    p.add_argument("--print", action="store_true", help="print the tensorboard command instead of running it")
    cluster_args(p)
    api_arg(p)
    p.set_defaults(func=_cluster_command(cmd_tensorboard))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
