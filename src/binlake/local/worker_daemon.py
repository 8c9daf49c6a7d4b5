"""PySpark's Python processes, without the zip archives Spark puts on their path.

Why: local Spark starts its Python processes with ``pyspark.zip``, the py4j zip and the
``spark-core`` jar on ``PYTHONPATH``, and PySpark calls ``importlib.invalidate_caches()``
at the start of every task, which on Python 3.11 re-reads the central directory of every
zip on the path (over 6,000 entries here). That is about a quarter of a second of CPU per
task, whatever the task does: most of a snapshot chunk's time in Python. Spark also plans
every Python data source read in two more processes (``create_data_source``,
``plan_data_source_read``), which pay the same per read before any task starts, and
compile PySpark from the zip (no ``.pyc`` there) when their daemon starts. When PySpark is
pip-installed (it always is for binlake) the same modules are in site-packages, so the
archives are dropped from ``sys.path`` before anything is imported from them.

Two ways in, both local only (see :mod:`binlake.spark`; never on Databricks):

- ``binlake-spark-python`` (:func:`launch`), the ``spark.pyspark.python`` of local
  sessions: Spark runs it as ``binlake-spark-python -m <module> [args]`` for every Python
  process it starts, workers and data source planners alike;
- ``spark.python.daemon.module`` (:func:`main`), always set as well: it covers the
  workers of a session started where that script is missing, and finds nothing left to
  drop where the launcher ran first.
"""

from __future__ import annotations

import os
import sys
import zipimport


def redundant_archives(path: list[str]) -> list[str]:
    """The entries of ``path`` that are archives (files, not directories) inside the
    directory of a pyspark that is installed, with py4j, in a directory also on ``path``:
    everything they hold is importable from there."""
    site = next((p for p in path if os.path.isdir(os.path.join(p, "pyspark")) and os.path.isdir(os.path.join(p, "py4j"))), None)
    if site is None:
        return []
    root = os.path.join(os.path.realpath(site), "pyspark") + os.sep
    return [p for p in path if os.path.isfile(p) and os.path.realpath(p).startswith(root)]


def drop_redundant_archives() -> None:
    """Take :func:`redundant_archives` off ``sys.path`` and forget their zip importers."""
    drop = set(redundant_archives(sys.path))
    sys.path[:] = [p for p in sys.path if p not in drop]
    for key, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter) and any(key == p or key.startswith(p + os.sep) for p in drop):
            del sys.path_importer_cache[key]


def launch(argv: list[str] | None = None) -> None:
    """``binlake-spark-python -m MODULE [ARGS]``: run MODULE as ``python -m`` would, with the
    archives dropped. Any other command line goes to this interpreter unchanged."""
    import runpy

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] != "-m":
        os.execv(sys.executable, [sys.executable, *args])
    drop_redundant_archives()
    sys.argv = [sys.argv[0], *args[2:]]  # run_module puts the module's path in argv[0]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)


def main() -> None:
    drop_redundant_archives()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
