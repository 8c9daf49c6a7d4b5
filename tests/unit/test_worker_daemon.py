"""The local Python worker daemon drops the archives that duplicate the pip-installed PySpark."""

import zipfile

from binlake.local.worker_daemon import redundant_archives


def _zip(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pyspark/__init__.py", "")
    return str(path)


def _site(tmp_path):
    site = tmp_path / "site-packages"
    (site / "pyspark").mkdir(parents=True)
    (site / "py4j").mkdir()
    return site


def test_pysparks_own_zips_and_jars_are_redundant_when_pyspark_is_installed(tmp_path):
    site = _site(tmp_path)
    pyspark_zip = _zip(site / "pyspark" / "python" / "lib" / "pyspark.zip")
    core_jar = _zip(site / "pyspark" / "jars" / "spark-core_2.13-4.0.1.jar")
    path = [str(tmp_path), pyspark_zip, core_jar, str(site)]
    assert redundant_archives(path) == [pyspark_zip, core_jar]


def test_archives_outside_the_pyspark_install_are_kept(tmp_path):
    site = _site(tmp_path)
    user_zip = _zip(tmp_path / "deps" / "mylib.zip")
    assert redundant_archives([user_zip, str(site)]) == []


def test_nothing_is_dropped_without_an_installed_pyspark(tmp_path):
    # pyspark only in the zip (a Spark distribution's own python/lib): the zip is needed.
    pyspark_zip = _zip(tmp_path / "spark" / "python" / "lib" / "pyspark.zip")
    assert redundant_archives([pyspark_zip, str(tmp_path / "empty")]) == []
