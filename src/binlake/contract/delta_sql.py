"""The part of Delta's ``DeltaTable`` API binlake uses, as Delta SQL commands.

Why: a Spark Connect session (serverless compute, standard access mode clusters, an
``sc://`` server) has no JVM for ``delta.tables.DeltaTable`` to call into. Delta's own Connect
client needs the Delta Connect plugin on the server, which a Spark Connect server does not
have unless someone installed it. Delta's SQL commands (``MERGE INTO``, ``UPDATE``,
``DELETE``, ``DESCRIBE HISTORY``, ``OPTIMIZE``, ``VACUUM``) need only Delta's SQL extension,
which every Delta-enabled server has, so on a Connect session binlake runs those instead.
:meth:`binlake.contract.tables.TableRef.delta` chooses; callers write the same builder
chain either way::

    ref.delta(spark).alias("t").merge(source.alias("s"), "t.id = s.id") \\
        .whenMatchedUpdate(condition="s.v > t.v", set={"v": "s.v"}) \\
        .whenNotMatchedInsertAll().execute()

Conditions and assignments must be SQL text (a Column of a Connect session cannot be turned
back into SQL); binlake passes text on both kinds of session. A merge's source is registered
as a temporary view for the one statement and always goes by ``s`` (binlake's convention;
``merge(..., source_alias=...)`` names another).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from binlake.spark import SparkLike

from binlake.contract.commit_tag import committing
from binlake.contract.sql import Sql, quote_ident, sql, sql_list


@overload
def _sql(what: str, value: str) -> Sql: ...
@overload
def _sql(what: str, value: object) -> Sql | None: ...
def _sql(what: str, value: object) -> Sql | None:
    """A condition or value, SQL text as DeltaTable's API takes it (the caller built it)."""
    if value is None or isinstance(value, str):
        return None if value is None else Sql(value)
    raise TypeError(
        f"{what} must be SQL text on a Spark Connect session (got {type(value).__name__}): "
        "build it as a string, e.g. with binlake.contract.sql.spark_literal"
    )


def _assignments(what: str, pairs: Mapping[str, str]) -> Sql:
    return sql_list(Sql(f"{_sql('a column', column)} = {_sql(what, expr)}") for column, expr in pairs.items())


def _where(condition: Sql | None) -> Sql:
    return sql(" WHERE {c}", c=condition) if condition else Sql("")


class DeltaSql:
    """A Delta table addressed by SQL (``delta.`/path``` or a table name)."""

    def __init__(self, spark: SparkLike, table_sql: str, alias: str | None = None):
        self._spark = spark
        self._table = Sql(table_sql)  # TableRef.sql
        self._alias = alias

    @property
    def _target(self) -> Sql:
        return sql("{t} AS {a}", t=self._table, a=quote_ident(self._alias)) if self._alias else self._table

    def alias(self, name: str) -> DeltaSql:
        return DeltaSql(self._spark, self._table, name)

    def toDF(self):
        return self._spark.table(self._table)

    def history(self, limit: int | None = None):
        suffix = f" LIMIT {int(limit)}" if limit is not None else ""
        return self._spark.sql(f"DESCRIBE HISTORY {self._table}{suffix}")

    def detail(self):
        return self._spark.sql(f"DESCRIBE DETAIL {self._table}")

    def update(self, condition: str | None = None, set: Mapping[str, str] | None = None):
        where = _sql("an UPDATE condition", condition)
        statement = sql(
            "UPDATE {t} SET {a}{w}", t=self._target, a=_assignments("an UPDATE value", set or {}), w=_where(where)
        )
        with committing(self._spark):
            self._spark.sql(statement)

    def delete(self, condition: str | None = None):
        where = _sql("a DELETE condition", condition)
        with committing(self._spark):
            self._spark.sql(sql("DELETE FROM {t}{w}", t=self._target, w=_where(where)))

    def merge(self, source, condition: str, source_alias: str = "s") -> MergeSql:
        return MergeSql(self._spark, self._target, source, source_alias, _sql("a MERGE condition", condition))

    def optimize(self) -> _Optimize:
        return _Optimize(self._spark, self._table)

    def vacuum(self, retentionHours: float | None = None):
        retain = f" RETAIN {float(retentionHours)} HOURS" if retentionHours is not None else ""
        with committing(self._spark):
            return self._spark.sql(f"VACUUM {self._table}{retain}")


class _Optimize:
    def __init__(self, spark: SparkLike, table_sql: str):
        self._spark = spark
        self._table = table_sql

    def executeCompaction(self):
        with committing(self._spark):
            return self._spark.sql(f"OPTIMIZE {self._table}")


class MergeSql:
    """``MERGE INTO`` built clause by clause, in the order the clauses are added."""

    def __init__(self, spark: SparkLike, target: str, source, source_alias: str, condition: str):
        self._spark = spark
        self._target = target
        self._source = source
        self._source_alias = source_alias
        self._condition = condition
        self._clauses: list[str] = []

    def _add(self, head: str, condition, action: str) -> MergeSql:
        cond = _sql("a MERGE clause condition", condition)
        self._clauses.append(f"{head}{f' AND {cond}' if cond else ''} THEN {action}")
        return self

    def whenMatchedUpdate(self, condition: str | None = None, set: Mapping[str, str] | None = None):
        return self._add("WHEN MATCHED", condition, sql("UPDATE SET {a}", a=_assignments("a MERGE value", set or {})))

    def whenMatchedUpdateAll(self, condition: str | None = None):
        return self._add("WHEN MATCHED", condition, "UPDATE SET *")

    def whenMatchedDelete(self, condition: str | None = None):
        return self._add("WHEN MATCHED", condition, "DELETE")

    def whenNotMatchedInsert(self, condition: str | None = None, values: Mapping[str, str] | None = None):
        values = values or {}
        columns = sql_list(_sql("a column", c) for c in values)
        exprs = sql_list(_sql("a MERGE value", v) for v in values.values())
        return self._add("WHEN NOT MATCHED", condition, sql("INSERT ({c}) VALUES ({v})", c=columns, v=exprs))

    def whenNotMatchedInsertAll(self, condition: str | None = None):
        return self._add("WHEN NOT MATCHED", condition, "INSERT *")

    def whenNotMatchedBySourceDelete(self, condition: str | None = None):
        return self._add("WHEN NOT MATCHED BY SOURCE", condition, "DELETE")

    def execute(self):
        """Run the MERGE; returns its metrics row as a DataFrame (``num_affected_rows``,
        ``num_updated_rows``, ``num_deleted_rows``, ``num_inserted_rows``), as DeltaTable does."""
        if not self._clauses:
            raise ValueError("a MERGE needs at least one WHEN clause")
        view = f"binlake_merge_source_{uuid.uuid4().hex}"
        self._source.createOrReplaceTempView(view)
        try:
            # A command runs when spark.sql() is called (classic and Connect alike); the rows
            # are fetched before the view goes.
            with committing(self._spark):
                statement = sql(
                    "MERGE INTO {t} USING {v} AS {s} ON {c} {clauses}",
                    t=self._target,
                    v=quote_ident(view),
                    s=quote_ident(self._source_alias),
                    c=Sql(self._condition),
                    clauses=sql_list((Sql(c) for c in self._clauses), " "),
                )
                result = self._spark.sql(statement)
                rows = result.collect()
            return self._spark.createDataFrame(rows, result.schema)
        finally:
            self._spark.catalog.dropTempView(view)
