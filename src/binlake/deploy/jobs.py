"""``binlake jobs status``: the bundle's jobs on Databricks and how their latest runs went.

Jobs are found by name: every job whose name starts with the bundle name, also behind the
``[dev <user>]`` prefix development mode adds. When a Spark session is at hand (a notebook, or one
passed in), the gold publish log adds the binlog position gold was last published at.

Example (with Databricks authentication configured)::

    $ binlake --config binlake.yml jobs status
    binlake_pipeline  #123  every 0 0/15 * * * ? UTC (paused)
      run 9001  SUCCESS   2026-11-22 08:00:03 UTC  6m12s  https://.../run/9001
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from binlake.config import Config
from binlake.errors import DatabricksApiError

_DEV_PREFIX = re.compile(r"^\[[^\]]*\]\s*")


def jobs_status(
    config: Config,
    bundle_name: str = "binlake",
    as_json: bool = False,
    *,
    client: Any = None,
    spark: Any = None,
    runs_per_job: int = 3,
) -> str:
    """Text (or JSON with ``as_json``) describing the bundle's jobs and their latest runs.

    ``client`` is a ``databricks.sdk.WorkspaceClient`` (default: the runtime's). Raises
    :class:`~binlake.errors.DatabricksApiError` when the workspace refuses or cannot be reached.
    """
    if not bundle_name:
        raise ValueError("bundle_name must be the bundle's name, e.g. 'binlake'")
    if runs_per_job < 1:
        raise ValueError(f"runs_per_job must be >= 1, got {runs_per_job}")
    if client is None:
        from binlake.deploy.runtime import current_runtime

        client = current_runtime().workspace_client(purpose="list the bundle's jobs")
    jobs = collect_jobs(client, bundle_name, runs_per_job)
    publish = last_publish(config, spark)
    report = {"bundle": bundle_name, "host": _host(client), "jobs": jobs, "last_publish": publish}
    if as_json:
        return json.dumps(report, indent=2, default=str)
    return format_jobs_status(report)


def collect_jobs(client: Any, bundle_name: str, runs_per_job: int = 3) -> list[dict[str, Any]]:
    """One dict per bundle job, sorted by name: id, name, trigger, latest runs (newest first)."""
    from databricks.sdk.errors import DatabricksError, PermissionDenied, Unauthenticated

    try:
        found = []
        for job in client.jobs.list():
            name = (job.settings.name if job.settings else None) or ""
            if _DEV_PREFIX.sub("", name).startswith(bundle_name):
                found.append(job)
        result = []
        for job in sorted(found, key=lambda j: (j.settings.name, j.job_id)):
            runs = [_run(r) for r in _take(client.jobs.list_runs(job_id=job.job_id, limit=runs_per_job), runs_per_job)]
            result.append(
                {"job_id": job.job_id, "name": job.settings.name, "trigger": _trigger(job.settings), "runs": runs}
            )
        return result
    except Unauthenticated:
        raise DatabricksApiError(
            f"{_host(client)} rejected the credentials: renew DATABRICKS_TOKEN or run `databricks auth login`"
        ) from None
    except PermissionDenied:
        raise DatabricksApiError(
            f"not allowed to list jobs on {_host(client)}: ask for CAN_VIEW on the bundle's jobs "
            "(the prod target grants it to var.operators_group)"
        ) from None
    except DatabricksError as exc:
        raise DatabricksApiError(
            f"cannot list jobs on {_host(client)} ({type(exc).__name__}: {exc.error_code or 'error'}): "
            "check that the workspace is reachable and retry"
        ) from None
    except OSError as exc:  # connection refused, DNS, TLS: requests' errors are OSErrors
        raise DatabricksApiError(
            f"cannot reach {_host(client)} to list jobs ({type(exc).__name__}): check DATABRICKS_HOST and the network"
        ) from None


def last_publish(config: Config, spark: Any = None) -> dict[str, Any] | None:
    """The newest successful publish in the gold publish log, or None without a Spark session or log.

    Only an already running session is used: starting Spark just to print job states would
    make ``jobs status`` take a minute on a laptop.
    """
    if spark is None:
        try:
            from pyspark.sql import SparkSession
        except ImportError:  # pragma: no cover - pyspark is a dependency
            return None
        spark = SparkSession.getActiveSession()
        if spark is None:
            return None
    from binlake.contract.tables import Lakehouse

    log = Lakehouse(config).publish_log
    try:
        if not log.exists(spark):
            return None
        # A failed publish left gold as it was, so it is not where gold stands.
        rows = (
            log.read(spark)
            .where("status = 'published'")
            .orderBy("published_at", ascending=False)
            .select("publish_id", "binlog_file", "pos", "gtid", "published_at", "status")
            .limit(1)
            .collect()
        )
    except Exception:  # noqa: BLE001 - optional extra: an unreadable log must not hide the job states
        return None
    if not rows:
        return None
    row = rows[0].asDict()
    return {**row, "position": f"{row['binlog_file']}:{row['pos']}"}


def format_jobs_status(report: dict[str, Any]) -> str:
    jobs = report["jobs"]
    if not jobs:
        return (
            f"no jobs named {report['bundle']}* on {report['host']}: deploy the bundle with "
            "`databricks bundle deploy -t dev` (or -t prod)"
        )
    lines = []
    for job in jobs:
        lines.append(f"{job['name']}  #{job['job_id']}  {job['trigger']}")
        if not job["runs"]:
            lines.append("  no runs yet")
        for run in job["runs"]:
            started = (
                run["start_time"].replace("T", " ").replace("+00:00", " UTC") if run["start_time"] else "not started"
            )
            duration = _duration(run["duration_seconds"]) if run["duration_seconds"] is not None else "-"
            message = f"  ({run['message']})" if run["message"] else ""
            lines.append(
                f"  run {run['run_id']}  {run['state']:<9} {started}  {duration}  {run['url'] or ''}{message}".rstrip()
            )
    publish = report.get("last_publish")
    if publish:
        lines.append(
            f"gold last published at {publish['position']} on {publish['published_at']} "
            f"(publish {publish['publish_id']}, {publish['status']})"
        )
    return "\n".join(lines)


def _take(iterator, n: int) -> list:
    # list_runs pages on its own; stop after the newest n instead of walking the whole history.
    out = []
    for item in iterator:
        out.append(item)
        if len(out) >= n:
            break
    return out


def _trigger(settings) -> str:
    if settings.continuous is not None:
        paused = settings.continuous.pause_status and settings.continuous.pause_status.value == "PAUSED"
        return "continuous" + (" (paused)" if paused else "")
    if settings.schedule is not None:
        s = settings.schedule
        paused = s.pause_status is not None and s.pause_status.value == "PAUSED"
        return f"every {s.quartz_cron_expression} {s.timezone_id}" + (" (paused)" if paused else "")
    return "manual"


def _run(run) -> dict[str, Any]:
    state, message = _state(run)
    start = (
        datetime.fromtimestamp(run.start_time / 1000, tz=timezone.utc).isoformat(timespec="seconds")
        if run.start_time
        else None
    )
    duration_ms = run.run_duration or ((run.end_time - run.start_time) if run.end_time and run.start_time else None)
    return {
        "run_id": run.run_id,
        "state": state,
        "message": message,
        "start_time": start,
        "duration_seconds": round(duration_ms / 1000) if duration_ms else None,
        "url": run.run_page_url,
    }


def _state(run) -> tuple[str, str]:
    # Newer API versions fill `status`; older ones only the deprecated `state`.
    status = run.status
    if status is not None and status.state is not None:
        if status.state.value == "TERMINATED" and status.termination_details is not None:
            details = status.termination_details
            return (details.code.value if details.code else "TERMINATED"), details.message or ""
        return status.state.value, ""
    state = run.state
    if state is None:
        return "UNKNOWN", ""
    if state.result_state is not None:
        return state.result_state.value, state.state_message or ""
    return (state.life_cycle_state.value if state.life_cycle_state else "UNKNOWN"), state.state_message or ""


def _duration(seconds: int) -> str:
    h, rest = divmod(int(seconds), 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _host(client: Any) -> str:
    try:
        return client.config.host or "the workspace"
    except Exception:  # noqa: BLE001 - the SDK resolves its config lazily; the host only labels a message
        return "the workspace"
