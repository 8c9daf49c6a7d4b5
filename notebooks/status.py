# Databricks notebook source
# MAGIC %md
# MAGIC # binlake: status
# MAGIC
# MAGIC Capture position and lag, binlog purge risk, last gold publish per table, and the runs of
# MAGIC the bundle's jobs. Read-only.
# MAGIC
# MAGIC **Needs**: a cluster with the binlake wheel installed (the one `databricks bundle deploy` built),
# MAGIC and a `binlake.yml` in the workspace or a volume, e.g. written by
# MAGIC `binlake-job --print-config <the job's flags> status` (see docs/databricks.md).
# MAGIC The password in it is a `{{secrets/<scope>/<key>}}` reference, read here through `dbutils.secrets`.

# COMMAND ----------

dbutils.widgets.text("config", "/Workspace/Shared/binlake/binlake.yml", "binlake.yml path")
dbutils.widgets.text("bundle_name", "binlake", "bundle name (job name prefix)")

# COMMAND ----------

from binlake.deploy.entrypoints import main as binlake_job

binlake_job(["--settings", dbutils.widgets.get("config"), "status"])

# COMMAND ----------

from binlake.deploy.jobs import jobs_status
from binlake.deploy.runtime import current_runtime

runtime = current_runtime(dbutils=dbutils)
print(jobs_status(runtime.load_config(dbutils.widgets.get("config")), dbutils.widgets.get("bundle_name"), spark=runtime.spark()))
