"""``binlake status --html FILE``: the health dashboard as one self-contained HTML page.

The same views as the bundle's AI/BI dashboard (``bundles/dashboards/binlake_health.lvdash.json``),
drawn from the metrics table (:mod:`binlake.ops.metrics`) of the last ``days`` days: capture
lag and each publish group's gold lag over time, rows per run, step durations, failed checks
and blocked or stopped tables, with ``binlake status``'s text on top. Charts are inline SVG
(matplotlib), so the file opens offline and can be attached to a ticket as it is.
"""

from __future__ import annotations

import html
import io
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from binlake.config import Config
from binlake.errors import MissingDependencyError
from binlake.ops.metrics import HEALTH_VIEWS, health_view, read_metrics
from binlake.timing import utc_now

if TYPE_CHECKING:
    from binlake.spark import SparkLike

DAYS = 7
# Stopped tables come from the status (current); the current lag is the alert's.
_NOT_CHARTED = ("stopped_tables", "current_lag")


def write_health_page(
    spark: SparkLike, config: Config, status: Mapping[str, Any], path: str | Path, days: int = DAYS
) -> Path:
    """Write the page for ``status`` (:func:`binlake.ops.status.collect_status`) to ``path``."""
    if days < 1:
        raise ValueError(f"days must be at least 1, got {days}")
    since = utc_now() - timedelta(days=days)
    views = _views(spark, config, since)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(status, views, days), encoding="utf-8")
    return out


def _views(spark: SparkLike, config: Config, since: datetime) -> dict[str, list[dict]]:
    """Each chart's and table's rows, aggregated by Spark (the page gets a few hundred rows)."""
    metrics = read_metrics(spark, config)
    if metrics is None:
        return {}
    metrics.createOrReplaceTempView("binlake_metrics")
    since_sql = f"TIMESTAMP '{since.isoformat(sep=' ')}'"
    return {
        name: [r.asDict() for r in spark.sql(health_view(name, "binlake_metrics", since_sql)).collect()]
        for name in HEALTH_VIEWS
        if name not in _NOT_CHARTED
    }


# ---------------------------------------------------------------------------------------
# Rendering (pure: status and views in, HTML out)


def render_page(status: Mapping[str, Any], views: Mapping[str, list[dict]], days: int = DAYS) -> str:
    from binlake.ops.status import format_status

    stopped = [t for t in status.get("tables") or [] if t.get("stopped")]
    sections = [
        f"<h1>binlake health</h1><p class=meta>generated {html.escape(str(status.get('generated_at', '')))} UTC; "
        f"charts over the last {days} day(s) of the metrics table</p>",
        f"<h2>Status</h2><pre>{html.escape(format_status(status))}</pre>",
        "<h2>Stopped tables</h2>"
        + (
            _table(["table", "why, and the command that recovers it"], [[t["table"], t["stopped"]] for t in stopped])
            if stopped
            else "<p class=ok>none</p>"
        ),
    ]
    if not views:
        sections.append("<p>No metrics recorded yet: run any binlake command (run, capture, silver, gold).</p>")
    else:
        sections += [
            "<h2>Lag behind the source</h2>",
            _figure(
                "Capture lag (seconds; 0 = caught up, else an upper bound)",
                {"capture": _points(views["capture_lag"], "lag_seconds")},
                "seconds",
            ),
            _figure(
                "Gold lag per publish group (seconds)",
                {g: _points(rows, "lag_seconds") for g, rows in _by(views["gold_lag"], "publish_group").items()},
                "seconds",
            ),
            "<h2>Rows per run</h2>",
            _figure(
                "Row changes captured and applied to silver per run",
                {kind: _points(rows, "rows") for kind, rows in _by(views["rows_per_run"], "kind").items()},
                "rows",
                bars=True,
            ),
            "<h2>Step durations</h2>",
            _figure(
                "Seconds per step per run",
                {step: _points(rows, "seconds") for step, rows in _by(views["step_seconds"], "step").items()},
                "seconds",
            ),
            "<h2>Failed checks, blocked and stopped tables</h2>",
            _table(
                ["time", "command", "step", "table", "group", "status", "failed checks", "detail"],
                [
                    [
                        r["started_at"],
                        r["command"],
                        r["step"],
                        r["table"] or "-",
                        r["publish_group"] or "-",
                        r["status"],
                        "" if r["checks_failed"] is None else r["checks_failed"],
                        r["detail"] or "",
                    ]
                    for r in views["problems"]
                ],
            )
            if views["problems"]
            else "<p class=ok>none</p>",
        ]
    return _PAGE.format(body="\n".join(sections))


def _points(rows: list[dict], column: str) -> list[tuple]:
    return [(r["t"], r[column]) for r in rows if r.get("t") is not None and r.get(column) is not None]


def _by(rows: list[dict], key: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(str(r[key] or "-"), []).append(r)
    return out


def _bar_width(times: list, series: int) -> float:
    """Bars (in days, matplotlib's date unit) a third as wide as the average gap between runs."""
    if len(times) < 2:
        return 1 / 1440
    span = (max(times) - min(times)).total_seconds() / 86400
    return max(span / len(times) / max(series, 1) / 1.5, 1 / 86400)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(title: str, series: Mapping[str, list[tuple]], unit: str, bars: bool = False) -> str:
    """One chart as inline SVG: a line (or bars) per series of (time, value) points."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.dates as mdates
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError("binlake status --html needs matplotlib: pip install 'binlake[local]'") from None

    plt.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable
    fig, ax = plt.subplots(figsize=(9, 2.8), dpi=100)
    try:
        drawn = 0
        width = _bar_width([t for points in series.values() for t, _ in points], len(series))
        for i, (name, points) in enumerate(series.items()):
            if not points:
                continue
            xs, ys = zip(*points)
            if bars:  # side by side: series i is shifted by i bar widths
                ax.bar([x + timedelta(days=width * i) for x in xs], ys, width=width, label=name, align="edge")
            else:
                ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, label=name)
            drawn += 1
        if not drawn:
            return f"<figure><figcaption>{html.escape(title)}</figcaption><p>no data yet</p></figure>"
        ax.set_ylabel(unit)
        ax.grid(True, alpha=0.3)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
        ax.legend(loc="upper left", fontsize=8, frameon=False)
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    finally:
        plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]  # drop the XML prologue and DOCTYPE: inline in HTML
    return f"<figure><figcaption>{html.escape(title)}</figcaption>{svg}</figure>"


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>binlake health</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #1d2125; max-width: 1000px; }}
h1 {{ margin-bottom: 0; }} .meta {{ color: #666; margin-top: 4px; }}
pre {{ background: #f5f6f7; padding: 12px; overflow-x: auto; font-size: 12px; }}
figure {{ margin: 12px 0; }} figcaption {{ font-weight: 600; margin-bottom: 4px; }}
svg {{ max-width: 100%; height: auto; }}
table {{ border-collapse: collapse; font-size: 12px; }}
th, td {{ border: 1px solid #ddd; padding: 4px 6px; text-align: left; }}
.ok {{ color: #2f7d32; }}
</style></head>
<body>
{body}
</body></html>
"""
