"""Python workers of the local session import from site-packages, not from archives.

PySpark re-reads the directory of every archive on a worker's import path at the start of
every task; with Spark's own zips and jars there that is a fixed CPU cost on every task
(see binlake.local.worker_daemon). These tests look at a real worker.
"""

import os


def _worker_import_state(spark):
    def state(_):
        # Runs on the worker; defined here so that it is pickled by value.
        import os as wos
        import sys as wsys
        import zipimport

        import pyspark as wpyspark

        archives = [p for p in wsys.path if wos.path.isfile(p)]
        zip_finders = [k for k, v in wsys.path_importer_cache.items() if isinstance(v, zipimport.zipimporter)]
        yield archives, zip_finders, wpyspark.__file__

    [result] = spark.sparkContext.parallelize([0], 1).mapPartitions(state).collect()
    return result


def test_workers_have_no_archives_on_their_import_path(spark):
    archives, zip_finders, _ = _worker_import_state(spark)
    assert [a for a in archives if a.lower().endswith((".zip", ".jar"))] == []
    assert zip_finders == []


def test_workers_import_the_same_pyspark_as_the_driver(spark):
    import pyspark

    _, _, worker_pyspark = _worker_import_state(spark)
    assert os.path.realpath(worker_pyspark) == os.path.realpath(pyspark.__file__)


def test_data_source_planners_have_no_archives_on_their_import_path(spark):
    # Spark plans a Python data source read in processes of its own (create_data_source,
    # plan_data_source_read), which it starts with its default daemon module: only the
    # session's launcher can clean their path. The schema is computed in such a process.
    from pyspark.sql.datasource import DataSource

    class PlannerProbe(DataSource):
        @classmethod
        def name(cls):
            return "binlake-test-planner-probe"

        def schema(self):
            import os as pos
            import sys as psys
            import zipimport

            archives = [p for p in psys.path if pos.path.isfile(p) and p.lower().endswith((".zip", ".jar"))]
            finders = [k for k, v in psys.path_importer_cache.items() if isinstance(v, zipimport.zipimporter)]
            return f"archives_{len(archives)}_zip_finders_{len(finders)} INT"

    spark.dataSource.register(PlannerProbe)
    assert spark.read.format("binlake-test-planner-probe").load().schema.names == ["archives_0_zip_finders_0"]


def test_workers_serve_tasks_with_binlakes_task_loop(spark):
    # binlake.local.worker_daemon.serve_task: reads acknowledged at once, survivors of a
    # task frozen. Eight tasks on the session's few task slots: most run on a worker that
    # has served a task before.
    def served_by(_):
        import gc as wgc
        import sys as wsys

        yield wsys.modules["pyspark.daemon"].worker.__qualname__, wgc.get_freeze_count()

    served = spark.sparkContext.parallelize(range(8), 8).mapPartitions(served_by).collect()
    assert {task_loop for task_loop, _ in served} == {"serve_task"}
    assert max(frozen for _, frozen in served) > 0


def test_data_source_planners_serve_with_binlakes_task_loop(spark):
    from pyspark.sql.datasource import DataSource

    class TaskLoopProbe(DataSource):
        @classmethod
        def name(cls):
            return "binlake-test-task-loop-probe"

        def schema(self):
            import sys as psys

            daemon = psys.modules.get("pyspark.daemon")
            return f"{getattr(getattr(daemon, 'worker', None), '__qualname__', 'none')} INT"

    spark.dataSource.register(TaskLoopProbe)
    assert spark.read.format("binlake-test-task-loop-probe").load().schema.names == ["serve_task"]
