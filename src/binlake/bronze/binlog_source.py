"""``spark.read.format("binlake_binlog")``: the Python batch data source capture reads a batch
with, one partition per binlog file of the batch (:mod:`binlake.bronze.binlog_reader` reads
each, on an executor).

Server ids: a binlog dump registers as a replica, and two dumps with one server id kick each
other off the server. Partition ``i`` of a batch therefore uses ``source.server_id + 1 + i``
(the driver's own short probes use ``source.server_id``). Keep the ``server_id`` values of
different binlake deployments (and real replicas) at least ``max_parallel_files + 1`` apart;
:data:`MAX_PARALLEL_FILES` caps the partitions per batch so the block of ids is bounded.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from binlake.bronze.binlog_reader import READ_SCHEMA, ReadRange, arrow_schema, read_range
from binlake.config import BINLOG_READERS, SourceConfig

if TYPE_CHECKING:
    from binlake.spark import SparkLike

SOURCE_NAME = "binlake_binlog"
MAX_PARALLEL_FILES = BINLOG_READERS


class _Partition(InputPartition):
    def __init__(self, rng: ReadRange):
        super().__init__(rng.index)
        self.rng = rng


class _Reader(DataSourceReader):
    def __init__(self, options: dict[str, str]):
        self.options = {k: options[k] for k in ("source", "password", "mask_salt_secret") if k in options}
        self.ranges = [ReadRange(**r) for r in json.loads(options["ranges"])]

    def partitions(self):
        return [_Partition(r) for r in self.ranges]

    def read(self, partition):
        yield from read_range(SourceConfig.from_executor_options(self.options), partition.rng)


class BinlogDataSource(DataSource):
    """``spark.read.format("binlake_binlog")``: options ``source`` and ``password``
    (:meth:`SourceConfig.executor_options`) and ``ranges``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return READ_SCHEMA

    def reader(self, schema):
        from pyspark.sql.pandas.types import to_arrow_schema

        # The reader yields Arrow batches built for arrow_schema(); Spark checks only names.
        if not to_arrow_schema(schema).equals(arrow_schema()):
            raise ValueError(f"{SOURCE_NAME} reads only its own schema: {READ_SCHEMA}")
        return _Reader(self.options)


def read_dataframe(spark: SparkLike, source: SourceConfig, ranges: list[ReadRange]):
    """A DataFrame over the ranges; the password travels as an option named ``password``,
    which Spark redacts in plan text."""
    spark.dataSource.register(BinlogDataSource)
    return (
        spark.read.format(SOURCE_NAME)
        .schema(READ_SCHEMA)  # given, so Spark need not start a Python worker to ask for it
        .options(**source.executor_options())
        .option("ranges", json.dumps([asdict(r) for r in ranges]))
        .load()
    )
