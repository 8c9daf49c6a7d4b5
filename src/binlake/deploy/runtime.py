"""Where binlake runs: a laptop or CI box, a Databricks job task, or a Databricks notebook.

Everything that differs between them is answered here, once, so the pipeline code has no
``if on_databricks`` branches of its own:

=====================  =========================  ==========================================
                       local                      Databricks (job task / notebook)
=====================  =========================  ==========================================
Spark session          local Spark + Delta        the cluster's session
tables                 ``<path>/<layer>/...``     ``<catalog>.<schema>.<name>`` (Unity Catalog)
system files           ``<path>/system/files``    ``/Volumes/<catalog>/<schema>/<volume>``
secrets                Secrets API (SDK auth)     job: Secrets API (runtime auth);
                                                  notebook: ``dbutils.secrets``
=====================  =========================  ==========================================

Example::

    >>> from binlake.deploy.runtime import current_runtime
    >>> current_runtime(environ={}).kind.value
    'local'
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from binlake.config import Config, LakehouseConfig, load_config
from binlake.config.secrets import notebook_dbutils, resolve_secret, workspace_client
from binlake.contract.tables import Lakehouse
from binlake.errors import ConfigError, DatabricksApiError, SecretError
from binlake.spark import on_databricks


class RuntimeKind(str, enum.Enum):
    LOCAL = "local"
    DATABRICKS_JOB = "databricks-job"
    DATABRICKS_NOTEBOOK = "databricks-notebook"


@dataclass(frozen=True)
class Runtime:
    """The environment binlake runs in; build it with :func:`current_runtime`."""

    kind: RuntimeKind
    # A notebook's dbutils: reads secrets with the notebook user's rights, no token needed.
    dbutils: Any = field(default=None, compare=False, repr=False)
    client_factory: Callable[[], Any] | None = field(default=None, compare=False, repr=False)

    def spark(self):
        from binlake.spark import get_spark

        return get_spark()

    def workspace_client(self, purpose: str = "reach the Databricks workspace"):
        """A ``databricks.sdk.WorkspaceClient`` (see :func:`binlake.config.secrets.workspace_client`)."""
        if self.client_factory is not None:
            return self.client_factory()
        return workspace_client(purpose)

    def secret(self, scope: str, key: str) -> str:
        if self.dbutils is not None:
            return resolve_secret(scope, key, dbutils=self.dbutils)
        try:
            client = self.workspace_client(purpose=f"read Databricks secret {scope}/{key}")
        except DatabricksApiError as exc:
            raise SecretError(str(exc)) from None
        return resolve_secret(scope, key, client=client)

    def check_lakehouse(self, lakehouse: LakehouseConfig) -> None:
        """Refuse a lakehouse layout that cannot work here, before anything is written."""
        if self.kind is RuntimeKind.LOCAL:
            return
        if lakehouse.catalog is None:
            raise ConfigError(
                f"lakehouse.path {lakehouse.path!r} is a local directory but binlake runs on Databricks: "
                "set lakehouse.catalog (Unity Catalog) and lakehouse.system_path: /Volumes/<catalog>/<schema>/<volume>"
            )
        if not str(lakehouse.system_path).startswith("/Volumes/"):
            raise ConfigError(
                f"lakehouse.system_path {lakehouse.system_path!r} is not a Unity Catalog volume: on Databricks "
                "the continuous mode's state needs a volume path such as /Volumes/main/binlake_bronze/binlake_system"
            )

    def load_config(self, path: str | os.PathLike[str]) -> Config:
        config = load_config(path)
        self.check_lakehouse(config.lakehouse)
        return config

    def lakehouse(self, config: Config):
        self.check_lakehouse(config.lakehouse)
        return Lakehouse(config)


def current_runtime(environ: Mapping[str, str] | None = None, dbutils: Any = None) -> Runtime:
    """Detect the runtime: :func:`binlake.spark.on_databricks` tells a cluster, and a
    notebook has ``dbutils`` in its namespace. Pass ``dbutils`` explicitly from a notebook cell
    if the package cannot find it."""
    if not on_databricks(environ):
        return Runtime(RuntimeKind.LOCAL)
    found = dbutils if dbutils is not None else notebook_dbutils()
    if found is not None:
        return Runtime(RuntimeKind.DATABRICKS_NOTEBOOK, dbutils=found)
    return Runtime(RuntimeKind.DATABRICKS_JOB)
