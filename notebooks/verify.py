# Databricks notebook source
# MAGIC %md
# MAGIC # binlake: verify
# MAGIC
# MAGIC Compares the source with silver chunk by chunk (row count + checksum). With `repair` set to
# MAGIC `true` it re-reads only the chunks that differ. The weekly `binlake_verify` job runs the same
# MAGIC command; this notebook is for an operator checking by hand.
# MAGIC
# MAGIC **Needs**: the binlake wheel on the cluster, network access to MySQL, and a `binlake.yml`
# MAGIC (see the status notebook). A mismatch fails the cell (exit code 8) with the chunks listed.

# COMMAND ----------

dbutils.widgets.text("config", "/Workspace/Shared/binlake/binlake.yml", "binlake.yml path")
dbutils.widgets.dropdown("repair", "false", ["false", "true"], "repair")
dbutils.widgets.text("tables", "", "tables (db.table, comma-separated; empty = all)")

# COMMAND ----------

from binlake.deploy.entrypoints import main as binlake_job

binlake_job([
    "--settings", dbutils.widgets.get("config"),
    "verify", f"--repair-if={dbutils.widgets.get('repair')}", f"--table-list={dbutils.widgets.get('tables')}",
])
