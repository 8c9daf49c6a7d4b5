# Databricks notebook source
# MAGIC %md
# MAGIC # binlake: browse bronze
# MAGIC
# MAGIC The newest binlog changes binlake captured, newest first (ordered by the change sequence
# MAGIC `file_index, pos, row`, never by time). Leave `db` / `table` empty to see every table,
# MAGIC including DDL and capture heartbeats. Read-only.
# MAGIC
# MAGIC **Needs**: the binlake wheel on the cluster and the bundle's `binlake.yml` (see the status notebook).

# COMMAND ----------

dbutils.widgets.text("config", "../binlake.yml", "binlake.yml (relative to this notebook)")
dbutils.widgets.text("db", "", "database")
dbutils.widgets.text("table", "", "table")
dbutils.widgets.text("limit", "100", "rows")

# COMMAND ----------

import binlake

config = binlake.load_config(dbutils.widgets.get("config"))

# COMMAND ----------

display(
    binlake.recent_changes(
        spark,
        config,
        db=dbutils.widgets.get("db"),
        table=dbutils.widgets.get("table"),
        limit=int(dbutils.widgets.get("limit")),
    )
)

# COMMAND ----------

# MAGIC %md
# MAGIC The completed snapshot chunks (bounds, low/high watermark, row count, checksum), newest first.

# COMMAND ----------

display(
    binlake.snapshot_chunks(
        spark,
        config,
        db=dbutils.widgets.get("db"),
        table=dbutils.widgets.get("table"),
        limit=int(dbutils.widgets.get("limit")),
    )
)
