"""Secrets, the runtime and the ``binlake-job`` entry point, against a local HTTP server that
answers like the Databricks REST API (no SDK mocks: the real WorkspaceClient talks to it)."""

from __future__ import annotations

import base64
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.service.workspace import GetSecretResponse

from binlake.config import Secret, load_config_text
from binlake.config.secrets import resolve_secret
from binlake.deploy.entrypoints import parse_job_args, run_job
from binlake.deploy.runtime import Runtime, RuntimeKind, current_runtime
from binlake.errors import ConfigError, DatabricksApiError, SecretError

PASSWORD = "s3cr3t-Pw-9c1d"


class FakeWorkspace:
    """Secrets API: GET /api/2.0/secrets/get answers from ``secrets``; ``status`` forces errors."""

    def __init__(self):
        self.secrets: dict[tuple[str, str], str] = {}
        self.forced: tuple[int, dict] | None = None
        self.requests: list[str] = []
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def client(self) -> WorkspaceClient:
        return WorkspaceClient(host=self.host, token="x")

    def put(self, scope: str, key: str, value: str) -> None:
        self.secrets[(scope, key)] = base64.b64encode(value.encode()).decode()

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urlparse(self.path)
                if url.path.startswith("/api/"):  # not the SDK's host-metadata probe
                    fake.requests.append(url.path)
                if url.path != "/api/2.0/secrets/get":
                    return self._send(404, {"error_code": "ENDPOINT_NOT_FOUND", "message": "no such endpoint"})
                if fake.forced:
                    return self._send(*fake.forced)
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                value = fake.secrets.get((q["scope"], q["key"]))
                if value is None:
                    return self._send(
                        404,
                        {
                            "error_code": "RESOURCE_DOES_NOT_EXIST",
                            "message": f"Failed to get secret {q['key']} for scope {q['scope']}.",
                        },
                    )
                self._send(200, GetSecretResponse(key=q["key"], value=value).as_dict())

            def _send(self, status, payload):
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        return Handler

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def workspace(monkeypatch):
    fake = FakeWorkspace()
    # The default runtime builds WorkspaceClient() from the environment, as on a laptop.
    monkeypatch.setenv("DATABRICKS_HOST", fake.host)
    monkeypatch.setenv("DATABRICKS_TOKEN", "x")
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    for name in ("DATABRICKS_CONFIG_PROFILE", "DATABRICKS_CLIENT_ID", "DATABRICKS_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    yield fake
    fake.close()


class NotebookDbutils:
    """The slice of a notebook's dbutils that binlake uses: ``dbutils.secrets.get``."""

    def __init__(self, values):
        outer = values

        class Secrets:
            def get(self, scope, key):
                if (scope, key) not in outer:
                    raise RuntimeError(f"Secret does not exist with scope: {scope} and key: {key}")
                return outer[(scope, key)]

        self.secrets = Secrets()


CONFIG = """
source: {host: db.internal, user: cdc, password: "{{secrets/binlake/mysql-cdc}}", server_id: 5401, tables: ["shop.*"]}
lakehouse: {catalog: main, system_path: /Volumes/main/binlake_bronze/binlake_system}
"""


# ---------------------------------------------------------------------------------------------
# resolve_secret


def test_a_secret_reference_in_the_config_is_resolved_through_the_secrets_api(workspace):
    workspace.put("binlake", "mysql-cdc", PASSWORD)
    config = load_config_text(CONFIG)
    assert config.source.password.reveal() == PASSWORD
    assert "/api/2.0/secrets/get" in workspace.requests


def test_the_api_value_is_base64_decoded_to_text(workspace):
    workspace.put("s", "k", "pä$$ wörd")
    assert resolve_secret("s", "k", client=workspace.client()) == "pä$$ wörd"


def test_a_missing_secret_names_scope_key_and_the_command_that_creates_it(workspace):
    with pytest.raises(SecretError) as exc:
        resolve_secret("binlake", "mysql-cdc", client=workspace.client())
    assert str(exc.value) == (
        "Databricks secret binlake/mysql-cdc does not exist: create it with "
        "`databricks secrets put-secret binlake mysql-cdc` (first `databricks secrets create-scope binlake` "
        "if the scope is new), or change the reference in binlake.yml (source.password, source.mask_salt)"
    )
    assert exc.value.exit_code == 2, "a secret problem is a config problem"


def test_a_denied_secret_says_which_acl_to_grant(workspace):
    workspace.forced = (403, {"error_code": "PERMISSION_DENIED", "message": "User does not have READ permission"})
    with pytest.raises(
        SecretError,
        match=r"^not allowed to read Databricks secret binlake/pw: grant READ .* "
        r"`databricks secrets put-acl binlake <principal> READ`$",
    ):
        resolve_secret("binlake", "pw", client=workspace.client())


def test_rejected_credentials_say_how_to_renew_them(workspace):
    workspace.forced = (401, {"error_code": "UNAUTHENTICATED", "message": "Invalid access token"})
    with pytest.raises(SecretError, match="rejected the credentials; renew DATABRICKS_TOKEN"):
        resolve_secret("binlake", "pw", client=workspace.client())


def test_a_value_that_is_not_base64_is_refused_without_showing_it(workspace):
    workspace.secrets[("s", "k")] = "not base64 !!"
    with pytest.raises(SecretError) as exc:
        resolve_secret("s", "k", client=workspace.client())
    assert "not base64 !!" not in str(exc.value)
    assert exc.value.__cause__ is None
    assert exc.value.__suppress_context__


def test_an_empty_secret_is_refused(workspace):
    workspace.put("s", "k", "")
    with pytest.raises(SecretError, match=r"^Databricks secret s/k is empty: store the MySQL password with"):
        resolve_secret("s", "k", client=workspace.client())


@pytest.mark.parametrize(("scope", "key"), [("", "k"), ("a/b", "k"), ("s", "k y"), ("s", "x" * 129)])
def test_malformed_names_are_refused_before_any_request(workspace, scope, key):
    with pytest.raises(SecretError, match=r"is not a valid name: use letters, digits"):
        resolve_secret(scope, key, client=workspace.client())
    assert workspace.requests == []


def test_the_value_never_reaches_the_log(workspace, caplog):
    workspace.put("binlake", "mysql-cdc", PASSWORD)
    with caplog.at_level(logging.DEBUG):
        resolve_secret("binlake", "mysql-cdc")
    assert "binlake/mysql-cdc" in caplog.text
    assert PASSWORD not in caplog.text
    assert PASSWORD not in repr(load_config_text(CONFIG))


def test_in_a_notebook_dbutils_reads_the_secret_and_no_request_is_made(workspace):
    dbutils = NotebookDbutils({("binlake", "mysql-cdc"): PASSWORD})
    runtime = current_runtime(environ={"DATABRICKS_RUNTIME_VERSION": "17.3"}, dbutils=dbutils)
    assert runtime.kind is RuntimeKind.DATABRICKS_NOTEBOOK
    assert runtime.secret("binlake", "mysql-cdc") == PASSWORD
    assert workspace.requests == []


def test_a_missing_notebook_secret_gets_the_same_message_as_through_the_api():
    with pytest.raises(SecretError, match=r"^Databricks secret binlake/nope does not exist: create it with"):
        resolve_secret("binlake", "nope", dbutils=NotebookDbutils({}))


def test_without_any_databricks_auth_the_error_says_what_to_set(monkeypatch, tmp_path):
    for name in ("DATABRICKS_HOST", "DATABRICKS_TOKEN", "DATABRICKS_CONFIG_PROFILE", "DATABRICKS_RUNTIME_VERSION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.databrickscfg
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(tmp_path / "none.cfg"))
    with pytest.raises(SecretError) as exc:
        resolve_secret("binlake", "mysql-cdc")
    assert str(exc.value) == (
        "cannot read Databricks secret binlake/mysql-cdc: no Databricks authentication is configured here; "
        "set DATABRICKS_HOST and DATABRICKS_TOKEN (or DATABRICKS_CONFIG_PROFILE), or run `databricks auth login`"
    )


# ---------------------------------------------------------------------------------------------
# the runtime


def test_the_runtime_is_local_off_databricks_and_a_job_on_a_cluster_without_a_notebook():
    assert current_runtime(environ={}).kind is RuntimeKind.LOCAL
    assert current_runtime(environ={"DATABRICKS_RUNTIME_VERSION": "17.3"}).kind is RuntimeKind.DATABRICKS_JOB


def test_on_databricks_a_local_lakehouse_path_is_refused_with_the_fix():
    runtime = Runtime(RuntimeKind.DATABRICKS_JOB)
    cfg = load_config_text(
        CONFIG.replace("{{secrets/binlake/mysql-cdc}}", "pw").replace(
            "{catalog: main, system_path: /Volumes/main/binlake_bronze/binlake_system}", "{path: /tmp/lake}"
        )
    )
    with pytest.raises(
        ConfigError, match=r"^lakehouse.path '/tmp/lake' is a local directory but binlake runs on Databricks"
    ):
        runtime.lakehouse(cfg)
    assert Runtime(RuntimeKind.LOCAL).lakehouse(cfg).root == "/tmp/lake"


def test_on_databricks_the_system_files_must_be_on_a_volume():
    cfg = load_config_text(
        CONFIG.replace("{{secrets/binlake/mysql-cdc}}", "pw").replace(
            "/Volumes/main/binlake_bronze/binlake_system", "dbfs:/tmp/cp"
        )
    )
    with pytest.raises(ConfigError, match=r"lakehouse.system_path 'dbfs:/tmp/cp' is not a Unity Catalog volume"):
        Runtime(RuntimeKind.DATABRICKS_JOB).lakehouse(cfg)
    lake = Runtime(RuntimeKind.DATABRICKS_JOB).lakehouse(
        load_config_text(CONFIG.replace("{{secrets/binlake/mysql-cdc}}", "pw"))
    )
    assert lake.changelog.name == "`main`.`bronze`.`changelog`"
    assert lake.silver("shop", "orders").name == "`main`.`silver`.`shop__orders`"
    assert lake.system_dir("continuous") == "/Volumes/main/binlake_bronze/binlake_system/continuous"


# ---------------------------------------------------------------------------------------------
# binlake-job


BUNDLE_ARGS = [
    "--catalog=main",
    "--bronze-schema=binlake_bronze",
    "--silver-schema=binlake_silver",
    "--gold-schema=binlake_gold",
    "--system-path=/Volumes/main/binlake_bronze/binlake_system",
    "--mysql-host=db.internal",
    "--mysql-port=3306",
    "--mysql-user=cdc",
    "--mysql-server-id=5401",
    "--mysql-password-secret=binlake/mysql-cdc",
    "--tables=shop.*,crm.customers",
]


def test_the_job_flags_become_the_config_the_cli_reads_with_the_password_as_a_reference(workspace):
    workspace.put("binlake", "mysql-cdc", PASSWORD)
    inv = parse_job_args([*BUNDLE_ARGS, "capture", "--until-now"])
    assert inv.cli_args == ("capture", "--until-now")
    assert PASSWORD not in inv.config_yaml
    assert "{{secrets/binlake/mysql-cdc}}" in inv.config_yaml
    cfg = load_config_text(inv.config_yaml)
    assert cfg.source.tables == ("shop.*", "crm.customers")
    assert cfg.source.server_id == 5401
    assert cfg.lakehouse.gold_schema == "binlake_gold"
    assert cfg.source.password.reveal() == PASSWORD


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["snapshot", "--table-list="], ("snapshot",)),
        (
            ["snapshot", "--table-list=shop.a, shop.b", "--reset-capture-if=true"],
            ("snapshot", "--table", "shop.a", "--table", "shop.b", "--reset-capture"),
        ),
        (["verify", "--repair-if=false", "--table-list="], ("verify",)),
        (["verify", "--repair-if=TRUE"], ("verify", "--repair")),
    ],
)
def test_job_parameters_arrive_as_text_and_become_cli_flags(args, expected):
    assert parse_job_args([*BUNDLE_ARGS, *args]).cli_args == expected


def test_a_job_parameter_that_was_not_substituted_is_refused():
    with pytest.raises(ConfigError, match=r"^--repair-if=\{\{job.parameters.repair\}\} was not substituted"):
        parse_job_args([*BUNDLE_ARGS, "verify", "--repair-if={{job.parameters.repair}}"])
    with pytest.raises(ConfigError, match=r"^--repair-if must be true or false, got 'maybe'"):
        parse_job_args([*BUNDLE_ARGS, "verify", "--repair-if=maybe"])


def test_a_secret_flag_that_is_not_scope_slash_key_is_refused():
    args = [
        a if not a.startswith("--mysql-password-secret") else "--mysql-password-secret=binlake" for a in BUNDLE_ARGS
    ]
    with pytest.raises(ConfigError, match=r"^--mysql-password-secret 'binlake' is not SCOPE/KEY"):
        parse_job_args([*args, "gold"])


def test_settings_file_supplies_the_other_sections_and_flags_win(tmp_path):
    settings = tmp_path / "binlake.yml"
    settings.write_text("snapshot: {chunk_size: 1000}\nsource: {host: old-host, port: 3307}\n")
    inv = parse_job_args(["--settings", str(settings), *BUNDLE_ARGS, "silver"])
    cfg = load_config_text(inv.config_yaml.replace("'{{secrets/binlake/mysql-cdc}}'", "pw"))
    assert cfg.snapshot.chunk_size == 1000
    assert cfg.source.host == "db.internal"
    assert cfg.source.port == 3306


def test_print_config_shows_the_generated_file_without_running(capsys):
    assert run_job(parse_job_args(["--print-config", *BUNDLE_ARGS, "status"])) == 0
    out = capsys.readouterr().out
    assert out.startswith("source:\n")
    assert "catalog: main" in out


def test_a_job_on_databricks_with_a_local_path_fails_before_touching_anything(capsys, tmp_path):
    args = [
        "--lakehouse-path",
        str(tmp_path / "lake"),
        "--mysql-host=h",
        "--mysql-user=u",
        "--mysql-server-id=9",
        "--mysql-password-env=PW",
        "--tables=a.*",
        "status",
    ]
    with pytest.raises(ConfigError, match="is a local directory but binlake runs on Databricks"):
        run_job(parse_job_args(args), runtime=Runtime(RuntimeKind.DATABRICKS_JOB))
    assert not (tmp_path / "lake").exists()


def test_the_console_script_exits_with_the_failure_code_and_one_line(capsys, monkeypatch, tmp_path):
    from binlake.deploy.entrypoints import main

    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "--lakehouse-path",
                str(tmp_path),
                "--mysql-host=h",
                "--mysql-user=u",
                "--mysql-server-id=9",
                "--mysql-password-env=PW",
                "--tables=a.*",
                "status",
            ]
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: lakehouse.path ")
    assert err.count("\n") == 1


def test_no_databricks_auth_for_jobs_status_is_a_databricks_api_error(monkeypatch, tmp_path):
    for name in ("DATABRICKS_HOST", "DATABRICKS_TOKEN", "DATABRICKS_CONFIG_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(tmp_path / "none.cfg"))
    with pytest.raises(DatabricksApiError, match=r"^cannot list the bundle's jobs: no Databricks authentication"):
        Runtime(RuntimeKind.LOCAL).workspace_client(purpose="list the bundle's jobs")


def test_a_relative_lakehouse_path_in_the_settings_file_stays_relative_to_that_file(tmp_path):
    (tmp_path / "conf").mkdir()
    settings = tmp_path / "conf" / "binlake.yml"
    settings.write_text(
        "source: {host: h, user: u, password: pw, server_id: 9, tables: [a.*]}\nlakehouse: {path: ../lake}\n"
    )
    inv = parse_job_args(["--settings", str(settings), "status"])
    assert inv.settings["lakehouse"]["path"] == str(tmp_path / "lake")


def test_an_unreachable_workspace_is_a_secret_error_not_a_traceback():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from databricks.sdk.core import Config as SdkConfig

    client = WorkspaceClient(config=SdkConfig(host=f"http://127.0.0.1:{port}", token="x", retry_timeout_seconds=1))
    with pytest.raises(SecretError, match=r"^cannot read Databricks secret s/k: the workspace cannot be reached"):
        resolve_secret("s", "k", client=client)


def test_the_config_file_is_read_as_binlake_config_reads_it_and_the_bundle_s_flags_override_its_lakehouse(tmp_path):
    conf = tmp_path / "files" / "binlake.yml"
    (conf.parent / "expectations").mkdir(parents=True)
    (conf.parent / "expectations" / "o.json").write_text(
        '{"expectations": [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}}]}'
    )
    conf.write_text(CONFIG + "gold: {expectations: {shop.orders: expectations/o.json}}\nsnapshot: {chunk_size: 1000}\n")
    inv = parse_job_args(
        [f"--config={conf}", "--catalog=dev", "--silver-schema=dev_me_silver", "--job-id=7", "--job-run-id=8", "gold"]
    )
    cfg = inv.config()
    assert (cfg.lakehouse.catalog, cfg.lakehouse.silver_schema, cfg.lakehouse.gold_schema) == (
        "dev",
        "dev_me_silver",
        "gold",
    )
    assert cfg.snapshot.chunk_size == 1000
    assert cfg.gold.suite("shop", "orders")
    assert cfg.source.password == Secret.reference("binlake", "mysql-cdc")
    assert (inv.job_id, inv.job_run_id, inv.cli_args) == ("7", "8", ("gold",))


def test_config_and_its_older_name_settings_are_one_or_the_other_and_a_missing_file_says_what_syncs_it(tmp_path):
    with pytest.raises(ConfigError, match=r"^--config and --settings both name a file"):
        parse_job_args(["--config=a.yml", "--settings=b.yml", "gold"])
    with pytest.raises(ConfigError, match=r"^--config file '/nowhere/binlake.yml' not found: the bundle syncs"):
        parse_job_args(["--config=/nowhere/binlake.yml", "gold"])
    # An empty value, as an older bundle passes for an unset variable, is no file.
    assert parse_job_args([*BUNDLE_ARGS, "--settings=", "gold"]).origin is None
