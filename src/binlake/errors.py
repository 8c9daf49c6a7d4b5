"""The exceptions binlake raises: one per failure mode, each with a message that says
what to fix. The CLI prints ``str(exc)`` as a single line and exits non-zero."""

from __future__ import annotations

import re
from typing import Any


class BinlakeError(Exception):
    """Base class. ``exit_code`` is what the CLI returns for this failure; ``result`` is what
    a command that did part of its work completed before failing (its own result object: the
    :class:`~binlake.silver.run.SilverResult` whose stopped tables say why, the
    :class:`~binlake.gold.publish.GoldResult` of the groups that published, the
    :class:`~binlake.ops.verify.VerifyResult` with its mismatches), else None.
    ``pipeline_result`` is the :class:`~binlake.ops.pipeline.PipelineResult` of the steps a
    ``binlake run`` completed before this error stopped it, else None."""

    exit_code = 1
    result: Any = None
    pipeline_result: Any = None

    def __init__(self, message: str, *, result: Any = None):
        # One line, always: schedulers and log greps depend on it.
        super().__init__(" ".join(str(message).split()))
        if result is not None:
            self.result = result


class ConfigError(BinlakeError):
    """The configuration file is missing, malformed or has a bad value."""

    exit_code = 2


class SourceConnectionError(BinlakeError):
    """The MySQL/MariaDB source cannot be reached or refused the login."""

    exit_code = 3


class ArchiveSourceError(ConfigError):
    """The source is a binlog archive (``source.archive``) and what was asked needs a server
    (a snapshot, verify, preflight, a table snapshotted because of a RENAME or a widened
    table filter); the message says what to do instead."""


class PreflightError(BinlakeError):
    """The source is not set up for change capture; ``problems`` lists every fix, ``report``
    is the whole :class:`~binlake.source.preflight.PreflightReport` when preflight ran."""

    exit_code = 4
    report: Any = None

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        n = len(self.problems)
        super().__init__(f"preflight found {n} problem{'s' if n != 1 else ''}: " + " | ".join(self.problems))


class BinlogPurgedError(BinlakeError):
    """The binlog file capture must resume from is no longer on the server."""

    exit_code = 5

    def __init__(self, missing_file: str, oldest_file: str, tables: list[str], missing: list[str] | None = None):
        self.missing_file = missing_file
        self.oldest_file = oldest_file
        self.tables = list(tables)
        table_args = " ".join(f"--table {t}" for t in self.tables) or "(all captured tables)"
        if missing:
            # capture.on_purge: archive, and the archive does not close the gap either.
            super().__init__(
                f"binlog {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} needed to resume capture from "
                f"{missing_file} is neither on the server (oldest: {oldest_file}) nor in capture.archive; "
                f"copy it into the archive, or recover with: binlake snapshot --reset-capture {table_args}"
            )
            return
        super().__init__(
            f"binlog {missing_file} needed to resume capture has been purged (oldest on server: {oldest_file}); "
            f"recover with: binlake snapshot --reset-capture {table_args} "
            "(or set capture.on_purge: archive or resnapshot to do this automatically)"
        )


class SourceChangedError(BinlakeError):
    """The source is no longer the binlog capture was reading (another server after a
    switch, or a reset or restored binlog) and capture cannot find its place in it."""

    exit_code = 5


class BinlogDecodeError(BinlakeError):
    """The binlog holds an event or a value binlake cannot decode. Capture stops before it,
    with nothing after it committed; the message names the event, where it starts and the fix."""

    exit_code = 16


class BinlogArchiveError(BinlogDecodeError):
    """A file of the binlog archive (``capture.archive``) cannot be read: not a binlog file, cut
    short before its end, or missing a position capture needs; the message names the file."""


class ArchiveUnreadableError(BinlogDecodeError):
    """A source that is only a binlog archive (``source.archive``) has no server to read a
    table from, so every change of a captured table must be in the files as rows under known
    columns: a TABLE_MAP without column names (``binlog_row_metadata=MINIMAL``) or without a
    key, or a change logged as a statement or as a partial image silver cannot complete, stops
    capture. The message names the table, the position and the fix."""


class BinlogEndedEarly(RuntimeError):
    """A binlog dump ended before the planned end of its range (the server lost the tail of a
    file, a restart): not a BinlakeError, because planning the batch again from the server's
    files is the fix, so capture retries it."""


class GtidNotFound(Exception):
    """The server's binlog does not hold the GTID position (the reason is the message):
    capture then takes the re-snapshot path (:class:`SourceChangedError`)."""


class UnsupportedTypeError(ValueError):
    """A MySQL column type binlake has no mapping for (preflight lists them with the fix)."""


class TableDefinitionChanged(Exception):
    """A snapshot chunk's table changed definition after its read's consistent snapshot
    began (MySQL error 1412): the chunk is read again while attempts remain."""


class LocalMariaDBError(RuntimeError):
    """The local MariaDB of ``make demo`` and the tests cannot be set up or reached."""


class BinlogReadError(ValueError):
    """What the binlog parser could not read, before anyone knows where it is: the reader of a
    range turns it into :class:`BinlogDecodeError` with the position, or, when only one table's
    change is lost (see the subclasses), into a change that stops that table in silver."""


class TruncatedEventError(BinlogReadError):
    """An event's bytes end before one of its fields does, or fail their checksum."""


class UnsupportedEventError(BinlogReadError):
    """An event binlake does not decode; ``reason`` says what to do about it."""

    def __init__(self, event_name: str, reason: str):
        self.event_name = event_name
        self.reason = reason
        super().__init__(f"{event_name}: {reason}")


class TableMapError(BinlogReadError):
    """A TABLE_MAP binlake cannot read (malformed, or a column type it does not know);
    ``schema`` and ``table`` name its table when the event got that far."""

    def __init__(self, message: str, table_id: int | None = None, schema: str | None = None, table: str | None = None):
        super().__init__(message)
        self.table_id = table_id
        self.schema = schema
        self.table = table


class UnsupportedColumnError(BinlogReadError):
    """A column whose binlog values binlake cannot decode (its type, and why)."""


class JsonDecodeError(BinlogReadError):
    """A value is not valid MySQL binary JSON, a diff list or its path is malformed, or a before
    value given as text is not JSON: ``offset`` is the byte of the value where reading failed
    (None for a path or text), the message says what was wrong there. MySQL never writes such
    a value, so this is a corrupt event or a bug to report, not a setting to change."""

    def __init__(self, message: str, offset: int | None = None):
        self.offset = offset
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"malformed MySQL JSON value{where}: {message}")


class UnsupportedJsonDiffError(BinlogReadError):
    """A partial JSON update that cannot be applied exactly to the before image's document.
    Capture keeps such a change as one its table's silver must stop on (the source is the one
    to change: it decides what it logs)."""

    def __init__(self, operation: str, path: str, reason: str):
        self.operation = operation
        self.path = path
        self.reason = reason
        super().__init__(
            f"cannot apply the partial JSON update {operation} {path}: {reason}; "  # noqa: S608 - a message, not SQL
            "have the source log whole JSON documents: SET PERSIST binlog_row_value_options = '' "
            "(binlog_row_value_options= in my.cnf), then re-snapshot the table"
        )


class PartialJsonWithoutBeforeError(BinlogReadError):
    """A partial JSON update whose before image lacks the JSON column, so the diff has
    nothing to apply to (``binlog_row_value_options=PARTIAL_JSON`` with a MINIMAL image)."""

    def __init__(self, columns: list[str]):
        self.columns = columns
        super().__init__(f"partial JSON update of {', '.join(columns)} without the before value")


class SchemaChangeError(BinlakeError):
    """A DDL change that silver cannot apply in place; the table needs a re-snapshot."""

    exit_code = 6


class CascadeError(SchemaChangeError):
    """The foreign-key actions of one silver batch did not settle (a chain of cascaded steps
    longer than ``binlake.silver.cascade.MAX_ROUNDS``): silver stops rather than guess."""


class DefaultBackfillError(SchemaChangeError):
    """An ADD COLUMN gave the table's existing rows a value binlake cannot know exactly (an
    expression DEFAULT, ``CURRENT_TIMESTAMP(6)``, ...): silver stops the table rather than
    publish NULL for it; a re-snapshot of the table recovers it."""


class SilverTableError(BinlakeError):
    """Silver could not apply a table for a reason other than a schema change (an error of
    Spark, Delta or the table itself): that table keeps its progress and says why in
    ``status``, the other tables were applied; running silver again after the cause is fixed
    applies it."""

    exit_code = 18


class IncompleteChangeError(BinlakeError):
    """The binlog holds a change of a table without what silver needs to apply it exactly (a
    writer session logged it as SQL text, or without columns silver cannot fill in); the table
    is stopped until a re-snapshot covers the change."""

    exit_code = 6


class QualityCheckFailed(BinlakeError):
    """A gold check with severity ``fail`` failed; the last good gold version is kept.
    ``tables`` and ``blocked`` as for :class:`NotReadyError`."""

    exit_code = 7
    tables: list[str] | None = None
    blocked: dict[str, NotReadyError | QualityCheckFailed] | None = None


class VerifyMismatch(BinlakeError):
    """``verify`` found chunks whose content differs between source and silver."""

    exit_code = 8


class LakehouseError(BinlakeError):
    """The lakehouse location cannot be written (permissions, disk full, missing path)."""

    exit_code = 9


class NotReadyError(BinlakeError):
    """A command ran before what it depends on exists (e.g. gold before any silver).

    Gold's: ``blockers`` maps each table that blocks a publish to why; ``tables`` are the
    tables of the publish group it blocked; ``blocked`` (on the error a gold run raises) maps
    each blocked group to its own error."""

    exit_code = 10
    blockers: dict[str, list[str]] | None = None
    tables: list[str] | None = None
    blocked: dict[str, NotReadyError | QualityCheckFailed] | None = None


class TableNameClash(ConfigError):
    """Two captured source tables would share one lakehouse table (``a__b.c`` and ``a.b__c``
    are both ``a__b__c`` on Unity Catalog; ``x__history`` is ``x``'s history table)."""


class SecretError(ConfigError):
    """A Databricks secret the config references cannot be read; names scope/key, never the value."""


class MissingDependencyError(ConfigError):
    """An optional library a command needs is not installed; names the pip command."""


class LagExceededError(BinlakeError):
    """``binlake status --check``: capture or gold is further behind the source than
    ``health.max_lag_seconds``."""

    exit_code = 12


class LayoutOutdatedError(NotReadyError):
    """The lakehouse was laid out by an earlier binlake and a read-only command cannot move it;
    ``binlake migrate`` (or any command that writes) does, once."""


class LayoutTooNewError(LakehouseError):
    """The lakehouse was laid out by a newer binlake than this one: run that version."""


class ErasureRefused(BinlakeError):
    """``binlake erase`` would not make the key go away for good (the source or silver still
    has it live, or a snapshot of the table is in flight); nothing was deleted."""

    exit_code = 13


class DatabricksApiError(BinlakeError):
    """The Databricks workspace cannot be reached or refused a request (e.g. ``jobs status``)."""

    exit_code = 11


class ComputeError(BinlakeError):
    """The Spark session binlake was given cannot run it; the message names the compute that can."""

    exit_code = 14


class ConnectWithoutDeltaError(ComputeError):
    """A Spark Connect server without Delta Lake's SQL extension: binlake's tables are Delta tables."""


class ConnectWorkersWithoutBinlakeError(ComputeError):
    """A Spark Connect server whose Python workers cannot import binlake (or run another
    version of it): the snapshot and binlog readers run there."""


class InternalInvariantError(BinlakeError):
    """Something binlake guarantees itself did not hold (a bug in binlake, not a failure of the
    source or the lakehouse): the command stops at once, retrying would not help, and what was
    in flight is not committed."""

    exit_code = 17


class LeaseError(BinlakeError):
    """A layer (capture, silver or gold) has one writer at a time, fenced by a lease in the
    system table ``leases``; the message names the holder and what to do."""

    exit_code = 15


class LeaseHeldError(LeaseError):
    """Another live process holds the lease of a layer this command writes; nothing was written."""


class LeaseLostError(LeaseError):
    """This process lost its lease while it ran (it was not renewed in time, so another process
    took the layer): it stopped writing as soon as it could."""


_RAISED_ON_WORKER = re.compile(r"binlake\.errors\.(?P<name>[A-Za-z]+): (?P<message>[^\n]*)")


def raised_on_worker(exc: BaseException) -> BinlakeError | None:
    """The binlake error a Spark task raised, from the exception the driver got for it.

    Spark hands a Python task's exception to the driver as text (a traceback inside a JVM
    exception); this finds binlake's error in it so that the driver stops with the same named
    error instead of treating it as a transient failure. None when the task raised no binlake
    error."""
    found = _RAISED_ON_WORKER.findall(str(exc))
    for name, message in reversed(found):
        cls = globals().get(name)
        if isinstance(cls, type) and issubclass(cls, BinlakeError) and cls.__init__ is BinlakeError.__init__:
            return cls(message)
    return None


def cause_of(exc: BaseException) -> str:
    """One line saying what an unexpected exception says: its type and the first line of its
    message. For an error raised in Spark's JVM and passed on by Py4J, that is the Java
    exception's simple class name and message, not Py4J's "An error occurred while calling
    o72.sql"."""
    kind, lines = type(exc).__name__, [line.strip() for line in str(exc).splitlines() if line.strip()]
    if lines and lines[0].startswith("An error occurred while calling") and len(lines) > 1:
        java_class, _, message = lines[1].lstrip(": ").partition(": ")
        kind, lines = java_class.rsplit(".", 1)[-1], [message.strip(), *lines[2:]]
    text = lines[0] if lines else ""
    # A message ending in a colon goes on in its next line (the values a constraint rejected,
    # the constraints that name a column); a Java stack trace's lines start with "at".
    if text.endswith(":") and len(lines) > 1 and not lines[1].startswith("at "):
        text = f"{text} {lines[1]}"
    return f"{kind}: {text[:300]}" if text else kind
