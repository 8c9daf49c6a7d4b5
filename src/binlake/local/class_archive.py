"""A class-data-sharing (CDS) archive for local Spark JVMs: each new local session starts faster.

Why: every ``binlake`` command on a laptop or CI box starts a fresh Spark JVM, which spends
seconds loading and verifying the same ~20,000 Spark classes before it does any work. The
JVM can map those classes from an archive instead (JDK 13+ "dynamic CDS"). ``make setup``
(:mod:`binlake.devtools.warm`) writes the archive once, from a JVM that ran a small Delta
workload; :func:`binlake.spark.get_spark` then starts local JVMs with it, so every local
``binlake`` command, test session and benchmark starts seconds sooner.

The JVM checks the archive itself (same JDK build, same class path, each jar's size and
modification time) and silently starts without it when it does not fit, so a stale archive
costs nothing but the lost speed-up. The file name carries the JDK, the PySpark and Delta
versions and every class-path jar's path, size and modification time, so an upgrade, another
virtualenv or the same virtualenv built again (same versions, new files: CI rebuilds it in the
same place while the cache survives) writes its own. Never used on Databricks.
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
        versions = [version("pyspark"), version("delta-spark")]
        install = os.path.realpath(os.path.dirname(pyspark.__file__))
        jars = _class_path_stamps(Path(install) / "jars")
    except (OSError, PackageNotFoundError, ImportError):
        return None
    # Two parts: which install (so a rebuilt one can delete its own stale archives) and
    # what exactly the JVM will compare.
    where = _digest([install])[:8]
    key = _digest([java, str(stat.st_size), str(stat.st_mtime_ns), *versions, *jars])[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "binlake"
    return base / f"spark-classes-{where}-{key}.jsa"


def remove_stale_archives(current: Path) -> list[Path]:
    """Delete the archives an earlier build of the same install left (about 190 MB each),
    keeping ``current`` and other installs' archives; returns what was deleted."""
    install_prefix = current.name.rsplit("-", 1)[0] + "-"
    stale = [p for p in current.parent.glob(f"{install_prefix}*.jsa") if p != current]
    for path in stale:
        path.unlink(missing_ok=True)  # another process may be pruning too
    return stale


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _class_path_stamps(jars: Path) -> list[str]:
    """Path, size and modification time of each jar on a local Spark JVM's class path: what
    the JVM compares before it maps the archive, so a key without them could name an
    archive the JVM then refuses (``-Xshare:on`` fails, the default silently loses the speed-up)."""
    return [f"{jar}:{st.st_size}:{st.st_mtime_ns}" for jar in sorted(jars.glob("*.jar")) for st in [jar.stat()]]


def java_options() -> str:
    """JVM options that start a local Spark JVM from the archive, or ``""`` when there is none."""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def dump_options(target: Path) -> str:
    """JVM options that write the classes the JVM loaded to ``target`` when it exits."""
    return f"-XX:ArchiveClassesAtExit={target} {_QUIET}"
