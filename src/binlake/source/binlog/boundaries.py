"""Transaction boundaries: the positions a binlog read may stop at and resume from.

A capture batch ends on a transaction boundary so that a restart never begins inside a
transaction (whose TABLE_MAP events it would miss). A boundary follows an XID, a COMMIT or
ROLLBACK statement, an XA PREPARE (the end of an XA transaction's branch in the binlog) or
XA COMMIT / XA ROLLBACK, and a statement outside any transaction (DDL commits implicitly).
Inside a transaction (after BEGIN, XA START, or a MariaDB GTID event that opens one) a
statement-format DML statement is not a boundary.
"""

from __future__ import annotations

from binlake.source.binlog.events import Event, Gtid, Query, TransactionPayload, XaPrepare, Xid


class Boundaries:
    """Follows one stream's transactions; :meth:`ends` says whether an event ends one."""

    def __init__(self) -> None:
        self.open = False

    def ends(self, event: Event) -> bool:
        if isinstance(event, (Xid, XaPrepare)):
            self.open = False
            return True
        if isinstance(event, TransactionPayload):
            return any([self.ends(inner) for inner in event.events])
        if isinstance(event, Gtid):
            if event.mariadb and not event.standalone:
                self.open = True
            return False
        if isinstance(event, Query):
            return self._query(event.text.strip().upper())
        return False

    def _query(self, text: str) -> bool:
        if text == "BEGIN" or text.startswith(("XA START", "XA BEGIN")):
            self.open = True
            return False
        if text.startswith(("SAVEPOINT", "ROLLBACK TO", "XA END")):
            return False
        if text.startswith(("COMMIT", "ROLLBACK", "XA COMMIT", "XA ROLLBACK")):
            self.open = False
            return True
        return not self.open
