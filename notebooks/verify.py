# Databricks notebook source
# MAGIC %md
# MAGIC # binlake: verify
# MAGIC
# MAGIC Compares the source with silver chunk by chunk (row count + checksum). With `repair` set to
# MAGIC `true` it re-reads only the chunks that differ. The weekly `binlake_verify` job runs the same
# MAGIC command; this notebook is for an operator checking by hand.
# MAGIC
# MAGIC **Needs**: the binlake wheel on the cluster, network access to MySQL, and the bundle's
# MAGIC `binlake.yml` (see the status notebook). A mismatch fails the cell (`binlake.VerifyMismatch`)
# MAGIC with the chunks listed.

# COMMAND ----------

dbutils.widgets.text("config", "../binlake.yml", "binlake.yml (relative to this notebook)")
dbutils.widgets.dropdown("repair", "false", ["false", "true"], "repair")
dbutils.widgets.text("tables", "", "tables (db.table, comma-separated; empty = all)")

# COMMAND ----------

import binlake

config = binlake.load_config(dbutils.widgets.get("config"))
result = binlake.run_verify(
    spark, config, repair=dbutils.widgets.get("repair") == "true", tables=dbutils.widgets.get("tables").split(",")
)
print(result.summary())
