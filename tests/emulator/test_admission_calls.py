"""Admission plugins that wait on I/O (`admission.awaited`) under `run_admitted`: each call is made once, off
the event loop, and the write runs again with the answers; outside it, calls are made in place."""

from __future__ import annotations

import asyncio
import itertools
import threading

import pytest

from kubelocal.apiserver.admission import MAX_ROUNDS, awaited, run_admitted, stable
from kubelocal.apiserver.errors import ApiError


def test_each_call_is_made_once_on_another_thread_and_the_write_sees_every_answer() -> None:
    loop_thread, calls, runs = threading.get_ident(), [], []

    def call(n: int) -> int:
        calls.append((n, threading.get_ident() != loop_thread))
        return n * 10

    def write() -> list[int]:
        runs.append(1)
        return [awaited(("hook", n), lambda n=n: call(n)) for n in (1, 2)]

    assert asyncio.run(run_admitted(write)) == [10, 20]
    assert (calls, len(runs)) == ([(1, True), (2, True)], 3)  # one round per call, then the one that completes


def test_outside_run_admitted_the_call_is_made_in_place() -> None:
    assert awaited("k", lambda: "answer") == "answer"


def test_a_write_that_needs_a_new_answer_every_round_ends_as_a_conflict() -> None:
    rounds = iter(range(10 * MAX_ROUNDS))

    def write() -> None:
        awaited(next(rounds), lambda: None)  # the object changes between rounds: a new key each time

    with pytest.raises(ApiError) as refused:
        asyncio.run(run_admitted(write))
    assert refused.value.code == 409


def test_what_the_server_makes_for_a_write_is_the_same_in_every_round() -> None:
    made = itertools.count()

    def write() -> tuple[str, int]:
        return stable("name", lambda: f"gen-{next(made)}"), awaited("hook", lambda: 1)

    assert asyncio.run(run_admitted(write)) == ("gen-0", 1)  # two rounds, one name
    assert next(made) == 1
