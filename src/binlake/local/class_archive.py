"""A class-data-sharing (CDS) archive for local Spark JVMs: each new local session starts faster.

Why: every ``binlake`` command on a laptop or CI box starts a fresh Spark JVM, which spends
seconds loading and verifying the same ~20,000 Spark classes before it does any work. The
JVM can map those classes from an archive instead (JDK 13+ "dynamic CDS"). ``make setup``
(:mod:`binlake.local.warm`) writes the archive once, from a JVM that ran a small Delta
workload; :func:`binlake.spark.get_spark` then starts local JVMs with it. Measured on the
2-core CI box: a session's start and first Delta write took 12.5 s without it and 8 s with
it, and a whole first ``binlake run`` of three small tables about 10 s less.

The JVM checks the archive itself (same JDK build, same class path) and silently starts
without it when it does not fit, so a stale archive costs nothing but the lost speed-up.
The file name carries the JDK, the PySpark and Delta versions and where PySpark is installed
(its jars are the class path), so an upgrade or another virtualenv writes its own. Never used on Databricks.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

# Quiet: an archive that does not fit is a lost optimisation, not something to print on
# every start (the JVM would warn on stdout).
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def java_executable() -> str | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.realpath(os.path.join(home, "bin", "java"))
    found = shutil.which("java")
    return os.path.realpath(found) if found else None


def archive_path() -> Path | None:
    """Where the archive for this JDK, PySpark and Delta lives (``None`` without a ``java``)."""
    from importlib.metadata import PackageNotFoundError, version

    java = java_executable()
    if java is None:
        return None
    try:
        import pyspark

        stat = os.stat(java)
        # The archive holds the JVM's class path, which is Spark's jars in this install.
        versions = [version("pyspark"), version("delta-spark"), os.path.realpath(os.path.dirname(pyspark.__file__))]
    except (OSError, PackageNotFoundError, ImportError):
        return None
    key = hashlib.sha256("\0".join([java, str(stat.st_size), str(stat.st_mtime_ns), *versions]).encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "binlake"
    return base / f"spark-classes-{key}.jsa"


def java_options() -> str:
    """JVM options that start a local Spark JVM from the archive, or ``""`` when there is none."""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def dump_options(target: Path) -> str:
    """JVM options that write the classes the JVM loaded to ``target`` when it exits."""
    return f"-XX:ArchiveClassesAtExit={target} {_QUIET}"
