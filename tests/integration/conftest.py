"""Fixtures: a local control plane and the real operator as a subprocess (see operator_harness)."""

from __future__ import annotations

from operator_harness import cluster, operator

__all__ = ["cluster", "operator"]
