"""Local Spark JVMs start from a class archive when make setup wrote one, and never fail without it."""

import importlib.metadata
import os

from binlake.local import class_archive
from binlake.spark import with_java_options


def test_there_are_no_options_until_the_archive_exists(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = class_archive.archive_path()
    assert path is not None
    assert path.parent == tmp_path / "binlake"
    assert class_archive.java_options() == ""

    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    options = class_archive.java_options()
    assert f"-XX:SharedArchiveFile={path}" in options.split()
    # A stale archive must not print on every start: the JVM's CDS warnings are off.
    assert {"-Xlog:cds=off", "-Xlog:cds+dynamic=off"} <= set(options.split())


def test_another_spark_or_delta_version_gets_its_own_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    before = class_archive.archive_path()
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.9.9" if name == "pyspark" else real(name))
    assert class_archive.archive_path() != before


def test_without_java_there_is_no_archive_and_no_options(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert class_archive.archive_path() is None
    assert class_archive.java_options() == ""


def test_the_callers_own_jvm_options_come_last_so_they_win():
    conf = with_java_options({"spark.driver.extraJavaOptions": "-Xshare:off"}, "-XX:SharedArchiveFile=/a.jsa")
    assert conf["spark.driver.extraJavaOptions"] == "-XX:SharedArchiveFile=/a.jsa -Xshare:off"
    assert with_java_options({}, "") == {}
    assert with_java_options({"x": "1"}, "-Xss2m") == {"x": "1", "spark.driver.extraJavaOptions": "-Xss2m"}


def test_another_pyspark_install_gets_its_own_archive(tmp_path, monkeypatch):
    # The archive records the class path, i.e. where Spark's jars are: another virtualenv
    # with the same versions cannot use it.
    import pyspark

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    before = class_archive.archive_path()
    monkeypatch.setattr(pyspark, "__file__", str(tmp_path / "other-venv" / "pyspark" / "__init__.py"))
    assert class_archive.archive_path() != before


def test_the_same_install_rebuilt_with_new_jar_files_gets_its_own_archive(tmp_path, monkeypatch):
    # The JVM refuses an archive whose class-path jars changed size or modification time,
    # which is what a virtualenv rebuilt in the same place (same versions) looks like.
    import pyspark

    install = tmp_path / "venv" / "pyspark"
    (install / "jars").mkdir(parents=True)
    jar = install / "jars" / "slf4j-api-2.0.16.jar"
    jar.write_bytes(b"jar")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(pyspark, "__file__", str(install / "__init__.py"))
    before = class_archive.archive_path()
    assert class_archive.archive_path() == before, "the name is stable while nothing changes"

    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000_000))
    assert class_archive.archive_path() != before


def test_a_new_archive_replaces_only_the_stale_ones_of_the_same_install(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    current = class_archive.archive_path()
    install = current.name.rsplit("-", 1)[0]
    current.parent.mkdir(parents=True)
    stale = current.parent / f"{install}-0123456789abcdef.jsa"
    another_install = current.parent / "spark-classes-00000000-0123456789abcdef.jsa"
    for path in (current, stale, another_install):
        path.write_bytes(b"archive")

    assert class_archive.remove_stale_archives(current) == [stale]
    assert current.is_file()
    assert another_install.is_file()
    assert not stale.exists()
