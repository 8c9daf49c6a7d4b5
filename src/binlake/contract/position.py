"""Binlog positions and the change sequence ``_cdc_seq`` (docs/architecture.md, "The change
sequence").

A :class:`BinlogPosition` is a point in one server's binlog: a file and a byte offset,
ordered by the file's numeric suffix, then the offset, within a *source epoch*. The epoch
counts the times capture had to move to a binlog whose numbering is unrelated to the one
before: a primary switch followed by GTID, or a source whose binlog was reset. Positions of
a later epoch sort after every position of an earlier one.

The change sequence orders every record binlake keeps: ``(file_index, pos, row)``, where
``file_index`` is the *log index* ``epoch * 2**32 + binlog file number`` (so it is the plain
file number until the first switch, and lakehouses from before epochs need no rewrite), and
``row`` is the row's index inside its ROWS event, or one of the reserved values below for
records that are not binlog rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering
from typing import Any

_BINLOG_FILE = re.compile(r"^(?P<base>.+)\.(?P<index>\d+)$")
EPOCH_SHIFT = 32
"""A log index is ``epoch << EPOCH_SHIFT | binlog file number``."""
_FILE_MASK = (1 << EPOCH_SHIFT) - 1

# Reserved ``row`` values of the change sequence.
SNAPSHOT_ROW = -1
"""A snapshot row sits at its chunk's low watermark: every change ending after it wins."""
DERIVED_ROW = -2
"""A tombstone silver derives at a position where it proved rows gone (TRUNCATE, a completed
chunk); it sorts below snapshot rows read at that same position."""
HEARTBEAT_ROW = 2**31 - 1
"""The heartbeat that ends a capture batch sorts after every row change at its position."""


def file_index(file: str) -> int:
    """``mysql-bin.000123`` -> 123."""
    m = _BINLOG_FILE.match(file)
    if not m:
        raise ValueError(f"binlog file name {file!r} has no numeric suffix")
    return int(m.group("index"))


def file_name(template: str, index: int) -> str:
    """The binlog file with ``index`` in the same series as ``template`` (same base, same width)."""
    m = _BINLOG_FILE.match(template)
    if not m:
        raise ValueError(f"binlog file name {template!r} has no numeric suffix")
    return f"{m.group('base')}.{index:0{len(m.group('index'))}d}"


def log_index(epoch: int, file_index: int) -> int:
    """The change sequence's first field for binlog file ``file_index`` of source epoch ``epoch``."""
    return (int(epoch) << EPOCH_SHIFT) | int(file_index)


def epoch_of(log_index_value: int) -> int:
    return int(log_index_value) >> EPOCH_SHIFT


@total_ordering
@dataclass(frozen=True)
class BinlogPosition:
    """A point in the binlog: file name and byte position in source epoch ``epoch``.
    Ordered by (epoch, file index, pos), then by the file name: equal positions name the same
    file, so two files with one number (another base name) are distinct and still ordered."""

    file: str
    pos: int
    epoch: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.file, str) or not _BINLOG_FILE.match(self.file):
            raise ValueError(f"binlog file name {self.file!r} has no numeric suffix (expected like mysql-bin.000123)")
        if not isinstance(self.epoch, int) or self.epoch < 0:
            raise ValueError(f"source epoch must be a non-negative integer, got {self.epoch!r}")

    @property
    def file_index(self) -> int:
        """The binlog file's own number (``mysql-bin.000123`` -> 123), whatever the epoch."""
        return file_index(self.file)

    @property
    def log_index(self) -> int:
        """The change sequence's first field: the file number within the epoch."""
        return log_index(self.epoch, self.file_index)

    def key(self) -> tuple[int, int]:
        return (self.log_index, self.pos)

    def in_epoch(self, epoch: int) -> BinlogPosition:
        return BinlogPosition(self.file, self.pos, epoch)

    def __lt__(self, other: BinlogPosition) -> bool:
        return (self.key(), self.file) < (other.key(), other.file)

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}" + (f"@{self.epoch}" if self.epoch else "")

    @staticmethod
    def parse(text: str) -> BinlogPosition:
        """``FILE:POS``, or ``FILE:POS@EPOCH`` for a position after a source switch."""
        body, at, epoch = str(text).partition("@")
        file, _, pos = body.rpartition(":")
        if not file or not pos.isdigit() or (at and not epoch.isdigit()):
            raise ValueError(
                f"binlog position {text!r} is not FILE:POS (e.g. mysql-bin.000003:4, "
                "or mysql-bin.000003:4@1 in source epoch 1)"
            )
        return BinlogPosition(file, int(pos), int(epoch) if at else 0)

    @staticmethod
    def from_log(file: str, log_index_value: int, pos: int) -> BinlogPosition:
        """The position a stored row names by its file name, log index and offset."""
        position = BinlogPosition(file, int(pos), epoch_of(log_index_value))
        if position.log_index != int(log_index_value):
            raise ValueError(f"log index {log_index_value} does not name binlog file {file}")
        return position

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "pos": self.pos, "epoch": self.epoch}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> BinlogPosition:
        return BinlogPosition(str(d["file"]), int(d["pos"]), int(d.get("epoch") or 0))


def position_key(value: Any) -> tuple[int, int]:
    """``(file_index, pos)`` of a position a user names: ``"mysql-bin.000003:1234"``,
    ``(3, 1234)`` or a :class:`BinlogPosition`."""
    if isinstance(value, BinlogPosition):
        return value.key()
    if isinstance(value, str):
        try:
            return BinlogPosition.parse(value).key()
        except ValueError:
            pass
    elif (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return (int(value[0]), int(value[1]))
    raise ValueError(
        f'position must be "FILE:POS" such as "mysql-bin.000003:1234" or a (file_index, pos) tuple, got {value!r}'
    )


def describe_key(key: tuple[int, int]) -> str:
    """A ``(log_index, pos)`` for messages when the file name is not at hand: ``#3:1234``
    (``#3:1234@1`` in source epoch 1)."""
    epoch = epoch_of(key[0])
    return f"#{key[0] & _FILE_MASK}:{key[1]}" + (f"@{epoch}" if epoch else "")


# ---------------------------------------------------------------------------------------
# The change sequence in Spark SQL


def seq_sql(file_index_sql: str, pos_sql: str, row_sql: str) -> str:
    """The ``_cdc_seq`` struct built from three SQL expressions."""
    return (
        f"named_struct('file_index', CAST({file_index_sql} AS BIGINT), 'pos', CAST({pos_sql} AS BIGINT), "
        f"'row', CAST({row_sql} AS INT))"
    )


CHANGELOG_SEQ_SQL = seq_sql("file_index", "pos", "`row`")
"""``_cdc_seq`` of a bronze change-log row."""


def seq_literal(seq: tuple[int, int, int]) -> str:
    """A ``_cdc_seq`` literal."""
    a, b, c = (int(x) for x in seq)
    return seq_sql(str(a), str(b), str(c))


def parse_seq(text: str | None) -> tuple[int, int, int] | None:
    """``"3,1234,0"`` (as kept in table properties) -> ``(3, 1234, 0)``."""
    if not text:
        return None
    a, b, c = (int(x) for x in text.split(","))
    return (a, b, c)


def seq_text(seq: tuple[int, int, int]) -> str:
    """The inverse of :func:`parse_seq`."""
    return ",".join(str(int(x)) for x in seq)
