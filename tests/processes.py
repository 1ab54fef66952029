"""Processes as a test sees them: which are still running, and what command each runs."""

from __future__ import annotations

import psutil


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The processes still running (a zombie has exited; only its parent has not read its status yet)."""
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.NoSuchProcess:
            pass
    return out


def cmdline(proc: psutil.Process) -> list[str]:
    """Its command line; empty once it is gone."""
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []
