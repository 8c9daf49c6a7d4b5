"""Connections to the MySQL/MariaDB source and the few statements every part asks it.

Every SQL string binlake builds quotes identifiers with
:func:`binlake.contract.sql.quote_ident` and passes values as parameters: no name or value
is ever pasted unquoted.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pymysql
import pymysql.cursors

from binlake.config import SourceConfig
from binlake.contract.position import BinlogPosition
from binlake.contract.sql import quote_ident
from binlake.contract.types import Kind
from binlake.errors import ArchiveSourceError, SourceConnectionError


def exact_value_sql(column) -> str:
    """The SELECT expression that returns a column's stored value exactly.

    The text protocol prints FLOAT with 6 significant digits (``0.482375`` for the stored
    float32 ``0.48237514...``), while the binlog carries the exact bits; widening to DOUBLE
    in the server keeps every bit, so a snapshot and a binlog image give one value.
    """
    name = quote_ident(column.name)
    return f"CAST({name} AS DOUBLE)" if column.kind is Kind.FLOAT else name


def connection_kwargs(source: SourceConfig, database: str | None = None) -> dict[str, Any]:
    """pymysql.connect keyword arguments for the source (also used on Spark executors)."""
    kwargs: dict[str, Any] = dict(
        host=source.host,
        port=source.port,
        user=source.user,
        password=source.password.reveal(),
        database=database,
        charset="utf8mb4",
        connect_timeout=source.connect_timeout,
        autocommit=True,
    )
    if source.tls.enabled:
        ctx = ssl.create_default_context(cafile=source.tls.ca)
        ctx.check_hostname = source.tls.verify_identity
        if source.tls.cert:
            ctx.load_cert_chain(source.tls.cert, source.tls.key)
        kwargs["ssl"] = ctx
    return kwargs


def connect(source: SourceConfig, database: str | None = None, **overrides: Any) -> pymysql.connections.Connection:
    """Open a connection, turning driver errors into one-line :class:`SourceConnectionError`."""
    if source.archive is not None:
        raise ArchiveSourceError(
            f"the source is the binlog archive {source.archive} (source.archive), and this needs a MySQL server: "
            "capture, silver, gold, run and status read an archive; for the rest point source at the server"
        )
    kwargs = {**connection_kwargs(source, database), **overrides}
    where = f"{source.host}:{source.port}"
    try:
        conn = pymysql.connect(**kwargs)
    except pymysql.err.OperationalError as exc:
        code = exc.args[0] if exc.args else 0
        if code == 1045:
            if not source.tls.enabled and _login_works_over_tls(kwargs):
                raise SourceConnectionError(
                    f"MySQL at {where} requires TLS for user {source.user!r}: set source.tls.ca to the server's CA "
                    "certificate"
                ) from None
            raise SourceConnectionError(
                f"MySQL at {where} refused user {source.user!r}: check source.user and source.password"
            ) from None
        text = str(exc)
        if code == 3159 or "secure transport" in text.lower():
            raise SourceConnectionError(
                f"MySQL at {where} requires TLS: set source.tls.ca to the server's CA certificate"
            ) from None
        # A failed certificate check surfaces as 2003 "Can't connect ... ([SSL: ...])": test
        # for TLS first, or a bad CA would read as an unreachable server.
        if code == 1043 or "SSL" in text or "certificate" in text.lower() or (code == 2013 and source.tls.enabled):
            raise SourceConnectionError(
                f"TLS handshake with {where} failed: check source.tls (ca, cert, key) matches the server's certificates"
            ) from None
        if code == 2003:
            raise SourceConnectionError(
                f"cannot reach MySQL at {where}: check source.host and source.port, and that the server is running"
            ) from None
        raise SourceConnectionError(
            f"cannot connect to MySQL at {where} (error {code}): check the source settings"
        ) from None
    except ssl.SSLError:
        raise SourceConnectionError(
            f"TLS handshake with {where} failed: check source.tls (ca, cert, key) matches the server's certificates"
        ) from None
    except pymysql.err.InternalError as exc:
        raise SourceConnectionError(f"MySQL at {where} rejected the connection (error {exc.args[0]})") from None
    if "time_zone" not in overrides:
        # TIMESTAMP values come back as UTC wall clock, matching the binlog decoder.
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
    return conn


def _login_works_over_tls(kwargs: dict[str, Any]) -> bool:
    """After "access denied" without TLS: would the same login succeed over TLS?

    MariaDB answers an account created with REQUIRE SSL exactly like a wrong password
    (1045), so the only way to tell the operator what to fix is to try. The probe does not
    verify the certificate, but it sends nothing the plain-text attempt did not already
    expose (the same challenge-response, to the same host and port), and only its success
    or failure is used.
    """
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        pymysql.connect(**{**kwargs, "ssl": ctx}).close()
    except Exception:  # noqa: BLE001 - any failure means "TLS is not the missing piece"
        return False
    return True


def query(conn: pymysql.connections.Connection, sql: str, args: Any = None) -> list[dict[str, Any]]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def stream(conn: pymysql.connections.Connection, sql: str, args: Any = None) -> Iterator[tuple]:
    """Unbuffered rows: memory stays flat whatever the result size."""
    with conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(sql, args)
        yield from cur


def is_mariadb(conn: pymysql.connections.Connection) -> bool:
    """From the handshake's version string: no round trip."""
    return "mariadb" in conn.get_server_info().lower()


def server_version(conn: pymysql.connections.Connection) -> tuple[int, int, int]:
    """``(major, minor, patch)`` from the handshake's version string."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", conn.get_server_info())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else (0, 0, 0)


def server_id(conn: pymysql.connections.Connection) -> int:
    """The server's ``@@server_id``: which server of a replication topology this is."""
    return int(query(conn, "SELECT @@server_id AS s")[0]["s"])


def master_status(conn: pymysql.connections.Connection) -> BinlogPosition:
    """The server's current binlog end: always a transaction boundary.

    MySQL 8.2 renamed ``SHOW MASTER STATUS`` to ``SHOW BINARY LOG STATUS`` and 8.4 removed
    the old name; MariaDB keeps it.
    """
    modern = not is_mariadb(conn) and server_version(conn) >= (8, 2, 0)
    rows = query(conn, "SHOW BINARY LOG STATUS" if modern else "SHOW MASTER STATUS")
    if not rows:
        raise SourceConnectionError("the source has no binary log: start it with log_bin enabled (see preflight)")
    return BinlogPosition(rows[0]["File"], int(rows[0]["Position"]))


@dataclass
class ConsistentRead:
    """The binlog positions that bound a consistent read: ``low`` before it, ``high`` after.

    ``exact`` means both name the one position whose effects the read sees: every
    transaction that ends at or before it is visible, and none after it.
    """

    low: BinlogPosition
    high: BinlogPosition
    exact: bool


class consistent_read:
    """``with consistent_read(conn) as read:`` run SELECTs that see one snapshot; ``read.low``
    is set on entry, ``read.high`` on exit.

    A transaction is written to the binlog before the storage engine makes it visible (the
    two-phase commit), so a position from ``SHOW MASTER STATUS`` followed by a SELECT can
    miss a transaction that ended before the position: its change would then sort below
    the snapshot row and lose. MariaDB closes that window: ``START TRANSACTION WITH
    CONSISTENT SNAPSHOT`` reports in ``Binlog_snapshot_file`` / ``Binlog_snapshot_position``
    exactly the binlog position its snapshot corresponds to (low and high watermark at
    once). MySQL has no such status: there the low watermark is read before the snapshot
    starts and the high one after it ends, the window stays (docs/snapshot.md says what it
    means).
    """

    def __init__(self, conn: pymysql.connections.Connection):
        self.conn = conn
        self.read: ConsistentRead | None = None

    def __enter__(self) -> ConsistentRead:
        conn = self.conn
        with conn.cursor() as cur:
            # The snapshot is only consistent under REPEATABLE READ; SET TRANSACTION applies
            # to the next transaction only and leaves the session's default alone.
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        if is_mariadb(conn):
            with conn.cursor() as cur:
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            status = {
                r["Variable_name"].lower(): r["Value"] for r in query(conn, "SHOW STATUS LIKE 'binlog_snapshot_%'")
            }
            at = BinlogPosition(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))
            self.read = ConsistentRead(at, at, exact=True)
        else:
            low = master_status(conn)
            with conn.cursor() as cur:
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            self.read = ConsistentRead(low, low, exact=False)
        return self.read

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.conn.rollback()  # the read wrote nothing; ending it releases the snapshot
        except pymysql.err.MySQLError:
            if exc_type is None:
                raise
            return
        if exc_type is None and self.read is not None and not self.read.exact:
            self.read.high = master_status(self.conn)


def binary_logs(conn: pymysql.connections.Connection) -> list[tuple[str, int]]:
    """(file, size) of every binlog file still on the server, oldest first."""
    return [(r["Log_name"], int(r["File_size"])) for r in query(conn, "SHOW BINARY LOGS")]


def server_variables(conn: pymysql.connections.Connection, *names: str) -> dict[str, str]:
    out = {}
    for name in names:
        rows = query(conn, "SHOW GLOBAL VARIABLES LIKE %s", (name,))
        if rows:
            out[name] = str(rows[0]["Value"])
    return out
