"""PySpark's Python worker daemon, without the zip archives Spark puts on the workers' path.

Why: local Spark starts its Python workers with ``pyspark.zip``, the py4j zip and the
``spark-core`` jar on ``PYTHONPATH``, and PySpark calls ``importlib.invalidate_caches()``
at the start of every task, which on Python 3.11 re-reads the central directory of every
zip on the path (over 6,000 entries here). That is about a quarter of a second of CPU per
task, whatever the task does: most of a snapshot chunk's time in Python. When PySpark is
pip-installed (it always is for binlake) the same modules are in site-packages, so the
archives are dropped from ``sys.path`` before anything is imported from them.

Used through ``spark.python.daemon.module`` (see :mod:`binlake.spark`); never on Databricks.
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


def main() -> None:
    drop = set(redundant_archives(sys.path))
    sys.path[:] = [p for p in sys.path if p not in drop]
    for key, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter) and any(key == p or key.startswith(p + os.sep) for p in drop):
            del sys.path_importer_cache[key]
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
