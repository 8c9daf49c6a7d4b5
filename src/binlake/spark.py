"""The Spark session: Databricks' own when running there, local Spark + Delta otherwise."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: importing PySpark at runtime is left to where it is used
    from typing import TypeAlias

    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSparkSession
    from typing_extensions import TypeIs

    # What binlake is given as ``spark``: a classic session (local Spark, a Databricks
    # cluster) or a Spark Connect one (serverless, ``sc://`` servers); the two classes are
    # unrelated, so code that needs the JVM narrows with :func:`is_connect` first.
    SparkLike: TypeAlias = SparkSession | ConnectSparkSession

# Hadoop's default file system for file: paths checksums every file into a hidden ".crc"
# sidecar, and without Hadoop's native library (a pip install never has it) it forks a
# `chmod` for every file it creates and two `readlink`s for every rename. Delta renames for
# each commit and each version checksum, so a run of many small commits forks thousands of
# processes. The raw file system writes no sidecars (Parquet writes a CRC per page itself),
# and the plain FileSystem rename for Delta's version checksums forks nothing.
# Commit files keep Delta's own log store (HDFSLogStore: rename without overwrite), so
# commits stay as they were. Local lakehouses only: cloud paths and Databricks are untouched.
LOCAL_FILE_CONF = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
}

_LOCAL_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # One laptop or CI box: small shuffles, no UI port clashes between parallel test runs.
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "false",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    "spark.python.worker.reuse": "true",
    # Delta logs each VACUUM as two commits (VACUUM START, VACUUM END) in every table's
    # history; `binlake maintain` vacuums every table, and for a small table those commits
    # cost about as much as the VACUUM itself. Databricks sessions keep the workspace's
    # setting.
    "spark.databricks.delta.vacuum.logging.enabled": "false",
    # Workers without Spark's zip archives on their path, which PySpark re-reads at every task.
    "spark.python.daemon.module": "binlake.local.worker_daemon",
    **LOCAL_FILE_CONF,
}


# Extra Spark settings for local sessions, from the environment: `key=value` pairs separated
# by `;`, applied over binlake's own (a caller's extra_conf wins over both). For what a
# deployment cannot put in binlake.yml, and for processes that only ever see small data:
# the test suite runs its `binlake` commands with C1 alone and without code generation,
# where compiling costs more CPU than it saves (see tests/conftest.py).
SPARK_CONF_ENV = "BINLAKE_SPARK_CONF"


def env_spark_conf(text: str | None = None) -> dict[str, str]:
    """The settings in ``text`` (default: the :data:`SPARK_CONF_ENV` variable) as a dict."""
    from binlake.errors import ConfigError

    text = os.environ.get(SPARK_CONF_ENV, "") if text is None else text
    conf = {}
    for item in (part.strip() for part in text.split(";")):
        if not item:
            continue
        key, eq, value = (part.strip() for part in item.partition("="))
        if not eq or not key.startswith("spark."):
            raise ConfigError(
                f"{SPARK_CONF_ENV}: {item!r} is not a spark.* key=value pair: "
                "write it like spark.sql.shuffle.partitions=2;spark.driver.memory=4g"
            )
        conf[key] = value
    return conf


def on_databricks(environ: Mapping[str, str] | None = None) -> bool:
    """Whether binlake runs on a Databricks cluster (a job task or a notebook): Databricks sets
    ``DATABRICKS_RUNTIME_VERSION`` there. ``environ`` defaults to the process's environment."""
    return "DATABRICKS_RUNTIME_VERSION" in (os.environ if environ is None else environ)


# A round of few rows (a continuous loop's, a scheduled run's after a quiet interval) spends
# more CPU compiling Spark's plans to Java than running them; a big round (a first load, a
# catch-up) gains from it. So a round's session compiles only when the round is big: the
# steps that know their input's size (silver and gold after capture) run under small_plans.
SMALL_ROUND_ROWS = 50_000
SMALL_ROUND_CONF = {"spark.sql.codegen.wholeStage": "false"}

# Tables a step works on at the same time on one session (silver's decode and apply, gold's
# checks and writes, maintain's compaction and vacuum): on small tables most of the time is
# driver-side latency (Delta log reads, file listings, commits), not work, and each table is
# its own.
TABLE_THREADS = 4


@contextmanager
def small_plans(spark: SparkLike, rows: int | None) -> Iterator[None]:
    """Run the block without whole-stage code generation when ``rows`` (the round's input,
    e.g. the row changes capture committed) is at most :data:`SMALL_ROUND_ROWS`; the
    session's settings are put back after. Give a thread of its own session
    (``spark.newSession()``) when others use the same one at the same time."""
    if rows is None or rows > SMALL_ROUND_ROWS:
        yield
        return
    saved = {key: spark.conf.get(key, None) for key in SMALL_ROUND_CONF}
    for key, small in SMALL_ROUND_CONF.items():
        spark.conf.set(key, small)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


# PySpark's own variable for "use this Spark Connect server" (``sc://host:port``): with it set,
# binlake talks to that server instead of starting local Spark.
REMOTE_ENV = "SPARK_REMOTE"


def is_connect(spark: SparkLike) -> TypeIs[ConnectSparkSession]:
    """True for a Spark Connect session: serverless compute, standard access mode clusters,
    ``sc://`` servers. Such a session has no ``sparkContext`` and no JVM to reach into.

    Decided by the session's class, not by PySpark's process-wide ``is_remote()``, which turns
    true for every session once any Connect session exists in the process."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def default_parallelism(spark: SparkLike, fallback: int = 2) -> int:
    """How many tasks the session runs at once: the SparkContext's number on a classic session;
    ``spark.default.parallelism`` where a Connect server sets it, else ``fallback``."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    try:
        value = spark.conf.get("spark.default.parallelism", None)
    except Exception:  # noqa: BLE001 - a server may refuse to show a configuration (serverless does)
        value = None
    return int(value) if value and str(value).isdigit() else fallback


def get_spark(
    app_name: str = "binlake",
    master: str | None = None,
    extra_conf: dict[str, str] | None = None,
    extra_packages: list[str] | None = None,
) -> SparkLike:
    """Return the active session on Databricks, a Spark Connect session when
    :data:`REMOTE_ENV` names a server, or a local Spark + Delta session.

    A local session gets binlake's settings, then those of the :data:`SPARK_CONF_ENV`
    environment variable, then ``extra_conf``; the last one to set a key wins.

    The Delta jars are resolved from Maven Central by ``configure_spark_with_delta_pip`` on the
    first start and cached in ``~/.ivy2``; ``make setup`` warms that cache and writes the
    class archive local JVMs start from (:mod:`binlake.local.class_archive`).
    """
    from pyspark.sql import SparkSession

    if on_databricks():
        return SparkSession.builder.getOrCreate()
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    remote = os.environ.get(REMOTE_ENV)
    if remote:
        # The server has its own settings (and Delta, see binlake.devtools.connect_server):
        # nothing of the local configuration applies to it.
        session = SparkSession.builder.remote(remote).getOrCreate()
        require_delta(session)
        return session
    from delta import configure_spark_with_delta_pip

    builder = SparkSession.builder.appName(app_name).master(
        master or os.environ.get("BINLAKE_SPARK_MASTER", "local[2]")
    )
    if not os.environ.get("PYSPARK_PYTHON"):
        # Python workers (UDFs, the snapshot data source) must import binlake and its
        # dependencies: run them on this interpreter, not whatever python3 is on PATH,
        # through the launcher that keeps Spark's archives off their path where it is
        # installed. SparkContext reads the variable itself for Python functions, hence the env.
        python = spark_python()
        os.environ["PYSPARK_PYTHON"] = python
        builder = builder.config("spark.pyspark.python", python)
    for key, value in local_conf(extra_conf).items():
        builder = builder.config(key, value)
    spark = configure_spark_with_delta_pip(builder, extra_packages=extra_packages).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    _quiet_known_noise(spark)
    _keep_jars_off_python_path(spark)
    return spark


DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"


def require_delta(spark: SparkLike) -> None:
    """Refuse a Spark Connect server without Delta Lake, in one line, before anything is read
    or written. Databricks has Delta built in (and may not show its settings); a classic local
    session gets it from :func:`get_spark`."""
    from binlake.errors import ConnectWithoutDeltaError

    if not is_connect(spark) or on_databricks():
        return
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    if DELTA_EXTENSION not in extensions:
        raise ConnectWithoutDeltaError(
            f"the Spark Connect server at {os.environ.get(REMOTE_ENV) or 'the remote address'} has no Delta Lake "
            f"(spark.sql.extensions does not name {DELTA_EXTENSION}): start it with Delta's extension and catalog "
            "(python -m binlake.devtools.connect_server does), or run binlake on Databricks serverless compute or a "
            "Databricks cluster, where Delta is built in"
        )


# Spark Connect sessions whose Python workers were found to run this binlake (by session id).
_WORKERS_CHECKED: set[str] = set()


def require_binlake_on_workers(spark: SparkLike) -> None:
    """On a Spark Connect session, check once per session that the server's Python workers
    import the binlake this process runs, and refuse in one line if not: the snapshot and
    binlog readers are sent there by reference and run that code. On a classic session the
    workers run the driver's own installation (local) or the cluster's library: no check."""
    from binlake.errors import ConnectWorkersWithoutBinlakeError

    if not is_connect(spark) or spark.session_id in _WORKERS_CHECKED:
        return
    from importlib.metadata import version

    from pyspark.sql import functions as F

    here = version("binlake")

    def probe(_):
        # Runs on a server worker: the readers' modules, with everything they import, by name
        # (the function travels by value and refers to no binlake module itself).
        try:
            import importlib
            from importlib.metadata import version

            for module in ("binlake.bronze.snapshot_source", "binlake.bronze.binlog_source"):
                importlib.import_module(module)
            return version("binlake")
        except Exception as exc:  # noqa: BLE001 - reported to the caller, whatever it is
            return f"!{type(exc).__name__}: {exc}"

    try:
        there = spark.range(1).select(F.udf(probe, "string")(F.lit(0))).head(1)[0][0]
    except Exception as exc:  # noqa: BLE001 - a worker that cannot start at all fails the probe job
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        there = "!" + next((line for line in reversed(lines) if "Error" in line), lines[0] if lines else repr(exc))
    if there.startswith("!") or there != here:
        detail = f"they fail with {there[1:]}" if there.startswith("!") else f"they run binlake {there}, this is {here}"
        raise ConnectWorkersWithoutBinlakeError(
            f"the Spark Connect server's Python workers cannot run this binlake ({detail}); its snapshot and binlog "
            "readers run there: install this binlake wheel on that compute (Databricks serverless: a dependency of "
            "the job's environment; a cluster: a cluster library), or run binlake on local Spark (unset "
            f"{REMOTE_ENV}) or on a Databricks cluster with the wheel as a task library"
        )
    _WORKERS_CHECKED.add(spark.session_id)


def local_conf(extra_conf: dict[str, str] | None = None) -> dict[str, str]:
    """The settings of a local Spark JVM (a session's, or a local Spark Connect server's):
    binlake's, then the :data:`SPARK_CONF_ENV` variable's, then ``extra_conf``, with the class
    archive's JVM options (:mod:`binlake.local.class_archive`) before the driver's own."""
    from binlake.local.class_archive import java_options

    return with_java_options({**_LOCAL_CONF, **env_spark_conf(), **(extra_conf or {})}, java_options())


def delta_package() -> str:
    """The Maven coordinate of the Delta jar matching the installed ``delta-spark`` (what
    ``configure_spark_with_delta_pip`` adds to a local session)."""
    from importlib.metadata import version

    return f"io.delta:delta-spark_2.13:{version('delta-spark')}"


def spark_python() -> str:
    """The executable local Spark runs its Python processes with: this interpreter's
    ``binlake-spark-python`` (:func:`binlake.local.worker_daemon.launch`) when it is installed
    beside it, else the interpreter itself."""
    import sys
    from pathlib import Path

    launcher = Path(sys.executable).with_name("binlake-spark-python")
    return str(launcher) if os.access(launcher, os.X_OK) else sys.executable


def with_java_options(conf: dict[str, str], options: str) -> dict[str, str]:
    """``conf`` with ``options`` put before the driver JVM options it already has (so the
    caller's own win where both set the same flag)."""
    key = "spark.driver.extraJavaOptions"
    joined = " ".join(o for o in (options, conf.get(key, "")) if o)
    return {**conf, key: joined} if joined else dict(conf)


def _keep_jars_off_python_path(spark: SparkSession) -> None:
    """PySpark puts every ``--packages`` jar (Delta's, here) on the workers' Python path, in
    case it holds Python code; these hold none, and each archive on that path costs every
    task time (see :mod:`binlake.local.worker_daemon`). The list is private to PySpark, so
    a PySpark without it is left as it is."""
    includes = getattr(spark.sparkContext, "_python_includes", None)
    if isinstance(includes, list):
        includes[:] = [p for p in includes if not p.lower().endswith(".jar")]


# Logged at ERROR on every read of a table with deletion vectors, yet harmless: the filter
# is applied by Delta itself when the Parquet reader cannot take it.
NOISY_LOGGERS = ("org.apache.spark.sql.delta.DeltaParquetFileFormat",)


def _quiet_known_noise(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    if jvm is None:  # PySpark types the gateway optional; a started context has one
        return
    try:
        level = jvm.org.apache.logging.log4j.Level.OFF
        for name in NOISY_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
    except Exception:  # noqa: BLE001 - only log levels; never worth failing a run for
        pass
