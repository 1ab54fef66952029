"""The TFJob API (`tfjob.dev/v1`): the contract with users.

Field names follow Kubeflow's `kubeflow.org/v1` TFJob so existing manifests port by changing `apiVersion`.
Each field's description becomes the CRD schema doc (`kubectl explain tfjob.spec`); `crds/tfjob.yaml` is
generated from these models by `tfjob_operator.api.crd`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from tfjob_operator.api import constants, limits


def _json_int(value: Any) -> Any:
    """Integers as the API server reads JSON: true and "3" are not integers (pydantic's lax mode takes them)."""
    if isinstance(value, bool | str):
        raise ValueError(f"must be an integer, got {value!r:.60}")
    return value


def _json_int_or_string(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"must be an integer or a string (a quantity such as 8 or 500m), got {value!r:.60}")
    return value


def _json_bool(value: Any) -> Any:
    """Booleans as the API server reads JSON: only true and false ("yes", 1 are not)."""
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {value!r:.60}")
    return value


#: int and bool fields of the spec: refused where the API server would refuse them, so render never accepts more.
#: (`_INT` goes after a field's bounds, so they still reach the CRD as minimum/maximum.)
_INT = BeforeValidator(_json_int)
KubeBool = Annotated[bool, BeforeValidator(_json_bool)]


class _Model(BaseModel):
    # Unknown fields are refused (a typo must not be silently dropped); the CRD prunes them on a cluster.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ReplicaType(StrEnum):
    """Replica types, in the order TF_CONFIG lists them."""

    CHIEF = "Chief"
    WORKER = "Worker"
    PS = "PS"
    EVALUATOR = "Evaluator"

    @property
    def tf_name(self) -> str:
        """The lowercase name used in TF_CONFIG, pod names and labels."""
        return self.value.lower()


#: Spellings accepted as replica-type keys (any case); Kubeflow's `Master` is the chief.
REPLICA_TYPE_ALIASES: dict[str, ReplicaType] = {
    "chief": ReplicaType.CHIEF,
    "master": ReplicaType.CHIEF,
    "worker": ReplicaType.WORKER,
    "ps": ReplicaType.PS,
    "evaluator": ReplicaType.EVALUATOR,
}


class RestartPolicy(StrEnum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(StrEnum):
    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


class SuccessPolicy(StrEnum):
    DEFAULT = ""
    ALL_WORKERS = "AllWorkers"


class ElasticScaling(StrEnum):
    """How the batch and learning rate follow the width (the worker runtime applies it)."""

    CONSTANT_GLOBAL_BATCH = "ConstantGlobalBatch"
    SCALE_LEARNING_RATE = "ScaleLearningRate"


class ElasticPolicy(_Model):
    """Elastic workers (MultiWorkerMirroredStrategy): the operator picks the Worker width in [min, max]."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, json_schema_extra={
        "x-kubernetes-validations": [{"rule": "self.minReplicas <= self.maxReplicas",
                                      "message": "spec.elasticPolicy.minReplicas must be ≤ maxReplicas"}]})

    minReplicas: Annotated[int, Field(ge=1, le=limits.MAX_REPLICAS_PER_TYPE), _INT] = Field(
        ..., description="Fewest workers the job trains with; below it the gang waits (Queued)."
    )
    maxReplicas: Annotated[int, Field(ge=1, le=limits.MAX_REPLICAS_PER_TYPE), _INT] = Field(
        ..., description="Most workers the job widens to when room returns."
    )
    scaling: ElasticScaling = Field(
        ElasticScaling.CONSTANT_GLOBAL_BATCH,
        description="ConstantGlobalBatch (default: the global batch and learning rate kept, the global batch split "
        "over the width, shares differing by one where it does not divide) or ScaleLearningRate (per-worker batch "
        "kept, learning rate × width / Worker.replicas).",
    )
    resizeCooldownSeconds: Annotated[int, Field(ge=0), _INT] = Field(
        300,
        description="Seconds after a resize (or the start) before the gang may widen again; room for more workers "
        "must also last 60 s (hysteresis). Shrinking on a lost worker never waits.",
    )


class SchedulingPolicy(_Model):
    """How the gang is scheduled: all pods or none."""

    minAvailable: Annotated[int, Field(ge=1), _INT] | None = Field(
        None,
        description="Pods that must be placed together before any starts. Default: every pod of the job.",
    )
    queue: str | None = Field(
        None, description="Queue name for Volcano or Kueue (kueue.x-k8s.io/queue-name)."
    )
    priorityClass: str | None = Field(
        None, description="PriorityClass of the gang; admission order is priority, then arrival."
    )
    minResources: dict[str, Annotated[int | str, BeforeValidator(_json_int_or_string)]] | None = Field(
        None, description="Resources the gang needs as a whole (PodGroup minResources), e.g. {nvidia.com/gpu: 8}."
    )
    scheduleTimeoutSeconds: Annotated[int, Field(ge=1), _INT] | None = Field(
        None,
        description="If the whole gang is not scheduled within this many seconds, its pods are recreated "
        "and the job requeued with back-off. Default 300.",
    )


class RunPolicy(_Model):
    """Policies that govern the job's run: clean-up, deadlines, retries, gang scheduling."""

    cleanPodPolicy: CleanPodPolicy = Field(
        CleanPodPolicy.RUNNING,
        description="Which pods to delete when the job finishes: All, Running (default: pods still running, "
        "such as PS and evaluator), or None.",
    )
    ttlSecondsAfterFinished: Annotated[int, Field(ge=0), _INT] | None = Field(
        None, description="Delete the finished job (and its pods) this many seconds after it finishes."
    )
    activeDeadlineSeconds: Annotated[int, Field(ge=1), _INT] | None = Field(
        None, description="Fail the job if it runs longer than this, counted from status.startTime."
    )
    backoffLimit: Annotated[int, Field(ge=0), _INT] | None = Field(
        None,
        description="Gang restarts caused by failures before the job is failed. Disruptions (eviction, "
        "preemption, node loss) do not count.",
    )
    schedulingPolicy: SchedulingPolicy | None = Field(None, description="Gang-scheduling settings.")
    stallTimeoutSeconds: Annotated[int, Field(ge=1), _INT] | None = Field(
        None,
        description="Restart the gang when a worker makes no training progress (no step, evaluation step or "
        "checkpoint) for this many seconds: the worker runtime exits 202 and the job records TrainingStalled. "
        "The first step after start-up gets at least 600 s (TFJOB_FIRST_STEP_GRACE_SECONDS); set it above the "
        "longest checkpoint save. ParameterServerStrategy jobs are not watched. Default: off.",
    )
    suspend: KubeBool = Field(
        False, description="true deletes the job's pods and keeps the job; false again recreates them."
    )
    managedBy: str | None = Field(
        None,
        description="Controller that manages this job. Empty or tfjob.dev/tfjob-operator: this operator; "
        "anything else: this operator leaves the job alone (e.g. for MultiKueue).",
    )


class ReplicaSpec(_Model):
    """One replica type: how many pods, when to restart them, and their pod template."""

    replicas: Annotated[int, Field(ge=0, le=limits.MAX_REPLICAS_PER_TYPE), _INT] = Field(
        1, description=f"Number of pods of this type (at most {limits.MAX_REPLICAS_PER_TYPE}; Chief and Evaluator 1)."
    )
    restartPolicy: RestartPolicy = Field(
        RestartPolicy.NEVER,
        description="Always | OnFailure | Never | ExitCode. ExitCode: exit codes 1-127 are permanent "
        "failures, 128 and above (signals, the worker runtime's peer-lost codes) restart the gang.",
    )
    template: dict[str, Any] = Field(
        default_factory=dict,
        description="Pod template (a Kubernetes PodTemplateSpec) for this replica type; kept as given, checked "
        "against the Kubernetes pod schema.",
        # The CRD types the parts its rules read (crd.py: images, resource quantities); the rest is checked against
        # Kubernetes' pod schema by validation.
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )

    @field_validator("template", mode="before")
    @classmethod
    def _drop_nulls(cls, value: Any) -> Any:
        """A null field of a Kubernetes object means unset (`ports:` left empty): drop it, as the API server does."""
        return _without_nulls(value)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _spellings(rtype: ReplicaType) -> list[str]:
    """The keys the rules below read as this replica type: its name and aliases capitalised, lowercase and
    uppercase (a key in another mix of cases is covered by the rule for unusual spellings)."""
    aliases = [a for a, t in REPLICA_TYPE_ALIASES.items() if t is rtype]
    return list(dict.fromkeys([rtype.value, *(f(a) for a in aliases for f in (str.capitalize, str.lower, str.upper))]))


_SUSPENDED = "(has({x}.runPolicy) && has({x}.runPolicy.suspend) && {x}.runPolicy.suspend)"
_REPLICAS_OF = "(has({x}.tfReplicaSpecs[k].replicas) ? {x}.tfReplicaSpecs[k].replicas : 1)"
_WHY_FIXED = ("cannot change unless the job is suspended (a running MultiWorkerMirroredStrategy gang cannot be "
              "resized): set spec.runPolicy.suspend to true, then change replicas, then set it to false")


def _total(x: str, keys: list[str]) -> str:
    """CEL: the replicas of `x`'s replica specs under these keys (0 when none; a spec without replicas counts 1)."""
    return f"{x}.tfReplicaSpecs.filter(k, k in {keys}).map(k, {_REPLICAS_OF.format(x=x)}).sum()"


def _replicas_fixed_rules() -> list[dict[str, str]]:
    """CEL transition rules: no replica type's `replicas` changes unless the job is (or was) suspended, which
    deletes the gang; resuming creates it at the new size. One rule per replica type, so a type may be allowed
    to change later (elastic workers) by its own rule alone; one more for keys spelled in an unusual case."""
    either_suspended = f"{_SUSPENDED.format(x='self')} || {_SUSPENDED.format(x='oldSelf')}"
    rules = []
    for rtype in ReplicaType:
        keys = _spellings(rtype)
        # An elastic job's width is the operator's to choose: its Worker.replicas may change (the gang restarts
        # at the new width), within the elastic rules below.
        elastic = "has(self.elasticPolicy) || " if rtype is ReplicaType.WORKER else ""
        rules.append({"rule": f"{elastic}{either_suspended} || {_total('self', keys)} == {_total('oldSelf', keys)}",
                      "message": f"spec.tfReplicaSpecs.{rtype.value}.replicas {_WHY_FIXED}"
                                 + (" (or give the job a spec.elasticPolicy)" if elastic else "")})
    known = [k for rtype in ReplicaType for k in _spellings(rtype)]
    same = (f"k in {known} || (k in oldSelf.tfReplicaSpecs && {_REPLICAS_OF.format(x='self')} == "
            f"{_REPLICAS_OF.format(x='oldSelf')})")
    rules.append({"rule": f"{either_suspended} || (self.tfReplicaSpecs.all(k, {same}) && "
                          f"oldSelf.tfReplicaSpecs.all(k, k in {known} || k in self.tfReplicaSpecs))",
                  "message": f"spec.tfReplicaSpecs.<type>.replicas {_WHY_FIXED}"})
    return rules


def _elastic_rules() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """CEL (rules, transition rules): an elastic job's Worker.replicas lies in [minReplicas, maxReplicas]; no PS
    (elastic workers are MultiWorkerMirroredStrategy's); the policy is added or removed only while suspended."""
    workers = _total("self", _spellings(ReplicaType.WORKER))
    ps = _total("self", _spellings(ReplicaType.PS))
    either_suspended = f"{_SUSPENDED.format(x='self')} || {_SUSPENDED.format(x='oldSelf')}"
    return [
        {"rule": f"!has(self.elasticPolicy) || self.elasticPolicy.minReplicas <= {workers}",
         "message": "spec.elasticPolicy.minReplicas must be ≤ spec.tfReplicaSpecs.Worker.replicas"},
        {"rule": f"!has(self.elasticPolicy) || {workers} <= self.elasticPolicy.maxReplicas",
         "message": "spec.tfReplicaSpecs.Worker.replicas must be ≤ spec.elasticPolicy.maxReplicas"},
        {"rule": f"!has(self.elasticPolicy) || {ps} == 0",
         "message": "spec.elasticPolicy is for MultiWorkerMirroredStrategy jobs: a job with PS replicas cannot "
                    "have it (for ParameterServerStrategy use spec.enableDynamicWorker on kubeflow.org/v1)"},
    ], [
        {"rule": f"{either_suspended} || has(self.elasticPolicy) == has(oldSelf.elasticPolicy)",
         "message": "spec.elasticPolicy cannot be added or removed unless the job is suspended: set "
                    "spec.runPolicy.suspend to true first"},
    ]


_ELASTIC_RULES, _ELASTIC_TRANSITION_RULES = _elastic_rules()
#: The spec's transition rules (on `spec` in the CRD): a running gang keeps its size (elastic workers aside).
REPLICAS_FIXED_WHILE_RUNNING: list[dict[str, str]] = _replicas_fixed_rules() + _ELASTIC_TRANSITION_RULES
_SPEC_SCHEMA_EXTRA: dict[str, Any] = {"x-kubernetes-validations": _ELASTIC_RULES + REPLICAS_FIXED_WHILE_RUNNING}


class TFJobSpec(_Model):
    """Desired state of a TFJob."""

    # The API server refuses a replicas change of a running job at apply time (kubeflow.org/v1 jobs, whose CRD is
    # Kubeflow's: at run time, `reconcile.resize`).
    model_config = ConfigDict(extra="forbid", populate_by_name=True,
                              json_schema_extra=_SPEC_SCHEMA_EXTRA)

    tfReplicaSpecs: dict[ReplicaType, ReplicaSpec] = Field(
        ...,
        description="Replica types and their specs. Keys: Chief (or Master), Worker, PS, Evaluator; "
        f"any case is accepted. At most {limits.MAX_REPLICAS_PER_JOB} pods in all.",
        json_schema_extra={
            "maxProperties": len(ReplicaType),
            "x-kubernetes-validations": [{
                # replicas is defaulted (1) before rules run; has() keeps the rule safe without it.
                "rule": "self.map(k, has(self[k].replicas) ? self[k].replicas : 1).sum() <= "
                        f"{limits.MAX_REPLICAS_PER_JOB}",
                "message": limits.TOO_MANY_PODS.split(": ", 1)[1],
            }],
        },
    )
    runPolicy: RunPolicy = Field(default_factory=RunPolicy, description="Run policies.")
    successPolicy: SuccessPolicy = Field(
        SuccessPolicy.DEFAULT,
        description='"" (the chief, or worker 0 when there is no chief, decides success) or AllWorkers.',
    )
    elasticPolicy: ElasticPolicy | None = Field(
        None,
        description="Elastic workers for MultiWorkerMirroredStrategy jobs (no PS): the operator runs the Worker "
        "gang at the widest width in [minReplicas, maxReplicas] that fits, shrinks it when a worker is lost to a "
        "disruption and widens it again after resizeCooldownSeconds. Worker.replicas is the initial width; "
        "changing it on a running job restarts the gang at that width. See docs/elastic.md.",
    )
    enableDynamicWorker: KubeBool = Field(
        False,
        description="Kubeflow's dynamic workers, for ParameterServerStrategy jobs (with PS): each worker's TF_CONFIG "
        "names the PS and itself only, a lost worker restarts alone and a replicas change adds or removes workers "
        "one by one.",
    )

    @field_validator("tfReplicaSpecs", mode="before")
    @classmethod
    def _normalise_replica_types(cls, value: Any) -> Any:
        """Accept `worker`, `WORKER`, `Master` ... as keys; unknown keys are left for the enum to refuse."""
        if not isinstance(value, dict):
            return value
        out: dict[Any, Any] = {}
        for key, spec in value.items():
            rtype = REPLICA_TYPE_ALIASES.get(str(key).lower())
            out[rtype.value if rtype else key] = spec
        return out


class JobConditionType(StrEnum):
    CREATED = "Created"
    QUEUED = "Queued"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class JobCondition(_Model):
    type: JobConditionType = Field(..., description="Condition type.")
    status: str = Field(..., description='"True", "False" or "Unknown".')
    reason: str | None = Field(None, description="One-word CamelCase reason for the last transition.")
    message: str | None = Field(None, description="Human-readable details.")
    lastUpdateTime: str | None = Field(None, description="Last time the condition was updated (RFC 3339).")
    lastTransitionTime: str | None = Field(None, description="Last time the status changed (RFC 3339).")


class ReplicaStatus(_Model):
    active: int = Field(0, description="Pods running or about to run.")
    ready: int = Field(0, description="Pods whose containers are all running and ready.")
    succeeded: int = Field(0, description="Pods that exited 0.")
    failed: int = Field(0, description="Pods that failed (in the current attempt).")


class JobProgress(_Model):
    """The chief's training progress, read from its metrics endpoint by the operator."""

    epoch: int | None = Field(None, description="Epoch in progress (1-based).")
    epochs: int | None = Field(None, description="Epochs the run will train.")
    step: int | None = Field(None, description="Training steps of the job so far (counting epochs before a resume).")
    examplesPerSecond: float | None = Field(None, description="Global training examples per second.")
    lastCheckpointTime: str | None = Field(None, description="When the chief last wrote a checkpoint (RFC 3339).")
    updatedAt: str | None = Field(None, description="When the operator read these figures (RFC 3339).")
    summary: str | None = Field(None, description='Short form for `kubectl get`, e.g. "epoch 2/6 step 45".')


class ElasticStatus(_Model):
    """The width of an elastic job's Worker gang, chosen by the operator."""

    currentReplicas: int = Field(..., description="Workers of the current gang attempt.")
    minReplicas: int = Field(..., description="spec.elasticPolicy.minReplicas.")
    maxReplicas: int = Field(..., description="spec.elasticPolicy.maxReplicas.")
    baseReplicas: int | None = Field(
        None, description="Worker.replicas when the job started: the width its batch and learning rate are for."
    )
    specReplicas: int | None = Field(None, description="spec Worker.replicas last acted on (a change resizes).")
    lastResizeTime: str | None = Field(None, description="When the width last changed (RFC 3339).")
    resizes: int = Field(0, description="Width changes so far; never counted towards backoffLimit.")
    widerSince: str | None = Field(
        None, description="Since when room for more workers has been seen without a break (hysteresis)."
    )
    cause: str | None = Field(None, description="What the last gang restart was caused by, for the resize message.")
    summary: str | None = Field(None, description='Short form for `kubectl get`, e.g. "3/4 (min 2)".')


class TFJobStatus(_Model):
    """Observed state of a TFJob, written by the operator."""

    conditions: list[JobCondition] = Field(default_factory=list, description="Conditions, oldest first.")
    replicaStatuses: dict[str, ReplicaStatus] = Field(
        default_factory=dict, description="Pod counts per replica type."
    )
    startTime: str | None = Field(None, description="When the operator first acted on the job.")
    completionTime: str | None = Field(None, description="When the job succeeded or failed.")
    lastReconcileTime: str | None = Field(None, description="Last time the operator reconciled the job.")
    restartCount: int = Field(0, description="Whole-gang restarts, for any cause.")
    failureRestarts: int = Field(
        0, description="Gang restarts caused by failures; these count towards runPolicy.backoffLimit."
    )
    observedGeneration: int | None = Field(None, description="metadata.generation the status reflects.")
    state: str | None = Field(None, description="The current state, for `kubectl get` (last true condition).")
    workers: str | None = Field(None, description='Ready pods over all pods of the gang, e.g. "3/4".')
    progress: JobProgress | None = Field(None, description="The chief's training progress while Running.")
    elastic: ElasticStatus | None = Field(None, description="The current width of an elastic job's workers.")


class ObjectMeta(BaseModel):
    # Kubernetes metadata is kept whole; only the fields the operator reads are typed.
    model_config = ConfigDict(extra="allow")

    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("labels", "annotations", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        """`labels:` left empty (null) means none, as in Kubernetes."""
        return {} if value is None else value

    @field_validator("namespace", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        """`namespace: ""` means the default namespace (the context's), as kubectl reads a manifest."""
        return None if value == "" else value


class TFJob(BaseModel):
    """A TFJob as stored: apiVersion, kind, metadata, spec, status."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    apiVersion: str = constants.API_VERSION
    kind: str = constants.KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TFJobSpec
    status: TFJobStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"

    def replica_specs(self) -> list[tuple[ReplicaType, ReplicaSpec]]:
        """Replica types present, in canonical order (Chief, Worker, PS, Evaluator)."""
        specs = self.spec.tfReplicaSpecs
        return [(rtype, specs[rtype]) for rtype in ReplicaType if rtype in specs]  # type: ignore[comparison-overlap]

    def total_replicas(self) -> int:
        return sum(spec.replicas for _, spec in self.replica_specs())

    def has_chief(self) -> bool:
        return any(rtype is ReplicaType.CHIEF and spec.replicas > 0 for rtype, spec in self.replica_specs())
