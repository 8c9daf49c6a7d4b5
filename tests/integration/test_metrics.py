"""The metrics table: every command run appends one row per step and per table it touched,
with rows in and out, the position reached, lag behind the source and check results; a
blocked group is recorded as blocked while the others record their publish; a metrics table
that cannot be written never fails the command it describes. ``binlake status --html FILE``
writes one self-contained page whose charts a headless browser draws from that table, and
``binlake status --check`` exits 12 once a layer lags more than ``health.max_lag_seconds``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from binlake import cli
from binlake.config import load_config
from binlake.contract.tables import Lakehouse
from binlake.deploy.dashboard import METRICS, dashboard, lag_alert_query
from binlake.deploy.entrypoints import parse_job_args, run_job

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
# Keep the rendered page's screenshot for the docs: BINLAKE_SCREENSHOT=docs/images/status-html.png
SCREENSHOT_COPY = os.environ.get("BINLAKE_SCREENSHOT")


def _browser(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--allow-file-access-from-files",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _rows(spark, config, **where):
    df = Lakehouse(config).metrics.read(spark)
    for column, value in where.items():
        df = df.where(df[column].isNull() if value is None else df[column] == value)
    return [r.asDict() for r in df.orderBy("started_at", "step", "table").collect()]


def _last_run(spark, config, command: str) -> list[dict]:
    rows = _rows(spark, config, command=command)
    last = max(rows, key=lambda r: r["started_at"])["run_id"]
    return [r for r in rows if r["run_id"] == last]


def _write_config(mariadb, tmp_path: Path, database: str, name: str, **sections) -> Path:
    path = tmp_path / name
    groups = {"orders": [f"{database}.orders"], "people": [f"{database}.people"]}
    path.write_text(
        mariadb.config_yaml(
            str(tmp_path / "lakehouse"),
            [f"{database}.*"],
            server_id=6301,
            gold={"groups": groups, **sections.pop("gold", {})},
            health={"max_lag_seconds": 1},
            **sections,
        )
    )
    return path


@pytest.mark.skipif(CHROMIUM is None, reason="no headless browser: make setup installs chromium")
def test_each_command_records_its_steps_and_tables_and_the_html_status_draws_them(
    spark, mariadb, database, tmp_path, capsys
):
    mariadb.execute(
        "CREATE TABLE orders (id INT PRIMARY KEY, amount INT)",
        "CREATE TABLE people (id INT PRIMARY KEY, name VARCHAR(20))",
        "INSERT INTO orders SELECT seq, seq * 10 FROM seq_1_to_40",
        "INSERT INTO people SELECT seq, CONCAT('p', seq) FROM seq_1_to_7",
        database=database,
    )
    path = _write_config(mariadb, tmp_path, database, "binlake.yml")
    config = load_config(path)

    assert cli.main(["--config", str(path), "run"]) == 0
    printed = capsys.readouterr().out
    run = _last_run(spark, config, "run")
    steps = {r["step"]: r for r in run if r["table"] is None}
    assert set(steps) == {"snapshot", "capture", "silver", "gold"}
    assert all(r["status"] == "ok" and r["seconds"] is not None and r["seconds"] >= 0 for r in steps.values())
    snap = {r["table"]: r["rows_in"] for r in run if r["step"] == "snapshot" and r["table"]}
    assert snap == {f"{database}.orders": 40, f"{database}.people": 7}
    gold = {r["table"]: r for r in run if r["step"] == "gold" and r["table"]}
    assert {t: (r["publish_group"], r["rows_out"], r["status"]) for t, r in gold.items()} == {
        f"{database}.orders": ("orders", 40, "ok"),
        f"{database}.people": ("people", 7, "ok"),
    }
    # Silver and gold say what each table cost: a share of their step's time, never more.
    for step in ("silver", "gold"):
        shares = [r["seconds"] for r in run if r["step"] == step and r["table"]]
        assert len(shares) == 2, (step, shares)
        assert all(0 < s <= steps[step]["seconds"] for s in shares), (step, shares)
    # ... and the run prints them on each table's line.
    assert re.search(rf"{database}\.orders: 0 changes, 40 snapshot rows .* bulk-loaded \(\d+\.\d s\)", printed)
    assert re.search(rf"{database}\.orders: 40 rows, gold version \d+ \(rebuilt, \d+\.\d s\)", printed)
    # Nothing committed since: every layer is at the source's end.
    assert all(r["lag_bytes"] == 0 and r["lag_seconds"] == 0 for r in gold.values())
    assert cli.main(["--config", str(path), "status", "--check"]) == 0, "caught up: lag 0"
    assert steps["capture"]["lag_bytes"] == 0
    assert steps["silver"]["lag_bytes"] == 0

    # Capture counts per table; silver is then behind by what committed after it.
    mariadb.execute(
        "INSERT INTO orders VALUES (41, 410), (42, 420), (43, 430)",
        "UPDATE people SET name = 'x' WHERE id = 1",
        database=database,
    )
    assert cli.main(["--config", str(path), "capture"]) == 0
    capture = _last_run(spark, config, "capture")
    assert {r["table"]: r["rows_in"] for r in capture if r["table"]} == {
        f"{database}.orders": 3,
        f"{database}.people": 1,
    }
    assert [r["rows_in"] for r in capture if r["table"] is None] == [4]
    mariadb.execute("INSERT INTO orders VALUES (44, 440)", database=database)
    assert cli.main(["--config", str(path), "silver"]) == 0
    silver = {r["table"]: r for r in _last_run(spark, config, "silver")}
    assert silver[f"{database}.orders"]["rows_in"] == 3
    assert silver[f"{database}.orders"]["changes_applied"] == 3
    assert silver[None]["lag_bytes"] > 0, "the insert after capture is not in silver"

    # A failing check blocks its group only: recorded as blocked, the other group publishes.
    failing = _write_config(
        mariadb,
        tmp_path,
        database,
        "failing.yml",
        gold={"checks": {f"{database}.people": [{"column": "name", "regex": "^p", "severity": "fail"}]}},
    )
    assert cli.main(["--config", str(failing), "gold"]) == 7
    gold_run = {r["table"]: r for r in _last_run(spark, config, "gold")}
    assert gold_run[None]["status"] == "blocked"
    assert "group people" in gold_run[None]["detail"]
    people = gold_run[f"{database}.people"]
    assert (people["status"], people["checks_failed"], people["publish_group"]) == ("blocked", 1, "people")
    orders = gold_run[f"{database}.orders"]
    assert (orders["status"], orders["rows_out"]) == ("ok", 43)
    # The insert after capture is not published: gold lags the source, an upper bound in seconds.
    assert orders["lag_bytes"] > 0
    assert orders["lag_seconds"] is not None
    assert orders["lag_seconds"] >= 0

    # A job task records the Databricks job run it belongs to.
    job = parse_job_args(
        [
            f"--lakehouse-path={tmp_path / 'lakehouse'}",
            f"--mysql-port={mariadb.port}",
            "--mysql-host=127.0.0.1",
            "--mysql-user=cdc",
            "--mysql-server-id=6301",
            "--mysql-password-env=MYSQL_PASSWORD",
            f"--tables={database}.*",
            f"--settings={path}",
            "--job-run-id=987654",
            "gold",
        ]
    )
    assert run_job(job) == 0
    assert {r["job_run_id"] for r in _last_run(spark, config, "gold")} == {"987654"}
    capsys.readouterr()

    # Every query the bundle's dashboard and lag alert run is valid SQL over this table.
    table = f"delta.`{Lakehouse(config).metrics.path}`"
    for dataset in dashboard()["datasets"]:
        rows = spark.sql(dataset["query"].replace(METRICS, table)).collect()
        assert rows or dataset["name"] == "stopped_tables", f"dashboard dataset {dataset['name']} is empty"
    (lag,) = spark.sql(lag_alert_query(table)).collect()
    assert lag["lag_seconds"] is not None
    assert lag["lag_seconds"] >= 0

    # The insert after capture is still not captured: status --check fails, naming each layer.
    page = tmp_path / "health.html"
    capsys.readouterr()
    assert cli.main(["--config", str(path), "status", "--check", "--html", str(page)]) == 12
    err = capsys.readouterr().err
    assert err.startswith("error: behind the source by more than health.max_lag_seconds=1: capture ")
    assert "gold group" in err
    assert err.count("\n") == 1

    text = page.read_text()
    assert "<script" not in text, "the page loads something from elsewhere"
    assert "<link" not in text, "the page loads something from elsewhere"
    assert not re.search(r'(src|href)="https?:', text), "the page loads something from elsewhere"
    dom = _browser("--dump-dom", page.as_uri()).stdout
    for title in ("Capture lag", "Gold lag per publish group", "Row changes captured", "Seconds per step per run"):
        assert title in dom, f"chart {title!r} missing from the rendered page"
    assert dom.count("<svg") >= 4
    assert "no data yet" not in dom
    assert "blocked" in dom, "the blocked group is not in the problems table"
    assert f"{database}.people" in dom, "the blocked group is not in the problems table"
    shot = tmp_path / "status-html.png"
    _browser(f"--screenshot={shot}", "--window-size=1100,2000", page.as_uri())
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    colours = image.resize((220, 400)).getcolors(maxcolors=1 << 16) or []
    assert image.size == (1100, 2000), "the screenshot is blank"
    assert len(colours) > 50, "the screenshot is blank"
    if SCREENSHOT_COPY:
        shutil.copy(shot, Path(SCREENSHOT_COPY))


def test_a_metrics_table_that_cannot_be_written_does_not_fail_the_command(spark, mariadb, database, tmp_path, caplog):
    mariadb.execute(
        "CREATE TABLE orders (id INT PRIMARY KEY, amount INT)", "INSERT INTO orders VALUES (1, 1)", database=database
    )
    path = _write_config(mariadb, tmp_path, database, "binlake.yml")
    blocker = tmp_path / "lakehouse" / "system" / "metrics"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("not a Delta table")  # the metrics table's directory is a file

    assert cli.main(["--config", str(path), "snapshot"]) == 0
    assert "metrics:" in caplog.text
    assert "not written" in caplog.text
    typed = Lakehouse(load_config(path)).snapshot_tables(spark, database, "orders").values()
    assert sum(ref.read(spark).where("_cdc_chunk_stats IS NULL").count() for ref in typed) == 1


@pytest.mark.parametrize("value", ["", "{{job.run_id}}"])
def test_a_job_run_id_flag_without_a_value_is_a_config_error(value):
    from binlake.errors import ConfigError

    with pytest.raises(ConfigError, match="--job-run-id"):
        parse_job_args(["--lakehouse-path=/tmp/x", f"--job-run-id={value}", "gold"])
