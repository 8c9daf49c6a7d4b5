"""Secrets (the password, the mask salt) and the values of excluded columns never appear in
logs, exceptions, status output, Delta tables or their properties, job definitions or the
SQL/plan text Spark shows in its UI (the event log holds the same)."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CANARY = "Canary-Pw-7f3e9a1c"
SALT = "Canary-Salt-2c9d"  # source.mask_salt, a secret like the password
SSN = "Canary-Ssn-5e8b"  # a value of an excluded column (source.columns)


@pytest.fixture
def canary_user(mariadb):
    mariadb.execute(
        f"CREATE USER IF NOT EXISTS 'canary'@'127.0.0.1' IDENTIFIED BY '{CANARY}'",
        "GRANT SELECT, REPLICATION CLIENT, REPLICATION SLAVE ON *.* TO 'canary'@'127.0.0.1'",
    )
    yield "canary"
    mariadb.execute("DROP USER IF EXISTS 'canary'@'127.0.0.1'")


def _grep_tree(root: Path, needle: bytes) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file() and needle in p.read_bytes():
            hits.append(str(p))
    return hits


def test_the_password_appears_nowhere_binlake_writes(mariadb, database, canary_user, tmp_path):
    mariadb.execute(
        f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, v VARCHAR(20), ssn VARCHAR(20))",
        f"INSERT INTO `{database}`.t VALUES (1, 'a', '{SSN}'), (2, 'b', NULL)",
    )
    conf_dir = tmp_path / "spark-conf"
    events = tmp_path / "spark-events"
    conf_dir.mkdir()
    events.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events}\n")
    config = tmp_path / "binlake.yml"
    config.write_text(
        mariadb.config_yaml(
            str(tmp_path / "lakehouse"),
            [f"{database}.*"],
            server_id=7300,
            source={
                "columns": {f"{database}.t": {"exclude": ["ssn"], "mask": {"v": "hash"}}},
                "mask_salt": "${CANARY_SALT}",
            },
        )
        .replace("user: cdc", f"user: {canary_user}")
        .replace("${MYSQL_PASSWORD}", "${CANARY_PASSWORD}")
    )
    env = {**os.environ, "CANARY_PASSWORD": CANARY, "CANARY_SALT": SALT, "SPARK_CONF_DIR": str(conf_dir), "CI": "1"}
    outputs = []
    page = tmp_path / "health.html"
    # One status process prints the JSON and writes the page, which holds the text form too.
    for args in (["run"], ["status", "--json", "--html", str(page)], ["preflight"]):
        res = subprocess.run(
            [str(ROOT / ".venv/bin/binlake"), "--config", str(config), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
        assert res.returncode == 0, f"binlake {' '.join(args)} failed: {res.stderr.strip().splitlines()[-1:]}"
        outputs.append(res.stdout + res.stderr)
    # A failing run must not leak it either (wrong port -> connection error message).
    bad = tmp_path / "bad.yml"
    bad.write_text(config.read_text().replace(f"port: {mariadb.port}", "port: 1"))
    res = subprocess.run(
        [str(ROOT / ".venv/bin/binlake"), "--config", str(bad), "preflight"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode != 0
    outputs.append(res.stdout + res.stderr)

    assert "capture: resume" in page.read_text(), "the page lacks the status text"
    outputs.append(page.read_text())
    assert any(events.iterdir()), "no Spark event log was written, so the plan text was not checked"
    for secret in (CANARY, SALT, SSN):
        assert not [o for o in outputs if secret in o], f"{secret} leaked into command output"
        assert _grep_tree(tmp_path / "lakehouse", secret.encode()) == [], f"{secret} leaked into the lakehouse"
        assert _grep_tree(events, secret.encode()) == [], f"{secret} leaked into Spark's plan/SQL text"


def test_job_definitions_hold_no_secret_values():
    for path in [ROOT / "databricks.yml", *sorted((ROOT / "bundles").glob("*.yml"))]:
        text = path.read_text()
        for line in text.splitlines():
            lowered = line.lower()
            if "password" in lowered and ":" in line:
                value = line.split(":", 1)[1].strip().strip("\"'")
                assert value == "" or value.startswith(("${", "{{")), (
                    f"{path.name}: a literal password value: {line.strip()}"
                )
