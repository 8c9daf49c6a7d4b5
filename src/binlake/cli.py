"""``binlake --config PATH <command>``: thin; every command calls one function in the package.

Exit 0 on success; on failure one line on stderr (``error: ...``) and the failure's own
exit code (see :mod:`binlake.errors`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from binlake.errors import BinlakeError, ConfigError, cause_of

if TYPE_CHECKING:
    from binlake.spark import SparkLike

COMMANDS = (
    "preflight",
    "snapshot",
    "capture",
    "silver",
    "gold",
    "run",
    "status",
    "checks",
    "verify",
    "maintain",
    "erase",
    "migrate",
    "jobs",
)
# What a Databricks job task may run (binlake-job, binlake.deploy.entrypoints): not the two that
# only show what the jobs did (`checks` renders check results, `jobs` lists the jobs' runs).
JOB_COMMANDS = tuple(c for c in COMMANDS if c not in ("checks", "jobs"))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="binlake", description="Mirror MySQL/MariaDB into Delta Lake (bronze, silver, gold)."
    )
    ap.add_argument("--config", "-c", default="binlake.yml", help="path to binlake.yml (default: ./binlake.yml)")
    ap.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    ap.add_argument("--debug", action="store_true", help="show the Python traceback on unexpected errors")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("preflight", help="check the source is ready for capture; lists every problem with its fix")

    p = sub.add_parser("snapshot", help="lock-free chunked snapshot of the captured tables into bronze")
    p.add_argument(
        "--table",
        action="append",
        default=[],
        metavar="DB.TABLE",
        help="only these tables (repeatable); re-snapshots them",
    )
    p.add_argument(
        "--reset-capture",
        action="store_true",
        help="after a binlog purge: restart capture at the current position, then snapshot the tables",
    )

    p = sub.add_parser("capture", help="read the binlog into the bronze change log (exactly once)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--until-now", action="store_true", help="stop at the position the server reports at start (default)"
    )
    mode.add_argument("--continuous", action="store_true", help="keep capturing until interrupted")

    sub.add_parser("silver", help="apply new bronze records to the silver current-state tables")
    sub.add_parser("gold", help="check and publish gold at one consistent binlog position")
    p = sub.add_parser("run", help="what a scheduled job does: snapshot if needed, capture until now, silver, gold")
    p.add_argument(
        "--continuous",
        action="store_true",
        help="loop capture -> silver -> gold in one long-lived process until interrupted",
    )

    p = sub.add_parser("status", help="capture position, lag, purge risk, last publish per table")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--html", metavar="FILE", help="also write the health dashboard (charts from the metrics table) to FILE"
    )
    p.add_argument("--days", type=int, default=7, help="days of metrics the --html charts show (default: 7)")
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 12 when capture or gold is further behind the source than health.max_lag_seconds",
    )

    p = sub.add_parser("checks", help="gold's Great Expectations results per table; --docs renders GE's Data Docs")
    p.add_argument("--table", action="append", default=[], metavar="DB.TABLE", help="only these tables (repeatable)")
    p.add_argument("--last", type=int, default=1, help="publish attempts per table (default: the newest)")
    p.add_argument("--json", action="store_true", help="GE's result JSON, one entry per table and attempt")
    p.add_argument("--docs", metavar="DIR", help="also render GE's Data Docs site of these results into DIR")

    p = sub.add_parser("verify", help="compare source and silver chunk by chunk (count + checksum)")
    p.add_argument("--repair", action="store_true", help="re-snapshot only the chunks that differ")
    p.add_argument("--table", action="append", default=[], metavar="DB.TABLE", help="only these tables (repeatable)")

    sub.add_parser(
        "maintain",
        help="remove old silver tombstones and bronze rows nothing needs, compact, VACUUM "
        "(safe beside a running pipeline)",
    )

    p = sub.add_parser("erase", help="remove one key's rows from every layer (after deleting it at the source)")
    p.add_argument("--table", required=True, metavar="DB.TABLE", help="the captured table")
    p.add_argument(
        "--key",
        action="append",
        required=True,
        metavar="COLUMN=VALUE",
        help="a key column's value (repeat for each column of a composite key)",
    )

    sub.add_parser(
        "migrate",
        help="move a lakehouse an earlier binlake laid out to this version's layout (binlake's own tables into the "
        "system schema); once, under every layer's lease; any writing command does it too",
    )

    p = sub.add_parser("jobs", help="the Databricks bundle's job runs (needs databricks-sdk auth)")
    p.add_argument("action", choices=["status"])
    p.add_argument("--bundle-name", default="binlake", help="job name prefix of the bundle (default: binlake)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return ap


def main(argv: Sequence[str] | None = None, config=None) -> int:
    """Run one command; ``config`` (a loaded :class:`~binlake.config.Config`) replaces
    ``--config`` (``binlake-job`` loads its own)."""
    args = build_parser().parse_args(argv)
    from binlake.console import setup_logging

    setup_logging(args.verbose)
    try:
        return _dispatch(args, config)
    except BinlakeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted; re-run the same command to continue where it stopped", file=sys.stderr)
        return 130
    except Exception as exc:  # the last line of defence: one line, no traceback
        if args.debug:
            raise
        from binlake.contract.write_errors import storage_error

        if (refused := storage_error(exc)) is not None:
            print(f"error: {refused}", file=sys.stderr)
            return refused.exit_code
        print(f"error: unexpected {cause_of(exc)} (re-run with --debug for the traceback)", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace, config=None) -> int:
    from binlake.config import load_config

    config = config or load_config(args.config)
    cmd = args.command
    if cmd == "preflight":
        from binlake.ops.preflight import run_preflight

        report = run_preflight(config)
        print(report.text())
        return 0
    if cmd == "jobs":
        from binlake.deploy.jobs import jobs_status

        print(jobs_status(config, bundle_name=args.bundle_name, as_json=args.json))
        return 0

    from binlake.console import Console
    from binlake.spark import get_spark

    console = Console()
    if cmd == "status":
        from binlake.ops.status import (
            check_lag,
            collect_status,
            format_status,
            status_json,
        )

        if args.days < 1:
            raise ConfigError(f"--days must be at least 1, got {args.days}")
        spark = get_spark()
        status = collect_status(spark, config)
        print(status_json(status) if args.json else format_status(status))
        if args.html:
            from binlake.ops.health_page import write_health_page

            print(f"health page written to {write_health_page(spark, config, status, args.html, days=args.days)}")
        if args.check:
            check_lag(status, config.health.max_lag_seconds)
        return 0

    if cmd == "checks":
        from binlake.ops.check_results import format_results, results_json, stored_results, write_data_docs

        results = stored_results(get_spark(), config, tables=args.table or None, last=args.last)
        print(results_json(results) if args.json else format_results(results))
        if args.docs:
            print(f"Data Docs written to {write_data_docs(results, args.docs)}")
        return 0

    spark = get_spark()
    from binlake.ops import commands

    # Before anything is recorded: the metrics table itself moves when an earlier layout is migrated.
    migrated = commands.prepare_lakehouse(spark, config, cmd)
    if migrated.steps or cmd == "migrate":
        print(migrated.summary())
    if cmd == "migrate":
        return 0
    if cmd == "run" and args.continuous:
        state = commands.run_continuous(spark, config, console=console)
        print(f"continuous: stopped after {state.loops} loop(s)")
        return 0
    from binlake.ops.metrics import recorded

    result = recorded(spark, config, cmd, lambda: _run_command(spark, config, args, console))
    print(result.summary())
    logging.getLogger("binlake").debug("done: %s", cmd)
    return 0


def _run_command(spark: SparkLike, config, args: argparse.Namespace, console):
    """The work of one lakehouse command; returns its result (which has ``summary()``)."""
    from binlake.ops import commands

    cmd = args.command
    if cmd == "snapshot" and args.reset_capture:
        return commands.recover_from_purge(spark, config, tables=args.table or None, console=console)
    if cmd == "snapshot":
        return commands.run_snapshot(spark, config, tables=args.table or None, console=console)
    if cmd == "capture":
        return commands.run_capture(spark, config, continuous=args.continuous, console=console)
    if cmd == "silver":
        return commands.run_silver(spark, config, console=console)
    if cmd == "gold":
        return commands.run_gold(spark, config, console=console)
    if cmd == "run":
        return commands.run_pipeline(spark, config, console=console)
    if cmd == "maintain":
        return commands.run_maintain(spark, config)
    if cmd == "verify":
        return commands.run_verify(spark, config, repair=args.repair, tables=args.table or None, console=console)
    if cmd == "erase":
        return commands.run_erase(spark, config, args.table, args.key)
    raise AssertionError(cmd)  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
