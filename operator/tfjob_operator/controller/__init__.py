"""The controller runtime, one concern per module:

- `job_controller`: :class:`JobController`, which wires the rest and runs one reconcile;
- `workqueue`: triggers coalesced per job, one reconcile at a time, back-off, the job's next timer;
- `status_cache`: the status each job was decided and written with, and the write hold;
- `actuator`: status writes, Events, annotations, creates and deletes through `kube`;
- `gang_wiring`: the gang view a reconcile reads (backends and the admission loop's reasons);
- `watches`: the operator's own pod and node watches;
- `pod_records`: what a job's pods record that the job may not carry.
"""

from tfjob_operator.controller.job_controller import JobController

__all__ = ["JobController"]
