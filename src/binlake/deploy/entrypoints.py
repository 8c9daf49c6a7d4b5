"""``binlake-job``: the console entry point the bundle's ``python_wheel_task`` tasks call.

Each task reads the ``binlake.yml`` the bundle syncs into the workspace, and passes the few
values only the deployment knows: where the bundle put the lakehouse (development mode
renames the schemas per developer, so the deployed names come from the bundle's resources)
and which job run this is::

    binlake-job --config=/Workspace/.../files/binlake.yml \\
        --catalog=main --bronze-schema=binlake_bronze --silver-schema=binlake_silver \\
        --gold-schema=binlake_gold --system-schema=binlake_system \\
        --system-path=/Volumes/main/binlake_bronze/binlake_system \\
        --job-id=123 --job-run-id=456 capture --until-now

The flags override the file's ``lakehouse`` keys; the password stays a
``{{secrets/<scope>/<key>}}`` reference in the file, read when a connection needs it. Paths
in the file (``gold.expectations`` suites, a relative ``lakehouse.path``) are relative to it,
as for ``binlake --config``. Then the ordinary CLI runs on that config, so a job task and
``binlake --config binlake.yml`` share one code path.

Job parameters arrive as text, so three command flags take a value instead of repeating or
being present: ``--table-list=a.b,c.d`` (empty: all tables) becomes ``--table a.b --table c.d``;
``--key-list=region=eu;id=42`` becomes ``--key region=eu --key id=42``;
``--repair-if=true`` becomes ``--repair``; ``--reset-capture-if=true`` becomes ``--reset-capture``.

**The older flags** (bundles deployed before the config file was synced) still work: the
source as flags (``--mysql-host``, ``--mysql-port``, ``--mysql-user``, ``--mysql-server-id``,
``--mysql-password-secret`` or ``--mysql-password-env``, ``--mask-salt-secret`` or
``--mask-salt-env``, ``--tables``, ``--exclude``) over an optional ``--settings`` file (the older
name of ``--config``); locally ``--lakehouse-path DIR`` replaces the Unity Catalog flags.
``--print-config`` prints the resulting ``binlake.yml`` (it holds no secret value) instead of
running.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from binlake.cli import JOB_COMMANDS
from binlake.errors import BinlakeError, ConfigError

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
    """What one task run does: the config it builds and the CLI arguments to run on it."""

    settings: Mapping[str, Any]
    cli_args: tuple[str, ...]
    print_config: bool = False
    job_run_id: str | None = None
    job_id: str | None = None
    # The file the settings came from: relative paths in it are relative to its directory.
    origin: str | None = None

    @property
    def config_yaml(self) -> str:
        return yaml.safe_dump(_plain(self.settings), sort_keys=False)

    def config(self):
        """The checked :class:`~binlake.config.Config` (raises ``ConfigError`` with the fix)."""
        from binlake.config import load_config_text

        base_dir = str(Path(self.origin).resolve().parent) if self.origin else os.getcwd()
        return load_config_text(self.config_yaml, base_dir=base_dir, origin=self.origin or "the job's flags")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="binlake-job",
        description="Run one binlake command as a Databricks job task, on the bundle's binlake.yml.",
    )
    ap.add_argument(
        "--config",
        metavar="PATH",
        help="the binlake.yml to run with (the bundle syncs it: ${workspace.file_path}/binlake.yml)",
    )
    uc = ap.add_argument_group("where the bundle deployed the lakehouse (override the file's lakehouse keys)")
    uc.add_argument("--catalog")
    uc.add_argument("--bronze-schema")
    uc.add_argument("--silver-schema")
    uc.add_argument("--gold-schema")
    uc.add_argument("--system-schema", help="the schema of binlake's own tables (publish log, metrics, leases, ...)")
    uc.add_argument(
        "--system-path",
        help="a Unity Catalog volume path for files (the continuous mode's state), "
        "/Volumes/<catalog>/<schema>/<volume>",
    )
    uc.add_argument("--lakehouse-path", help="local Delta directory instead of Unity Catalog")
    ap.add_argument(
        "--job-id", help="the Databricks job ({{job.id}}): its next run may take over a killed run's leases"
    )
    ap.add_argument("--job-run-id", help="the Databricks job run ({{job.run_id}}), recorded in the metrics table")
    ap.add_argument("--print-config", action="store_true", help="print the resulting binlake.yml and exit")
    ap.add_argument("--verbose", "-v", action="store_true", help="debug logging")

    old = ap.add_argument_group("older flags, kept for bundles deployed before --config (the file's keys are better)")
    old.add_argument("--settings", metavar="PATH", help="the older name of --config; empty: none")
    old.add_argument("--mysql-host")
    old.add_argument("--mysql-port")
    old.add_argument("--mysql-user")
    old.add_argument("--mysql-server-id")
    pw = old.add_mutually_exclusive_group()
    pw.add_argument("--mysql-password-secret", metavar="SCOPE/KEY", help="Databricks secret holding the password")
    pw.add_argument(
        "--mysql-password-env", metavar="NAME", help="environment variable holding the password (local runs)"
    )
    salt = old.add_mutually_exclusive_group()
    salt.add_argument(
        "--mask-salt-secret",
        metavar="SCOPE/KEY",
        help="Databricks secret holding source.mask_salt (hash masks of source.columns); empty: none",
    )
    salt.add_argument(
        "--mask-salt-env", metavar="NAME", help="environment variable holding source.mask_salt (local runs)"
    )
    old.add_argument("--tables", help='comma-separated include patterns, e.g. "shop.*,crm.customers"')
    old.add_argument("--exclude", help="comma-separated exclude patterns")

    ap.add_argument("command", choices=JOB_COMMANDS)
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the command's own flags")
    return ap


def parse_job_args(argv: Sequence[str]) -> JobInvocation:  # noqa: C901 (one branch per job flag family)
    """Turn ``binlake-job`` arguments into a :class:`JobInvocation`; raises ``ConfigError``."""
    ns = build_parser().parse_args(list(argv))
    config_file = (ns.config or "").strip() or None
    settings_file = (ns.settings or "").strip() or None
    if config_file and settings_file:
        raise ConfigError(
            "--config and --settings both name a file: --settings is the older name of --config, keep one"
        )
    origin = config_file or settings_file
    flag = "--config" if config_file else "--settings"
    settings: dict[str, Any] = _read_settings(flag, origin) if origin else {}

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
            "--mysql-password-secret", ns.mysql_password_secret, "binlake/mysql-cdc (scope/key)"
        )
    elif ns.mysql_password_env is not None:
        source["password"] = "${" + ns.mysql_password_env + "}"
    # Older bundles pass the flag to every task; an empty value (no salt configured) means none.
    if ns.mask_salt_secret is not None and ns.mask_salt_secret.strip():
        source["mask_salt"] = _secret_reference(
            "--mask-salt-secret", ns.mask_salt_secret.strip(), "binlake/mask-salt (scope/key)"
        )
    elif ns.mask_salt_env is not None:
        source["mask_salt"] = "${" + ns.mask_salt_env + "}"
    if ns.tables is not None:
        source["tables"] = _csv(ns.tables)
    if ns.exclude is not None:
        source["exclude"] = _csv(ns.exclude)

    lakehouse = dict(settings.get("lakehouse") or {})
    if origin and isinstance(lakehouse.get("path"), str) and not Path(lakehouse["path"]).is_absolute():
        # Relative to the file, as binlake --config reads it; absolute in --print-config's output.
        lakehouse["path"] = str((Path(origin).resolve().parent / lakehouse["path"]).resolve())
    flags = (
        ("catalog", ns.catalog),
        ("bronze_schema", ns.bronze_schema),
        ("silver_schema", ns.silver_schema),
        ("gold_schema", ns.gold_schema),
        ("system_schema", ns.system_schema),
        ("system_path", ns.system_path),
    )
    for key, value in flags:
        if value is not None:
            lakehouse[key] = value
    if ns.catalog is not None:
        lakehouse.pop("path", None)  # the bundle's catalog replaces a local directory in the file
    if ns.lakehouse_path is not None:
        lakehouse.pop("catalog", None)
        lakehouse["path"] = str(Path(ns.lakehouse_path).resolve())

    for name, value in (("--job-run-id", ns.job_run_id), ("--job-id", ns.job_id)):
        if value is not None and (not value.strip() or value.startswith("{{")):
            raise ConfigError(
                f"{name}={value!r} is no job id: Databricks fills in {{{{job.run_id}}}} and {{{{job.id}}}} in job "
                "tasks only; elsewhere pass an id or drop the flag"
            )
    settings = {**settings, "source": source, "lakehouse": lakehouse}
    cli_args = (["--verbose"] if ns.verbose else []) + [ns.command, *_expand_value_flags(ns.args)]
    return JobInvocation(
        settings=settings,
        cli_args=tuple(cli_args),
        print_config=ns.print_config,
        job_run_id=ns.job_run_id,
        job_id=ns.job_id,
        origin=origin,
    )


def run_job(invocation: JobInvocation, runtime=None) -> int:
    """Load the config and run the CLI on it."""
    from binlake import cli
    from binlake.config import LakehouseConfig
    from binlake.deploy.runtime import current_runtime
    from binlake.ops.commands import JOB_ID_ENV
    from binlake.ops.metrics import JOB_RUN_ENV

    if invocation.print_config:
        print(invocation.config_yaml, end="")
        return 0
    # Where the lakehouse is decides whether this can run here at all: checked first.
    lakehouse = invocation.settings.get("lakehouse") or {}
    (runtime or current_runtime()).check_lakehouse(
        LakehouseConfig(**{k: v for k, v in lakehouse.items() if k in LakehouseConfig.__dataclass_fields__})
    )
    config = invocation.config()
    ids = {JOB_RUN_ENV: invocation.job_run_id, JOB_ID_ENV: invocation.job_id}
    previous = {name: os.environ.get(name) for name in ids}
    os.environ.update({name: value for name, value in ids.items() if value})
    try:
        return cli.main(list(invocation.cli_args), config=config)
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


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


def _read_settings(flag: str, path: str) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(
            f"{flag} file {path!r} not found: the bundle syncs binlake.yml from its root (databricks.yml, sync); "
            "deploy again, or point the bundle variable config_file at the synced file"
        ) from None
    except yaml.YAMLError:
        raise ConfigError(f"{flag} file {path!r} is not valid YAML: fix the syntax") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{flag} file {path!r} must be a YAML mapping of binlake.yml sections")
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
                    f"{flag} must be true or false, got {value!r}: set the job parameter {_VALUE_FLAGS[flag]!r} to "
                    "true or false"
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
