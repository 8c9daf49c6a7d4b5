"""A local Spark Connect server with Delta, started from the installed PySpark.

Serverless compute and standard access mode clusters (Databricks' defaults for Unity Catalog)
give binlake a Spark Connect session: no ``sparkContext``, no JVM in the Python process. This
server gives a laptop or CI box the same kind of session, so that path is tested here:

    python -m binlake.devtools.connect_server                 # serves until Ctrl-C, prints the URL
    SPARK_REMOTE=sc://127.0.0.1:15002 binlake --config binlake.yml run

The server is PySpark's own ``SparkConnectServer`` (``pyspark/jars`` has spark-connect) run
through ``spark-submit`` with Delta's SQL extension and catalog and the same local settings a
local session gets (:func:`binlake.spark.local_conf`); its Python workers (the snapshot and
binlog data sources) run on this interpreter, so they import binlake. It needs no Delta
Connect plugin: binlake runs Delta's SQL commands on a Connect session
(:mod:`binlake.contract.delta_sql`).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# Logged by SparkConnectServer once its gRPC port listens, with the port it bound.
_STARTED = re.compile(r"Spark Connect server started at: (\S+):(\d+)")

# Warnings and errors of everything, and the one line that says the server listens; Spark's
# default INFO log would write several lines for every request.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.server.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.server.level = info
"""


@dataclass
class ConnectServer:
    """A running server: ``url`` for ``SparkSession.builder.remote`` or ``SPARK_REMOTE``."""

    url: str
    process: subprocess.Popen
    log_path: Path

    def stop(self, timeout: float = 60) -> None:
        """Stop the server (its JVM runs the shutdown hooks) and wait for it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(port: int, conf: dict[str, str], delta: bool = True) -> list[str]:
    """The ``spark-submit`` command line of a server listening on 127.0.0.1:``port``."""
    import pyspark

    from binlake.spark import delta_package

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        **conf,
    }
    args = [str(submit), "--class", SERVER_CLASS, *(["--packages", delta_package()] if delta else [])]
    for key, value in settings.items():
        args += ["--conf", f"{key}={value}"]
    return [*args, "spark-internal"]


def start(
    port: int | None = None,
    extra_conf: dict[str, str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    timeout: float = 300,
    delta: bool = True,
    python: str | None = None,
) -> ConnectServer:
    """Start a server and wait until it listens; its log and scratch files go to ``workdir``
    (default: a new temporary directory). Raises ``RuntimeError`` with the log's last lines if
    it exits or does not listen within ``timeout`` seconds.

    ``delta=False`` starts a plain Spark Connect server, without Delta Lake; ``python`` is the
    interpreter of its Python workers (default: this one's, see :func:`binlake.spark.spark_python`).
    Both are for showing what binlake says on a server that lacks them."""
    import pyspark

    from binlake.spark import NOISY_LOGGERS, local_conf, spark_python

    work = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="binlake-connect-"))
    work.mkdir(parents=True, exist_ok=True)
    log4j = work / "log4j2.properties"
    log4j.write_text(
        _LOG4J2
        + "".join(
            f"logger.noise{i}.name = {name}\nlogger.noise{i}.level = off\n" for i, name in enumerate(NOISY_LOGGERS)
        )
    )
    conf = local_conf(
        {
            "spark.master": os.environ.get("BINLAKE_SPARK_MASTER", "local[2]"),
            "spark.app.name": "binlake-connect-server",
            "spark.sql.warehouse.dir": str(work / "warehouse"),
            **(extra_conf or {}),
        }
    )
    if not delta:
        conf = {k: v for k, v in conf.items() if k not in ("spark.sql.extensions", "spark.sql.catalog.spark_catalog")}
    key = "spark.driver.extraJavaOptions"
    conf[key] = f"{conf.get(key, '')} -Dlog4j2.configurationFile=file:{log4j}".strip()
    python = python or spark_python()
    conf["spark.pyspark.python"] = python
    env = {
        **os.environ,
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        # The server's Python workers run the data sources: this interpreter imports binlake.
        "PYSPARK_PYTHON": python,
    }
    env.pop("SPARK_REMOTE", None)
    log_path = work / "server.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            server_command(port or free_port(), conf, delta=delta),
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C meant for the caller reaches it through stop()
        )
    server = ConnectServer("", process, log_path)
    deadline = time.monotonic() + timeout
    while True:
        found = _STARTED.search(log_path.read_text(errors="replace"))
        if found:
            server.url = f"sc://{found.group(1)}:{found.group(2)}"
            return server
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
            why = (
                f"exited with code {process.returncode}" if process.returncode else f"did not listen in {timeout:.0f}s"
            )
            raise RuntimeError(f"the Spark Connect server {why}; the end of {log_path}:\n{tail}")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m binlake.devtools.connect_server",
        description="Serve a local Spark Connect server with Delta until interrupted.",
    )
    parser.add_argument("--port", type=int, default=15002, help="gRPC port (default 15002, Spark Connect's own)")
    parser.add_argument("--workdir", help="where the log and scratch files go (default: a new temporary directory)")
    args = parser.parse_args(argv)
    began = time.monotonic()
    server = start(port=args.port, workdir=args.workdir)
    print(
        f"Spark Connect server listening at {server.url} after {time.monotonic() - began:.0f}s (log: {server.log_path})"
    )
    print(f"use it with: SPARK_REMOTE={server.url} binlake --config binlake.yml run")
    try:
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
