"""Shared fixtures: one local Spark + Delta per session, one throwaway MariaDB per session.

Tests under tests/unit need neither; tests/spark need Spark; tests/integration need both.
Markers follow the directory, so `pytest -m unit` runs the fast ones; a test outside
tests/integration that asks for the `mariadb` fixture is marked `integration` too, so
`pytest -m "not integration"` runs every test that needs no MariaDB (`make test-fast`).
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections import Counter
from pathlib import Path

import pytest

from binlake.spark import SPARK_CONF_ENV

ROOT = Path(__file__).resolve().parents[1]

# Every Spark the tests start sees small data only, where compiling costs more CPU than it
# saves: expressions are interpreted rather than compiled to Java, and plan descriptions for
# Spark's listeners are the simple ones. Every JVM the tests start (the sessions, and the
# `binlake` commands through the environment) runs on the C1 compiler alone: the test JVMs share
# two cores, and the optimizing compiler's work on ever new small queries does not pay back,
# not even in the sessions that live for the whole run (docs/development.md, "Local Spark in
# the tests").
SMALL_DATA_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.ui.explainMode": "simple",
}
# C1 alone shrinks the JVM's code cache to 48 MB by default, which a long run of many small
# queries fills (the JVM then fails with "Out of space in CodeCache"): keep the usual size.
TEST_JVM = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
os.environ[SPARK_CONF_ENV] = ";".join(
    f"{k}={v}" for k, v in {**SMALL_DATA_CONF, "spark.driver.extraJavaOptions": TEST_JVM}.items()
)


# `BINLAKE_TEST_COSTS=costs.csv make test`: each test's Spark jobs and session CPU (tests/spark_costs.py).
TEST_COSTS = os.environ.get("BINLAKE_TEST_COSTS")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not TEST_COSTS:
        yield
        return
    from spark_costs import measure

    done = measure(TEST_COSTS, item.nodeid)
    yield
    done()


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        if parts and parts[0] in ("unit", "spark", "integration"):
            item.add_marker(getattr(pytest.mark, parts[0]))
        # A test anywhere that asks for the session's MariaDB (directly or through another
        # fixture) needs one: `make test-fast` leaves it out by this marker, not by a list.
        if "mariadb" in getattr(item, "fixturenames", ()) and parts[:1] != ("integration",):
            item.add_marker(pytest.mark.integration)
    # `make test` hands whole files to two xdist workers in collection order
    # (--no-loadscope-reorder). Files holding a `slow` test go first, the single long
    # end-to-end tests before them all, so the two longest start at once on different
    # workers instead of one of them starting last and running alone.
    per_file = Counter(item.fspath for item in items)
    slow = {item.fspath for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (item.fspath not in slow, per_file[item.fspath] if item.fspath in slow else 0))


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from binlake.spark import get_spark

    warehouse = tmp_path_factory.mktemp("warehouse")
    session = get_spark(
        "binlake-tests",
        extra_conf={
            **SMALL_DATA_CONF,
            "spark.driver.extraJavaOptions": TEST_JVM,
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.warehouse.dir": str(warehouse),
        },
    )
    yield session
    session.stop()


@pytest.fixture
def spark_with_code_generation(spark):
    """The session with Spark's own code generation back on for one test: the tests that
    mirror every type end to end run the compiled paths production runs (SMALL_DATA_CONF
    turns them off for the rest)."""
    saved = {key: spark.conf.get(key) for key in SMALL_DATA_CONF}
    for key in SMALL_DATA_CONF:
        spark.conf.unset(key)
    assert spark.conf.get("spark.sql.codegen.factoryMode") == "FALLBACK"
    try:
        yield spark
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory):
    """A MariaDB with ROW binlog + FULL row image + FULL metadata, and a `cdc` user."""
    from binlake.devtools.mariadb import LocalMariaDB

    db = LocalMariaDB(tmp_path_factory.mktemp("mariadb"))
    db.start()
    os.environ["MYSQL_PASSWORD"] = db.cdc_password
    yield db
    db.destroy()


_counter = itertools.count()


@pytest.fixture
def database(mariadb):
    """A fresh, empty database on the session server (dropped afterwards)."""
    name = f"t{next(_counter)}_{uuid.uuid4().hex[:6]}"
    mariadb.execute(f"CREATE DATABASE `{name}`")
    yield name
    mariadb.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def make_config(mariadb, tmp_path):
    """Write a binlake.yml for the session server and load it: make_config(["db.*"], snapshot={...})."""
    from binlake.config import load_config

    counter = itertools.count()

    def make(tables, lakehouse: str | None = None, server_id: int | None = None, **sections):
        path = tmp_path / f"binlake{next(counter)}.yml"
        sid = server_id or 5000 + (hash(str(tmp_path)) % 1000) * 8
        path.write_text(
            mariadb.config_yaml(lakehouse or str(tmp_path / "lakehouse"), tables, server_id=sid, **sections)
        )
        return load_config(path)

    return make
