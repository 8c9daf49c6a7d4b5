"""MariaDB GTID positions: what capture records with every batch, and how it finds its place
on another server of the same replication topology.

A MariaDB GTID is ``domain-server-sequence``; a *GTID position* holds the last GTID of each
replication domain (``0-1-100,1-2-7``), which names a point in the history every server of
the topology shares, whatever their binlog files are called. ``@@gtid_binlog_pos`` is a
server's position at its binlog end; ``BINLOG_GTID_POS(file, pos)`` is the one at a point
of its binlog.

MySQL's GTID sets are not handled here: on MySQL a source switch stops capture with the
re-snapshot recovery (docs/capture.md).
"""

from __future__ import annotations

import re

import pymysql

from binlake.config import SourceConfig
from binlake.contract.position import BinlogPosition
from binlake.errors import GtidNotFound
from binlake.source.mysql import master_status, query

_GTID = re.compile(r"^\d+-\d+-\d+$")
_EVENT_GTID = re.compile(r"GTID (\d+-\d+-\d+)")


def parse(position: str | None) -> dict[int, tuple[int, int]]:
    """``"0-1-100,1-2-7"`` -> ``{0: (1, 100), 1: (2, 7)}`` (domain -> (server, sequence))."""
    out: dict[int, tuple[int, int]] = {}
    for part in (position or "").split(","):
        part = part.strip()
        if not part:
            continue
        if not _GTID.match(part):
            raise ValueError(f"GTID {part!r} is not DOMAIN-SERVER-SEQUENCE (e.g. 0-1-100)")
        domain, server, seq = (int(x) for x in part.split("-"))
        out[domain] = (server, seq)
    return out


def text(state: dict[int, tuple[int, int]]) -> str:
    return ",".join(f"{d}-{s}-{n}" for d, (s, n) in sorted(state.items()))


def advance(position: str | None, later: str | None) -> str | None:
    """The GTID position after ``position`` once the GTIDs in ``later`` (the last one of each
    domain that a stretch of binlog holds) have been applied."""
    if position is None:
        return None
    state = parse(position)
    state.update(parse(later))
    return text(state)


def covers(server_position: str, position: str) -> bool:
    """Whether a server whose binlog ends at ``server_position`` has logged every GTID of
    ``position`` (per domain, a sequence at least as high)."""
    server = parse(server_position)
    return all(d in server and server[d][1] >= n for d, (_, n) in parse(position).items())


def gtid_at(conn: pymysql.connections.Connection, pos: BinlogPosition) -> str | None:
    """The GTID position at a transaction boundary of this server's binlog (None if the
    server cannot tell: no such file, or not a boundary)."""
    rows = query(conn, "SELECT BINLOG_GTID_POS(%s, %s) AS g", (pos.file, pos.pos))
    return rows[0]["g"] if rows else None


def binlog_position(conn: pymysql.connections.Connection) -> str:
    return str(query(conn, "SELECT @@gtid_binlog_pos AS g")[0]["g"] or "")


def event_gtid_at(conn: pymysql.connections.Connection, pos: BinlogPosition) -> tuple[bool, str | None]:
    """(is ``pos`` an event boundary of this server's binlog, the GTID of the transaction
    that starts there, if one does). One event is read; the server seeks to it directly."""
    try:
        rows = query(conn, f"SHOW BINLOG EVENTS IN %s FROM {int(pos.pos)} LIMIT 1", (pos.file,))
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] == 1220:  # "Wrong offset or I/O error", "Invalid pos specified"
            return False, None
        raise
    if not rows:
        return True, None
    info = str(rows[0].get("Info") or "")
    m = _EVENT_GTID.search(info) if rows[0].get("Event_type") == "Gtid" else None
    return True, (m.group(1) if m else None)


def position_after(
    source: SourceConfig, server_id: int, conn: pymysql.connections.Connection, position: str
) -> BinlogPosition:
    """Where, in this server's binlog, the history named by the GTID position ends: the
    transaction boundary right after its last transaction of every domain.

    The server is asked the way a replica asks it (a GTID binlog dump): it refuses a GTID it
    does not have, and its first transaction in the dump is the first one after
    ``position``. The boundary found is checked with ``SHOW BINLOG EVENTS``. Raises
    :class:`GtidNotFound` when the server's binlog does not hold the position.
    """
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import (
        MariadbGtidEvent,
        MariadbGtidListEvent,
        RotateEvent,
    )

    from binlake.source.binlog.dump import stream_settings

    here = binlog_position(conn)
    if not covers(here, position):
        raise GtidNotFound(f"its binlog ends at GTID {here or '(none)'}, before {position}")
    end = master_status(conn)
    if parse(gtid_at(conn, end)) == parse(position):
        return end  # nothing after the position: it is the binlog's end
    stream = BinLogStreamReader(
        connection_settings=stream_settings(source),
        server_id=server_id,
        auto_position=position,
        is_mariadb=True,
        blocking=False,
        enable_logging=False,
        only_events=[RotateEvent, MariadbGtidListEvent, MariadbGtidEvent],
    )
    file, start = None, None
    try:
        for event in stream:
            if isinstance(event, RotateEvent):
                file = event.next_binlog
            elif isinstance(event, MariadbGtidListEvent) and event.packet.log_pos:
                start = event.packet.log_pos  # the fake list sent just before the first transaction
            elif isinstance(event, MariadbGtidEvent):
                file = stream.log_file or file
                first = event.gtid
                break
        else:
            first = None
    except pymysql.err.OperationalError as exc:
        raise GtidNotFound(str(exc.args[1] if len(exc.args) > 1 else exc)) from None
    finally:
        stream.close()
    if first is None:
        # Nothing after the position yet: it is the end of the binlog.
        end = master_status(conn)
        if parse(gtid_at(conn, end)) != parse(position):
            raise GtidNotFound(f"found no transaction after GTID {position} and the binlog does not end there")
        return end
    if file is None or start is None:
        raise GtidNotFound(f"the server did not say where GTID {first} starts")
    found = BinlogPosition(file, int(start))
    boundary, gtid = event_gtid_at(conn, found)
    if not boundary or gtid != first:
        raise GtidNotFound(f"the server's position {found} for GTID {first} does not hold it")
    if parse(position).get(int(first.split("-")[0]), (0, -1))[1] >= int(first.split("-")[2]):
        raise GtidNotFound(f"the server's next transaction {first} is not after GTID {position}")
    return found
