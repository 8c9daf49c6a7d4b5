"""Bronze as an operator browses it (the ``bronze_browse`` notebook): the newest changes and
snapshot chunks, as DataFrames to ``display``. The same calls work on a laptop against local
tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from binlake.config import Config
from binlake.contract.tables import Lakehouse, TableRef
from binlake.errors import NotReadyError

if TYPE_CHECKING:
    from binlake.spark import SparkLike


def recent_changes(spark: SparkLike, config: Config, db: str = "", table: str = "", limit: int = 100):
    """The newest bronze change-log rows (optionally of one ``db``/``table``), newest first by
    change sequence: ``file_index, pos, row``, never by time."""
    from pyspark.sql import functions as F

    df = _filtered(spark, Lakehouse(config).changelog, db, table, limit)
    return df.orderBy(F.col("file_index").desc(), F.col("pos").desc(), F.col("row").desc()).limit(limit)


def snapshot_chunks(spark: SparkLike, config: Config, db: str = "", table: str = "", limit: int = 100):
    """The completed snapshot chunks (the manifest), newest commit first."""
    from pyspark.sql import functions as F

    df = _filtered(spark, Lakehouse(config).snapshot_chunks, db, table, limit)
    return df.orderBy(F.col("committed_at").desc(), F.col("chunk_id").desc()).limit(limit)


def _filtered(spark: SparkLike, ref: TableRef, db: str, table: str, limit: int):
    from pyspark.sql import functions as F

    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"limit must be a whole number >= 1, got {limit!r}")
    if not ref.exists(spark):
        raise NotReadyError(f"{ref} does not exist yet: run the binlake_snapshot or binlake_pipeline job first")
    df = ref.read(spark)
    if db:
        df = df.where(F.col("db") == db)
    if table:
        df = df.where(F.col("table") == table)
    return df
