"""python-mysql-replication as the independent reference for binlake's binlog decoder.

binlake decodes binlog events with its own parser (``binlake.source.binlog``). The tests hold
it against python-mysql-replication, a separately written decoder: the library turns each
value into a Python object and :func:`encode_image` turns those into binlake's canonical
texts with :func:`binlake.contract.types.encode_value`, correcting the library's known quirks
(each probed against MariaDB 10.11 and named below). Test code only.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from binlake.config import SourceConfig
from binlake.contract.position import BinlogPosition
from binlake.contract.types import ZERO_DATE, ZERO_DATETIME, Column, Kind, encode_value
from binlake.source.binlog.dump import stream_settings

_ZERO_BY_SOURCE = {"out of date range", "out of datetime range", "out of datetime2 range"}
_EPOCH = dt.datetime(1970, 1, 1)


def library_stream(source: SourceConfig, server_id: int, start: BinlogPosition, **extra: Any):
    """python-mysql-replication's non-blocking binlog dump from ``start``; the caller closes it."""
    from pymysqlreplication import BinLogStreamReader

    return BinLogStreamReader(
        connection_settings=stream_settings(source),
        server_id=server_id,
        log_file=start.file,
        log_pos=start.pos,
        resume_stream=True,
        blocking=False,
        enable_logging=False,
        **extra,
    )


def encode_image(
    cols: dict[str, Column], values: dict, none_sources: dict, pads: dict[str, int] | None = None
) -> dict[str, str | None]:
    """Canonical texts of one row image the library decoded.

    ``pads``: BINARY(n) columns and their n. The binlog drops their trailing zero bytes,
    which a SELECT returns.
    """
    out: dict[str, str | None] = {}
    for name, value in values.items():
        col = cols.get(name)
        if col is None:
            out[name] = None if value is None else str(value)
            continue
        if pads and name in pads and value is not None:
            raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
            value = raw.ljust(pads[name], b"\0")
        if value is None:
            why = none_sources.get(name)
            if why in _ZERO_BY_SOURCE:
                # The library gives None for zero/invalid dates; the snapshot sees '0000-00-00'.
                out[name] = ZERO_DATE if col.kind is Kind.DATE else ZERO_DATETIME
            elif why == "empty set":
                out[name] = ""
            else:
                out[name] = None
            continue
        if col.kind is Kind.TIMESTAMP and isinstance(value, dt.datetime) and value == _EPOCH:
            # TIMESTAMP cannot hold the epoch itself; 0 is how the binlog stores the zero value.
            out[name] = ZERO_DATETIME
            continue
        if col.kind is Kind.TIME and isinstance(value, dt.timedelta) and value < dt.timedelta(0):
            value = fix_negative_time(value)
        if col.kind is Kind.YEAR and value == 1900:
            # The binlog stores YEAR as an offset from 1900; 0 is the zero year 0000, not 1900.
            out[name] = "0"
            continue
        out[name] = encode_value(col, value)
    return out


def fix_negative_time(value: dt.timedelta) -> dt.timedelta:
    """Undo the library's decoding of negative TIME(fsp) with a fraction.

    It returns -(W + 1 - f) for the stored -(W + f) (W whole seconds, f the fraction), as
    probed against MariaDB 10.11 for fsp 1..6; whole-second values come back right.
    """
    magnitude = -(value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds)
    whole, frac = divmod(magnitude, 1_000_000)
    if frac == 0:
        return value
    return -dt.timedelta(microseconds=whole * 1_000_000 + (1_000_000 - frac))
