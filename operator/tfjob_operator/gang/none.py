"""No gang scheduling: pods go straight to the default scheduler, one by one (partial gangs possible)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfjob_operator.api import TFJob
from tfjob_operator.gang import base


class NoGangBackend(base.GangBackend):
    name = "none"

    def decorate_pod(self, job: TFJob, pod: Mapping[str, Any]) -> dict[str, Any]:
        return self.scheduled_copy(job, pod)
