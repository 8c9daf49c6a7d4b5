"""``binlake status``: where capture is, how far behind the source, purge risk, and per table
what silver has applied and what gold last published.

The source side (server position, lag in bytes, purge risk) comes from
:func:`binlake.bronze.capture.capture_status`. When the source cannot be reached the
lakehouse side is still reported, with a note saying what is missing.

Example::

    >>> status = collect_status(spark, config)            # doctest: +SKIP
    >>> print(format_status(status))                      # doctest: +SKIP
    capture: resume mysql-bin.000004:1532, server mysql-bin.000004:1890, lag 358 bytes, <= 4 s
    ...
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from binlake.bronze.capture import capture_status
from binlake.config import Config, require_config
from binlake.contract.changelog import HEARTBEAT_OP
from binlake.contract.layout import require_current_layout
from binlake.contract.leases import current_holders
from binlake.contract.tables import Lakehouse
from binlake.errors import BinlakeError, LagExceededError
from binlake.gold.publish_log import STATUS_PUBLISHED, last_published
from binlake.gold.readiness import silver_progress
from binlake.ops.continuous import read_state
from binlake.ops.metrics import lag_seconds, read_metrics
from binlake.silver.backfill import report
from binlake.timing import utc_now

if TYPE_CHECKING:
    from binlake.spark import SparkLike


def _plain(value: Any) -> Any:
    """JSON-ready: datetimes as ISO text, dataclasses and mappings as dicts."""
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "value") and type(value).__module__ != "builtins" and isinstance(value.value, (str, int)):
        return value.value  # enums
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def _capture_side(spark: SparkLike, config: Config, notes: list[str]) -> dict[str, Any] | None:
    """What capture_status reports of the source (server position, lag, purge risk), or None
    with a note when the source cannot be asked."""
    try:
        out = _plain(capture_status(spark, config))
        # capture_status reports file and pos apart; status shows them as FILE:POS.
        for side in ("resume", "server"):
            if out.get(f"{side}_position") is None and out.get(f"{side}_file"):
                out[f"{side}_position"] = f"{out[f'{side}_file']}:{out.get(f'{side}_pos')}"
        return out
    except BinlakeError as exc:
        notes.append(f"source position, lag and purge risk unavailable: {exc}")
    except Exception as exc:  # noqa: BLE001 - status must still show the lakehouse side
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        notes.append(f"source position, lag and purge risk unavailable: {type(exc).__name__}: {first}")
    return None


# How many of the change log's latest commits status reads (through the change data feed)
# for the last batch. Capture commits once per batch, heartbeat included, so the latest
# heartbeat is in the latest capture commit; only a log whose recent commits hold no
# heartbeat or no change at all (a long idle stretch, a foreign writer) is scanned whole.
RECENT_COMMITS = 50


def _captured(spark: SparkLike, lh: Lakehouse) -> dict[str, Any] | None:
    """The last capture batch in the change log (its heartbeat), from the lakehouse alone.

    Reads only the latest :data:`RECENT_COMMITS` commits' rows, so ``status`` costs the same
    on a log of years as on a new one."""
    if not lh.changelog.exists(spark):
        return None
    latest = lh.changelog.latest_version(spark)
    first = max(0, latest - RECENT_COMMITS + 1)
    hb, last_commit_ts = _last_batch(lh.changelog.read_changes(spark, first, latest))
    if first > 0 and (hb is None or last_commit_ts is None):
        old_hb, old_ts = _last_batch(lh.changelog.read(spark))
        hb, last_commit_ts = hb or old_hb, last_commit_ts or old_ts
    if hb is None and last_commit_ts is None:
        return None
    return {
        "position": f"{hb['binlog_file']}:{hb['pos']}" if hb else None,
        "captured_at": _plain(hb["captured_at"]) if hb else None,
        "last_commit_ts": last_commit_ts,
    }


def _last_batch(rows) -> tuple[Any, Any]:
    """(the largest heartbeat, the latest commit time) among change log ``rows``."""
    from pyspark.sql import functions as F

    r = rows.agg(
        F.max(F.when(F.col("op") == HEARTBEAT_OP, F.struct("file_index", "pos", "binlog_file", "captured_at"))).alias(
            "hb"
        ),
        F.max("commit_ts").alias("last_commit_ts"),
    ).first()
    return r["hb"], r["last_commit_ts"]


def _lag(capture: dict | None, captured: dict | None, now: datetime) -> dict[str, Any]:
    """Lag in binlog bytes (from the source) and in seconds: 0 when caught up, else an upper
    bound, since every uncaptured event committed after the last captured one."""
    lag_bytes = capture.get("lag_bytes") if capture else None
    newest = captured["last_commit_ts"] if captured else None
    seconds = lag_seconds(now, newest, None if lag_bytes is None else lag_bytes == 0)
    basis = None
    if seconds is not None:
        basis = "caught up" if lag_bytes == 0 else "upper bound: now - commit time of the last captured change"
    return {"bytes": lag_bytes, "seconds": seconds, "seconds_basis": basis}


def _last_attempts(spark: SparkLike, lh: Lakehouse) -> dict[str, dict]:
    """The latest publish attempt per table, published or failed."""
    from pyspark.sql import functions as F

    if not lh.publish_log.exists(spark):
        return {}
    return {
        f"{r['db']}.{r['table']}": r["a"].asDict()
        for r in (
            lh.publish_log.read(spark)
            .groupBy("db", "table")
            .agg(F.max(F.struct("published_at", "status", "publish_id", "checks")).alias("a"))
            .collect()
        )
    }


def _failing_checks(checks_json: str | None) -> list[dict[str, Any]]:
    """The checks (built-ins and expectations) that failed in a publish attempt, from the
    summary its publish-log row keeps: name, severity, unexpected rows or observed value, error."""
    try:
        results = json.loads(checks_json or "{}")
    except ValueError:
        return []
    results = results.get("results", []) if isinstance(results, dict) else results
    keep = ("name", "severity", "unexpected_count", "observed_value", "error")
    return [{k: r.get(k) for k in keep} for r in results if isinstance(r, dict) and not r.get("success")]


def _gold_lag(published: Mapping[str, Any] | None, capture: Mapping[str, Any] | None, now: datetime) -> float | None:
    """Seconds gold's published position is behind the source: 0 when it is the server's
    position, else an upper bound (now - source commit time of the newest published change)."""
    if not published or not capture or not capture.get("server_file"):
        return None
    at_server = (published["binlog_file"], published["pos"]) == (capture["server_file"], capture["server_pos"])
    return lag_seconds(now, published.get("source_time"), at_server)


def _backfilled(spark, silver) -> list[dict[str, Any]]:
    """What the silver table's ADD COLUMN backfills gave its older rows (binlake.silver.backfill)."""
    return report(silver.properties(spark)) if silver.exists(spark) else []


def _table_rows(
    spark: SparkLike, config: Config, lh: Lakehouse, warnings: list[str], capture=None, now: datetime | None = None
) -> list[dict[str, Any]]:
    progress = {s.name: s for s in silver_progress(spark, config, lh)}
    published = last_published(spark, lh)
    attempts = _last_attempts(spark, lh)
    rows = []
    for name in sorted(set(progress) | {n for n in published if config.source.captures(*n.split(".", 1))}):
        db, table = name.split(".", 1)
        s, p, a = progress.get(name), published.get(name), attempts.get(name)
        gold_ref = lh.gold(db, table)
        rows.append(
            {
                "table": name,
                "group": config.gold.group_of(db, table),
                "silver_position": str(s.position) if s else None,
                "stopped": s.stopped if s else None,
                "published_position": _position_text(p) if p else None,
                "publish_id": p["publish_id"] if p else None,
                "published_at": _plain(p["published_at"]) if p else None,
                "source_time": _plain(p["source_time"]) if p else None,
                "gold_version": gold_ref.latest_version(spark) if gold_ref.exists(spark) else None,
                "published_gold_version": p["gold_version"] if p else None,
                "last_attempt_status": a["status"] if a else None,
                "gold_lag_seconds": _gold_lag(p, capture, now) if now else None,
                "failing_checks": _failing_checks(a["checks"]) if a else [],
                "backfilled": _backfilled(spark, lh.silver(db, table)) if s else [],
            }
        )
        if s and s.stopped:
            warnings.append(f"{name}: silver stopped it: {s.stopped}")
        if a and a["status"] != STATUS_PUBLISHED:
            warnings.append(
                f"{name}: the last publish attempt {a['publish_id']} {a['status']}; gold still holds publish "
                f"{p['publish_id'] if p else '(none)'}"
            )
    return rows


def collect_status(spark: SparkLike, config: Config) -> dict[str, Any]:
    """Everything ``binlake status`` shows, as a JSON-ready dict.

    Keys: ``generated_at``, ``capture`` (what capture_status reports, or None), ``captured``
    (the change log's last batch), ``lag`` (``bytes``, ``seconds``, ``seconds_basis``),
    ``continuous`` (the last loop of ``run --continuous``, or None), ``writers`` (per layer
    with a live lease: ``holder``, ``since``, ``until``; binlake.contract.leases),
    ``warnings``, ``notes``, ``last_publish`` and ``tables`` (one dict per table:
    ``table``, ``group`` (its publish group), ``silver_position``, ``stopped`` (why silver
    stopped it and the command that recovers it, or None), ``published_position``, ``publish_id``,
    ``published_at``, ``source_time``, ``gold_version``, ``published_gold_version``,
    ``last_attempt_status``, ``gold_lag_seconds``: how far its gold is behind the source, 0
    when at the server's position, else an upper bound, and ``failing_checks``: the checks of
    the last publish attempt that failed, and ``backfilled``: each added column whose DEFAULT
    silver gave the rows older than its ADD: ``column``, ``value``, ``position``, ``rows``), and
    ``online_schema_changes`` (the latest gh-ost or pt-osc cut-overs capture met: replayed, or
    re-snapshotted and why).
    """
    require_config(config)
    lh = Lakehouse(config)
    require_current_layout(spark, lh)
    now = utc_now()
    notes: list[str] = []
    warnings: list[str] = []
    capture = _capture_side(spark, config, notes)
    captured = _captured(spark, lh)
    lag = _lag(capture, captured, now)
    purge = capture.get("purge_warning") if capture else None
    if purge:
        warnings.append(
            purge if isinstance(purge, str) else "the resume position is close to being purged from the server"
        )
    if captured:
        captured["last_commit_ts"] = _plain(captured["last_commit_ts"])
    tables = _table_rows(spark, config, lh, warnings, capture, now)
    return {
        "generated_at": _plain(now),
        "capture": capture,
        "captured": captured,
        "lag": lag,
        "continuous": _continuous(lh, now),
        "writers": _plain(current_holders(spark, lh)),
        "warnings": warnings,
        "notes": notes,
        "last_publish": _last_publish(spark, lh),
        "tables": tables,
        "online_schema_changes": _online_schema_changes(spark, config),
    }


# The prefix of binlake.bronze.osc_replay.Replay.describe(), as capture's metrics rows hold it.
_OSC_DETAIL = "online schema change of "


def _online_schema_changes(spark: SparkLike, config: Config, limit: int = 20) -> list[dict[str, Any]]:
    """The latest online schema change cut-overs capture met (its metrics rows): per cut-over
    ``table``, ``at`` (the run's start), ``replayed``, ``rows`` and ``detail`` (why it re-snapshotted)."""
    from pyspark.sql import functions as F

    df = read_metrics(spark, config)
    if df is None:
        return []
    rows = (
        df.where((F.col("step") == "capture") & F.col("table").isNotNull() & F.col("detail").startswith(_OSC_DETAIL))
        .orderBy(F.col("started_at").desc())
        .limit(limit)
        .collect()
    )
    out, seen = [], set()
    for r in rows:
        if r["detail"] not in seen:  # a re-read batch meets the same cut-over again
            seen.add(r["detail"])
            replayed = ": re-snapshotted, since " not in r["detail"]
            out.append(
                {
                    "table": r["table"],
                    "at": _plain(r["started_at"]),
                    "replayed": replayed,
                    "rows": r["rows_in"],
                    "detail": r["detail"],
                }
            )
    return out


def _continuous(lh: Lakehouse, now: datetime) -> dict[str, Any] | None:
    """What the last ``binlake run --continuous`` process reported after its last loop."""
    state = read_state(lh)
    if not state or not state.get("last"):
        return None
    last = state["last"]
    fresh = sorted(state.get("recent_freshness") or [])
    ended = datetime.fromisoformat(last["started_at"]) + timedelta(seconds=float(last["seconds"]))
    return {
        "pid": state.get("pid"),
        "host": state.get("host"),
        "started_at": state.get("started_at"),
        "loops": state.get("loops"),
        "last_loop": last,
        "seconds_since_last_loop": round((now - ended).total_seconds(), 1),
        "freshness_p50_seconds": fresh[len(fresh) // 2] if fresh else None,
        "freshness_max_seconds": fresh[-1] if fresh else None,
        "freshness_publishes": len(fresh),
    }


def _last_publish(spark: SparkLike, lh: Lakehouse) -> dict[str, Any] | None:
    from pyspark.sql import functions as F

    if not lh.publish_log.exists(spark):
        return None
    r = (
        lh.publish_log.read(spark)
        .where(F.col("status") == STATUS_PUBLISHED)
        .orderBy(F.col("published_at").desc(), F.col("file_index").desc(), F.col("pos").desc())
        .limit(1)
        .collect()
    )
    if not r:
        return None
    r = r[0]
    return {
        "publish_id": r["publish_id"],
        "position": _position_text(r.asDict()),
        "gtid": r["gtid"],
        "source_time": _plain(r["source_time"]),
        "published_at": _plain(r["published_at"]),
    }


def _position_text(row: Mapping[str, Any]) -> str:
    return f"{row['binlog_file']}:{row['pos']}" if row.get("binlog_file") else f"#{row['file_index']}:{row['pos']}"


def _fmt_seconds(value: Any) -> str:
    if value is None:
        return "? s"
    return f"{float(value):,.0f} s"


def format_status(status: Mapping[str, Any]) -> str:
    """``collect_status`` as text for a terminal or a job log."""
    sections = (_capture_lines, _continuous_lines, _notice_lines, _osc_lines, _publish_lines, _table_lines)
    return "\n".join(line for section in sections for line in section(status))


def _capture_lines(status: Mapping[str, Any]) -> list[str]:
    """Where capture is, against the server's position when it is known."""
    cap = status.get("capture")
    lag = status.get("lag") or {}
    captured = status.get("captured")
    if not cap:
        if captured:
            return [
                f"capture: last batch ends at {captured['position']} (captured {captured['captured_at']}); "
                "source position unknown"
            ]
        return ["capture: nothing captured yet"]
    resume = cap.get("resume_position") or (captured or {}).get("position") or "?"
    server = cap.get("server_position") or "?"
    lag_text = f"lag {lag.get('bytes'):,} bytes" if lag.get("bytes") is not None else "lag ? bytes"
    secs = lag.get("seconds")
    prefix = "<= " if (lag.get("seconds_basis") or "").startswith("upper bound") else ""
    lines = [f"capture: resume {resume}, server {server}, {lag_text}, {prefix}{_fmt_seconds(secs)}"]
    if cap.get("oldest_binlog"):
        lines.append(f"oldest binlog on server: {cap['oldest_binlog']}")
    return lines


def _continuous_lines(status: Mapping[str, Any]) -> list[str]:
    """The last loop of a continuous run, and gold's freshness over its last publishes."""
    cont = status.get("continuous")
    if not cont:
        return []
    last = cont["last_loop"]
    fresh = (
        (
            f", freshness median {cont['freshness_p50_seconds']:.1f} s, max {cont['freshness_max_seconds']:.1f} s "
            f"over the last {cont['freshness_publishes']} publishes"
        )
        if cont["freshness_publishes"]
        else ""
    )
    return [
        f"continuous: loop {cont['loops']} ended {cont['seconds_since_last_loop']:,.0f} s ago "
        f"({last['seconds']:.1f} s: {last['captured']} changes, gold {last['gold']}){fresh}"
    ]


def _notice_lines(status: Mapping[str, Any]) -> list[str]:
    """Who holds which layer's lease, then the warnings and notes."""
    writers: dict[str, list[str]] = {}
    for layer, lease in (status.get("writers") or {}).items():
        writers.setdefault(f"{lease['holder']} until {lease['until']} UTC", []).append(layer)
    lines = [f"writing {', '.join(layers)}: {holder}" for holder, layers in writers.items()]
    lines += [f"WARNING: {w}" for w in status.get("warnings") or []]
    lines += [f"note: {n}" for n in status.get("notes") or []]
    return lines


def _osc_lines(status: Mapping[str, Any]) -> list[str]:
    """The latest online schema change cut-overs: replayed, or re-snapshotted and why."""
    return [f"{c['detail']} (capture run of {c['at']})" for c in status.get("online_schema_changes") or []]


def _publish_lines(status: Mapping[str, Any]) -> list[str]:
    last = status.get("last_publish")
    if not last:
        return ["last publish: none yet"]
    return [
        f"last publish: {last['publish_id']} at {last['position']}"
        + (f" (GTID {last['gtid']})" if last.get("gtid") else "")
        + f", source time {last['source_time'] or '?'}, published {last['published_at']}"
    ]


def _table_lines(status: Mapping[str, Any]) -> list[str]:
    """One aligned row per table, then the failing checks of the last publish attempt."""
    tables = status.get("tables") or []
    if not tables:
        return []
    header = ("table", "group", "silver applied", "gold published at", "gold lag", "gold version", "last attempt")
    rows = [
        (
            t["table"],
            t.get("group") or "-",
            (t["silver_position"] or "-") + (" STOPPED" if t.get("stopped") else ""),
            t["published_position"] or "-",
            "-"
            if t.get("gold_lag_seconds") is None
            else ("<= " if t["gold_lag_seconds"] else "") + _fmt_seconds(t["gold_lag_seconds"]),
            "-" if t["gold_version"] is None else str(t["gold_version"]),
            t["last_attempt_status"] or "-",
        )
        for t in tables
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [""]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    failing = [(t["table"], c) for t in tables for c in t.get("failing_checks") or []]
    if failing:
        lines.append("")
        lines.append("failing checks of the last publish attempt (binlake checks --docs DIR renders GE's results):")
        lines += [f"  {name} {_describe_check(c)}" for name, c in failing]
    filled = [(t["table"], b) for t in tables for b in t.get("backfilled") or [] if b["rows"]]
    if filled:
        lines.append("")
        lines.append("added columns' defaults given to the rows older than their ADD COLUMN:")
        lines += [f"  {name}.{b['column']} = {b['value']!r}: {b['rows']:,} rows" for name, b in filled]
    return lines


def _describe_check(c: Mapping[str, Any]) -> str:
    if c.get("error"):
        what = f"error: {c['error']}"
    elif c.get("unexpected_count") is not None:
        what = f"{c['unexpected_count']:,} unexpected rows"
    else:
        what = f"observed {c.get('observed_value')}"
    return f"{c['name']} ({c['severity']}): {what}"


def status_json(status: Mapping[str, Any]) -> str:
    return json.dumps(status, indent=2, default=str)


def check_lag(status: Mapping[str, Any], max_lag_seconds: float) -> None:
    """Raise :class:`LagExceededError` when capture, or any table's gold, is more than
    ``max_lag_seconds`` behind the source (``binlake status --check``)."""
    over = []
    capture_lag = (status.get("lag") or {}).get("seconds")
    if capture_lag is not None and capture_lag > max_lag_seconds:
        over.append(f"capture {capture_lag:,.0f} s")
    for group, lag in sorted(_group_lags(status).items()):
        if lag > max_lag_seconds:
            over.append(f"gold group {group} {lag:,.0f} s")
    if over:
        raise LagExceededError(
            f"behind the source by more than health.max_lag_seconds={max_lag_seconds:,.0f}: "
            + "; ".join(over)
            + " (upper bounds; binlake status shows where each layer is)"
        )


def _group_lags(status: Mapping[str, Any]) -> dict[str, float]:
    lags: dict[str, float] = {}
    for t in status.get("tables") or []:
        if t.get("gold_lag_seconds") is not None:
            group = t.get("group") or "-"
            lags[group] = max(lags.get(group, 0.0), float(t["gold_lag_seconds"]))
    return lags
