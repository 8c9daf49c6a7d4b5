"""Where capture stands: the resume position, the server it was read from, and (MariaDB) the
GTID position there. All three live in the newest heartbeat of ``bronze/changelog``, so they
are committed atomically with the batch they end (docs/capture.md).

Snapshot and verify read it too: their binlog watermarks are only comparable with capture's
positions when they come from the same server, in the same source epoch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from binlake.contract.changelog import HEARTBEAT_OP
from binlake.contract.position import BinlogPosition
from binlake.contract.sql import spark_string, sql
from binlake.contract.tables import Lakehouse
from binlake.errors import SourceChangedError

if TYPE_CHECKING:
    from binlake.spark import SparkLike

# How many of the change log's newest commits are searched for capture's latest tag.
_RECENT_COMMITS = 20


@dataclass(frozen=True)
class CaptureState:
    position: BinlogPosition
    server_id: int | None  # None: recorded before binlake kept it
    gtid: str | None  # MariaDB GTID position at ``position``; None on MySQL or when unknown
    # source.tables / exclude of the commit (None: not recorded): a table the filter
    # matches now and did not then needs a snapshot (capture never kept its older rows).
    table_filter: dict | None = None

    def tag(self) -> dict:
        """The part of a capture commit's userMetadata that restores this state."""
        return {"capture_end": str(self.position), "server_id": self.server_id, "gtid": self.gtid}


def capture_state(spark: SparkLike, lh: Lakehouse) -> CaptureState | None:
    """The state the newest capture commit left (None before the first one)."""
    if not lh.changelog.exists(spark):
        return None
    # The latest capture commit's tag holds the state of the heartbeat it committed, the
    # largest one (commits are ordered by their start). It is normally the latest commit;
    # after maintenance (OPTIMIZE, retention, VACUUM) it is among the last few. Reading them
    # from the Delta log spares a scan of the whole table, which is the fallback.
    newest = lh.changelog.latest_version(spark)
    for commit in reversed(lh.changelog.commits(spark, max(0, newest - _RECENT_COMMITS + 1), newest)):
        tagged = from_tag([commit])
        if tagged is not None:
            return tagged
    statement = sql(
        "SELECT binlog_file, file_index, pos, server_id, gtid FROM {changelog} WHERE op = {heartbeat} "
        "ORDER BY file_index DESC, pos DESC LIMIT 1",
        changelog=lh.changelog.sql,
        heartbeat=spark_string(HEARTBEAT_OP),
    )
    rows = spark.sql(statement).collect()
    if not rows:
        return None
    r = rows[0]
    return CaptureState(
        BinlogPosition.from_log(r["binlog_file"], r["file_index"], r["pos"]),
        None if r["server_id"] is None else int(r["server_id"]),
        r["gtid"],
    )


def from_tag(history_rows) -> CaptureState | None:
    try:
        tag = json.loads(history_rows[0]["userMetadata"])
        position = BinlogPosition.parse(tag["capture_end"])
    except (IndexError, TypeError, ValueError, KeyError):
        return None
    sid = tag.get("server_id")
    return CaptureState(position, None if sid is None else int(sid), tag.get("gtid"), tag.get("filter"))


def capture_position(spark: SparkLike, lh: Lakehouse) -> BinlogPosition | None:
    """The stored resume position: the largest heartbeat in the change log (None if none)."""
    state = capture_state(spark, lh)
    return state.position if state else None


def current_epoch(spark: SparkLike, lh: Lakehouse, server_id: int) -> int:
    """The source epoch positions read now from server ``server_id`` belong to.

    Raises :class:`SourceChangedError` when capture last read another server: positions of
    this one are not comparable with capture's until capture has followed the switch.
    """
    state = capture_state(spark, lh)
    if state is None:
        return 0
    if state.server_id is not None and state.server_id != server_id:
        raise SourceChangedError(
            f"the source is now server {server_id}, but capture last read server {state.server_id}: "
            "run binlake capture (or binlake run) first, which follows the switch"
        )
    return state.position.epoch
