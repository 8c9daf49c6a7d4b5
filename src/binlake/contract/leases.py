"""One writer per layer: a lease row per layer in the system table ``leases``.

Capture, silver and gold each have one writer at a time: two binlog readers with the same
server ids fight over the stream, and two silver or gold runs would apply the same batch
twice over each other's commits. The bundle's jobs are set up so that only one of them
writes (the continuous job and the scheduled pipeline must not both run); the lease makes
that a rule instead of a convention:

- a command takes the lease of every layer it writes before it starts (``capture`` the
  capture lease, ``silver`` and ``gold`` theirs, ``run`` and ``run --continuous`` all three)
  and gives it back when it ends, failed or not;
- while it runs, a thread renews the leases every :data:`RENEW_SECONDS`; a lease not renewed
  for :data:`LEASE_SECONDS` has expired, so a holder killed without giving it back blocks
  its layers for at most that long;
- a lease is free when it has expired, was given back, or its holder is known to be gone: a
  process on this host that no longer exists (a killed local run), or an earlier run of the
  same Databricks job (a continuous job restarted on a new cluster; jobs run one at a time);
- otherwise the command refuses with :class:`~binlake.errors.LeaseHeldError`, naming the
  holder and what to do, and writes nothing.

A holder whose renewal finds another holder (it stalled past :data:`LEASE_SECONDS` and was
taken over) is told through ``on_lost`` and raises :class:`~binlake.errors.LeaseLostError`
once its command has stopped.

Cost: taking the leases and giving them back are one Delta ``UPDATE`` of this three-row table
each (one commit); renewing is one more every :data:`RENEW_SECONDS` from the thread, however
fast ``run --continuous`` loops. A refusal reads the table once more to name the holder.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from binlake.contract.sql import Sql, spark_string, sql, sql_list
from binlake.contract.tables import Lakehouse
from binlake.contract.write_errors import with_retry
from binlake.errors import LakehouseError, LeaseHeldError, LeaseLostError

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.leases")

CAPTURE, SILVER, GOLD = "capture", "silver", "gold"
LAYERS = (CAPTURE, SILVER, GOLD)
"""The layers with one writer at a time. (A snapshot writes bronze beside capture by design,
and ``maintain`` and ``erase`` are safe beside every writer: they take no lease.)"""

# Long enough that a renewal delayed by a busy driver (a long garbage collection, a slow
# commit) does not lose the lease; short enough that a holder nobody can tell is gone (killed
# on another host, outside a Databricks job) blocks its layers only briefly.
LEASE_SECONDS = 300
RENEW_SECONDS = 60

# How long a command waits for another one's creation of the leases table to commit before it
# takes the half-made table for one killed in its creation.
INCOMPLETE_CREATE_SECONDS = 30

LAYOUT_PROPERTY = "binlake.layout_version"
"""The table property of ``leases`` that holds the lakehouse's layout version
(:mod:`binlake.contract.layout`): the leases table is the first thing every writing command
touches, so the version costs no read of its own."""


@dataclass(frozen=True)
class Holder:
    """Who takes a lease: one command in one process. ``id`` is what the table compares; the
    rest describes the holder in a refusal and lets a later process tell it is gone."""

    command: str
    job_id: str | None = None
    job_run_id: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)

    def describe(self) -> str:
        job = f", job {self.job_id}" if self.job_id else ""
        run = f" run {self.job_run_id}" if self.job_run_id else ""
        return f"`binlake {self.command}` (pid {self.pid} on {self.host}{job}{run})"


def ensure_leases_table(spark: SparkLike, lh: Lakehouse, layout_version: int) -> None:
    """Create ``leases`` with one free row per layer, stamped with ``layout_version``; nothing
    when it exists. One CREATE ... AS SELECT: the rows and the stamp are in its first commit,
    so a process racing this one sees the whole table or none."""
    ref = lh.leases
    if ref.exists(spark):
        return
    if ref.name:
        schema = lh.config.lakehouse.system_schema
        if not spark.catalog.databaseExists(f"`{lh.catalog}`.`{schema}`"):
            raise LakehouseError(
                f"schema {lh.catalog}.{schema} (lakehouse.system_schema) does not exist: deploy the bundle, which "
                f"creates it, or run CREATE SCHEMA {lh.catalog}.{schema}"
            )
    rows = sql_list(sql("({layer})", layer=spark_string(layer)) for layer in LAYERS)
    nulls = Sql(
        "CAST(NULL AS STRING) AS holder_id, CAST(NULL AS STRING) AS command, CAST(NULL AS STRING) AS host, "
        "CAST(NULL AS BIGINT) AS pid, CAST(NULL AS STRING) AS job_id, CAST(NULL AS STRING) AS job_run_id, "
        "CAST(NULL AS TIMESTAMP) AS acquired_at, CAST(NULL AS TIMESTAMP) AS renewed_at, "
        "CAST(NULL AS TIMESTAMP) AS expires_at"
    )

    def create() -> None:
        statement = sql(
            "CREATE TABLE IF NOT EXISTS {t} USING DELTA "
            "COMMENT 'binlake: which process writes which layer; the lakehouse layout version' "
            "TBLPROPERTIES ({key} = {version}) "
            "AS SELECT layer, {nulls} FROM VALUES {rows} AS v(layer)",
            t=ref.sql,
            key=spark_string(LAYOUT_PROPERTY),
            version=spark_string(str(int(layout_version))),
            nulls=nulls,
            rows=rows,
        )
        spark.sql(statement)

    try:
        with_retry("create the leases table", create)
    except Exception as exc:
        if ref.name or not _is_creation_under_way(exc):
            raise
    if ref.name or ref.exists(spark):
        return
    # Another process's creation is under way at this path, or was killed before its first
    # commit: Spark takes a path whose log directory exists as a table and creates nothing, and
    # refuses a path holding the data files of a creation not yet committed.
    deadline = time.monotonic() + INCOMPLETE_CREATE_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if ref.exists(spark):
            return
    log.warning("%s: a creation killed before its first commit left files but no table: created again", ref)
    # Nothing at the path was committed, so nothing there is a table's content.
    shutil.rmtree(ref._local_path(), ignore_errors=True)
    with_retry("create the leases table", create)


def _is_creation_under_way(exc: BaseException) -> bool:
    """True for Delta's refusal to create a table at a path that holds files but no table:
    another process's CREATE ... AS SELECT wrote its data files and has not committed yet."""
    return "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION" in str(exc)


class Leases:
    """The leases of ``layers`` held by ``holder`` (use :func:`holding`)."""

    def __init__(
        self,
        spark: SparkLike,
        lh: Lakehouse,
        layers: Sequence[str],
        holder: Holder,
        lease_seconds: int = LEASE_SECONDS,
        renew_seconds: float = RENEW_SECONDS,
    ):
        unknown = sorted(set(layers) - set(LAYERS))
        if unknown or not layers:
            raise ValueError(f"layers must be some of {', '.join(LAYERS)}, got {list(layers)}")
        self.spark, self.ref, self.holder = spark, lh.leases, holder
        self.layers = tuple(layer for layer in LAYERS if layer in layers)
        self.lease_seconds, self.renew_seconds = int(lease_seconds), renew_seconds
        self.lost = threading.Event()

    # -- the three writes: take, renew, give back. Each is one UPDATE whose condition decides;
    # two processes racing for a row conflict in Delta, and the retry re-evaluates the condition.

    def _update(self, layers: Sequence[str], assignments: str, condition: str) -> int:
        statement = sql(
            "UPDATE {t} SET {assignments} WHERE layer IN ({layers}) AND ({condition})",
            t=self.ref.sql,
            assignments=Sql(assignments),
            layers=sql_list(spark_string(layer) for layer in layers),
            condition=Sql(condition),
        )
        return int(with_retry("lease update", lambda: self.spark.sql(statement).collect())[0][0])

    def _take(self, layers: Sequence[str], condition: str) -> int:
        h = self.holder
        me = spark_string(h.id)
        text = lambda v: "NULL" if v is None else spark_string(str(v))  # noqa: E731
        assignments = (
            f"acquired_at = CASE WHEN holder_id <=> {me} THEN acquired_at ELSE current_timestamp() END, "
            f"holder_id = {me}, command = {text(h.command)}, host = {text(h.host)}, pid = {int(h.pid)}, "
            f"job_id = {text(h.job_id)}, job_run_id = {text(h.job_run_id)}, renewed_at = current_timestamp(), "
            f"expires_at = current_timestamp() + INTERVAL {self.lease_seconds} SECONDS"
        )
        return self._update(layers, assignments, condition)

    def acquire(self) -> None:
        """Take every lease or none; raise :class:`LeaseHeldError` naming the first live holder."""
        me = spark_string(self.holder.id)
        free = f"expires_at IS NULL OR expires_at <= current_timestamp() OR holder_id = {me}"
        if self.holder.job_id:
            free += f" OR job_id <=> {spark_string(self.holder.job_id)}"
        if self._take(self.layers, free) == len(self.layers):
            return
        # Some layer has a live holder; it may still be gone: a process of this host that no longer runs.
        for row in self.rows():
            if row["layer"] in self.layers and row["holder_id"] != self.holder.id and _gone(row):
                log.info("taking over the %s lease of %s, which no longer runs", row["layer"], _holder(row).describe())
                self._take([row["layer"]], f"holder_id <=> {spark_string(row['holder_id'])}")
        held = {row["layer"]: row for row in self.rows()}
        others = [held[layer] for layer in self.layers if held[layer]["holder_id"] != self.holder.id]
        if others:
            if len(others) < len(self.layers):  # give back the ones this holder did get
                self.release()
            raise LeaseHeldError(_refusal(others[0]))

    def renew(self) -> bool:
        """Extend the leases; False when another holder took one of them."""
        me = spark_string(self.holder.id)
        assignments = (
            "renewed_at = current_timestamp(), "
            f"expires_at = current_timestamp() + INTERVAL {self.lease_seconds} SECONDS"
        )
        return self._update(self.layers, assignments, f"holder_id = {me}") == len(self.layers)

    def release(self) -> None:
        """Give the leases back (the row keeps who held it last, for ``binlake status``)."""
        me = spark_string(self.holder.id)
        self._update(self.layers, "expires_at = current_timestamp()", f"holder_id = {me}")

    def rows(self) -> list:
        return self.spark.sql(sql("SELECT *, current_timestamp() AS now FROM {t}", t=self.ref.sql)).collect()

    def raise_if_lost(self) -> None:
        if self.lost.is_set():
            raise LeaseLostError(
                f"the {'/'.join(self.layers)} lease of {self.holder.describe()} was taken over while it ran (it was "
                f"not renewed for {self.lease_seconds} s: the process stalled or lost the lakehouse); it stopped "
                "writing at the next step: check what the other writer is, then run the command again"
            )


def _holder(row) -> Holder:
    return Holder(
        command=row["command"] or "?",
        job_id=row["job_id"],
        job_run_id=row["job_run_id"],
        id=row["holder_id"],
        host=row["host"] or "?",
        pid=int(row["pid"] or 0),
    )


def _live(row) -> bool:
    return row["holder_id"] is not None and row["expires_at"] is not None and row["expires_at"] > row["now"]


def _gone(row) -> bool:
    """A live lease whose holder ran on this host and is no longer running."""
    if not _live(row) or row["host"] != socket.gethostname() or not row["pid"]:
        return False
    try:
        os.kill(int(row["pid"]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: it runs
        return False
    return False


def _refusal(row) -> str:
    until = row["expires_at"].strftime("%Y-%m-%d %H:%M:%S")
    return (
        f"the {row['layer']} layer is being written by {_holder(row).describe()}, whose lease runs until {until} UTC "
        "unless renewed: one process writes a layer at a time. Let it finish or stop it (binlake_continuous and "
        "the scheduled binlake_pipeline must not both run: pause one), then run this again; a holder killed "
        "without giving the lease back blocks the layer until its lease expires"
    )


def current_holders(spark: SparkLike, lh: Lakehouse) -> dict[str, dict]:
    """Each layer's live lease: ``{layer: {holder, since, until}}`` (``binlake status``)."""
    if not lh.leases.exists(spark):
        return {}
    rows = spark.sql(sql("SELECT *, current_timestamp() AS now FROM {t}", t=lh.leases.sql)).collect()
    return {
        r["layer"]: {"holder": _holder(r).describe(), "since": r["acquired_at"], "until": r["expires_at"]}
        for r in rows
        if _live(r)
    }


@contextmanager
def holding(
    spark: SparkLike,
    lh: Lakehouse,
    layers: Sequence[str],
    holder: Holder,
    on_lost: Callable[[], None] | None = None,
    lease_seconds: int = LEASE_SECONDS,
    renew_seconds: float = RENEW_SECONDS,
) -> Iterator[Leases]:
    """Hold the leases of ``layers`` inside the block, renewed by a thread; ``on_lost`` is
    called (from that thread) when one was taken over. Gives them back however the block ends."""
    leases = Leases(spark, lh, layers, holder, lease_seconds, renew_seconds)
    leases.acquire()
    stop = threading.Event()

    def renew_until_stopped() -> None:
        while not stop.wait(leases.renew_seconds):
            try:
                kept = leases.renew()
            except Exception as exc:  # noqa: BLE001 - a failed renewal is retried; the lease has slack
                log.warning("lease renewal failed, retrying: %s", (str(exc).splitlines() or [""])[0][:200])
                continue
            if not kept:
                log.error("%s lost its %s lease", holder.describe(), "/".join(leases.layers))
                leases.lost.set()
                if on_lost is not None:
                    on_lost()
                return

    renewer = threading.Thread(target=renew_until_stopped, name="binlake-lease", daemon=True)
    renewer.start()
    try:
        yield leases
    finally:
        stop.set()
        renewer.join()
        if not leases.lost.is_set():
            try:
                leases.release()
            except Exception as exc:  # noqa: BLE001 - never hide the block's own outcome; it expires anyway
                log.warning("lease not given back (it expires by itself): %s", (str(exc).splitlines() or [""])[0][:200])
