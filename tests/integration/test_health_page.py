"""``binlake status --html FILE`` writes one self-contained page whose charts a headless browser
draws from the metrics table; ``binlake status --check`` exits 12 once capture or gold is
further behind the source than ``health.max_lag_seconds``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from binlake import cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
# `make test` keeps the screenshot for docs/ when asked: BINLAKE_SCREENSHOT=docs/images/status-html.png
SCREENSHOT_COPY = os.environ.get("BINLAKE_SCREENSHOT")


def _browser(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--allow-file-access-from-files", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless browser: make setup installs chromium")
def test_the_html_status_draws_lag_rows_durations_and_problems_and_check_fails_on_lag(mariadb, database, tmp_path,
                                                                                     capsys):
    mariadb.execute("CREATE TABLE orders (id INT PRIMARY KEY, amount INT)",
                    "CREATE TABLE people (id INT PRIMARY KEY, name VARCHAR(20))",
                    "INSERT INTO orders SELECT seq, seq FROM seq_1_to_30", "INSERT INTO people VALUES (1, 'ann')",
                    database=database)
    path = tmp_path / "binlake.yml"
    path.write_text(mariadb.config_yaml(str(tmp_path / "lakehouse"), [f"{database}.*"], server_id=6311,
                                        health={"max_lag_seconds": 1}))
    failing = tmp_path / "failing.yml"
    failing.write_text(mariadb.config_yaml(
        str(tmp_path / "lakehouse"), [f"{database}.*"], server_id=6311, health={"max_lag_seconds": 1},
        gold={"groups": {"orders": [f"{database}.orders"], "people": [f"{database}.people"]},
              "checks": {f"{database}.people": [{"column": "name", "regex": "^z", "severity": "fail"}]}}))

    assert cli.main(["--config", str(path), "run"]) == 0
    assert cli.main(["--config", str(path), "status", "--check"]) == 0, "caught up: lag 0"
    for i in range(2, 4):
        mariadb.execute(f"INSERT INTO orders SELECT {i} * 100 + seq, seq FROM seq_1_to_{i * 5}", database=database)
        assert cli.main(["--config", str(path), "run"]) == 0
    assert cli.main(["--config", str(failing), "gold"]) == 7  # a blocked group in the problems table
    time.sleep(2.5)
    mariadb.execute("INSERT INTO orders VALUES (9999, 1)", database=database)
    capsys.readouterr()

    page = tmp_path / "health.html"
    assert cli.main(["--config", str(path), "status", "--check", "--html", str(page)]) == 12
    err = capsys.readouterr().err
    assert err.startswith("error: behind the source by more than health.max_lag_seconds=1: capture ")
    assert "gold group" in err and err.count("\n") == 1

    text = page.read_text()
    assert "<script" not in text and "<link" not in text and not re.search(r'(src|href)="https?:', text), \
        "the page loads something from elsewhere"
    dom = _browser("--dump-dom", page.as_uri()).stdout
    for title in ("Capture lag", "Gold lag per publish group", "Row changes captured", "Seconds per step per run"):
        assert title in dom, f"chart {title!r} missing from the rendered page"
    assert dom.count("<svg") >= 4 and "no data yet" not in dom
    assert "blocked" in dom and f"{database}.people" in dom, "the blocked group is not in the problems table"

    shot = tmp_path / "status-html.png"
    _browser(f"--screenshot={shot}", "--window-size=1100,2000", page.as_uri())
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    colours = image.resize((220, 520)).getcolors(maxcolors=1 << 16) or []
    assert image.size == (1100, 2000) and len(colours) > 50, "the screenshot is blank"
    if SCREENSHOT_COPY:
        shutil.copy(shot, Path(SCREENSHOT_COPY))
