# Databricks notebook source
# MAGIC %md
# MAGIC # binlake: status
# MAGIC
# MAGIC Capture position and lag, binlog purge risk, which process writes each layer, last gold
# MAGIC publish per table, and the runs of the bundle's jobs. Read-only.
# MAGIC
# MAGIC **Needs**: a cluster with the binlake wheel installed (the one `databricks bundle deploy` built),
# MAGIC and the bundle's `binlake.yml`, synced beside this folder (the default path below). The jobs
# MAGIC read the catalog and schemas the bundle deployed; this notebook reads the file's `lakehouse`
# MAGIC section, so point it at the file of the target you look at. The password in it is a
# MAGIC `{{secrets/<scope>/<key>}}` reference, read here through `dbutils.secrets`.

# COMMAND ----------

dbutils.widgets.text("config", "../binlake.yml", "binlake.yml (relative to this notebook)")
dbutils.widgets.text("bundle_name", "binlake", "bundle name (job name prefix)")

# COMMAND ----------

import binlake

config = binlake.load_config(dbutils.widgets.get("config"))
print(binlake.format_status(binlake.collect_status(spark, config)))

# COMMAND ----------

print(binlake.jobs_status(config, dbutils.widgets.get("bundle_name"), spark=spark))
