"""The bundle's AI/BI dashboard over the metrics table (``bundles/dashboards/binlake_health.lvdash.json``).

Built from the health views (:data:`binlake.ops.metrics.HEALTH_VIEWS`), so the dashboard and
``binlake status --html`` chart the same SQL. After changing a view, regenerate the file::

    python -m binlake.deploy.dashboard > bundles/dashboards/binlake_health.lvdash.json

``tests/unit/test_bundle.py`` fails when the file and this module disagree, and checks the
file against Databricks' published Lakeview model.
"""

from __future__ import annotations

import json
import sys

from binlake.ops.metrics import health_view

# The dashboard resource sets dataset_catalog/dataset_schema to the system schema, where the
# metrics table lives; the datasets name it alone.
METRICS = "`metrics`"
SINCE = "current_timestamp() - INTERVAL 7 DAYS"

_TITLES = {
    "capture_lag": "Capture lag behind the source",
    "gold_lag": "Gold lag per publish group",
    "rows_per_run": "Rows per run",
    "step_seconds": "Step durations",
    "problems": "Failed checks, blocked and stopped tables",
    "stopped_tables": "Stopped tables",
}


def _fields(*names: str) -> list[dict]:
    return [{"name": n, "expression": f"`{n}`"} for n in names]


def _widget(name: str, dataset: str, fields: list[str], spec: dict) -> dict:
    return {
        "name": name,
        "queries": [
            {"name": "main_query", "query": {"datasetName": dataset, "fields": _fields(*fields), "disaggregated": True}}
        ],
        "spec": spec,
    }


def _frame(title: str) -> dict:
    return {"showTitle": True, "title": title}


def _line(title: str, y: str, y_title: str, color: str | None = None) -> dict:
    encodings = {
        "x": {"fieldName": "t", "scale": {"type": "temporal"}, "displayName": "time"},
        "y": {"fieldName": y, "scale": {"type": "quantitative"}, "displayName": y_title},
    }
    if color:
        encodings["color"] = {"fieldName": color, "scale": {"type": "categorical"}, "displayName": color}
    return {"version": 3, "widgetType": "line", "encodings": encodings, "frame": _frame(title)}


def _table(title: str, columns: list[str]) -> dict:
    return {
        "version": 2,
        "widgetType": "table",
        "encodings": {"columns": [{"fieldName": c, "displayName": c} for c in columns]},
        "frame": _frame(title),
    }


def dashboard() -> dict:
    """The dashboard as the Lakeview JSON document (``serialized_dashboard``)."""
    datasets = [
        {"name": name, "displayName": title, "query": health_view(name, METRICS, SINCE)}
        for name, title in _TITLES.items()
    ]
    problems = ["started_at", "command", "step", "table", "publish_group", "status", "checks_failed", "detail"]
    widgets = [
        (
            _widget(
                "capture_lag",
                "capture_lag",
                ["t", "lag_seconds"],
                _line("Capture lag (seconds; 0 = caught up, else an upper bound)", "lag_seconds", "seconds"),
            ),
            0,
            0,
            3,
            5,
        ),
        (
            _widget(
                "gold_lag",
                "gold_lag",
                ["t", "lag_seconds", "publish_group"],
                _line("Gold lag per publish group (seconds)", "lag_seconds", "seconds", color="publish_group"),
            ),
            3,
            0,
            3,
            5,
        ),
        (
            _widget(
                "rows_per_run",
                "rows_per_run",
                ["t", "rows", "kind"],
                {
                    **_line("Row changes captured and applied to silver per run", "rows", "rows", color="kind"),
                    "widgetType": "bar",
                },
            ),
            0,
            5,
            3,
            5,
        ),
        (
            _widget(
                "step_seconds",
                "step_seconds",
                ["t", "seconds", "step"],
                _line("Seconds per step per run", "seconds", "seconds", color="step"),
            ),
            3,
            5,
            3,
            5,
        ),
        (
            _widget(
                "stopped_tables",
                "stopped_tables",
                ["table", "why", "since"],
                _table("Stopped tables (why, and the command that recovers each)", ["table", "why", "since"]),
            ),
            0,
            10,
            6,
            4,
        ),
        (
            _widget("problems", "problems", problems, _table("Failed checks, blocked and stopped tables", problems)),
            0,
            14,
            6,
            7,
        ),
    ]
    layout = [
        {"widget": w, "position": {"x": x, "y": y, "width": width, "height": height}}
        for w, x, y, width, height in widgets
    ]
    return {"datasets": datasets, "pages": [{"name": "health", "displayName": "binlake health", "layout": layout}]}


def lag_alert_query(metrics: str) -> str:
    """The SQL the bundle's lag alert (``bundles/binlake_lag.alert.yml``) evaluates."""
    return health_view("current_lag", metrics, "current_timestamp() - INTERVAL 7 DAYS")


def main() -> None:
    json.dump(dashboard(), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
