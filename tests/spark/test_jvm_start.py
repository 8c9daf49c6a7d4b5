"""Local Spark JVMs start from the class archive that make setup writes (binlake.local.class_archive)."""

import os
import subprocess
import sys

from binlake.local.class_archive import archive_path
from binlake.spark import SPARK_CONF_ENV


def test_make_setup_wrote_a_class_archive_that_a_new_local_jvm_maps():
    path = archive_path()
    assert path is not None, "make setup (python -m binlake.devtools.warm) writes the class archive"
    assert path.is_file(), "make setup (python -m binlake.devtools.warm) writes the class archive"
    # -Xshare:on turns "the archive does not fit this JVM" from a silent fallback into a
    # failed start, so this run proves the archive is used, not merely present.
    code = (
        "from binlake.spark import get_spark; "
        "s = get_spark('binlake-archive-check', extra_conf={'spark.driver.extraJavaOptions': '-Xshare:on'}); "
        "print('rows', s.range(3).count()); print('explain', s.conf.get('spark.sql.ui.explainMode'))"
    )
    env = {**os.environ, SPARK_CONF_ENV: "spark.sql.ui.explainMode=cost"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "rows 3" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    # The same start shows that settings from the environment reach a new local session.
    assert "explain cost" in done.stdout


def test_the_session_jvm_was_started_with_the_archive(spark):
    args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert f"-XX:SharedArchiveFile={archive_path()}" in args
