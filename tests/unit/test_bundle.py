"""The Databricks bundle (databricks.yml + bundles/*.yml) is valid against the published bundle
JSON schema, and its cross-references hold: variables, resources, tasks, entry points, and the
files tasks read (the synced binlake.yml and the suites it names).

The schema checks structure only; `databricks bundle validate` stays the authority, but it needs
a workspace. These tests catch what a typo would break before anyone deploys.
"""

from __future__ import annotations

import copy
import fnmatch
import glob
import json
import re
import shlex
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
import tomllib
import yaml

from binlake.config import Secret, load_config
from binlake.deploy.entrypoints import parse_job_args
from binlake.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
# databricks/cli's bundle/schema/jsonschema.json, kept in the repository (tests/data/README.md).
SCHEMA_PATH = ROOT / "tests" / "data" / "databricks_bundle_schema.json"
BUNDLE_FILES = sorted((ROOT / "bundles").glob("*.yml"))
INTERPOLATION = re.compile(r"\$\{([^}]+)\}")
JOB_PARAMETER = re.compile(r"\{\{\s*job\.parameters\.([A-Za-z0-9_]+)\s*\}\}")


# ---------------------------------------------------------------------------------------------
# helpers


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _validator():
    # Test dependencies (pyproject.toml's test extra): missing, the tests fail rather than skip.
    import jsonschema
    import regex
    from jsonschema import validators

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    base = validators.validator_for(schema)

    # The schema's patterns use \p{L}, which only the `regex` module understands.
    def pattern(validator, patrn, instance, _schema):
        if validator.is_type(instance, "string") and not regex.search(patrn, instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {patrn!r}")

    cls = validators.extend(base, {"pattern": pattern})
    return cls(schema)


def _errors(document: dict) -> list[str]:
    def where(err):
        return "/".join(str(p) for p in err.absolute_path) or "<root>"

    out = []
    for err in _validator().iter_errors(document):
        # oneOf errors are unreadable at the top; the deepest context names the bad key.
        leaf = min(err.context, key=lambda e: -len(e.absolute_path), default=err) if err.context else err
        out.append(f"{where(err)}: {leaf.message}")
    return out


def _merge(into: dict, fragment: dict, origin: str) -> None:
    """Merge an included file into the root the way the CLI does: resources by type and name;
    the same resource defined twice is an error."""
    for key, value in fragment.items():
        if key == "resources":
            for rtype, items in value.items():
                bucket = into.setdefault("resources", {}).setdefault(rtype, {})
                for name, body in items.items():
                    assert name not in bucket, f"{origin}: resources.{rtype}.{name} is defined twice"
                    bucket[name] = body
        else:
            assert key not in into, f"{origin}: top-level key {key!r} is already set by another file"
            into[key] = value


@lru_cache(maxsize=1)
def _root() -> dict:
    return _load(ROOT / "databricks.yml")


def _merged() -> dict:
    root = copy.deepcopy(_root())
    for pattern in root.get("include", []):
        for path in sorted(glob.glob(str(ROOT / pattern))):
            _merge(root, _load(Path(path)), Path(path).name)
    return root


def _jobs() -> dict:
    return _merged()["resources"]["jobs"]


def _tasks():
    for job_key, job in _jobs().items():
        for task in job.get("tasks", []):
            yield job_key, task


def _strings(node, path=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, f"{path}[{i}]")
    elif isinstance(node, str):
        yield path, node


def _file_of(job_key: str) -> Path:
    for path in BUNDLE_FILES:
        if job_key in (_load(path).get("resources", {}).get("jobs") or {}):
            return path
    raise AssertionError(f"job {job_key} is in no bundles/*.yml file")


# ---------------------------------------------------------------------------------------------
# the schema


def test_the_schema_is_kept_in_the_repository():
    """Every checkout validates the bundle: a schema missing is a failure, never a skip."""
    assert SCHEMA_PATH.is_relative_to(ROOT)
    assert SCHEMA_PATH.is_file()
    assert "resources" in json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))["properties"]


def test_the_schema_validator_rejects_what_the_cli_would_reject():
    # Guards the guard: without the regex-aware pattern check every ${var} would pass or fail blindly.
    bad = {
        "bundle": {"name": "x"},
        "resources": {"jobs": {"j": {"tasks": [{"python_wheel_task": {"package_name": "p"}}]}}},
    }
    assert _errors(bad), "a task without task_key and entry_point must be invalid"
    assert _errors({"bundle": {"name": "x"}, "resources": {"jobs": {"j": {"no_such_key": 1}}}})
    assert not _errors({"bundle": {"name": "x"}, "resources": {"jobs": {"j": {"max_concurrent_runs": "${var.n}"}}}})
    assert _errors({"bundle": {"name": "x"}, "resources": {"jobs": {"j": {"max_concurrent_runs": "${nope}"}}}})


def test_databricks_yml_is_valid_against_the_bundle_schema():
    assert _errors(_root()) == []


@pytest.mark.parametrize("path", BUNDLE_FILES, ids=lambda p: p.name)
def test_each_included_file_is_a_valid_bundle_fragment(path):
    assert _errors(_load(path)) == []


def test_the_merged_bundle_is_valid_for_every_target():
    merged = _merged()
    assert _errors(merged) == []
    for target in merged["targets"]:
        # What the CLI does per target, as far as structure goes: target keys override the root.
        effective = {k: v for k, v in merged.items() if k != "targets"}
        for key, value in merged["targets"][target].items():
            if key in ("variables", "mode", "default"):
                continue
            effective[key] = value
        assert _errors(effective) == [], target


# ---------------------------------------------------------------------------------------------
# layout and top level


def test_databricks_yml_includes_every_bundles_file_and_builds_the_wheel():
    root = _root()
    assert root["bundle"]["name"] == "binlake"
    assert root["include"] == ["bundles/*.yml"]
    included = {Path(p).name for pattern in root["include"] for p in glob.glob(str(ROOT / pattern))}
    assert included == {p.name for p in BUNDLE_FILES}
    assert included
    (artifact,) = root["artifacts"].values()
    assert artifact["type"] == "whl"
    assert artifact["path"] == "."
    assert "wheel" in artifact["build"]
    assert "dist" in artifact["build"]


@pytest.mark.parametrize("path", BUNDLE_FILES, ids=lambda p: p.name)
def test_each_file_holds_one_resource_named_like_the_file(path):
    resources = _load(path)["resources"]
    assert len(resources) == 1
    ((rtype, items),) = resources.items()
    assert len(items) == 1
    (name,) = items
    assert path.name == f"{name}.{rtype.rstrip('s')}.yml"


def test_dev_is_the_default_development_target_and_prod_is_pinned_production():
    targets = _root()["targets"]
    assert targets["dev"]["mode"] == "development"
    assert targets["dev"]["default"] is True
    assert targets["dev"]["variables"]["schedule_pause_status"] == "PAUSED"
    prod = targets["prod"]
    assert prod["mode"] == "production"
    assert prod["workspace"]["root_path"].startswith("/Workspace/")
    assert "${workspace.current_user" not in prod["workspace"]["root_path"], "prod must deploy to one fixed place"
    assert prod["run_as"]
    assert prod["permissions"]


def test_the_four_unity_catalog_schemas_and_the_files_volume_exist():
    resources = _merged()["resources"]
    schemas = {v["name"] for v in resources["schemas"].values()}
    assert schemas == {"${var.bronze_schema}", "${var.silver_schema}", "${var.gold_schema}", "${var.system_schema}"}
    (volume,) = resources["volumes"].values()
    assert volume["schema_name"] == "${resources.schemas.binlake_bronze.name}"
    # Nothing streams: no checkpoint is left to keep, the volume holds working files.
    for where, text in _strings(_merged()):
        assert "checkpoint" not in text.lower(), where
        assert "streaming" not in text.lower(), where
    for path in (ROOT / "databricks.yml", *BUNDLE_FILES):
        assert "checkpoint" not in path.read_text().lower(), path.name


def test_resource_keys_are_unique_across_resource_types():
    # The CLI refuses two resources with one key even of different types (bundle run and
    # summary name resources by key alone).
    keys = [name for items in _merged()["resources"].values() for name in items]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


# ---------------------------------------------------------------------------------------------
# cross references


def test_every_interpolation_refers_to_something_declared():
    merged = _merged()
    variables = set(merged["variables"])
    resources = {(rtype, name) for rtype, items in merged["resources"].items() for name in items}
    builtins = {
        "bundle.name",
        "bundle.target",
        "workspace.current_user.short_name",
        "workspace.current_user.userName",
        "workspace.file_path",
        "workspace.root_path",
    }
    for where, text in _strings(merged):
        for ref in INTERPOLATION.findall(text):
            parts = ref.split(".")
            if parts[0] == "var":
                assert parts[1] in variables, f"{where}: ${{{ref}}} is not declared under variables"
            elif parts[0] == "resources":
                assert (parts[1], parts[2]) in resources, f"{where}: ${{{ref}}} names no resource of the bundle"
            else:
                assert ref in builtins, f"{where}: ${{{ref}}} is not a known bundle substitution"


def test_every_variable_has_a_description_and_target_overrides_declared_variables():
    root = _root()
    for name, spec in root["variables"].items():
        assert spec.get("description"), f"variable {name} needs a description"
    for target, body in root["targets"].items():
        for name in body.get("variables", {}):
            assert name in root["variables"], f"target {target} sets undeclared variable {name}"


def test_job_task_dependencies_and_clusters_refer_to_existing_keys():
    for job_key, job in _jobs().items():
        keys = [t["task_key"] for t in job["tasks"]]
        assert len(keys) == len(set(keys)), f"{job_key}: duplicate task_key"
        clusters = {c["job_cluster_key"] for c in job.get("job_clusters", [])}
        for task in job["tasks"]:
            for dep in task.get("depends_on", []):
                assert dep["task_key"] in keys, (
                    f"{job_key}.{task['task_key']} depends on unknown task {dep['task_key']}"
                )
                assert dep["task_key"] != task["task_key"]
            if "job_cluster_key" in task:
                assert task["job_cluster_key"] in clusters, f"{job_key}.{task['task_key']}: unknown job cluster"
            if "environment_key" in task:
                environments = {e["environment_key"] for e in job.get("environments", [])}
                assert task["environment_key"] in environments, f"{job_key}.{task['task_key']}: unknown environment"
            if "python_wheel_task" in task:
                # Exactly one compute: a job cluster (with the wheel as a library) or a serverless environment.
                assert ("job_cluster_key" in task) != ("environment_key" in task), f"{job_key}.{task['task_key']}"
                assert "environment_key" not in task or "libraries" not in task, f"{job_key}.{task['task_key']}"


def test_job_parameter_references_name_parameters_the_job_declares():
    for job_key, job in _jobs().items():
        declared = {p["name"] for p in job.get("parameters", [])}
        for where, text in _strings(job):
            for name in JOB_PARAMETER.findall(text):
                assert name in declared, (
                    f"{job_key} {where}: {{{{job.parameters.{name}}}}} is not a parameter of the job"
                )


def test_every_wheel_task_calls_a_declared_entry_point_that_imports():
    import importlib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    scripts = project["scripts"]
    seen = 0
    for job_key, task in _tasks():
        wheel = task.get("python_wheel_task")
        if not wheel:
            continue
        seen += 1
        assert wheel["package_name"] == project["name"]
        assert wheel["entry_point"] in scripts, (
            f"{job_key}.{task['task_key']}: no [project.scripts] entry {wheel['entry_point']}"
        )
        module, func = scripts[wheel["entry_point"]].split(":")
        assert callable(getattr(importlib.import_module(module), func))
        libs = [lib["whl"] for lib in task.get("libraries", []) if "whl" in lib]
        if "environment_key" in task:
            # Serverless: the task's environment installs the wheel.
            (env,) = [e for e in _jobs()[job_key]["environments"] if e["environment_key"] == task["environment_key"]]
            libs = [d for d in env["spec"]["dependencies"] if d.endswith(".whl")]
        assert libs, f"{job_key}.{task['task_key']}: the wheel is not installed on its compute"
        for lib in libs:
            # Paths in included files are relative to that file; the artifact build writes ./dist.
            resolved = (_file_of(job_key).parent / lib).resolve()
            assert fnmatch.fnmatch(str(resolved), str(ROOT / "dist" / "*.whl"))
    assert seen >= 8


def test_every_notebook_path_exists_in_databricks_source_format():
    for job_key, task in _tasks():
        nb = task.get("notebook_task")
        if nb:
            path = (_file_of(job_key).parent / nb["notebook_path"]).resolve()
            candidates = [path, path.with_suffix(".py")]
            found = next((p for p in candidates if p.is_file()), None)
            assert found, f"{job_key}.{task['task_key']}: notebook {nb['notebook_path']} does not exist"
            assert found.read_text().startswith("# Databricks notebook source")


# What an operator passes for the variables without a default (databricks bundle deploy --var ...).
_REQUIRED_EXAMPLES = {
    "mysql_host": "db.internal",
    "source_tables": "shop.*,crm.customers",
    "run_as_service_principal": "sp",
}


def _substitute(text: str) -> str:
    def value(m):
        ref = m.group(1)
        if ref.startswith("var."):
            name = ref[4:]
            default = _root()["variables"][name].get("default")
            return _REQUIRED_EXAMPLES[name] if name in _REQUIRED_EXAMPLES else str(default)
        return "resolved_" + ref.split(".")[2] if ref.startswith("resources.") else "x"

    text = INTERPOLATION.sub(value, text)
    text = text.replace("{{job.run_id}}", "123456").replace("{{job.id}}", "777")  # filled in at run time
    examples = {
        "repair": "false",
        "reset_capture": "false",
        "capture": "true",
        "table": "shop.customers",
        "key": "id=42",
    }
    return JOB_PARAMETER.sub(lambda m: examples.get(m.group(1), ""), text)


def _task_argv(task, file_path: Path = ROOT, **values) -> list[str]:
    """A wheel task's parameters as Databricks passes them: variables at their defaults (or
    ``values``), resources at their keys, ``${workspace.file_path}`` at ``file_path`` (the
    bundle's folder, synced there)."""
    out = []
    for arg in task["python_wheel_task"]["parameters"]:
        for name, value in values.items():
            arg = arg.replace("${var." + name + "}", str(value))
        out.append(_substitute(arg.replace("${workspace.file_path}", str(file_path))))
    return out


def _binlake_tasks():
    for job_key, task in _tasks():
        wheel = task.get("python_wheel_task")
        if wheel and wheel["entry_point"] == "binlake-job":
            yield f"{job_key}.{task['task_key']}", task


# The flags a task passes besides its command: the config file, and what only the deployment
# knows (where the bundle put the lakehouse, which job run this is).
DEPLOYMENT_FLAGS = {
    "--config",
    "--catalog",
    "--bronze-schema",
    "--silver-schema",
    "--gold-schema",
    "--system-schema",
    "--system-path",
    "--job-id",
    "--job-run-id",
}


def test_every_task_reads_the_synced_config_and_passes_only_where_the_bundle_deployed():
    seen = 0
    for where, task in _binlake_tasks():
        params = task["python_wheel_task"]["parameters"]
        flags = [p.split("=", 1)[0] for p in params if p.startswith("--")]
        command_at = next(i for i, p in enumerate(params) if not p.startswith("--"))
        assert set(flags[:command_at]) == DEPLOYMENT_FLAGS, where
        assert params[0] == "--config=${workspace.file_path}/${var.config_file}", where
        # The source, its secrets and every setting are declared once, in binlake.yml.
        assert not any(p.startswith(("--mysql", "--tables", "--settings", "--mask-salt")) for p in params), where
        seen += 1
    assert seen >= 10


def test_every_wheel_task_parameter_list_is_accepted_by_the_entry_point():
    from binlake.cli import build_parser

    for where, task in _binlake_tasks():
        inv = parse_job_args(_task_argv(task))
        build_parser().parse_args(["--config", "x.yml", *inv.cli_args])
        cfg = inv.config()
        # The password stays a secret reference, read when a connection needs it.
        assert cfg.source.password == Secret.reference("binlake", "mysql-cdc"), where
        # The bundle's deployed names win over the file's (development mode prefixes them).
        lake = cfg.lakehouse
        assert (lake.catalog, lake.silver_schema, lake.system_schema) == (
            "main",
            "resolved_binlake_silver",
            "resolved_binlake_system_schema",
        ), where
        assert lake.system_path == "/Volumes/main/resolved_binlake_bronze/resolved_binlake_system", where


# What `databricks bundle deploy` uploads: the bundle's folder minus what git ignores, plus
# sync.include, minus sync.exclude (the CLI's rules, with gitignore semantics).


def _git_ignores(relative: str) -> bool:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", relative], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("git is needed to evaluate .gitignore as the bundle's sync does")
    if out.returncode == 128:
        pytest.skip("not a git checkout: cannot evaluate .gitignore as the bundle's sync does")
    return out.returncode == 0


def _matches(pattern: str, relative: str) -> bool:
    regex = re.escape(pattern).replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
    return re.fullmatch(regex, relative) is not None


def _synced(relative: str) -> bool:
    sync = _root().get("sync") or {}
    if any(_matches(p, relative) for p in sync.get("exclude", [])):
        return False
    return any(_matches(p, relative) for p in sync.get("include", [])) or not _git_ignores(relative)


def test_the_sync_model_reads_gitignore_and_the_include_rules():
    assert _synced("binlake.yml")
    assert _synced("notebooks/status.py")
    assert not _synced(".venv/bin/python")
    assert not _synced("dist/binlake.whl")
    # Included even where a user's .gitignore would drop them (a config is often ignored):
    # every task reads the config and the suites it names.
    include = (_root().get("sync") or {}).get("include", [])
    for path in ("binlake.yml", "binlake.dev.yml", "expectations/shop_orders.json", "expectations/crm/t.json"):
        assert any(_matches(p, path) for p in include), path
    assert not any(_matches(p, "src/binlake/cli.py") for p in include)


def _config_files() -> dict[str, str]:
    """The config file each target's tasks read (variable config_file), relative to the bundle."""
    root = _root()
    default = root["variables"]["config_file"]["default"]
    return {t: (body.get("variables") or {}).get("config_file", default) for t, body in root["targets"].items()}


def test_every_file_a_task_names_exists_and_is_synced():
    for target, name in _config_files().items():
        assert (ROOT / name).is_file(), f"target {target}: {name} is not synced with the bundle"
        assert _synced(name), f"target {target}: {name} is not synced with the bundle"
        config = load_config(ROOT / name, environ={})
        # Suites are read relative to the config file, where the bundle syncs them too.
        for suite in config.gold.expectations:
            path = (ROOT / name).parent / suite.path
            assert path.is_file(), f"{name}: {suite.path} is not synced"
            assert _synced(str(path.relative_to(ROOT))), f"{name}: {suite.path} is not synced"
    for where, task in _binlake_tasks():
        (arg,) = [a for a in _task_argv(task, file_path=Path("")) if a.startswith("--config=")]
        assert _synced(arg.split("=", 1)[1]), where
    for notebook in sorted((ROOT / "notebooks").glob("*.py")):
        assert _synced(str(notebook.relative_to(ROOT))), notebook.name


def test_a_task_finds_the_suites_its_config_names_beside_the_synced_file(tmp_path, monkeypatch):
    # As on a cluster: the task's working directory is not the bundle's folder.
    files = tmp_path / "files"
    (files / "expectations").mkdir(parents=True)
    (files / "expectations" / "orders.json").write_text(
        '{"expectations": [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}}]}'
    )
    (files / "binlake.yml").write_text(
        (ROOT / "binlake.yml").read_text() + "gold: {expectations: {shop.orders: expectations/orders.json}}\n"
    )
    monkeypatch.chdir(tmp_path)
    (task,) = [t for w, t in _binlake_tasks() if w == "binlake_pipeline.gold"]
    cfg = parse_job_args(_task_argv(task, file_path=files)).config()
    assert [e.type for e in cfg.gold.suite("shop", "orders")] == ["expect_column_values_to_not_be_null"]


def test_the_synced_config_names_the_lakehouse_the_bundle_deploys_by_default():
    # The notebooks read the file's lakehouse section; the jobs read the bundle's: in prod they agree.
    variables = {k: v.get("default") for k, v in _root()["variables"].items()}
    lake = load_config(ROOT / "binlake.yml", environ={}).lakehouse
    assert lake.catalog == variables["catalog"]
    assert (lake.bronze_schema, lake.silver_schema, lake.gold_schema, lake.system_schema) == tuple(
        variables[f"{layer}_schema"] for layer in ("bronze", "silver", "gold", "system")
    )
    assert (
        lake.system_path == f"/Volumes/{variables['catalog']}/{variables['bronze_schema']}/{variables['system_volume']}"
    )


# ---------------------------------------------------------------------------------------------
# what the jobs promise operators


def test_the_pipeline_runs_capture_then_silver_then_gold_on_a_paused_in_dev_schedule():
    job = _jobs()["binlake_pipeline"]
    by_key = {t["task_key"]: t for t in job["tasks"]}
    commands = {k: t["python_wheel_task"]["parameters"] for k, t in by_key.items() if "python_wheel_task" in t}
    assert commands["capture"][-2:] == ["capture", "--until-now"]
    assert commands["silver"][-1] == "silver"
    assert commands["gold"][-1] == "gold"
    assert {d["task_key"] for d in by_key["silver"]["depends_on"]} >= {"capture"}
    assert [d["task_key"] for d in by_key["gold"]["depends_on"]] == ["silver"]
    assert job["schedule"]["quartz_cron_expression"] == "${var.schedule_cron}"
    assert job["schedule"]["pause_status"] == "${var.schedule_pause_status}"
    assert job["max_concurrent_runs"] == 1
    assert job["queue"]["enabled"] is True
    assert job["timeout_seconds"] > 0
    assert by_key["capture"]["max_retries"] >= 1
    assert job["email_notifications"]["on_failure"] == "${var.notification_emails}"
    assert job["webhook_notifications"]["on_failure"] == "${var.failure_webhooks}"


def test_snapshot_continuous_and_verify_jobs_take_their_parameters():
    jobs = _jobs()
    snapshot = jobs["binlake_snapshot"]
    assert {p["name"] for p in snapshot["parameters"]} >= {"tables"}
    assert "--table-list={{job.parameters.tables}}" in snapshot["tasks"][0]["python_wheel_task"]["parameters"]
    continuous = jobs["binlake_continuous"]
    assert "continuous" in continuous
    assert "schedule" not in continuous
    assert continuous["tasks"][0]["python_wheel_task"]["parameters"][-2:] == ["run", "--continuous"]
    verify = jobs["binlake_verify"]
    assert {p["name"]: p["default"] for p in verify["parameters"]}["repair"] == "false"
    assert "--repair-if={{job.parameters.repair}}" in verify["tasks"][0]["python_wheel_task"]["parameters"]
    assert "SUN" in _root()["variables"]["verify_cron"]["default"]


def _deep_merge(base, override):
    """A target's settings over the root's, as the CLI merges them: maps key by key, a job's
    tasks by task_key, everything else replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            if key == "tasks" and isinstance(value, list) and key in base:
                by_key = {t["task_key"]: t for t in base[key]}
                for task in value:
                    by_key[task["task_key"]] = _deep_merge(by_key.get(task["task_key"], {}), task)
                out[key] = list(by_key.values())
            else:
                out[key] = _deep_merge(base.get(key), value) if key in base else value
        return out
    return override


def _effective(target: str, substitute: bool = True) -> dict:
    """The bundle as the CLI deploys it to ``target`` (variables substituted with their values
    there, unless ``substitute`` is false)."""
    merged = _merged()
    body = merged["targets"][target]
    settings = {k: v for k, v in body.items() if k not in ("variables", "mode", "default")}
    effective = _deep_merge({k: v for k, v in merged.items() if k != "targets"}, settings)
    values = {name: spec.get("default") for name, spec in merged["variables"].items()}
    values.update(body.get("variables", {}))

    def resolve(node):
        if isinstance(node, dict):
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        if isinstance(node, str):
            return INTERPOLATION.sub(
                lambda m: str(values[m.group(1)[4:]]) if m.group(1).startswith("var.") else m.group(0), node
            )
        return node

    return resolve(effective) if substitute else effective


def _pause(target: str, job: str) -> str:
    return _effective(target)["resources"]["jobs"][job]["schedule"]["pause_status"]


def test_one_scheduled_pipeline_reads_the_binlog_in_each_target():
    # Two pipelines on schedule would be two binlog readers with the same server ids.
    assert (_pause("prod", "binlake_pipeline"), _pause("prod", "binlake_pipeline_serverless")) == ("UNPAUSED", "PAUSED")
    assert _pause("serverless", "binlake_pipeline") == "PAUSED"
    assert _pause("serverless", "binlake_pipeline_serverless") == "UNPAUSED"
    assert {_pause("dev", "binlake_pipeline"), _pause("dev", "binlake_pipeline_serverless")} == {"PAUSED"}
    serverless, prod = _root()["targets"]["serverless"], _root()["targets"]["prod"]
    assert serverless["mode"] == "production"
    assert serverless["run_as"] == prod["run_as"]
    assert serverless["permissions"] == prod["permissions"]
    assert serverless["workspace"]["root_path"] == prod["workspace"]["root_path"]  # per target: .../${bundle.target}
    assert _errors(_effective("serverless", substitute=False)) == []


@pytest.mark.parametrize("job", ["binlake_pipeline", "binlake_snapshot"])
def test_the_serverless_jobs_run_the_classic_jobs_tasks_in_a_serverless_environment(job):
    jobs = _jobs()
    classic, serverless = jobs[job], jobs[f"{job}_serverless"]
    (env,) = serverless["environments"]
    assert env["spec"]["environment_version"] == "${var.serverless_environment_version}"
    assert env["spec"]["dependencies"] == ["../dist/*.whl"]
    assert "job_clusters" not in serverless
    compute = ("job_cluster_key", "libraries", "environment_key")
    for ours, theirs in zip(serverless["tasks"], classic["tasks"], strict=True):
        # Same commands and flags, dependencies and retries: only the compute differs.
        assert {k: v for k, v in ours.items() if k not in compute} == {
            k: v for k, v in theirs.items() if k not in compute
        }
        if "python_wheel_task" in ours:
            assert ours["environment_key"] == env["environment_key"]
    same = ("parameters", "max_concurrent_runs", "queue", "timeout_seconds", "email_notifications", "health")
    assert {k: serverless.get(k) for k in same} == {k: classic.get(k) for k in same}
    assert _root()["variables"]["serverless_environment_version"]["default"] == "4"  # Spark 4.0, as tested


def test_no_task_and_no_synced_config_carries_a_password_value():
    for job_key, task in _tasks():
        for arg in task.get("python_wheel_task", {}).get("parameters", []):
            assert "password" not in arg.lower(), f"{job_key}: {shlex.quote(arg)}"
    for target, name in _config_files().items():
        password = load_config(ROOT / name, environ={}).source.password
        assert password == Secret.reference("binlake", "mysql-cdc"), f"{name} ({target}) must name a secret"


# ---------------------------------------------------------------------------------------------
# operator notebooks

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))


def test_the_operator_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} >= {"status", "bronze_browse", "verify"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_notebook_is_databricks_source_format_and_only_calls_the_public_api(path):
    import ast

    import binlake

    text = path.read_text(encoding="utf-8")
    assert text.startswith("# Databricks notebook source\n")
    cells = text.split("\n# COMMAND ----------\n")
    assert len(cells) >= 3, "a markdown cell, a widgets cell and at least one call"
    assert cells[0].strip().splitlines()[1].startswith("# MAGIC %md")
    tree = ast.parse(text)
    used = []
    for node in ast.walk(tree):
        # No logic: the notebooks hold calls, never branches, loops or definitions.
        assert not isinstance(node, (ast.If, ast.For, ast.While, ast.FunctionDef, ast.ClassDef, ast.Try)), (
            f"{path.name}:{node.lineno}: move this logic into the binlake package"
        )
        # The public API only (binlake.__all__): internals may move.
        assert not isinstance(node, ast.ImportFrom), f"{path.name}:{node.lineno}: import binlake, not its modules"
        if isinstance(node, ast.Import):
            assert [a.name for a in node.names] == ["binlake"], f"{path.name}:{node.lineno}"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "binlake":
            used.append(node.attr)
    assert used, f"{path.name} calls nothing of binlake"
    for name in used:
        assert name in binlake.__all__, f"{path.name}: binlake.{name} is not in the public API"
    # Their default config is the file the bundle syncs beside the notebooks' folder.
    assert 'dbutils.widgets.text("config", "../binlake.yml"' in text
    assert (path.parent / "../binlake.yml").resolve() == ROOT / "binlake.yml"


# ---------------------------------------------------------------------------------------------
# health: metrics, dashboard, alert


def test_every_binlake_job_task_records_its_job_run_and_passes_its_job_for_the_leases():
    for where, task in _binlake_tasks():
        params = task["python_wheel_task"]["parameters"]
        assert "--job-run-id={{job.run_id}}" in params, where
        assert "--job-id={{job.id}}" in params, where
        inv = parse_job_args(_task_argv(task))
        assert (inv.job_run_id, inv.job_id) == ("123456", "777"), where


def test_the_dashboard_file_is_what_the_health_views_generate_and_a_valid_lakeview_document():
    from databricks.labs.lsql.lakeview import model

    from binlake.deploy.dashboard import dashboard

    (resource,) = _merged()["resources"]["dashboards"].values()
    path = (ROOT / "bundles" / resource["file_path"]).resolve()
    assert path.name.endswith(".lvdash.json")
    assert path.exists()
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document == dashboard(), "stale: python -m binlake.deploy.dashboard > " + str(path.relative_to(ROOT))
    # Databricks' Lakeview model reads every key back: a misspelt key or widget type would not survive.
    assert model.Dashboard.from_dict(document).as_dict() == document
    datasets = {d["name"] for d in document["datasets"]}
    for page in document["pages"]:
        for item in page["layout"]:
            for q in item["widget"]["queries"]:
                assert q["query"]["datasetName"] in datasets
    assert resource["warehouse_id"] == "${var.warehouse_id}"
    assert resource["dataset_schema"] == "${resources.schemas.binlake_system_schema.name}"


def test_the_lag_alert_evaluates_the_current_lag_view_against_max_lag_seconds():
    from binlake.deploy.dashboard import lag_alert_query

    (alert,) = _merged()["resources"]["alerts"].values()
    metrics = "`${var.catalog}`.`${resources.schemas.binlake_system_schema.name}`.`metrics`"
    assert alert["query_text"] == lag_alert_query(metrics)
    assert alert["evaluation"]["source"]["name"] == "lag_seconds"
    assert alert["evaluation"]["comparison_operator"] == "GREATER_THAN"
    assert alert["evaluation"]["threshold"]["value"]["double_value"] == "${var.max_lag_seconds}"
    rule = _jobs()["binlake_pipeline"]["health"]["rules"][0]
    assert (rule["metric"], rule["value"]) == ("RUN_DURATION_SECONDS", "${var.max_lag_seconds}")


def test_the_erase_job_passes_its_table_and_key_parameters_to_erase():
    job = _jobs()["binlake_erase"]
    assert {p["name"] for p in job["parameters"]} == {"table", "key"}
    (task,) = job["tasks"]
    argv = _task_argv(task)
    assert parse_job_args(argv).cli_args == ("erase", "--table=shop.customers", "--key", "id=42")
    composite = [a.replace("id=42", "region=eu;id=42") for a in argv]
    assert parse_job_args(composite).cli_args[-4:] == ("--key", "region=eu", "--key", "id=42")
    with pytest.raises(ConfigError, match=r"^--key-list is empty: set the job parameter 'key'"):
        parse_job_args([a.replace("id=42", "") for a in argv])
    assert task["max_retries"] == 0


# ---------------------------------------------------------------------------------------------
# one config: what binlake.yml says reaches every task


def test_every_task_gets_the_config_files_history_column_rules_and_mask_salt(tmp_path):
    config = tmp_path / "binlake.yml"
    config.write_text(
        (ROOT / "binlake.yml")
        .read_text()
        .replace("  # mask_salt:", '  mask_salt: "{{secrets/binlake/mask-salt}}"\n  # was:')
        + "snapshot: {chunk_size: 1000}\nhistory: {tables: [shop.customers]}\n"
    )
    config.write_text(
        config.read_text().replace(
            "  # columns:", '  columns: {"shop.customers": {exclude: [ssn], mask: {email: hash}}}\n  # was:'
        )
    )
    for where, task in _binlake_tasks():
        cfg = parse_job_args(_task_argv(task, file_path=tmp_path)).config()
        assert cfg.source.column_rule("shop", "customers").exclude == ("ssn",), where
        assert cfg.source.mask_salt == Secret.reference("binlake", "mask-salt")
        assert cfg.snapshot.chunk_size == 1000
        assert cfg.history.table("shop", "customers") is not None, where
