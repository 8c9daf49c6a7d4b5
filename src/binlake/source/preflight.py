"""``binlake preflight``: is the source set up for change capture? Every problem, with its fix.

Runs before anything touches data (docs/architecture.md, "Failure behaviour"). All checks run, whatever fails
first, so one run lists everything an operator has to change::

    >>> report = run_preflight(config)      # doctest: +SKIP
    >>> print(report.text())                # doctest: +SKIP
    OK    log_bin: ON
    OK    binlog_format: ROW
    ...

:func:`run_preflight` raises :class:`~binlake.errors.PreflightError` (``.problems`` holds
one "what is wrong: how to fix it" line per problem, ``.report`` the full report) when
anything must change; warnings and notes never fail it. :func:`check_source` returns the
report without raising, for callers that want to decide themselves.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pymysql

from binlake.config import BINLOG_READERS, Config, SourceConfig
from binlake.contract.columns import stored_schema
from binlake.contract.sql import mysql_string, quote_ident, unquote_ident
from binlake.contract.tables import name_clashes
from binlake.contract.types import TableSchema, column_from_information_schema
from binlake.errors import ConfigError, PreflightError, UnsupportedTypeError
from binlake.source import catalog
from binlake.source.mysql import connect, query

# The driver's probes use server_id and the parallel binlog readers server_id + 1 + i.
READER_IDS = 1 + BINLOG_READERS

# Below a day, a capture that is stopped over a night or a weekend finds its binlog gone.
SHORT_EXPIRY_SECONDS = 24 * 3600


class Status(str, enum.Enum):
    OK = "OK"
    INFO = "INFO"
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Check:
    """One line of the report. ``detail`` for FAIL reads "what is wrong: how to fix it"."""

    name: str
    status: Status
    detail: str


@dataclass
class PreflightReport:
    server: str = ""
    user: str = ""
    tables: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    def add(self, name: str, status: Status, detail: str) -> None:
        self.checks.append(Check(name, status, " ".join(detail.split())))

    @property
    def problems(self) -> list[str]:
        return [c.detail for c in self.checks if c.status is Status.FAIL]

    @property
    def warnings(self) -> list[str]:
        return [c.detail for c in self.checks if c.status is Status.WARN]

    @property
    def ok(self) -> bool:
        return not self.problems

    def text(self) -> str:
        head = f"preflight: {self.server} as {self.user}, {len(self.tables)} captured table(s)"
        lines = [head] + [f"{c.status.value:<5} {c.name}: {c.detail}" for c in self.checks]
        n_fail, n_warn = len(self.problems), len(self.warnings)
        n_ok = sum(c.status is Status.OK for c in self.checks)
        if n_fail:
            lines.append(f"{n_fail} problem(s) to fix, {n_warn} warning(s)")
        else:
            lines.append(f"all {n_ok} checks passed" + (f", {n_warn} warning(s)" if n_warn else ""))
        return "\n".join(lines)


# Checks the captured tables' stored schemas (what silver and gold will hold) against what a
# layer above the source expects of them; returns one line per problem.
TableCheck = Callable[[TableSchema], list[str]]


def run_preflight(config: Config, table_check: TableCheck | None = None) -> PreflightReport:
    """Check the source; raise :class:`PreflightError` listing every problem, else return the report.

    ``table_check`` (gold's expectations, :func:`binlake.ops.preflight.run_preflight`) runs on
    every captured table's stored schema."""
    report = check_source(config.source, table_check)
    if report.problems:
        err = PreflightError(report.problems)
        err.report = report
        raise err
    return report


def check_source(source: SourceConfig, table_check: TableCheck | None = None) -> PreflightReport:
    """Run every check and return the report (connection failures still raise
    :class:`~binlake.errors.SourceConnectionError`: nothing else can be checked then)."""
    report = PreflightReport()
    conn = connect(source)
    try:
        version = query(conn, "SELECT VERSION() AS v, CURRENT_USER() AS u, @@server_id AS sid")[0]
        mariadb = "mariadb" in version["v"].lower()
        report.server = f"{'MariaDB' if mariadb else 'MySQL'} {version['v']} at {source.host}:{source.port}"
        report.user = _account(version["u"])
        variables = _variables(conn)
        _check_binlog(report, variables, version["v"], mariadb)
        check_server_options(report, variables, mariadb)
        _check_login(report, conn, source)
        grants = _Grants.parse(r for row in query(conn, "SHOW GRANTS") for r in row.values())
        tables = catalog.matching_tables(conn, source)
        report.tables = [f"{db}.{t}" for db, t in tables]
        for clash in name_clashes(tables):
            report.add("names", Status.FAIL, clash)
        _check_privileges(report, grants, source, tables)
        _check_server_id(report, conn, source, int(version["sid"]), mariadb)
        _check_tables(report, conn, source, tables, grants, table_check, foreign_keys_logged(variables, mariadb))
        _check_expiry(report, conn, variables)
    finally:
        conn.close()
    return report


# ---------------------------------------------------------------------------------------
# binlog settings


def _variables(conn) -> dict[str, str]:
    names = (
        "log_bin",
        "binlog_format",
        "binlog_row_image",
        "binlog_row_metadata",
        "binlog_expire_logs_seconds",
        "expire_logs_days",
        # MySQL: how row images and transactions are written, and who applies FK actions.
        "binlog_row_value_options",
        "binlog_transaction_compression",
        "innodb_native_foreign_keys",
        # MariaDB: compressed binlog events.
        "log_bin_compress",
    )
    rows = query(conn, "SHOW GLOBAL VARIABLES WHERE Variable_name IN %s", (names,))
    return {r["Variable_name"].lower(): str(r["Value"]) for r in rows}


def _check_binlog(report: PreflightReport, v: dict[str, str], version: str, mariadb: bool) -> None:
    log_bin = v.get("log_bin", "OFF").upper()
    if log_bin in ("ON", "1"):
        report.add("log_bin", Status.OK, "ON")
    else:
        report.add(
            "log_bin",
            Status.FAIL,
            "log_bin is OFF, so there is no binlog to capture: start the server with log_bin=mysql-bin "
            "(in the [mysqld] section of my.cnf) and restart it",
        )

    fmt = v.get("binlog_format", "").upper()
    if fmt == "ROW":
        report.add("binlog_format", Status.OK, "ROW")
    else:
        report.add(
            "binlog_format",
            Status.FAIL,
            f"binlog_format is {fmt or 'unset'}, binlake needs ROW ({fmt or 'it'} logs SQL statements, "
            "not the changed rows): run SET GLOBAL binlog_format = 'ROW' and put binlog_format=ROW in my.cnf; "
            "sessions already connected keep the old format until they reconnect",
        )

    image = v.get("binlog_row_image", "FULL").upper()
    if image == "FULL":
        report.add("binlog_row_image", Status.OK, "FULL")
    else:
        report.add(
            "binlog_row_image",
            Status.FAIL,
            f"binlog_row_image is {image}, binlake needs FULL ({image} leaves unchanged columns out of "
            "row images, so silver could not rebuild whole rows): run SET GLOBAL binlog_row_image = 'FULL' "
            "and put binlog_row_image=FULL in my.cnf",
        )

    metadata = v.get("binlog_row_metadata")
    if metadata is None:
        need = "MariaDB 10.5" if mariadb else "MySQL 8.0.1"
        report.add(
            "binlog_row_metadata",
            Status.FAIL,
            f"server {version} has no binlog_row_metadata (it needs {need} or newer), so binlog rows carry "
            "no column names and would be decoded as UNKNOWN_COL0, UNKNOWN_COL1, ...: "
            f"upgrade the server to {need}+ and set binlog_row_metadata=FULL",
        )
    elif metadata.upper() == "FULL":
        report.add("binlog_row_metadata", Status.OK, "FULL")
    else:
        report.add(
            "binlog_row_metadata",
            Status.FAIL,
            f"binlog_row_metadata is {metadata.upper()}, binlake needs FULL (without it binlog rows carry "
            "no column names and would be decoded as UNKNOWN_COL0, UNKNOWN_COL1, ...): "
            "run SET GLOBAL binlog_row_metadata = 'FULL' and put binlog_row_metadata=FULL in my.cnf",
        )


def check_server_options(report: PreflightReport, v: dict[str, str], mariadb: bool) -> None:
    """The settings that change how rows are written, beyond format, image and metadata."""
    report.add(
        "session overrides",
        Status.INFO,
        "a session may set its own binlog_format and binlog_row_image, overriding the globals above; "
        "capture keeps what it cannot apply exactly (statement-format DML, rows without columns) as a change "
        "that stops its table in silver until re-snapshotted: grant writers no "
        + (
            "SUPER or BINLOG_ADMIN (MariaDB's privileges for SET SESSION binlog_format)"
            if mariadb
            else "SYSTEM_VARIABLES_ADMIN, SESSION_VARIABLES_ADMIN or SUPER (MySQL's privileges for SET SESSION "
            "binlog_format and binlog_row_image)"
        ),
    )
    options = v.get("binlog_row_value_options")
    if options is not None:
        report.add(
            "binlog_row_value_options",
            Status.OK if "PARTIAL_JSON" not in options.upper() else Status.INFO,
            "PARTIAL_JSON: updates of JSON columns are logged as diffs, which capture applies to the full "
            "before image (binlog_row_image=FULL)"
            if "PARTIAL_JSON" in options.upper()
            else "'' (JSON columns are logged whole)",
        )
    compression = v.get("binlog_transaction_compression")
    if compression is not None:
        on = compression.upper() in ("ON", "1")
        report.add(
            "binlog_transaction_compression",
            Status.OK,
            "ON: each transaction is one zstd TRANSACTION_PAYLOAD_EVENT, which capture decompresses" if on else "OFF",
        )
    report.add("foreign-key actions", Status.INFO, foreign_key_mode(v, mariadb))
    if v.get("log_bin_compress", "OFF").upper() in ("ON", "1"):
        report.add(
            "log_bin_compress",
            Status.FAIL,
            "log_bin_compress is ON: MariaDB writes compressed QUERY and ROWS events, which binlake does not "
            "decode: run SET GLOBAL log_bin_compress = OFF and put log_bin_compress=OFF in my.cnf",
        )


def foreign_keys_logged(v: dict[str, str], mariadb: bool) -> bool:
    """True when the server logs the rows foreign-key actions change (MySQL 9.6+ handles
    InnoDB foreign keys in the SQL layer unless innodb_native_foreign_keys is ON)."""
    native = v.get("innodb_native_foreign_keys")
    return not mariadb and native is not None and native.upper() in ("OFF", "0", "FALSE")


def foreign_key_mode(v: dict[str, str], mariadb: bool) -> str:
    """Whether the server logs the rows ON DELETE/UPDATE CASCADE and SET NULL change: silver
    applies the actions itself either way, so the line says which of the two it repeats."""
    if foreign_keys_logged(v, mariadb):
        return (
            "innodb_native_foreign_keys=OFF: the server (MySQL 9.6+) applies CASCADE and SET NULL in the SQL layer "
            "and logs the rows they change; silver applies them too, to the same rows and values"
        )
    setting = "" if mariadb or "innodb_native_foreign_keys" not in v else "innodb_native_foreign_keys=ON: "
    return (
        f"{setting}InnoDB applies CASCADE and SET NULL itself and the binlog does not hold the rows they change; "
        "silver applies them to the captured child tables of captured parents"
    )


_AUTH_PLUGIN = re.compile(r"IDENTIFIED\s+(?:WITH|VIA)\s+'?`?(?P<plugin>[\w]+)", re.IGNORECASE)


def _check_login(report: PreflightReport, conn, source: SourceConfig) -> None:
    """The CDC user's authentication plugin: MySQL 8's default, caching_sha2_password, needs TLS
    or the server's RSA key, which the cryptography package (a binlake dependency) handles."""
    try:
        text = " ".join(str(v) for row in query(conn, "SHOW CREATE USER CURRENT_USER()") for v in row.values())
    except pymysql.err.MySQLError:
        return  # an old server without SHOW CREATE USER: the login itself worked
    check_login_plugin(report, text, source.tls.enabled)


def check_login_plugin(report: PreflightReport, create_user: str, tls: bool) -> None:
    """The authentication line, from the user's ``SHOW CREATE USER`` text."""
    m = _AUTH_PLUGIN.search(create_user)
    plugin = m.group("plugin").lower() if m else "mysql_native_password"
    if plugin in ("caching_sha2_password", "sha256_password"):
        how = "over TLS" if tls else "with the server's RSA public key (the cryptography package)"
        report.add("authentication", Status.OK, f"{plugin}: binlake logs in {how}")
    elif plugin in ("mysql_native_password", "ed25519", "client_ed25519", "unix_socket"):
        report.add("authentication", Status.OK, plugin)
    else:
        report.add(
            "authentication",
            Status.WARN,
            f"the CDC user authenticates with {plugin}, which binlake's driver (pymysql) may not speak on every "
            "host: use caching_sha2_password or mysql_native_password",
        )


def _check_expiry(report: PreflightReport, conn, v: dict[str, str]) -> None:
    seconds = int(float(v.get("binlog_expire_logs_seconds") or 0))
    if not seconds and v.get("expire_logs_days"):
        seconds = int(float(v["expire_logs_days"]) * 86400)
    oldest = ""
    if v.get("log_bin", "OFF").upper() in ("ON", "1"):
        try:
            logs = query(conn, "SHOW BINARY LOGS")
            oldest = f" (oldest binlog on the server: {logs[0]['Log_name']})" if logs else ""
        except pymysql.err.MySQLError:
            pass  # the privilege check reports why
    if seconds == 0:
        report.add(
            "binlog expiry",
            Status.INFO,
            f"binlogs never expire automatically{oldest}; capture still warns before its resume file is purged",
        )
    elif seconds < SHORT_EXPIRY_SECONDS:
        report.add(
            "binlog expiry",
            Status.WARN,
            f"binlogs expire after {_duration(seconds)}{oldest}: a capture stopped for longer must re-snapshot; "
            "raise binlog_expire_logs_seconds to at least 604800 (7 days) unless capture runs continuously",
        )
    else:
        report.add("binlog expiry", Status.OK, f"binlogs expire after {_duration(seconds)}{oldest}")


def _duration(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} day(s)"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} hour(s)"
    return f"{seconds} seconds"


# ---------------------------------------------------------------------------------------
# privileges


def _account(current_user: str) -> str:
    user, _, host = current_user.rpartition("@")
    return f"{mysql_string(user)}@{mysql_string(host)}"


_IDENT = r"(?:`(?:[^`]|``)*`|\*|[^\s.`]+)"
_ROLE_GRANT = re.compile(r"^GRANT (?!PROXY )\S+ TO ")
_GRANT = re.compile(rf"^GRANT (?P<privs>.+?) ON (?:TABLE )?(?P<db>{_IDENT})\.(?P<table>{_IDENT}) TO ", re.S)


def _split_privileges(text: str) -> list[str]:
    """``SELECT (a, b), INSERT`` -> ``['SELECT (a, b)', 'INSERT']``."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [p for p in out if p]


@dataclass
class _Grants:
    """The privileges SHOW GRANTS lists, by level. Column-level grants do not count: binlake
    reads whole rows."""

    global_: set[str] = field(default_factory=set)
    databases: list[tuple[str, set[str]]] = field(default_factory=list)  # (db name or LIKE pattern, privs)
    tables: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    has_roles: bool = False

    @staticmethod
    def parse(lines) -> _Grants:
        g = _Grants()
        for line in lines:
            m = _GRANT.match(str(line))
            if not m:
                g.has_roles |= bool(_ROLE_GRANT.match(str(line)))
                continue  # PROXY, procedures
            privs = {p.upper() for p in _split_privileges(m.group("privs")) if "(" not in p}
            if privs & {"ALL", "ALL PRIVILEGES"}:
                privs |= {"SELECT", "REPLICATION CLIENT", "BINLOG MONITOR", "REPLICATION SLAVE"}
            db, table = m.group("db"), m.group("table")
            if db == "*":
                g.global_ |= privs
            elif table == "*":
                g.databases.append((unquote_ident(db), privs))
            else:
                g.tables.setdefault((unquote_ident(db), unquote_ident(table)), set()).update(privs)
        return g

    def has_global(self, *any_of: str) -> bool:
        return bool(self.global_ & set(any_of))

    def can_select(self, db: str, table: str | None = None) -> bool:
        if "SELECT" in self.global_:
            return True
        if any("SELECT" in privs and _db_grant_matches(pattern, db) for pattern, privs in self.databases):
            return True
        return table is not None and "SELECT" in self.tables.get((db, table), set())


def _db_grant_matches(pattern: str, db: str) -> bool:
    """Database-level grants may use LIKE wildcards (``_``, ``%``), escaped with a backslash."""
    regex, i = "", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            regex += re.escape(pattern[i + 1])
            i += 2
            continue
        regex += ".*" if ch == "%" else "." if ch == "_" else re.escape(ch)
        i += 1
    return re.fullmatch(regex, db) is not None


def _check_privileges(
    report: PreflightReport, grants: _Grants, source: SourceConfig, tables: list[tuple[str, str]]
) -> None:
    missing = []
    if not grants.has_global("REPLICATION CLIENT", "BINLOG MONITOR"):
        missing.append("REPLICATION CLIENT")
    if not grants.has_global("REPLICATION SLAVE"):
        missing.append("REPLICATION SLAVE")
    if missing:
        names = ", ".join(missing)
        why = []
        if "REPLICATION CLIENT" in missing:
            why.append("REPLICATION CLIENT (BINLOG MONITOR on MariaDB) to read binlog positions")
        if "REPLICATION SLAVE" in missing:
            why.append("REPLICATION SLAVE to read the binlog")
        roles = (
            " (privileges held through roles are not counted: grant them to the user itself)"
            if grants.has_roles
            else ""
        )
        report.add(
            "privileges",
            Status.FAIL,
            f"user {report.user} lacks {names} ({'; '.join(why)}): run GRANT {names} ON *.* TO {report.user}" + roles,
        )

    # Tables the user cannot SELECT are invisible in information_schema, so literal database
    # names in the patterns are checked too: otherwise "no table matches" hides the cause.
    dbs = {db for db, _ in tables}
    dbs |= {p.split(".", 1)[0] for p in source.tables if not any(ch in p.split(".", 1)[0] for ch in "*?[")}
    no_select = sorted(
        db
        for db in dbs
        if not grants.can_select(db)
        and not (any(d == db for d, _ in tables) and all(grants.can_select(d, t) for d, t in tables if d == db))
    )
    if no_select:
        statements = "; ".join(f"GRANT SELECT ON {quote_ident(db)}.* TO {report.user}" for db in no_select)
        report.add(
            "privileges",
            Status.FAIL,
            f"user {report.user} cannot SELECT from database(s) {', '.join(no_select)} "
            f"(the snapshot reads them): run {statements}",
        )
    if not missing and not no_select:
        report.add("privileges", Status.OK, f"{report.user} has SELECT, REPLICATION CLIENT, REPLICATION SLAVE")


# ---------------------------------------------------------------------------------------
# server id


def _check_server_id(report: PreflightReport, conn, source: SourceConfig, own_id: int, mariadb: bool) -> None:
    ids = range(source.server_id, source.server_id + READER_IDS)
    span = f"{ids[0]}..{ids[-1]}"
    taken: dict[int, str] = {own_id: "the source server's own @@server_id"}
    replicas, listed = _replicas(conn)
    for r in replicas:
        taken.setdefault(r[0], f"the replica registered from {r[1]}")
    clashes = {i: who for i, who in taken.items() if i in ids}
    if clashes:
        free = _free_server_id(set(taken))
        what = "; ".join(f"{i} is {who}" for i, who in sorted(clashes.items()))
        report.add(
            "server_id",
            Status.FAIL,
            f"source.server_id {source.server_id} collides ({what}; binlake's binlog readers use {span}): "
            f"set source.server_id to an unused number, e.g. {free} (the server drops one of two binlog "
            "readers that share a server id)",
        )
    else:
        report.add(
            "server_id",
            Status.OK,
            f"{span} differ from the server's {own_id}"
            + (f" and {len(replicas)} registered replica(s)" if listed else ""),
        )
    if not listed:
        need = "REPLICATION MASTER ADMIN" if mariadb else "REPLICATION SLAVE"
        report.add(
            "server_id",
            Status.INFO,
            f"could not list registered replicas (SHOW SLAVE HOSTS needs {need}): make sure no replica "
            f"or other binlog reader of this server uses a server id in {span}",
        )
    dumps = _binlog_dumps(conn)
    if dumps:
        report.add(
            "server_id",
            Status.INFO,
            f"{dumps} binlog reader(s) are connected (Binlog Dump threads); unregistered readers do not "
            f"show their server id: make sure none uses {span}",
        )


def _replicas(conn) -> tuple[list[tuple[int, str]], bool]:
    """(server id, host) of registered replicas, and whether the list could be read."""
    for sql in ("SHOW REPLICA HOSTS", "SHOW REPLICAS", "SHOW SLAVE HOSTS"):
        try:
            rows = query(conn, sql)
        except pymysql.err.ProgrammingError:
            continue  # syntax this server does not know
        except pymysql.err.MySQLError:
            return [], False  # access denied
        out = []
        for r in rows:
            norm = {k.lower(): v for k, v in r.items()}
            host = norm.get("host") or ""
            port = norm.get("port")
            out.append((int(norm["server_id"]), f"{host}:{port}" if host else f"port {port}"))
        return out, True
    return [], False


def _binlog_dumps(conn) -> int:
    try:
        rows = query(
            conn, "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE COMMAND LIKE %s", ("Binlog Dump%",)
        )
    except pymysql.err.MySQLError:
        return 0
    return int(rows[0]["n"])


def _free_server_id(taken: set[int]) -> int:
    candidate = 5401
    while any(i in taken for i in range(candidate, candidate + READER_IDS)):
        candidate += READER_IDS
    return candidate


# ---------------------------------------------------------------------------------------
# tables: keys, types, foreign keys


def _check_tables(
    report: PreflightReport,
    conn,
    source: SourceConfig,
    tables: list[tuple[str, str]],
    grants: _Grants,
    table_check: TableCheck | None = None,
    foreign_keys_logged: bool = False,
) -> None:
    if not tables:
        excl = f" minus exclude {json.dumps(list(source.exclude))}" if source.exclude else ""
        report.add(
            "tables",
            Status.FAIL,
            f"no table matches source.tables {json.dumps(list(source.tables))}{excl}: check the "
            "database and table names (patterns are case-sensitive, db.* or db.prefix_*); tables the "
            "user cannot SELECT are not visible to it",
        )
        return
    captured = {f"{db}.{t}" for db, t in tables}
    for name in sorted(set(source.chunk_keys) - captured):
        report.add(
            "chunk_keys",
            Status.WARN,
            f"source.chunk_keys names {name}, which is not captured: remove the entry or fix the name",
        )
    keyed, typed = 0, 0
    for db, table in tables:
        keyed += _check_key(report, conn, source, db, table)
        typed += _check_types(report, conn, db, table)
        _check_column_rule(report, conn, source, db, table)
        if table_check is not None:
            _check_stored_schema(report, conn, source, db, table, table_check)
    for rule in source.columns:
        if not any(rule.matches(db, t) for db, t in tables):
            report.add(
                "columns",
                Status.WARN,
                f"source.columns entry {rule.pattern!r} matches no captured table: remove it or fix the pattern",
            )
    if keyed == len(tables):
        report.add("keys", Status.OK, f"all {len(tables)} table(s) have a primary key or a configured chunk key")
    if typed == len(tables):
        report.add("types", Status.OK, f"every column type of the {len(tables)} table(s) is supported")
    _check_foreign_keys(report, conn, tables, captured, foreign_keys_logged)


def _check_column_rule(report: PreflightReport, conn, source: SourceConfig, db: str, table: str) -> None:
    from binlake.source.catalog import table_schema

    rule = source.column_rule(db, table)
    if rule is None:
        return
    try:
        stored_schema(source, table_schema(conn, source, db, table))
    except ConfigError as exc:
        report.add("columns", Status.FAIL, str(exc))
    else:
        report.add("columns", Status.OK, f"{db}.{table}: column rule {rule.pattern!r} fits")


def _check_stored_schema(
    report: PreflightReport, conn, source: SourceConfig, db: str, table: str, table_check: TableCheck
) -> None:
    from binlake.source.catalog import table_schema

    try:
        schema = stored_schema(source, table_schema(conn, source, db, table))
    except Exception:  # noqa: BLE001 - the column rule's or type's own check reports it
        return
    for problem in table_check(schema):
        report.add("expectations", Status.FAIL, problem)


def _indexes(conn, db: str, table: str) -> dict[str, dict]:
    rows = query(
        conn,
        "SELECT s.INDEX_NAME AS idx, s.NON_UNIQUE AS non_unique, s.COLUMN_NAME AS col, c.IS_NULLABLE AS nullable "
        "FROM information_schema.STATISTICS s JOIN information_schema.COLUMNS c "
        "ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME AND c.COLUMN_NAME = s.COLUMN_NAME "
        "WHERE s.TABLE_SCHEMA = %s AND s.TABLE_NAME = %s ORDER BY s.INDEX_NAME, s.SEQ_IN_INDEX",
        (db, table),
    )
    out: dict[str, dict] = {}
    for r in rows:
        idx = out.setdefault(r["idx"], {"unique": not int(r["non_unique"]), "columns": [], "not_null": True})
        idx["columns"].append(r["col"])
        idx["not_null"] = idx["not_null"] and r["nullable"] == "NO"
    return out


def _check_key(report: PreflightReport, conn, source: SourceConfig, db: str, table: str) -> bool:
    name = f"{db}.{table}"
    qname = f"{quote_ident(db)}.{quote_ident(table)}"
    if catalog.primary_key(conn, db, table):
        return True
    indexes = _indexes(conn, db, table)
    configured = source.chunk_keys.get(name)
    if configured is None:
        candidates = [i for i in indexes.values() if i["unique"] and i["not_null"]]
        if candidates:
            cols = candidates[0]["columns"]
            fix = (
                f"set source.chunk_keys: {{{json.dumps(name)}: {json.dumps(cols)}}} (its unique NOT NULL key), "
                f"or add a primary key"
            )
        else:
            fix = (
                f"add one (ALTER TABLE {qname} ADD PRIMARY KEY (...)), or add a unique NOT NULL key and name it "
                f"in source.chunk_keys, or exclude the table (source.exclude)"
            )
        report.add(
            "keys",
            Status.FAIL,
            f"table {name} has no primary key, so its rows cannot be chunked or merged by key: {fix}",
        )
        return False
    columns = {
        r["c"]: r["n"]
        for r in query(
            conn,
            "SELECT COLUMN_NAME AS c, IS_NULLABLE AS n FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (db, table),
        )
    }
    unknown = [c for c in configured if c not in columns]
    if unknown:
        report.add(
            "keys",
            Status.FAIL,
            f"source.chunk_keys for {name} names column(s) {', '.join(unknown)} that {name} does not have: "
            f"use columns of a unique NOT NULL key of the table",
        )
        return False
    nullable = [c for c in configured if columns[c] == "YES"]
    if nullable:
        cols = ", ".join(f"{quote_ident(c)}" for c in nullable)
        report.add(
            "keys",
            Status.FAIL,
            f"source.chunk_keys for {name} includes nullable column(s) {', '.join(nullable)}: make them "
            f"NOT NULL (ALTER TABLE {qname} MODIFY {cols} ... NOT NULL) or choose NOT NULL columns",
        )
        return False
    # A unique index on a subset of the chunk key makes the chunk key unique too.
    if not any(i["unique"] and set(i["columns"]) <= set(configured) for i in indexes.values()):
        cols = ", ".join(quote_ident(c) for c in configured)
        report.add(
            "keys",
            Status.FAIL,
            f"source.chunk_keys for {name} is ({', '.join(configured)}), but no unique index covers it, so "
            f"two rows could share a key: run CREATE UNIQUE INDEX binlake_chunk_key ON {qname} ({cols}), "
            "or name the columns of an existing unique index",
        )
        return False
    report.add(
        "keys",
        Status.INFO,
        f"{name} has no primary key; chunked and merged by source.chunk_keys "
        f"({', '.join(configured)}), a unique NOT NULL key",
    )
    return True


def _check_types(report: PreflightReport, conn, db: str, table: str) -> bool:
    rows = query(
        conn,
        "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION "
        "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (db, table),
    )
    return check_column_types(report, db, table, rows)


def check_column_types(report: PreflightReport, db: str, table: str, rows: list[dict]) -> bool:
    """The table's columns (information_schema.COLUMNS rows) against binlake's type map: a type
    it does not map fails; a VECTOR column (MySQL 9) is named with what it becomes."""
    bad = []
    vectors = [f"{c['COLUMN_NAME']} ({c['COLUMN_TYPE']})" for c in rows if str(c["DATA_TYPE"]).lower() == "vector"]
    if vectors:
        report.add(
            "types",
            Status.INFO,
            f"{db}.{table}: VECTOR column(s) {', '.join(vectors)} are mirrored as BINARY, their float32 values "
            "little-endian as MySQL stores them (VECTOR_TO_STRING reads them back)",
        )
    for c in rows:
        try:
            column_from_information_schema(
                c["COLUMN_NAME"],
                c["DATA_TYPE"],
                c["COLUMN_TYPE"],
                c["NUMERIC_PRECISION"],
                c["NUMERIC_SCALE"],
                c["DATETIME_PRECISION"],
            )
        except UnsupportedTypeError:
            bad.append(f"{c['COLUMN_NAME']} ({c['COLUMN_TYPE']})")
    if bad:
        report.add(
            "types",
            Status.FAIL,
            f"table {db}.{table} has column type(s) binlake does not map: {', '.join(bad)}: exclude the "
            f"table (source.exclude: [{json.dumps(f'{db}.{table}')}]) or change the column type",
        )
    return not bad


def _check_foreign_keys(
    report: PreflightReport, conn, tables: list[tuple[str, str]], captured: set[str], logged: bool = False
) -> None:
    # InnoDB applies ON DELETE/UPDATE actions inside the storage engine: the rows it changes
    # are not in the binlog. Silver re-applies CASCADE and SET NULL, which needs the parent.
    # MySQL 9.6+ applies them in the SQL layer by default and logs the child rows (before the
    # parent's event); silver's own actions then repeat what the log already says.
    mode = (
        "the server logs the rows it changes by {actions} (MySQL's SQL-layer foreign keys, "
        "innodb_native_foreign_keys=OFF); silver applies them too, to the same rows and values"
        if logged
        else "the server does not log the rows it changes by {actions}, so silver applies them itself"
    )
    for db, table in tables:
        for fk in catalog.foreign_keys(conn, db, table):
            child = f"{db}.{table}"
            actions = {
                f"ON {what.upper()} {fk[key]}"
                for what, key in (("delete", "on_delete"), ("update", "on_update"))
                if fk[key] in ("CASCADE", "SET NULL")
            }
            rules = f"ON DELETE {fk['on_delete']}, ON UPDATE {fk['on_update']}"
            link = f"{child} ({', '.join(fk['columns'])}) -> {fk['parent']} ({', '.join(fk['parent_columns'])})"
            if not actions:
                report.add(
                    "foreign keys",
                    Status.INFO,
                    f"{link}, {rules}: nothing for binlake to do (the server rejects violating changes)",
                )
            elif fk["parent"] in captured:
                report.add(
                    "foreign keys",
                    Status.INFO,
                    f"{link}, {rules}: " + mode.format(actions=" / ".join(sorted(actions))),
                )
            else:
                report.add(
                    "foreign keys",
                    Status.WARN,
                    f"{link}, {rules}: {fk['parent']} is not captured, so the rows the server changes by "
                    f"{' / '.join(sorted(actions))} (not in the binlog) stay unchanged in silver: "
                    f"capture {fk['parent']} too",
                )


__all__ = ["READER_IDS", "Check", "PreflightReport", "Status", "check_source", "run_preflight"]
