"""How the local worker daemon serves a task: it acknowledges what it reads at once, and
the garbage collection between tasks looks only at what the last task left behind.

Both were fixed costs of every Python task (see binlake.local.worker_daemon): a wait for a
delayed TCP acknowledgement and a full collection over everything the worker imported.
"""

import gc
import io
import socket
import weakref

import pytest

from binlake.local import worker_daemon
from binlake.local.worker_daemon import AckingReader, collect_after_task

linux_only = pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK is Linux's")


@pytest.fixture
def tcp_pair():
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        worker, _ = server.accept()
    with client, worker:
        yield client, worker


def _interactive(client, worker):
    """A few request/response rounds: Linux then delays the worker's acknowledgements
    (its "pingpong" mode), which is the state a reused Spark worker is in."""
    for _ in range(3):
        client.sendall(b"q" * 100)
        worker.recv(100)
        worker.sendall(b"a")
        client.recv(1)
    assert worker.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 0


def test_the_reader_returns_the_stream_as_sent_and_then_end_of_file(tcp_pair):
    client, worker = tcp_pair
    payload = bytes(range(256)) * 1000
    client.sendall(payload)
    client.shutdown(socket.SHUT_WR)
    reader = io.BufferedReader(AckingReader(worker), 4096)
    assert reader.read(10) == payload[:10]
    assert reader.read() == payload[10:]
    assert reader.read(1) == b""


@linux_only
def test_every_read_acknowledges_at_once(tcp_pair):
    client, worker = tcp_pair
    _interactive(client, worker)
    client.sendall(b"command")
    assert io.BufferedReader(AckingReader(worker), 4096).read(7) == b"command"
    assert worker.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 1


@linux_only
def test_a_plain_read_would_have_left_the_acknowledgement_delayed(tcp_pair):
    # The control for the test above: without the reader nothing changes the mode.
    client, worker = tcp_pair
    _interactive(client, worker)
    client.sendall(b"command")
    assert worker.recv(7) == b"command"
    assert worker.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 0


def test_the_reader_works_on_a_unix_socket_too():
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        a.sendall(b"row")
        assert io.BufferedReader(AckingReader(b), 16).read(3) == b"row"


class _Cycle:
    def __init__(self):
        self.me = self


@pytest.fixture
def fresh_gc(monkeypatch):
    monkeypatch.setattr(worker_daemon, "_tasks_served", 0)
    yield
    gc.unfreeze()


def test_what_survives_a_task_is_frozen_and_collections_skip_it(fresh_gc):
    survivor = _Cycle()
    collect_after_task()
    assert gc.get_freeze_count() > 0
    # The next collections do not look at it: frozen objects are in no generation.
    assert not any(o is survivor for o in gc.get_objects())


def test_garbage_a_task_leaves_is_collected_after_it(fresh_gc):
    garbage = _Cycle()
    gone = weakref.ref(garbage)
    del garbage
    collect_after_task()
    assert gone() is None


def test_frozen_cycles_are_reclaimed_by_a_full_collection_every_so_many_tasks(fresh_gc):
    survivor = _Cycle()
    gone = weakref.ref(survivor)
    collect_after_task()  # survivor frozen
    del survivor
    for _ in range(worker_daemon.FULL_COLLECTION_EVERY - 2):
        collect_after_task()
        assert gone() is not None  # frozen: ordinary collections leave it alone
    collect_after_task()
    assert gone() is None
