"""Waiting for the leader's port before TensorFlow connects (tfjob_worker.peers)."""

from __future__ import annotations

import socket
import threading

from tfjob_worker.peers import reachable, wait_reachable


def test_a_listening_port_is_reachable_and_a_closed_one_or_an_unknown_name_is_not():
    with socket.create_server(("127.0.0.1", 0)) as server:
        address = f"127.0.0.1:{server.getsockname()[1]}"
        assert reachable(address)
    assert not reachable(address)  # closed now
    assert not reachable("no-such-peer.invalid:2222")  # a peer whose DNS name does not exist yet


def test_waiting_returns_once_the_leader_listens():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    waited = threading.Event()
    waiter = threading.Thread(target=lambda: (wait_reachable(f"127.0.0.1:{port}", poll=0.01), waited.set()))
    waiter.start()
    assert not waited.wait(0.2)  # nothing listens yet
    probe.listen()
    waiter.join(30)
    assert waited.is_set()
    probe.close()
