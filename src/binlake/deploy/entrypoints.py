"""``binlake-job``: the console entry point the bundle's ``python_wheel_task`` tasks call.

A job task has no ``binlake.yml`` next to it; the bundle passes its variables as flags instead.
``binlake-job`` turns them into the same config the CLI reads (the password stays a
``{{secrets/<scope>/<key>}}`` reference, resolved by the runtime at load time) and then runs the
ordinary CLI, so a job task and ``binlake --config binlake.yml`` share one code path::

    binlake-job --catalog=main --bronze-schema=binlake_bronze --silver-schema=binlake_silver \\
        --gold-schema=binlake_gold --system-path=/Volumes/main/binlake_bronze/binlake_system \\
        --mysql-host=db.internal --mysql-user=cdc --mysql-server-id=5401 \\
        --mysql-password-secret=binlake/mysql-cdc --tables=shop.* capture --until-now

Job parameters arrive as text, so three command flags take a value instead of repeating or
being present: ``--table-list=a.b,c.d`` (empty: all tables) becomes ``--table a.b --table c.d``;
``--key-list=region=eu;id=42`` becomes ``--key region=eu --key id=42``;
``--repair-if=true`` becomes ``--repair``; ``--reset-capture-if=true`` becomes ``--reset-capture``.

Locally, ``--lakehouse-path DIR`` and ``--mysql-password-env NAME`` replace the Unity Catalog and
secret flags, and ``--print-config`` prints the generated ``binlake.yml`` (it holds no secret
value) instead of running, e.g. to save it for the operator notebooks.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from binlake.errors import BinlakeError, ConfigError

COMMANDS = ("preflight", "snapshot", "capture", "silver", "gold", "run", "status", "verify", "maintain", "erase")

_TRUE = {"true", "1", "yes", "y", "on"}
_FALSE = {"false", "0", "no", "n", "off", ""}
_VALUE_FLAGS = {
    "--table-list": "tables",
    "--key-list": "key",
    "--repair-if": "repair",
    "--reset-capture-if": "reset_capture",
}


@dataclass(frozen=True)
class JobInvocation:
    """What one task run does: the config it builds and the CLI arguments after ``--config``."""

    settings: Mapping[str, Any]
    cli_args: tuple[str, ...]
    print_config: bool = False
    job_run_id: str | None = None

    @property
    def config_yaml(self) -> str:
        return yaml.safe_dump(_plain(self.settings), sort_keys=False)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="binlake-job",
        description="Run one binlake command as a Databricks job task, configured by flags instead of binlake.yml.",
    )
    uc = ap.add_argument_group("lakehouse (Unity Catalog, or --lakehouse-path locally)")
    uc.add_argument("--catalog")
    uc.add_argument("--bronze-schema")
    uc.add_argument("--silver-schema")
    uc.add_argument("--gold-schema")
    uc.add_argument(
        "--system-path", help="a Unity Catalog volume path for checkpoints, /Volumes/<catalog>/<schema>/<volume>"
    )
    uc.add_argument("--lakehouse-path", help="local Delta directory instead of Unity Catalog")
    src = ap.add_argument_group("source")
    src.add_argument("--mysql-host")
    src.add_argument("--mysql-port")
    src.add_argument("--mysql-user")
    src.add_argument("--mysql-server-id")
    pw = src.add_mutually_exclusive_group()
    pw.add_argument("--mysql-password-secret", metavar="SCOPE/KEY", help="Databricks secret holding the password")
    pw.add_argument(
        "--mysql-password-env", metavar="NAME", help="environment variable holding the password (local runs)"
    )
    salt = src.add_mutually_exclusive_group()
    salt.add_argument(
        "--mask-salt-secret",
        metavar="SCOPE/KEY",
        help="Databricks secret holding source.mask_salt (hash masks of source.columns); empty: none",
    )
    salt.add_argument(
        "--mask-salt-env", metavar="NAME", help="environment variable holding source.mask_salt (local runs)"
    )
    src.add_argument("--tables", help='comma-separated include patterns, e.g. "shop.*,crm.customers"')
    src.add_argument("--exclude", help="comma-separated exclude patterns")
    ap.add_argument(
        "--settings",
        metavar="PATH",
        help="a binlake.yml whose sections apply (snapshot, capture, gold, history, source.columns, ...); "
        "flags override its source and lakehouse keys; empty: none",
    )
    ap.add_argument("--print-config", action="store_true", help="print the generated binlake.yml and exit")
    ap.add_argument("--job-run-id", help="the Databricks job run ({{job.run_id}}), recorded in the metrics table")
    ap.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    ap.add_argument("command", choices=COMMANDS)
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the command's own flags")
    return ap


def parse_job_args(argv: Sequence[str]) -> JobInvocation:
    """Turn ``binlake-job`` arguments into a :class:`JobInvocation`; raises ``ConfigError``."""
    ns = build_parser().parse_args(list(argv))
    settings: dict[str, Any] = {}
    if ns.settings and ns.settings.strip():
        settings = _read_settings(ns.settings)
        path = (settings.get("lakehouse") or {}).get("path")
        if isinstance(path, str) and not Path(path).is_absolute():
            # Relative to the settings file, as the CLI resolves it, not to the temporary copy.
            settings["lakehouse"] = {
                **settings["lakehouse"],
                "path": str((Path(ns.settings).resolve().parent / path).resolve()),
            }

    source = dict(settings.get("source") or {})
    for key, value in (
        ("host", ns.mysql_host),
        ("port", ns.mysql_port),
        ("user", ns.mysql_user),
        ("server_id", ns.mysql_server_id),
    ):
        if value is not None:
            source[key] = value
    if ns.mysql_password_secret is not None:
        source["password"] = _secret_reference(
            "--mysql-password-secret",
            ns.mysql_password_secret,
            "binlake/mysql-cdc (bundle variables mysql_secret_scope and mysql_secret_key)",
        )
    elif ns.mysql_password_env is not None:
        source["password"] = "${" + ns.mysql_password_env + "}"
    # The bundle passes the flag to every task; an empty value (variable mask_salt_secret
    # left at its default) means no salt.
    if ns.mask_salt_secret is not None and ns.mask_salt_secret.strip():
        source["mask_salt"] = _secret_reference(
            "--mask-salt-secret", ns.mask_salt_secret.strip(), "binlake/mask-salt (bundle variable mask_salt_secret)"
        )
    elif ns.mask_salt_env is not None:
        source["mask_salt"] = "${" + ns.mask_salt_env + "}"
    if ns.tables is not None:
        source["tables"] = _csv(ns.tables)
    if ns.exclude is not None:
        source["exclude"] = _csv(ns.exclude)

    lakehouse = dict(settings.get("lakehouse") or {})
    for key, value in (
        ("catalog", ns.catalog),
        ("bronze_schema", ns.bronze_schema),
        ("silver_schema", ns.silver_schema),
        ("gold_schema", ns.gold_schema),
        ("system_path", ns.system_path),
    ):
        if value is not None:
            lakehouse[key] = value
    if ns.lakehouse_path is not None:
        # The generated file lives in a temporary directory; a relative path must not follow it there.
        lakehouse["path"] = str(Path(ns.lakehouse_path).resolve())

    if ns.job_run_id is not None and (not ns.job_run_id.strip() or ns.job_run_id.startswith("{{")):
        raise ConfigError(
            f"--job-run-id={ns.job_run_id!r} is no run id: Databricks fills in {{{{job.run_id}}}} in job "
            "tasks only; elsewhere pass a run id or drop the flag"
        )
    settings = {**settings, "source": source, "lakehouse": lakehouse}
    cli_args = (["--verbose"] if ns.verbose else []) + [ns.command, *_expand_value_flags(ns.args)]
    return JobInvocation(
        settings=settings, cli_args=tuple(cli_args), print_config=ns.print_config, job_run_id=ns.job_run_id
    )


def run_job(invocation: JobInvocation, runtime=None) -> int:
    """Write the generated config to a private temporary file and run the CLI on it."""
    from binlake import cli
    from binlake.config import LakehouseConfig
    from binlake.deploy.runtime import current_runtime

    if invocation.print_config:
        print(invocation.config_yaml, end="")
        return 0
    runtime = runtime or current_runtime()
    lakehouse = invocation.settings.get("lakehouse") or {}
    runtime.check_lakehouse(
        LakehouseConfig(**{k: v for k, v in lakehouse.items() if k in LakehouseConfig.__dataclass_fields__})
    )
    from binlake.ops.metrics import JOB_RUN_ENV

    previous = os.environ.get(JOB_RUN_ENV)
    if invocation.job_run_id:
        os.environ[JOB_RUN_ENV] = invocation.job_run_id
    try:
        with tempfile.TemporaryDirectory(prefix="binlake-job-") as tmp:
            path = Path(tmp, "binlake.yml")
            path.write_text(invocation.config_yaml, encoding="utf-8")
            return cli.main(["--config", str(path), *invocation.cli_args])
    finally:
        if previous is None:
            os.environ.pop(JOB_RUN_ENV, None)
        else:
            os.environ[JOB_RUN_ENV] = previous


def main(argv: Sequence[str] | None = None) -> None:
    """Console script ``binlake-job``. A non-zero exit fails the Databricks task."""
    try:
        code = run_job(parse_job_args(sys.argv[1:] if argv is None else argv))
    except BinlakeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = exc.exit_code
    if code:
        raise SystemExit(code)


def _secret_reference(flag: str, value: str, example: str) -> str:
    scope, sep, key = value.partition("/")
    if not (sep and scope and key) or "/" in key:
        raise ConfigError(f"{flag} {value!r} is not SCOPE/KEY: write it like {example}")
    return "{{secrets/" + scope + "/" + key + "}}"


def _read_settings(path: str) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"--settings file {path!r} not found: deploy it with the bundle or drop the flag") from None
    except yaml.YAMLError:
        raise ConfigError(f"--settings file {path!r} is not valid YAML: fix the syntax") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"--settings file {path!r} must be a YAML mapping of binlake.yml sections")
    return raw


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _expand_value_flags(args: Sequence[str]) -> list[str]:
    out: list[str] = []
    for arg in args:
        flag, sep, value = arg.partition("=")
        if flag not in _VALUE_FLAGS:
            out.append(arg)
            continue
        if not sep:
            raise ConfigError(f"{flag} needs a value: write {flag}=<value>")
        if value.startswith("{{"):
            raise ConfigError(
                f"{flag}={value} was not substituted: the job parameter {_VALUE_FLAGS[flag]!r} is not defined "
                "on this job; add it under parameters, or pass a literal value"
            )
        if flag == "--table-list":
            for table in _csv(value):
                out += ["--table", table]
        elif flag == "--key-list":
            pairs = [p.strip() for p in value.split(";") if p.strip()]
            if not pairs:
                raise ConfigError(
                    "--key-list is empty: set the job parameter 'key' to column=value "
                    "(a composite key: region=eu;id=42)"
                )
            for pair in pairs:
                out += ["--key", pair]
        else:
            lowered = value.strip().lower()
            if lowered not in _TRUE | _FALSE:
                raise ConfigError(
                    f"{flag} must be true or false, got {value!r}: set the job parameter {_VALUE_FLAGS[flag]!r} to true or false"
                )
            if lowered in _TRUE:
                out.append("--repair" if flag == "--repair-if" else "--reset-capture")
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
