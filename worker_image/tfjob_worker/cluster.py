"""The cluster as this process sees it, from TF_CONFIG or Slurm variables. Pure: no TensorFlow.

Rank numbering follows MultiWorkerMirroredStrategy: the chief (if any) is rank 0, then the workers
in index order. Parameter servers and the evaluator are not in the training group (rank None).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

ROLES = ("chief", "worker", "ps", "evaluator")
TRAINER_ROLES = ("chief", "worker")
DEFAULT_SLURM_PORT_BASE = 8888


class ClusterConfigError(ValueError):
    """TF_CONFIG or the Slurm variables describe an impossible cluster."""


@dataclass(frozen=True)
class ClusterView:
    """Who this process is in the job."""

    role: str
    index: int
    rank: int | None
    world_size: int
    local_rank: int
    local_size: int
    is_chief: bool
    cluster: dict[str, list[str]] = field(default_factory=dict)
    source: str = "none"  # "tf_config", "slurm" or "none" (a single local process)

    @property
    def has_ps(self) -> bool:
        return bool(self.cluster.get("ps"))

    @property
    def is_trainer(self) -> bool:
        return self.role in TRAINER_ROLES

    @property
    def address(self) -> str | None:
        tasks = self.cluster.get(self.role, [])
        return tasks[self.index] if self.index < len(tasks) else None

    def chief_address(self) -> str | None:
        """Address of the task that coordinates (chief, else worker 0)."""
        if self.cluster.get("chief"):
            return self.cluster["chief"][0]
        workers = self.cluster.get("worker", [])
        return workers[0] if workers else None

    def tf_config(self) -> str:
        """TF_CONFIG JSON equivalent to this view (what TensorFlow's resolvers read)."""
        return json.dumps({"cluster": self.cluster, "task": {"type": self.role, "index": self.index}})


def _host(address: str) -> str:
    if address.startswith("["):  # [ipv6]:port
        return address[1 : address.index("]")]
    return address.rsplit(":", 1)[0]


def _view_from_cluster(cluster: dict[str, list[str]], role: str, index: int, source: str) -> ClusterView:
    trainers = [(r, i) for r in TRAINER_ROLES for i in range(len(cluster.get(r, [])))]
    rank = trainers.index((role, index)) if (role, index) in trainers else None
    everyone = [(r, i, addr) for r in ROLES for i, addr in enumerate(cluster.get(r, []))]
    my_host = _host(cluster[role][index])
    same_host = [(r, i) for r, i, addr in everyone if _host(addr) == my_host]
    has_chief = bool(cluster.get("chief"))
    is_chief = role == "chief" or (not has_chief and role == "worker" and index == 0)
    return ClusterView(
        role=role,
        index=index,
        rank=rank,
        world_size=len(trainers),
        local_rank=same_host.index((role, index)),
        local_size=len(same_host),
        is_chief=is_chief,
        cluster=cluster,
        source=source,
    )


def from_tf_config(text: str) -> ClusterView:
    """Parse a TF_CONFIG JSON string; raises ClusterConfigError saying which field is wrong."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClusterConfigError(f"TF_CONFIG is not valid JSON ({exc.msg} at char {exc.pos})") from exc
    if not isinstance(config, dict):
        raise ClusterConfigError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
    cluster_raw = config.get("cluster")
    task = config.get("task")
    if not isinstance(cluster_raw, dict) or not cluster_raw:
        raise ClusterConfigError("TF_CONFIG.cluster must be a non-empty object of role -> list of host:port")
    if not isinstance(task, dict):
        raise ClusterConfigError("TF_CONFIG.task must be an object like {\"type\": \"worker\", \"index\": 0}")
    cluster: dict[str, list[str]] = {}
    for role, tasks in cluster_raw.items():
        if role not in ROLES:
            raise ClusterConfigError(f"TF_CONFIG.cluster.{role}: unknown role (expected one of {', '.join(ROLES)})")
        if not isinstance(tasks, list) or not all(isinstance(t, str) and ":" in t for t in tasks):
            raise ClusterConfigError(f"TF_CONFIG.cluster.{role} must be a list of \"host:port\" strings")
        if tasks:
            cluster[role] = list(tasks)
    if len(cluster.get("chief", [])) > 1:
        raise ClusterConfigError("TF_CONFIG.cluster.chief may hold at most one task")
    role = task.get("type")
    index = task.get("index", 0)
    if role not in ROLES:
        raise ClusterConfigError(f"TF_CONFIG.task.type {role!r} is not one of {', '.join(ROLES)}")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise ClusterConfigError(f"TF_CONFIG.task.index must be a non-negative integer, got {index!r}")
    if role not in cluster:
        raise ClusterConfigError(f"TF_CONFIG.task.type {role!r} has no tasks in TF_CONFIG.cluster")
    if index >= len(cluster[role]):
        raise ClusterConfigError(
            f"TF_CONFIG.task.index {index} is out of range: cluster.{role} has {len(cluster[role])} task(s)"
        )
    if not any(cluster.get(r) for r in TRAINER_ROLES):
        raise ClusterConfigError("TF_CONFIG.cluster needs at least one chief or worker task")
    if cluster.get("ps") and not cluster.get("chief"):
        raise ClusterConfigError("TF_CONFIG.cluster has ps tasks but no chief: ParameterServerStrategy needs one")
    return _view_from_cluster(cluster, role, index, "tf_config")


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a Slurm host list such as 'gpu[01-03,7],cpu1' into host names."""
    hosts: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", hostlist):
        match = re.match(r"^(.*?)\[([^\]]*)\](.*)$", item)
        if not match:
            hosts.append(item)
            continue
        prefix, ranges, suffix = match.groups()
        for part in ranges.split(","):
            numbers = _RANGE.match(part.strip())
            if not numbers:
                raise ClusterConfigError(f"Slurm node list {hostlist!r}: cannot read range {part!r}")
            low, high = numbers.group(1), numbers.group(2) or numbers.group(1)
            for n in range(int(low), int(high) + 1):
                hosts.append(f"{prefix}{str(n).zfill(len(low))}{suffix}")
    return hosts


def expand_tasks_per_node(spec: str) -> list[int]:
    """Expand SLURM_TASKS_PER_NODE such as '2(x3),1' into [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise ClusterConfigError(f"SLURM_TASKS_PER_NODE {spec!r}: cannot read {part!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def from_slurm(env: Mapping[str, str], port_base: int = DEFAULT_SLURM_PORT_BASE) -> ClusterView:
    """Build the view from Slurm variables the way SlurmClusterResolver does: all tasks are workers."""
    try:
        rank = int(env["SLURM_PROCID"])
        ntasks = int(env.get("SLURM_STEP_NUM_TASKS") or env["SLURM_NTASKS"])
    except KeyError as exc:
        raise ClusterConfigError(f"Slurm variable {exc.args[0]} is not set") from exc
    except ValueError as exc:
        raise ClusterConfigError(f"SLURM_PROCID/SLURM_NTASKS must be integers: {exc}") from exc
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise ClusterConfigError("Slurm variable SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST) is not set")
    hosts = expand_hostlist(nodelist)
    per_node_spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if per_node_spec:
        per_node = expand_tasks_per_node(per_node_spec)
    else:  # spread evenly, the first nodes taking the remainder
        per_node = [ntasks // len(hosts) + (1 if i < ntasks % len(hosts) else 0) for i in range(len(hosts))]
    if len(per_node) != len(hosts):
        raise ClusterConfigError(
            f"Slurm node list has {len(hosts)} node(s) but tasks-per-node lists {len(per_node)}"
        )
    pairs = zip(hosts, per_node, strict=True)
    workers = [f"{host}:{port_base + local}" for host, count in pairs for local in range(count)]
    if len(workers) != ntasks:
        raise ClusterConfigError(f"Slurm tasks per node add up to {len(workers)}, but SLURM_NTASKS is {ntasks}")
    if not 0 <= rank < ntasks:
        raise ClusterConfigError(f"SLURM_PROCID {rank} is out of range for SLURM_NTASKS {ntasks}")
    view = _view_from_cluster({"worker": workers}, "worker", rank, "slurm")
    if "SLURM_LOCALID" in env:  # Slurm's own count wins over the one derived from the node list
        view = ClusterView(**{**view.__dict__, "local_rank": int(env["SLURM_LOCALID"])})
    return view


def from_env(env: Mapping[str, str] | None = None, port_base: int | None = None) -> ClusterView:
    """TF_CONFIG if set, else Slurm variables if present, else a single local worker."""
    env = os.environ if env is None else env
    if env.get("TF_CONFIG", "").strip():
        return from_tf_config(env["TF_CONFIG"])
    if "SLURM_PROCID" in env:
        base = port_base if port_base is not None else int(env.get("TFJOB_SLURM_PORT_BASE", DEFAULT_SLURM_PORT_BASE))
        return from_slurm(env, base)
    return ClusterView(role="worker", index=0, rank=0, world_size=1, local_rank=0, local_size=1, is_chief=True)


def _trainer_view() -> ClusterView:
    view = from_env()
    if view.rank is None:
        raise RuntimeError(f"rank()/size() are defined for chief and worker tasks, not for {view.role!r}")
    return view


def rank() -> int:
    """Horovod-style global rank of this process (chief is 0)."""
    return _trainer_view().rank or 0


def size() -> int:
    """Horovod-style number of training processes."""
    return _trainer_view().world_size


def local_rank() -> int:
    """Horovod-style rank of this process among those on the same host."""
    return from_env().local_rank
