"""A throwaway local MariaDB with the binlog set up the way binlake needs it.

Used by ``make demo`` / ``make test`` (``python -m binlake.devtools.mariadb up``) and by the
integration-test fixtures. It runs ``mariadbd`` directly (no Docker) in its own datadir, on
loopback, on a free port, with ``log_bin``, ``binlog_format=ROW``, ``binlog_row_image=FULL``
and ``binlog_row_metadata=FULL``, and creates a ``cdc`` user holding only SELECT,
REPLICATION CLIENT and REPLICATION SLAVE. Starting it twice is harmless.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

from binlake.errors import LocalMariaDBError

CDC_USER = "cdc"
CDC_GRANTS = "SELECT, REPLICATION CLIENT, REPLICATION SLAVE"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _find(binary: str) -> str:
    path = shutil.which(binary) or (f"/usr/sbin/{binary}" if Path(f"/usr/sbin/{binary}").exists() else None)
    if not path:
        raise LocalMariaDBError(
            f"{binary} not found: install it with 'apt-get install -y mariadb-server' (make setup does)"
        )
    return path


@dataclass
class LocalMariaDB:
    """One mariadbd process owning ``datadir``. State (port, password) lives in the datadir."""

    datadir: Path
    server_id: int = 1
    port: int | None = None
    # Non-UTC on purpose: anything that forgets to pin the session time zone shows up in tests.
    default_time_zone: str = "+02:00"
    extra_args: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.datadir = Path(self.datadir).resolve()

    # -- paths and state ---------------------------------------------------------------
    @property
    def data(self) -> Path:
        return self.datadir / "data"

    @property
    def socket_path(self) -> Path:
        return self.datadir / "mysqld.sock"

    @property
    def pid_file(self) -> Path:
        return self.datadir / "mysqld.pid"

    @property
    def log_file(self) -> Path:
        return self.datadir / "error.log"

    def _state(self, name: str) -> str | None:
        f = self.datadir / name
        return f.read_text().strip() if f.exists() else None

    @property
    def cdc_password(self) -> str:
        pw = self._state("cdc_password")
        if pw is None:
            pw = "cdc-" + secrets.token_hex(8)
            self.datadir.mkdir(parents=True, exist_ok=True)
            (self.datadir / "cdc_password").write_text(pw)
            os.chmod(self.datadir / "cdc_password", 0o600)
        return pw

    # -- lifecycle ---------------------------------------------------------------------
    def is_running(self) -> bool:
        pid = self._state("mysqld.pid")
        if not pid:
            return False
        try:
            os.kill(int(pid), 0)
        except (ProcessLookupError, ValueError):
            return False
        except PermissionError:
            return True
        return self.socket_path.exists()

    def start(self) -> LocalMariaDB:
        if self.is_running():
            self.port = int(self._state("port") or 0) or self.port
            return self
        self.datadir.mkdir(parents=True, exist_ok=True)
        if not (self.data / "mysql").exists():
            self._install_db()
        if self.port is None:
            saved = self._state("port")
            self.port = int(saved) if saved and _port_free(int(saved)) else free_port()
        (self.datadir / "port").write_text(str(self.port))
        args = [
            _find("mariadbd"),
            "--no-defaults",
            f"--datadir={self.data}",
            f"--socket={self.socket_path}",
            f"--pid-file={self.pid_file}",
            f"--log-error={self.log_file}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            f"--server-id={self.server_id}",
            f"--log-bin={self.data / 'mysql-bin'}",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL",
            f"--default-time-zone={self.default_time_zone}",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            "--innodb-buffer-pool-size=256M",
            "--innodb-flush-log-at-trx-commit=2",
            "--sync-binlog=0",
            "--max-connections=500",
            "--max-allowed-packet=256M",
            *self.extra_args,
        ]
        if os.geteuid() == 0:
            args.append("--user=root")
        with open(self.datadir / "stdout.log", "ab") as log:  # the server keeps its own descriptor
            subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready()
        self._ensure_cdc_user()
        return self

    def _install_db(self) -> None:
        cmd = [
            _find("mariadb-install-db"),
            "--no-defaults",
            f"--datadir={self.data}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        # A failed install leaves a "mysql" folder behind that would make the next start skip
        # the install and fail to start: remove what it wrote (there is no data yet), and try
        # once more, since parallel installs on a busy machine have been seen to fail once.
        for _ in range(2):
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode == 0:
                return
            shutil.rmtree(self.data, ignore_errors=True)
        tail = (res.stderr.strip() or res.stdout.strip()).splitlines()[-3:]
        raise LocalMariaDBError(f"mariadb-install-db failed twice (exit {res.returncode}): {tail}")

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.root_connection().close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.2)
        tail = self.log_file.read_text(errors="replace").splitlines()[-5:] if self.log_file.exists() else []
        raise LocalMariaDBError(f"mariadbd did not become ready in {timeout}s; last log lines: {tail}")

    def _ensure_cdc_user(self) -> None:
        pw = self.cdc_password
        with self.root_connection() as conn, conn.cursor() as cur:
            for host in ("127.0.0.1", "localhost"):
                cur.execute(f"CREATE USER IF NOT EXISTS '{CDC_USER}'@'{host}' IDENTIFIED BY %s", (pw,))
                cur.execute(f"GRANT {CDC_GRANTS} ON *.* TO '{CDC_USER}'@'{host}'")

    def stop(self, kill: bool = False) -> None:
        pid = self._state("mysqld.pid")
        if not pid:
            return
        try:
            os.kill(int(pid), signal.SIGKILL if kill else signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # When this process started the server, the dead child stays a zombie
            # (and os.kill(pid, 0) keeps succeeding) until it is reaped.
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(pid), os.WNOHANG)
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        if kill:
            self.pid_file.unlink(missing_ok=True)

    def restart(self) -> None:
        port = self.port
        self.stop()
        self.port = port
        self.start()

    def destroy(self) -> None:
        self.stop(kill=True)
        shutil.rmtree(self.datadir, ignore_errors=True)

    # -- connections ---------------------------------------------------------------------
    def root_connection(self, database: str | None = None) -> pymysql.connections.Connection:
        return pymysql.connect(
            unix_socket=str(self.socket_path),
            user="root",
            database=database,
            autocommit=True,
            charset="utf8mb4",
            connect_timeout=5,
        )

    def execute(self, *statements: str, database: str | None = None) -> None:
        """Run statements as root (test and demo setup only)."""
        with self.root_connection(database) as conn, conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)

    def purge_binlogs(self, timeout: float = 30) -> str:
        """PURGE every binlog file but the current one (fault tests); returns the current file.

        MariaDB keeps a file until its binlog checkpoint has moved on, so retry until gone.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self.root_connection() as conn, conn.cursor() as cur:
                cur.execute("SHOW MASTER STATUS")
                current = cur.fetchone()[0]
                cur.execute("PURGE BINARY LOGS TO %s", (current,))
                cur.execute("SHOW BINARY LOGS")
                if [r[0] for r in cur.fetchall()] == [current]:
                    return current
            if time.monotonic() >= deadline:
                raise LocalMariaDBError(f"the server kept binlog files older than {current} for {timeout}s")
            time.sleep(0.5)

    # -- replication (failover tests and the chaos failover scenario) --------------------
    def replicate_from(self, primary: LocalMariaDB) -> None:
        """Make this server a GTID replica of ``primary``, from the start of its binlog.

        Start this server with ``--log-slave-updates`` so that it logs what it applies and
        can be promoted, and with the primary's ``cdc_password`` (the login binlake uses on
        both, as it would after a real failover).
        """
        self.execute("STOP SLAVE", "RESET SLAVE ALL", "RESET MASTER", "SET GLOBAL gtid_slave_pos = ''")
        with self.root_connection() as conn, conn.cursor() as cur:
            cur.execute(
                "CHANGE MASTER TO master_host = '127.0.0.1', master_port = %s, master_user = %s, "
                "master_password = %s, master_use_gtid = slave_pos",
                (primary.port, CDC_USER, primary.cdc_password),
            )
            cur.execute("START SLAVE")

    def gtid_binlog_pos(self) -> str:
        with self.root_connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            return str(cur.fetchone()[0] or "")

    def wait_replicated(self, position: str, timeout: float = 60) -> None:
        """Wait until this replica has applied the primary's GTID position ``position``."""
        with self.root_connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (position, timeout))
            if cur.fetchone()[0] != 0:
                cur.execute("SHOW SLAVE STATUS")
                status = dict(zip([d[0] for d in cur.description], cur.fetchone() or ()))
                raise LocalMariaDBError(
                    f"replica did not reach GTID {position} in {timeout}s: "
                    f"{status.get('Last_Error') or status.get('Last_IO_Error')}"
                )

    def promote(self) -> None:
        """Stop replicating and forget the primary: this server is a primary now."""
        self.execute("STOP SLAVE", "RESET SLAVE ALL")

    def config_yaml(self, lakehouse: str, tables: list[str], server_id: int = 5401, **sections: dict) -> str:
        """A ``binlake.yml`` pointing at this server, with the password from ``$MYSQL_PASSWORD``."""
        import yaml

        doc: dict = {
            "source": {
                "host": "127.0.0.1",
                "port": self.port,
                "user": CDC_USER,
                "password": "${MYSQL_PASSWORD}",
                "server_id": server_id,
                "tables": tables,
            },
            "lakehouse": {"path": lakehouse},
        }
        for name, values in sections.items():
            doc.setdefault(name, {}).update(values)
        return yaml.safe_dump(doc, sort_keys=False)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m binlake.devtools.mariadb", description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["up", "down", "env", "destroy"])
    ap.add_argument("--dir", default=".local/mariadb", help="datadir and state (default: .local/mariadb)")
    ns = ap.parse_args(argv)
    db = LocalMariaDB(Path(ns.dir))
    try:
        if ns.action == "up":
            db.start()
            print(
                f"MariaDB running on 127.0.0.1:{db.port} (datadir {db.datadir}); user {CDC_USER}, password in "
                f"{db.datadir / 'cdc_password'}"
            )
        elif ns.action == "down":
            db.stop()
            print("MariaDB stopped")
        elif ns.action == "destroy":
            db.destroy()
            print("MariaDB stopped and its datadir removed")
        else:
            if not db.is_running():
                print("MariaDB is not running: run 'make mysql-up'", file=sys.stderr)
                return 1
            print(f"export MYSQL_PORT={db._state('port')}")
            print(f"export MYSQL_PASSWORD={db.cdc_password}")
    except LocalMariaDBError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
