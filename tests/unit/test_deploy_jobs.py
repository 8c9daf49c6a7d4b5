"""``binlake jobs status`` against a local HTTP server answering like the Jobs 2.2 REST API.

Payloads are built from the SDK's own dataclasses (BaseJob, BaseRun) so they have the real
shape; the real WorkspaceClient does the requests, paging included."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.service import jobs as j

from binlake.config import load_config_text
from binlake.deploy.jobs import jobs_status
from binlake.errors import DatabricksApiError

T0 = 1_795_000_000_000  # 2026-11-18 11:06:40 UTC, in ms as the API sends times


class FakeJobsApi:
    def __init__(self, jobs: list[j.BaseJob], runs: dict[int, list[j.BaseRun]], page_size: int = 2):
        self.jobs, self.runs, self.page_size = jobs, runs, page_size
        self.forced: tuple[int, dict] | None = None
        self.requests: list[tuple[str, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urlparse(self.path)
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path.startswith("/api/"):
                    fake.requests.append((url.path, q))
                if fake.forced and url.path.startswith("/api/"):
                    return self._send(*fake.forced)
                if url.path == "/api/2.2/jobs/list":
                    return self._send(200, fake._page("jobs", [x.as_dict() for x in fake.jobs], q))
                if url.path == "/api/2.2/jobs/runs/list":
                    runs = sorted(fake.runs.get(int(q["job_id"]), []), key=lambda r: -r.start_time)
                    return self._send(200, fake._page("runs", [r.as_dict() for r in runs], q, int(q.get("limit", 25))))
                self._send(404, {"error_code": "ENDPOINT_NOT_FOUND", "message": "no such endpoint"})

            def _send(self, status, payload):
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def _page(self, field, items, q, limit=None):
        # Paged like the real API: next_page_token until the last page.
        size = min(limit or self.page_size, self.page_size)
        start = int(q.get("page_token", 0))
        out = {field: items[start : start + size], "has_more": start + size < len(items)}
        if start + size < len(items):
            out["next_page_token"] = str(start + size)
        return out

    def client(self) -> WorkspaceClient:
        return WorkspaceClient(host=f"http://127.0.0.1:{self.server.server_port}", token="x")

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _job(job_id, name, schedule=None, continuous=None) -> j.BaseJob:
    return j.BaseJob(
        job_id=job_id,
        created_time=T0,
        creator_user_name="ops@example.com",
        settings=j.JobSettings(name=name, schedule=schedule, continuous=continuous, max_concurrent_runs=1),
    )


def _run(
    run_id, job_id, minutes_ago, result=None, lifecycle=j.RunLifeCycleState.TERMINATED, duration_s=372, message=""
) -> j.BaseRun:
    start = T0 - minutes_ago * 60_000
    return j.BaseRun(
        run_id=run_id,
        job_id=job_id,
        start_time=start,
        end_time=start + duration_s * 1000 if lifecycle == j.RunLifeCycleState.TERMINATED else None,
        run_duration=duration_s * 1000 if lifecycle == j.RunLifeCycleState.TERMINATED else None,
        run_page_url=f"https://adb-1.azuredatabricks.net/jobs/{job_id}/runs/{run_id}",
        state=j.RunState(life_cycle_state=lifecycle, result_state=result, state_message=message),
    )


@pytest.fixture
def api():
    cron = j.CronSchedule(quartz_cron_expression="0 0/15 * * * ?", timezone_id="UTC", pause_status=j.PauseStatus.PAUSED)
    fake = FakeJobsApi(
        jobs=[
            _job(11, "[dev alice] binlake_pipeline", schedule=cron),
            _job(12, "[dev alice] binlake_verify"),
            _job(13, "nightly_finance_export"),
            _job(14, "binlake_continuous", continuous=j.Continuous(pause_status=j.PauseStatus.UNPAUSED)),
        ],
        runs={
            11: [
                _run(901, 11, 30, j.RunResultState.SUCCESS),
                _run(902, 11, 15, j.RunResultState.FAILED, message="Task gold failed with message: quality check"),
                _run(903, 11, 0, lifecycle=j.RunLifeCycleState.RUNNING),
                _run(900, 11, 45, j.RunResultState.SUCCESS),
            ],
            14: [_run(950, 14, 600, lifecycle=j.RunLifeCycleState.RUNNING)],
        },
    )
    yield fake
    fake.close()


@pytest.fixture
def config(tmp_path):
    return load_config_text(
        f"source: {{host: h, user: u, password: pw, server_id: 9, tables: ['shop.*']}}\nlakehouse: "
        f"{{path: {tmp_path}}}\n"
    )


def test_lists_only_the_bundles_jobs_also_behind_the_dev_prefix_across_pages(api, config):
    report = json.loads(jobs_status(config, "binlake", as_json=True, client=api.client()))
    assert [job["name"] for job in report["jobs"]] == [
        "[dev alice] binlake_pipeline",
        "[dev alice] binlake_verify",
        "binlake_continuous",
    ]
    assert sum(1 for path, _ in api.requests if path == "/api/2.2/jobs/list") == 2, "4 jobs at 2 per page"


def test_shows_the_newest_runs_first_with_state_duration_and_link(api, config):
    report = json.loads(jobs_status(config, "binlake", as_json=True, client=api.client(), runs_per_job=3))
    pipeline = report["jobs"][0]
    assert [r["run_id"] for r in pipeline["runs"]] == [903, 902, 901]
    running, failed, ok = pipeline["runs"]
    assert running["state"] == "RUNNING"
    assert running["duration_seconds"] is None
    assert failed["state"] == "FAILED"
    assert failed["message"] == "Task gold failed with message: quality check"
    assert ok == {
        "run_id": 901,
        "state": "SUCCESS",
        "message": "",
        "start_time": "2026-11-18T10:36:40+00:00",
        "duration_seconds": 372,
        "url": "https://adb-1.azuredatabricks.net/jobs/11/runs/901",
    }
    assert pipeline["trigger"] == "every 0 0/15 * * * ? UTC (paused)"
    assert report["jobs"][1]["runs"] == []
    assert report["jobs"][1]["trigger"] == "manual"
    assert report["jobs"][2]["trigger"] == "continuous"
    assert report["last_publish"] is None, "no Spark session was running, so the publish log is not read"


def test_the_text_form_has_one_block_per_job(api, config):
    text = jobs_status(config, "binlake", client=api.client(), runs_per_job=2)
    assert text.splitlines()[:3] == [
        "[dev alice] binlake_pipeline  #11  every 0 0/15 * * * ? UTC (paused)",
        "  run 903  RUNNING   2026-11-18 11:06:40 UTC  -  https://adb-1.azuredatabricks.net/jobs/11/runs/903",
        "  run 902  FAILED    2026-11-18 10:51:40 UTC  6m12s  https://adb-1.azuredatabricks.net/jobs/11/runs/902"
        "  (Task gold failed with message: quality check)",
    ]
    assert "[dev alice] binlake_verify  #12  manual\n  no runs yet" in text
    assert "nightly_finance_export" not in text


def test_asks_only_for_as_many_runs_as_it_shows(api, config):
    jobs_status(config, "binlake", client=api.client(), runs_per_job=1)
    limits = {q["job_id"]: q["limit"] for path, q in api.requests if path == "/api/2.2/jobs/runs/list"}
    assert limits == {"11": "1", "12": "1", "14": "1"}
    assert not [q for path, q in api.requests if path == "/api/2.2/jobs/runs/list" and "page_token" in q]


def test_no_deployed_jobs_says_how_to_deploy(config):
    fake = FakeJobsApi(jobs=[_job(1, "other")], runs={})
    try:
        text = jobs_status(config, "binlake", client=fake.client())
    finally:
        fake.close()
    assert text.startswith("no jobs named binlake* on http://127.0.0.1:")
    assert text.endswith(": deploy the bundle with `databricks bundle deploy -t dev` (or -t prod)")


def test_a_refused_token_is_a_databricks_api_error_with_the_fix(api, config):
    api.forced = (401, {"error_code": "UNAUTHENTICATED", "message": "Invalid access token"})
    with pytest.raises(DatabricksApiError, match=r"rejected the credentials: renew DATABRICKS_TOKEN") as exc:
        jobs_status(config, "binlake", client=api.client())
    assert exc.value.exit_code == 11


def test_missing_permission_is_a_databricks_api_error_with_the_fix(api, config):
    api.forced = (403, {"error_code": "PERMISSION_DENIED", "message": "no"})
    with pytest.raises(
        DatabricksApiError, match=r"^not allowed to list jobs on http://127.0.0.1:\d+: ask for CAN_VIEW"
    ):
        jobs_status(config, "binlake", client=api.client())


def test_the_cli_prints_the_same_report(api, config, tmp_path, capsys, monkeypatch):
    from binlake.cli import main

    monkeypatch.setenv("DATABRICKS_HOST", f"http://127.0.0.1:{api.server.server_port}")
    monkeypatch.setenv("DATABRICKS_TOKEN", "x")
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    cfg = tmp_path / "binlake.yml"
    cfg.write_text(
        f"source: {{host: h, user: u, password: pw, server_id: 9, tables: ['shop.*']}}\nlakehouse: "
        f"{{path: {tmp_path}}}\n"
    )
    assert main(["--config", str(cfg), "jobs", "status", "--json"]) == 0
    assert [job["job_id"] for job in json.loads(capsys.readouterr().out)["jobs"]] == [11, 12, 14]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bundle_name": ""}, "bundle_name must be the bundle's name, e.g. 'binlake'"),
        ({"runs_per_job": 0}, "runs_per_job must be >= 1, got 0"),
    ],
)
def test_arguments_are_checked_at_the_boundary(config, kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        jobs_status(config, client=object(), **kwargs)
