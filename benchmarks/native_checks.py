"""The peer of ``gold_checks_per_changed_table_s``: gold's checks as one hand-written Spark job.

This is how binlake checked gold before its checks went through Great Expectations: every rule
a Spark SQL predicate TRUE for the rows it rejects, and one job per table, a group-by on the key
whose groups also sum each predicate's failing rows (so duplicates and every rule come out of
one pass). Kept here, not in the package, as the bar GE's one-scan validation is held to.
"""

from __future__ import annotations

import functools


def failing_rows(expectation: dict) -> str:
    """The predicate TRUE for the rows a column-map expectation rejects (NULLs never fail,
    except a not-null expectation)."""
    kind, kw = expectation["type"], expectation["kwargs"]
    col = f"`{kw['column']}`"
    if kind == "expect_column_values_to_not_be_null":
        return f"{col} IS NULL"
    if kind == "expect_column_values_to_be_between":
        bounds = [f"{col} < {kw['min_value']}"] if "min_value" in kw else []
        bounds += [f"{col} > {kw['max_value']}"] if "max_value" in kw else []
        return f"{col} IS NOT NULL AND ({' OR '.join(bounds) or 'FALSE'})"
    if kind == "expect_column_values_to_be_in_set":
        listed = ", ".join("'" + str(v).replace("'", "\\'") + "'" for v in kw["value_set"])
        return f"{col} IS NOT NULL AND NOT ({col} IN ({listed}))"
    if kind == "expect_column_values_to_match_regex":
        return f"{col} IS NOT NULL AND NOT (CAST({col} AS STRING) RLIKE '{kw['regex']}')"
    raise ValueError(f"no native form of {kind}")


def run_native_checks(df, expectations: list[dict], key: list[str]) -> dict:
    """Rows, duplicate-key rows and each expectation's failing rows, in one Spark job."""
    from pyspark.sql import functions as F

    flags = [F.expr(f"coalesce(({failing_rows(e)}), FALSE)") for e in expectations]
    per_row = [F.sum(F.when(f, 1).otherwise(0)).alias(f"_f{i}") for i, f in enumerate(flags)]
    complete = functools.reduce(lambda a, b: a & b, [F.col(k).isNotNull() for k in key])
    groups = df.groupBy(*key).agg(F.count(F.lit(1)).alias("_n"), *per_row)
    totals = groups.agg(
        F.sum("_n").alias("rows"),
        F.sum(F.when((F.col("_n") > 1) & complete, F.col("_n")).otherwise(0)).alias("dup"),
        *[F.sum(f"_f{i}").alias(f"_f{i}") for i in range(len(flags))],
    ).first()
    return {"rows": totals["rows"], "dup": totals["dup"], "failing": [totals[f"_f{i}"] for i in range(len(flags))]}
