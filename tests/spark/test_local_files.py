"""Local lakehouses are written through Hadoop's raw local file system: no ".crc" sidecar
beside each file, so half the files and half the `chmod`/`readlink` processes Hadoop forks
for them (see LOCAL_FILE_CONF in binlake/spark.py)."""

from pathlib import Path


def _sidecars(root: Path) -> list[str]:
    # Hadoop's sidecars are hidden: ".part-0000....parquet.crc", ".00000000000000000001.json.crc".
    # Delta's own version checksums (_delta_log/00000000000000000001.crc) are not hidden.
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*.crc"))


def test_a_local_delta_table_has_no_hadoop_checksum_sidecars(spark, tmp_path):
    path = tmp_path / "t"
    for _ in range(2):
        spark.range(10).write.format("delta").mode("append").save(str(path))

    assert spark.read.format("delta").load(str(path)).count() == 20
    assert list(path.glob("*.parquet")), "the table has data files"
    assert _sidecars(path) == []


def test_delta_still_writes_its_own_version_checksums(spark, tmp_path):
    path = tmp_path / "t"
    spark.range(3).write.format("delta").save(str(path))

    assert (path / "_delta_log" / "00000000000000000000.crc").is_file()


def test_the_session_uses_the_raw_local_file_system(spark):
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()

    assert hadoop.get("fs.file.impl") == "org.apache.hadoop.fs.RawLocalFileSystem"
    assert hadoop.get("fs.AbstractFileSystem.file.impl") == "org.apache.hadoop.fs.local.RawLocalFs"
