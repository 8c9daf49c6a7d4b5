"""``binlake checks``: gold's Great Expectations results, as GE keeps and shows them.

Every publish attempt stores GE's validation result of each table it checked with
expectations in ``system/check_results`` (:mod:`binlake.gold.publish_log`). This command lists
the newest result per table (the expectations that failed, with GE's counts) and, with
``--docs DIR``, renders GE's own Data Docs site from the stored results: the same pages a GE
checkpoint would build, one validation page per table and publish, and an index.

Example::

    >>> rows = stored_results(spark, config, last=1)                    # doctest: +SKIP
    >>> print(format_results(rows))                                      # doctest: +SKIP
    shop.orders publish 000003-900-f77493c214 (published): 5 of 6 expectations passed
      failed: expect_column_values_to_be_between(...) (drop): 2 unexpected rows
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from binlake.config import Config
from binlake.contract.layout import require_current_layout
from binlake.contract.tables import Lakehouse
from binlake.errors import ConfigError, NotReadyError

if TYPE_CHECKING:
    from binlake.spark import SparkLike


@dataclass(frozen=True)
class StoredResult:
    """One table's GE validation result of one publish attempt."""

    publish_id: str
    group: str | None
    table: str
    status: str
    success: bool
    checked_at: datetime
    result: dict[str, Any]

    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.result.get("results", []) if not r.get("success")]


def stored_results(
    spark: SparkLike, config: Config, tables: list[str] | None = None, last: int = 1
) -> list[StoredResult]:
    """The newest ``last`` stored results of each table (``tables``: only these), newest first.
    A publish repeated after a kill stored its results again; the newest copy stands."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if last < 1:
        raise ConfigError(f"--last must be at least 1, got {last}")
    lh = Lakehouse(config)
    require_current_layout(spark, lh)
    if not lh.check_results.exists(spark):
        raise NotReadyError(
            "no check results yet: gold stores Great Expectations' results once a table with "
            "gold.expectations or gold.checks is published (run binlake gold)"
        )
    rows = lh.check_results.read(spark).withColumn("name", F.concat_ws(".", "db", "table"))
    if tables:
        rows = rows.where(F.col("name").isin(list(tables)))
    newest_copy = Window.partitionBy("publish_id", "name").orderBy(F.col("checked_at").desc())
    newest = Window.partitionBy("name").orderBy(F.col("checked_at").desc())
    picked = (
        rows.withColumn("_copy", F.row_number().over(newest_copy))
        .where("_copy = 1")
        .withColumn("_n", F.row_number().over(newest))
        .where(F.col("_n") <= last)
        .orderBy("name", F.col("checked_at").desc())
        .collect()
    )
    return [
        StoredResult(
            r["publish_id"],
            r["publish_group"],
            r["name"],
            r["status"],
            r["success"],
            r["checked_at"],
            json.loads(r["result"]),
        )
        for r in picked
    ]


def format_results(results: list[StoredResult]) -> str:
    """The results as text: per table and attempt, how many expectations passed and what failed."""
    if not results:
        return "no check results for these tables"
    lines = []
    for r in results:
        stats = r.result.get("statistics") or {}
        lines.append(
            f"{r.table} publish {r.publish_id} ({r.status}, {r.checked_at:%Y-%m-%d %H:%M:%S}): "
            f"{stats.get('successful_expectations', '?')} of {stats.get('evaluated_expectations', '?')} "
            "expectations passed"
        )
        for f in r.failed():
            cfg = f.get("expectation_config") or {}
            meta = cfg.get("meta") or {}
            res = f.get("result") or {}
            error = (f.get("exception_info") or {}).get("exception_message")
            what = (
                f"error: {error.strip().splitlines()[0][:200]}"
                if error
                else f"{res['unexpected_count']:,} unexpected rows"
                if res.get("unexpected_count") is not None
                else f"observed {res.get('observed_value')}"
            )
            lines.append(f"  failed: {meta.get('name') or cfg.get('type')} ({meta.get('severity', 'fail')}): {what}")
    return "\n".join(lines)


def results_json(results: list[StoredResult]) -> str:
    return json.dumps(
        [
            {
                "table": r.table,
                "publish_id": r.publish_id,
                "publish_group": r.group,
                "status": r.status,
                "success": r.success,
                "checked_at": r.checked_at.isoformat(sep=" "),
                "result": r.result,
            }
            for r in results
        ],
        indent=2,
        default=str,
    )


def write_data_docs(results: list[StoredResult], out_dir: str) -> str:
    """Render GE's Data Docs site of ``results`` into ``out_dir``; returns its index page.

    The pages are GE's own (its site builder over a validation results store filled with the
    stored results): one validation page per table and publish attempt, named by the publish
    id, and GE's index of them."""
    from binlake.quality import engine

    return engine.build_data_docs(
        [
            (r.table, r.publish_id, r.checked_at.replace(tzinfo=r.checked_at.tzinfo or timezone.utc), r.result)
            for r in results
        ],
        str(Path(out_dir).resolve()),
    )


__all__ = ["StoredResult", "format_results", "results_json", "stored_results", "write_data_docs"]
