"""PySpark's Python processes, without the zip archives Spark puts on their path.

Why: local Spark starts its Python processes with ``pyspark.zip``, the py4j zip and the
``spark-core`` jar on ``PYTHONPATH``, and PySpark calls ``importlib.invalidate_caches()``
at the start of every task, which on Python 3.11 re-reads the central directory of every
zip on the path (thousands of entries). That is a fixed CPU cost on every task, whatever
the task does: most of a snapshot chunk's time in Python. Spark also plans every Python
data source read in two more processes (``create_data_source``, ``plan_data_source_read``),
which pay the same per read before any task starts, and compile PySpark from the zip (no
``.pyc`` there) when their daemon starts. When PySpark is pip-installed (it always is for
binlake) the same modules are in site-packages, so the archives are dropped from
``sys.path`` before anything is imported from them.

Two ways in, both local only (see :mod:`binlake.spark`; never on Databricks):

- ``binlake-spark-python`` (:func:`launch`), the ``spark.pyspark.python`` of local
  sessions: Spark runs it as ``binlake-spark-python -m <module> [args]`` for every Python
  process it starts, workers and data source planners alike;
- ``spark.python.daemon.module`` (:func:`main`), always set as well: it covers the
  workers of a session started where that script is missing, and finds nothing left to
  drop where the launcher ran first.

The daemon started either way also serves each task with :func:`serve_task` instead of
PySpark's own, which fixes two costs every Python task paid whatever it did (found with
strace on a reused worker; figures: ``local_worker_serve_task_s`` in benchmarks/history.csv):

- a wait per task. The JVM sends a task's command and then its (small) input on a socket
  without ``TCP_NODELAY``, so Nagle holds the input back until the command is acknowledged,
  and Linux delays that acknowledgement by its delayed-ACK minimum (40 ms), because the
  worker sends nothing back until it has the input. :class:`AckingReader` acknowledges
  every read at once (``TCP_QUICKACK``; nothing to do where the option does not exist).
  ``TCP_NODELAY`` on the worker's own socket would not help: the input is held back on the
  JVM's side.
- the full garbage collection PySpark's daemon runs after every task, over every object of
  the modules a worker has imported (pyarrow, pandas, binlake). :func:`collect_after_task`
  freezes the survivors of each task, so that those collections look only at what the next
  task leaves behind.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import signal
import socket
import sys
import zipimport

# A worker does a full collection again (frozen objects included) after this many tasks, so
# that garbage cycles among objects that once survived a task are reclaimed too.
FULL_COLLECTION_EVERY = 100
_tasks_served = 0


def redundant_archives(path: list[str]) -> list[str]:
    """The entries of ``path`` that are archives (files, not directories) inside the
    directory of a pyspark that is installed, with py4j, in a directory also on ``path``:
    everything they hold is importable from there."""
    site = next(
        (p for p in path if os.path.isdir(os.path.join(p, "pyspark")) and os.path.isdir(os.path.join(p, "py4j"))), None
    )
    if site is None:
        return []
    root = os.path.join(os.path.realpath(site), "pyspark") + os.sep
    return [p for p in path if os.path.isfile(p) and os.path.realpath(p).startswith(root)]


def drop_redundant_archives() -> None:
    """Take :func:`redundant_archives` off ``sys.path`` and forget their zip importers."""
    drop = set(redundant_archives(sys.path))
    sys.path[:] = [p for p in sys.path if p not in drop]
    for key, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter) and any(key == p or key.startswith(p + os.sep) for p in drop):
            del sys.path_importer_cache[key]


def launch(argv: list[str] | None = None) -> None:
    """``binlake-spark-python -m MODULE [ARGS]``: run MODULE as ``python -m`` would, with the
    archives dropped. Any other command line goes to this interpreter unchanged."""
    import runpy

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] != "-m":
        os.execv(sys.executable, [sys.executable, *args])
    drop_redundant_archives()
    sys.argv = [sys.argv[0], *args[2:]]  # run_module puts the module's path in argv[0]
    if args[1] == "pyspark.daemon":
        # The data source planners' daemon: theirs is PySpark's, the tasks served are ours.
        main()
        return
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)


class AckingReader(io.RawIOBase):
    """A worker's socket as a raw stream for reading, acknowledging at once what each read
    received (see the module docs). Wrap it in a ``BufferedReader``; closing it leaves the
    socket open (PySpark's daemon owns it)."""

    def __init__(self, sock: socket.socket):
        super().__init__()
        self._sock = sock
        # Linux TCP only (Spark may one day hand workers a Unix socket, which has no Nagle).
        tcp = sock.family in (socket.AF_INET, socket.AF_INET6)
        self._quick_ack = getattr(socket, "TCP_QUICKACK", None) if tcp else None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        received = self._sock.recv_into(buffer)
        if received and self._quick_ack is not None:
            self._sock.setsockopt(socket.IPPROTO_TCP, self._quick_ack, 1)
        return received


def collect_after_task() -> None:
    """Collect what a task left behind, then freeze the survivors (every
    :data:`FULL_COLLECTION_EVERY` tasks, collect everything first)."""
    global _tasks_served
    _tasks_served += 1
    if _tasks_served % FULL_COLLECTION_EVERY == 0:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


def serve_task(sock: socket.socket, authenticated: bool) -> int:
    """One task on a forked worker's socket: what ``pyspark.daemon.worker`` does (pyspark
    4.0, pinned), reading through an :class:`AckingReader` and collecting with
    :func:`collect_after_task`. Returns the worker's exit code (0: the worker may serve
    another task)."""
    import pyspark.daemon as daemon
    from pyspark.serializers import UTF8Deserializer, write_with_length

    # The daemon ignores these signals; a worker must not.
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    size = int(os.environ.get("SPARK_BUFFER_SIZE", 65536))
    infile = io.BufferedReader(AckingReader(sock), size)
    outfile = os.fdopen(os.dup(sock.fileno()), "wb", size)
    try:
        if not authenticated:
            accepted = UTF8Deserializer().loads(infile) == os.environ["PYTHON_WORKER_FACTORY_SECRET"]
            write_with_length(b"ok" if accepted else b"err", outfile)
            outfile.flush()
            if not accepted:
                sock.close()
                return 1
        try:
            daemon.worker_main(infile, outfile)
        except SystemExit as exc:
            return daemon.compute_real_exit_code(exc.code)
        return 0
    finally:
        with contextlib.suppress(OSError):  # the JVM has gone; the exit code says the rest
            outfile.close()  # flushes; the socket itself stays open for the next task
        collect_after_task()


def main() -> None:
    drop_redundant_archives()
    import pyspark.daemon as daemon

    daemon.worker = serve_task
    daemon.manager()


if __name__ == "__main__":
    main()
