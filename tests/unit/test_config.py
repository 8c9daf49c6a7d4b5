"""binlake.yml: every bad value is refused on load with a one-line message naming the key and
the fix; the README's example loads as written; the README's quickstart commands exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from binlake.config import (
    PurgePolicy,
    Secret,
    Severity,
    StartupMode,
    load_config,
    load_config_text,
)
from binlake.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
ENV = {"MYSQL_PASSWORD": "pw-from-env"}


def doc(**sections) -> dict:
    """A minimal valid config, with sections (or single keys as 'section.key') overridden."""
    d = {
        "source": {
            "host": "127.0.0.1",
            "port": 3306,
            "user": "cdc",
            "password": "${MYSQL_PASSWORD}",
            "server_id": 5401,
            "tables": ["shop.*"],
        },
        "lakehouse": {"path": ".local/lakehouse"},
    }
    for name, value in sections.items():
        if "__" in name:
            section, key = name.split("__", 1)
            if value is _DROP:
                d[section].pop(key)
            else:
                d.setdefault(section, {})[key] = value
        else:
            d[name] = value
    return d


_DROP = object()


def load(d: dict, environ=ENV):
    return load_config_text(yaml.safe_dump(d, sort_keys=False), environ=environ, origin="binlake.yml")


def refused(d: dict, environ=ENV) -> str:
    with pytest.raises(ConfigError) as info:
        load(d, environ)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_minimal_config_loads_with_documented_defaults():
    cfg = load(doc())
    assert cfg.source.port == 3306
    assert cfg.source.server_id == 5401
    assert cfg.source.password == Secret("pw-from-env")
    assert cfg.snapshot.chunk_size == 50000
    assert cfg.snapshot.parallelism == 2
    assert cfg.snapshot.wave_size == 32
    assert cfg.capture.startup is StartupMode.INITIAL
    assert cfg.capture.on_purge is PurgePolicy.FAIL
    assert cfg.source.captures("shop", "orders")
    assert not cfg.source.captures("crm", "orders")


def test_the_password_never_shows_in_the_configs_repr():
    cfg = load(doc())
    assert "pw-from-env" not in repr(cfg)
    assert "pw-from-env" not in str(cfg.source)
    assert cfg.source.password.reveal() == "pw-from-env"


@pytest.mark.parametrize(
    ("d", "message"),
    [
        (
            dict(sources={}),
            "unknown top-level key 'sources' in binlake.yml: allowed are capture, gold, health, history, lakehouse, "
            "maintenance, snapshot, source",
        ),
        (
            dict(source__hots="x"),
            "unknown key source.hots: allowed keys are archive, chunk_keys, columns, connect_timeout, exclude, host, "
            "mask_salt, password, port, server_id, tables, tls, user",
        ),
        (
            dict(snapshot={"chunksize": 10}),
            "unknown key snapshot.chunksize: allowed keys are chunk_size, chunks_per_commit, parallelism",
        ),
        (
            dict(source__tls={"ca_file": "x"}),
            "unknown key source.tls.ca_file: allowed keys are ca, cert, key, verify_identity",
        ),
        (
            dict(gold={"checks": {"shop.t": [{"column": "a", "not_null": True, "level": "warn"}]}}),
            "unknown key gold.checks.shop.t[0].level: allowed keys are between, column, not_null, regex, row_count, "
            "severity, values",
        ),
    ],
    ids=["top-level", "source", "snapshot", "tls", "check"],
)
def test_unknown_keys_are_refused_with_the_allowed_ones(d, message):
    assert refused(doc(**d)) == message


@pytest.mark.parametrize(
    ("d", "message"),
    [
        (dict(source__port="abc"), "source.port must be a whole number, got 'abc'"),
        (dict(source__server_id=True), "source.server_id must be a whole number, got True"),
        (
            dict(source__port=70000),
            "source.port must be between 1 and 65535, got 70000: set the server's TCP port, e.g. 3306",
        ),
        (
            dict(source__server_id=0),
            "source.server_id must be between 1 and 4294967231, got 0: pick a number no other "
            "replica or binlog reader of this server uses",
        ),
        (dict(source__tables={"shop": "*"}), 'source.tables must be a list of strings, e.g. ["shop.*"]'),
        (dict(source__tables=[]), 'source.tables is empty: list include patterns such as ["shop.*", "crm.customers"]'),
        (dict(source__host=["a"]), "source.host must be a string, got list"),
        (dict(source="x"), "source must be a mapping of keys, got str"),
        (
            dict(snapshot={"chunk_size": 0}),
            "snapshot.chunk_size must be between 1 and 10000000 rows, got 0: 50000 is a good start",
        ),
        (
            dict(source__tls={"ca": None, "verify_identity": "yes"}),
            "source.tls.verify_identity must be true or false, got 'yes'",
        ),
    ],
    ids=[
        "port-text",
        "server-id-bool",
        "port-range",
        "server-id-range",
        "tables-map",
        "tables-empty",
        "host-list",
        "section-scalar",
        "chunk-size",
        "verify-identity",
    ],
)
def test_wrong_types_and_ranges_are_refused(d, message):
    assert refused(doc(**d)) == message


def test_a_missing_password_says_how_to_provide_one():
    message = (
        "source.password is missing: set password: ${MYSQL_PASSWORD} (and export it) or a Databricks "
        "secret reference {{secrets/scope/key}}"
    )
    assert refused(doc(source__password=_DROP)) == message
    assert refused(doc(source__password="")) == message


def test_an_empty_password_from_the_environment_is_refused():
    assert refused(doc(), environ={"MYSQL_PASSWORD": ""}).startswith("source.password is missing: set password:")


def test_an_unset_environment_variable_is_named():
    assert refused(doc(), environ={}) == (
        "source.password references ${MYSQL_PASSWORD} but the environment variable MYSQL_PASSWORD is not set: export it"
    )
    assert refused(doc(source__host="${DB_HOST}")) == (
        "source.host references ${DB_HOST} but the environment variable DB_HOST is not set: export it"
    )


def test_environment_variables_are_expanded_inside_values():
    cfg = load(doc(source__host="${DB_HOST}.internal"), environ={**ENV, "DB_HOST": "mysql-1"})
    assert cfg.source.host == "mysql-1.internal"


@pytest.mark.parametrize("pattern", ["shop", "shop.orders.2024", "shop. orders", ".orders", "shop."])
def test_a_table_pattern_must_be_db_dot_table(pattern):
    assert refused(doc(source__tables=[pattern])) == (
        f'source.tables entry {pattern!r} is not a db.table pattern: write it as "db.table", "db.*" or "db.prefix_*"'
    )


@pytest.mark.parametrize("pattern", ["my db.order items", "données.çà", "shop.select", "it's.`odd`"])
def test_names_with_inner_spaces_quotes_and_unicode_are_patterns_too(pattern):
    assert load(doc(source__tables=[pattern])).source.tables == (pattern,)


def test_exclude_patterns_are_checked_and_applied():
    assert refused(doc(source__exclude=["audit"])).startswith("source.exclude entry 'audit' is not a db.table pattern")
    cfg = load(doc(source__exclude=["shop.tmp_*"]))
    assert cfg.source.captures("shop", "orders")
    assert not cfg.source.captures("shop", "tmp_orders")


def test_chunk_keys_need_db_table_and_columns():
    assert refused(doc(source__chunk_keys={"audit": ["id"]})) == (
        "source.chunk_keys entry 'audit' must map db.table to a non-empty list of unique NOT NULL columns"
    )
    assert (
        refused(doc(source__chunk_keys={"shop.audit": [1]}))
        == "source.chunk_keys.shop.audit must be a list of column names"
    )
    assert load(doc(source__chunk_keys={"shop.audit": "uuid"})).source.chunk_keys == {"shop.audit": ("uuid",)}


@pytest.mark.parametrize(
    ("capture", "message"),
    [
        ({"startup": "sometimes"}, "capture.startup is 'sometimes': use one of initial, latest, position, timestamp"),
        (
            {"startup": "position"},
            'capture.startup is "position" but capture.start_position is missing or not FILE:POS: '
            'set it like "mysql-bin.000003:4"',
        ),
        (
            {"startup": "position", "start_position": "mysql-bin:4"},
            'capture.startup is "position" but capture.start_position is missing or not FILE:POS: set it like '
            '"mysql-bin.000003:4"',
        ),
        (
            {"startup": "timestamp"},
            'capture.startup is "timestamp" but capture.start_timestamp is missing: '
            'set an ISO-8601 time with a zone, e.g. "2026-11-01T00:00:00Z"',
        ),
        (
            {"startup": "timestamp", "start_timestamp": "yesterday"},
            "capture.start_timestamp 'yesterday' is not ISO-8601: write it like 2026-11-01T00:00:00Z",
        ),
        (
            {"startup": "timestamp", "start_timestamp": "2026-11-01T00:00:00"},
            "capture.start_timestamp '2026-11-01T00:00:00' has no time zone: add Z or +HH:MM",
        ),
        ({"on_purge": "ignore"}, "capture.on_purge is 'ignore': use one of fail, resnapshot, archive"),
        (
            {"on_purge": "archive"},
            "capture.on_purge is archive but capture.archive is not set: set it to the directory your "
            "archive keeper (mysqlbinlog --read-from-remote-server --raw --stop-never) writes",
        ),
        ({"max_batch_rows": 0}, "capture.max_batch_rows must be >= 1, got 0"),
    ],
    ids=[
        "mode",
        "position-missing",
        "position-format",
        "timestamp-missing",
        "timestamp-format",
        "timestamp-zone",
        "on-purge",
        "on-purge-archive-without-archive",
        "batch",
    ],
)
def test_bad_startup_settings_are_refused(capture, message):
    assert refused(doc(capture=capture)) == message


def test_good_startup_settings_load():
    cfg = load(doc(capture={"startup": "POSITION", "start_position": "mysql-bin.000003:4"}))
    assert cfg.capture.startup is StartupMode.POSITION
    assert cfg.capture.start_position == "mysql-bin.000003:4"
    cfg = load(doc(capture={"startup": "timestamp", "start_timestamp": "2026-11-01T00:00:00+02:00"}))
    assert cfg.capture.startup is StartupMode.TIMESTAMP


def test_tls_files_must_exist_and_a_client_cert_needs_its_key(tmp_path):
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "client.pem", "client-key.pem"))
    for f in (ca, cert, key):
        f.write_text("PEM")
    assert refused(doc(source__tls={"ca": str(tmp_path / "nope.pem")})) == (
        f"source.tls.ca file {str(tmp_path / 'nope.pem')!r} does not exist: point it at the PEM file"
    )
    assert refused(doc(source__tls={"ca": str(ca), "cert": str(cert)})) == (
        "source.tls.cert and source.tls.key go together: set both for client certificates, or neither"
    )
    assert refused(doc(source__tls={"cert": str(cert), "key": str(key)})) == (
        "source.tls.cert is set but source.tls.ca is not: set ca to the server's CA certificate"
    )
    tls = load(doc(source__tls={"ca": str(ca), "cert": str(cert), "key": str(key)})).source.tls
    assert tls.enabled
    assert tls.verify_identity
    assert tls.key == str(key)


def test_the_lakehouse_needs_exactly_one_location():
    both = (
        "lakehouse needs exactly one of path (local Delta directory, e.g. .local/lakehouse) "
        "or catalog (Unity Catalog name on Databricks)"
    )
    assert refused(doc(lakehouse={"path": "x", "catalog": "main"})) == both
    assert refused(doc(lakehouse={})) == both
    no_section = doc()
    del no_section["lakehouse"]
    assert refused(no_section) == "binlake.yml has no 'lakehouse' section: add it (see README, Configuration)"
    assert refused(doc(lakehouse={"catalog": "main"})) == (
        "lakehouse.system_path is required with lakehouse.catalog: set a Unity Catalog volume path such as "
        "/Volumes/main/binlake/system"
    )


def test_binlake_s_own_tables_get_a_schema_of_their_own_named_once_per_layer():
    uc = {"catalog": "main", "system_path": "/Volumes/main/b/s"}
    assert load(doc(lakehouse=uc)).lakehouse.system_schema == "binlake_system"
    assert load(doc(lakehouse={**uc, "system_schema": "ops"})).lakehouse.system_schema == "ops"
    assert refused(doc(lakehouse={**uc, "system_schema": "gold"})) == (
        "lakehouse.system_schema and lakehouse.gold_schema are both 'gold': each layer needs a schema of its own "
        "(a table of one would take the name of another's)"
    )
    # Locally each layer is a folder anyway: the names are not used.
    assert load(doc(lakehouse={"path": "x", "gold_schema": "silver"})).lakehouse.gold_schema == "silver"


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (
            [{"column": "sku", "regex": "([a-z"}],
            "gold.checks.shop.products[0].regex is not a valid regular expression (unterminated character set at "
            "position 1): fix the pattern",
        ),
        (
            [{"column": "price", "between": [0]}],
            "gold.checks.shop.products[0].between must be a list [min, max] (use null for an open end)",
        ),
        (
            [{"column": "price"}],
            "gold.checks.shop.products[0] needs exactly one of between, values, regex, not_null, row_count",
        ),
        ([{"between": [0, 1]}], "gold.checks.shop.products[0] (between) needs a column"),
        (
            [{"column": "a", "not_null": True, "severity": "panic"}],
            "gold.checks.shop.products[0].severity is 'panic': use one of warn, drop, fail",
        ),
        ({"column": "a"}, "gold.checks.shop.products must be a list of rules"),
    ],
    ids=["regex", "between", "no-kind", "no-column", "severity", "not-a-list"],
)
def test_bad_gold_checks_are_refused(rules, message):
    assert refused(doc(gold={"checks": {"shop.products": rules}})) == message


def test_a_check_key_must_be_db_table():
    assert refused(doc(gold={"checks": {"products": []}})) == "gold.checks key 'products' is not db.table"


def test_invalid_yaml_names_the_line():
    with pytest.raises(ConfigError) as info:
        load_config_text("source: {host: [\n", environ=ENV, origin="binlake.yml")
    assert re.fullmatch(r"binlake\.yml is not valid YAML at line \d+, column \d+: fix the syntax", str(info.value))


@pytest.mark.parametrize("text", ["- source\n", "just text\n", "42\n"], ids=["list", "string", "number"])
def test_a_file_that_is_not_a_mapping_names_every_section(text):
    """The eight top-level sections of docs/configuration.md, the two required ones first."""
    with pytest.raises(ConfigError) as info:
        load_config_text(text, environ=ENV, origin="binlake.yml")
    assert str(info.value) == (
        "binlake.yml must be a YAML mapping with the sections source, lakehouse "
        "(and optionally snapshot, capture, gold, maintenance, health, history)"
    )


def test_a_missing_file_says_to_pass_config(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yml")
    assert (
        str(info.value)
        == f"config file {str(tmp_path / 'nope.yml')!r} not found: pass --config PATH to an existing binlake.yml"
    )


def test_a_relative_lakehouse_path_resolves_next_to_the_config_file(tmp_path):
    (tmp_path / "binlake.yml").write_text(yaml.safe_dump(doc()))
    cfg = load_config(tmp_path / "binlake.yml", environ=ENV)
    assert cfg.lakehouse_root == str((tmp_path / ".local/lakehouse").resolve())


# ---------------------------------------------------------------------------------------
# the README


def _readme() -> str:
    path = ROOT / "README.md"
    assert path.is_file(), "README.md is missing: the lead writes it; these tests check its example and commands"
    return path.read_text()


def test_the_readme_config_example_loads_as_written(tmp_path):
    text = _readme()
    section = text.split("## Configuration", 1)
    assert len(section) == 2, "README.md has no '## Configuration' section with the binlake.yml example"
    blocks = re.findall(r"```yaml\n(.*?)```", section[1], re.S)
    assert blocks, "README.md's Configuration section has no ```yaml block"
    # The suite file the example names is the README's own suite example.
    suites = re.findall(r"```json\n(.*?)```", section[1], re.S)
    assert suites, "README.md's Configuration section has no ```json expectation suite"
    (tmp_path / "expectations").mkdir()
    (tmp_path / "expectations" / "shop_orders.json").write_text(suites[0])
    cfg = load_config_text(blocks[0], environ=ENV, origin="README example", base_dir=str(tmp_path))
    assert cfg.source.tables == ("shop.*", "crm.customers")
    assert [r.severity for r in cfg.gold.checks["shop.products"]] == [Severity.DROP, Severity.FAIL]
    assert [e.severity for e in cfg.gold.suite("shop", "orders")] == [Severity.DROP, Severity.FAIL, Severity.WARN]


def test_the_readme_quickstart_commands_are_make_targets_and_ci_runs_make_test():
    text = _readme()
    for command in ("make demo", "make test"):
        assert command in text, f"README.md does not mention {command!r} in its quickstart"
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", makefile, re.M))
    assert {"demo", "test"} <= targets, f"Makefile lacks targets {sorted({'demo', 'test'} - targets)}"
    ci = (ROOT / ".ci/run").read_text()
    assert re.search(r"^\s*make test\b", ci, re.M), ".ci/run must run exactly what a user runs: make test"


def test_publish_groups_default_to_one_per_database_and_configured_groups_come_first():
    cfg = load(doc(gold={"groups": {"orders": ["shop.orders", "shop.order_*"], "people": ["crm.*", "shop.customers"]}}))
    assert cfg.gold.groups == {"orders": ("shop.orders", "shop.order_*"), "people": ("crm.*", "shop.customers")}
    group = cfg.gold.group_of
    assert (group("shop", "orders"), group("shop", "order_lines"), group("shop", "customers")) == (
        "orders",
        "orders",
        "people",
    )
    assert (group("shop", "items"), group("crm", "accounts"), group("billing", "invoices")) == (
        "shop",
        "people",
        "billing",
    )
    assert load(doc()).gold.group_of("shop", "items") == "shop"


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        (
            ["shop.*"],
            'gold.groups must map a group name to a list of "db.table" patterns, e.g. {orders: ["shop.orders", '
            '"shop.order_lines"]}',
        ),
        ({"orders": []}, 'gold.groups.orders must be a non-empty list of "db.table" patterns'),
        (
            {"orders": ["orders"]},
            'gold.groups.orders entry \'orders\' is not a "db.table" pattern such as "shop.orders"',
        ),
        ({"my group": ["shop.*"]}, "gold.groups name 'my group' must be letters, digits, _ . or - (e.g. orders)"),
    ],
    ids=["not-a-mapping", "empty", "not-db-table", "bad-name"],
)
def test_bad_publish_groups_are_refused(groups, message):
    assert refused(doc(gold={"groups": groups})) == message


def test_column_rules_load_in_order_with_the_salt_as_a_secret():
    cfg = load(
        doc(
            source__columns={
                "shop.customers": {"exclude": ["ssn"], "mask": {"email": "hash", "phone": None}},
                "shop.*": {"include": ["id", "name"]},
            },
            source__mask_salt="{{secrets/binlake/salt}}",
        )
    )
    first, second = cfg.source.columns
    assert first.pattern == "shop.customers"
    assert first.exclude == ("ssn",)
    assert dict(first.mask) == {"email": "hash", "phone": "null"}
    assert second.include == ("id", "name")
    assert cfg.source.mask_salt == Secret.reference("binlake", "salt")


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (
            {"shop.customers": {"exclude": "ssn"}},
            "source.columns['shop.customers'].exclude must be a list of column names",
        ),
        (
            {"shop.customers": {"hide": ["ssn"]}},
            "unknown key source.columns['shop.customers'].hide: allowed keys are exclude, include, mask, mask_key",
        ),
        ({"shop": {"exclude": ["ssn"]}}, "source.columns entry 'shop' is not a db.table pattern"),
        (
            {"shop.customers": {"mask": {"email": "hash"}}},
            "source.columns masks shop.customers.email with hash but source.mask_salt is not set",
        ),
        (
            {"shop.customers": {"mask": {"email": "blur"}}},
            "source.columns['shop.customers'].mask.email must be hash or null",
        ),
        ({"shop.customers": {"mask_key": "yes"}}, "source.columns['shop.customers'].mask_key must be true or false"),
    ],
)
def test_a_bad_column_rule_names_the_fix(columns, message):
    assert refused(doc(source__columns=columns)).startswith(message)


def test_a_gold_check_on_a_column_the_rules_drop_is_refused():
    message = refused(
        doc(
            source__columns={"shop.*": {"exclude": ["ssn"]}},
            gold={"checks": {"shop.people": [{"column": "ssn", "not_null": True}]}},
        )
    )
    assert message == (
        "gold.checks.shop.people[0] checks column ssn, which source.columns['shop.*'] drops: "
        "remove the check or keep the column"
    )


def test_history_tables_load_as_patterns_or_entries_and_the_first_match_applies():
    cfg = load(
        doc(
            history={
                "tables": [
                    "shop.orders",
                    {"table": "crm.*", "except_columns": ["updated_at"]},
                    {"table": "shop.*", "track_columns": "tier"},
                ]
            }
        )
    )
    assert cfg.history.table("shop", "orders").tracked(["id", "status"]) == ("id", "status")
    assert cfg.history.table("crm", "people").tracked(["id", "name", "updated_at"]) == ("id", "name")
    assert cfg.history.table("shop", "customers").tracked(["id", "name", "tier"]) == ("tier",)
    assert cfg.history.table("other", "t") is None
    assert load(doc()).history.tables == ()


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        (
            "shop.orders",
            'history.tables must be a list of "db.table" patterns or {table: ..., track_columns: [...]} '
            'entries, e.g. ["shop.orders"]',
        ),
        (
            ["orders"],
            'history.tables entry \'orders\' is not a db.table pattern: write it as "db.table", "db.*" or '
            '"db.prefix_*"',
        ),
        ([{"track_columns": ["a"]}], "history.tables[0] needs table: a db.table pattern such as shop.orders"),
        (
            [{"table": "shop.t", "columns": ["a"]}],
            "unknown key history.tables[0].columns: allowed keys are except_columns, table, track_columns",
        ),
        (
            [{"table": "shop.t", "track_columns": ["a"], "except_columns": ["b"]}],
            "history.tables entry 'shop.t' sets both track_columns and except_columns: keep one of them",
        ),
        (
            [{"table": "shop.t", "track_columns": []}],
            "history.tables entry 'shop.t' has an empty track_columns: list the columns whose changes open a version, "
            "or drop the key to track every column",
        ),
        (
            [{"table": "shop.t", "except_columns": [1]}],
            "history.tables[0].except_columns must be a list of column names, e.g. [status, amount]",
        ),
        (
            [7],
            'history.tables[0] must be a "db.table" pattern or a mapping such as '
            "{table: shop.orders, except_columns: [updated_at]}",
        ),
    ],
    ids=["not-a-list", "pattern", "no-table", "unknown-key", "both", "empty-track", "not-names", "not-an-entry"],
)
def test_bad_history_tables_are_refused(tables, message):
    assert refused(doc(history={"tables": tables})) == message


def test_a_history_column_the_table_lacks_is_a_config_error_naming_its_columns():
    from binlake.contract.types import Column, Kind, TableSchema
    from binlake.silver.history import HistorySpec

    schema = TableSchema("shop", "orders", (Column("id", Kind.INT, bits=32), Column("status", Kind.STRING)), ("id",))
    rule = load(doc(history={"tables": [{"table": "shop.*", "except_columns": ["stauts"]}]})).history.table(
        "shop", "orders"
    )
    with pytest.raises(
        ConfigError,
        match=r"^history.tables entry 'shop.\*': except_columns names 'stauts', which "
        r"shop.orders does not have: use its columns \(id, status\)$",
    ):
        HistorySpec.of(rule, schema)
    assert HistorySpec.of(
        load(doc(history={"tables": [{"table": "shop.*", "track_columns": ["status"]}]})).history.table(
            "shop", "orders"
        ),
        schema,
    ).tracked == ("status",)


# ---------------------------------------------------------------------------------------
# the configuration reference


def _reference_keys() -> set[str]:
    text = (ROOT / "docs" / "configuration.md").read_text()
    return set(re.findall(r"^\| `([^`]+)` \|", text, re.M))


def test_the_configuration_reference_is_generated_from_the_declarations():
    from binlake.config import reference

    path = ROOT / "docs" / "configuration.md"
    assert path.read_text() == reference(), (
        "docs/configuration.md differs from the keys binlake.config declares: "
        "regenerate it with .venv/bin/python -m binlake.config > docs/configuration.md"
    )


def test_every_key_the_readme_example_writes_is_in_the_reference_and_the_readme_links_it():
    text = _readme().split("## Configuration", 1)[1]
    example = yaml.safe_load(re.findall(r"```yaml\n(.*?)```", text, re.S)[0])
    written = {f"{section}.{key}" for section, keys in example.items() for key in keys}
    assert written - _reference_keys() == set()
    assert "(docs/configuration.md)" in text


def test_an_unknown_key_message_lists_exactly_the_keys_the_reference_has_for_its_section():
    message = refused(doc(maintenance={"vacuum_hours": 1}))
    allowed = set(message.split("allowed keys are ", 1)[1].split(", "))
    assert allowed == {k.split(".", 1)[1] for k in _reference_keys() if k.startswith("maintenance.")}


def test_an_entry_point_given_something_else_than_a_config_says_how_to_build_one():
    from binlake.config import require_config

    with pytest.raises(TypeError, match=r"^config must be a binlake.config.Config, got dict: use binlake.load_config$"):
        require_config({})
