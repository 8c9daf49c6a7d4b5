"""Databricks secrets for ``{{secrets/<scope>/<key>}}`` references in ``binlake.yml``.

In a notebook the value comes from ``dbutils.secrets`` (no extra credentials needed); everywhere
else (job tasks, a laptop) from the Secrets REST API through databricks-sdk, which returns it
base64-encoded. A config holds the reference (:class:`Secret`) and reads the value only when a
connection needs it.

The value is never logged, never part of an exception message and never chained into a
traceback: errors name the scope and key and say how to fix the problem.

Example (a configured workspace, e.g. ``DATABRICKS_HOST`` and ``DATABRICKS_TOKEN`` set)::

    >>> from binlake.secrets import resolve_secret
    >>> password = resolve_secret("binlake", "mysql-cdc")  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from typing import Any

from binlake.errors import DatabricksApiError, SecretError

log = logging.getLogger("binlake.secrets")

# The Secrets API's own rule for scope and key names.
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
_SECRET_REF = re.compile(r"^\{\{secrets/([^/{}]+)/([^/{}]+)\}\}$")


class Secret:
    """A string that never shows itself in logs, reprs or exception messages.

    Either a value, or a Databricks secret reference (``{{secrets/<scope>/<key>}}``) that is
    read only when :meth:`reveal` is first called (a connection needs it), so loading a config
    never talks to a workspace.
    """

    __slots__ = ("_ref", "_value")

    def __init__(self, value: str | None = None, *, scope: str | None = None, key: str | None = None):
        self._value = value
        self._ref: tuple[str, str] | None = (scope, key or "") if scope is not None else None

    @staticmethod
    def reference(scope: str, key: str) -> Secret:
        return Secret(scope=scope, key=key)

    @staticmethod
    def parse(text: Any) -> Secret:
        """A config value as a Secret: ``{{secrets/<scope>/<key>}}`` is a reference, any other
        text (or number) the value itself; None is the empty secret."""
        if isinstance(text, Secret):
            return text
        if text is None:
            return Secret()
        if isinstance(text, (int, float)) and not isinstance(text, bool):
            text = str(text)
        if not isinstance(text, str):
            from pydantic_core import PydanticCustomError

            raise PydanticCustomError("string_type", "Input should be a valid string")
        ref = _SECRET_REF.match(text)
        return Secret.reference(*ref.groups()) if ref else Secret(text)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        # A config field typed Secret takes text (parse) or a Secret (binlake.config).
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(cls.parse)

    def reveal(self) -> str:
        if self._value is None and self._ref is not None:
            self._value = resolve_secret(*self._ref)
        return self._value or ""

    def __repr__(self) -> str:
        return f"Secret({{{{secrets/{self._ref[0]}/{self._ref[1]}}}}})" if self._ref else "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return False
        if self._ref or other._ref:
            return self._ref == other._ref
        return self._value == other._value

    def __hash__(self) -> int:
        return hash(self._ref) if self._ref else hash(self._value)

    def __bool__(self) -> bool:
        return self._ref is not None or bool(self._value)


def resolve_secret(scope: str, key: str, *, client: Any = None, dbutils: Any = None) -> str:
    """Return the secret ``key`` of ``scope`` as text.

    ``dbutils`` (a notebook's) or ``client`` (a ``databricks.sdk.WorkspaceClient``) choose the
    source explicitly; with neither, a notebook's ``dbutils`` is used when there is one, else the
    Secrets API with the SDK's own authentication. Raises :class:`~binlake.errors.SecretError`
    naming ``scope/key`` and the fix.
    """
    for what, name in (("scope", scope), ("key", key)):
        if not isinstance(name, str) or not _NAME.match(name):
            raise SecretError(
                f"secret {what} {name!r} is not a valid name: use letters, digits, '-', '_' and '.' "
                "(at most 128 characters), as in {{secrets/binlake/mysql-cdc}}"
            )
    if client is None and dbutils is None:
        dbutils = notebook_dbutils()
        if dbutils is None:
            client = workspace_client(f"read Databricks secret {scope}/{key}", error=SecretError)
    if dbutils is not None:
        value = _via_dbutils(dbutils, scope, key)
        source = "dbutils.secrets"
    else:
        value = _via_api(client, scope, key)
        source = "the Secrets API"
    if not value:
        raise SecretError(
            f"Databricks secret {scope}/{key} is empty: store the MySQL password with "
            f"`databricks secrets put-secret {scope} {key}`"
        )
    log.debug("read Databricks secret %s/%s through %s", scope, key, source)
    return value


def _not_found(scope: str, key: str) -> SecretError:
    return SecretError(
        f"Databricks secret {scope}/{key} does not exist: create it with "
        f"`databricks secrets put-secret {scope} {key}` (first `databricks secrets create-scope {scope}` "
        "if the scope is new), or change the reference in binlake.yml (source.password, source.mask_salt)"
    )


def _via_dbutils(dbutils: Any, scope: str, key: str) -> str:
    try:
        return dbutils.secrets.get(scope=scope, key=key)
    except Exception as exc:  # noqa: BLE001 - dbutils raises Py4J/JVM errors of many classes
        if "does not exist" in str(exc):
            raise _not_found(scope, key) from None
        raise SecretError(
            f"cannot read Databricks secret {scope}/{key} through dbutils ({type(exc).__name__}): "
            f"check the scope and key names and that you may READ scope {scope} "
            f"(`databricks secrets list-acls {scope}`)"
        ) from None


def _via_api(client: Any, scope: str, key: str) -> str:
    from databricks.sdk.errors import (
        DatabricksError,
        NotFound,
        PermissionDenied,
        Unauthenticated,
    )

    try:
        response = client.secrets.get_secret(scope=scope, key=key)
    except NotFound:
        raise _not_found(scope, key) from None
    except PermissionDenied:
        raise SecretError(
            f"not allowed to read Databricks secret {scope}/{key}: grant READ on the scope to the user or "
            f"service principal the job runs as: `databricks secrets put-acl {scope} <principal> READ`"
        ) from None
    except Unauthenticated:
        raise SecretError(
            f"cannot read Databricks secret {scope}/{key}: the workspace rejected the credentials; "
            "renew DATABRICKS_TOKEN or run `databricks auth login`"
        ) from None
    except DatabricksError as exc:
        raise SecretError(
            f"cannot read Databricks secret {scope}/{key} ({type(exc).__name__}: {exc.error_code or 'error'}): "
            "check that the workspace is reachable and retry"
        ) from None
    except OSError as exc:  # connection refused, DNS, TLS: requests' errors are OSErrors
        raise SecretError(
            f"cannot read Databricks secret {scope}/{key}: the workspace cannot be reached ({type(exc).__name__}); "
            "check DATABRICKS_HOST and the network, then retry"
        ) from None
    encoded = getattr(response, "value", None)
    if encoded is None:
        raise _not_found(scope, key)
    try:
        return base64.b64decode(encoded, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise SecretError(
            f"Databricks secret {scope}/{key} is not base64-encoded UTF-8 text as the Secrets API returns it: "
            f"store the password again with `databricks secrets put-secret {scope} {key}`"
        ) from None


def notebook_dbutils() -> Any:
    """The ``dbutils`` of the Databricks notebook this runs in, or None."""
    try:
        from IPython import get_ipython  # type: ignore[import-not-found]
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None:
        return None
    return shell.user_ns.get("dbutils")


def workspace_client(purpose: str, error: type = DatabricksApiError):
    """A ``databricks.sdk.WorkspaceClient``: on a cluster it authenticates as the job's identity
    by itself; elsewhere through ``DATABRICKS_HOST``/``DATABRICKS_TOKEN`` or ``~/.databrickscfg``.
    Raises ``error`` with the fix when no authentication is configured."""
    from databricks.sdk import WorkspaceClient

    try:
        return WorkspaceClient()
    except ValueError:
        # The SDK's message lists every variable it probed; one line with the fix is enough.
        raise error(
            f"cannot {purpose}: no Databricks authentication is configured here; set DATABRICKS_HOST "
            "and DATABRICKS_TOKEN (or DATABRICKS_CONFIG_PROFILE), or run `databricks auth login`"
        ) from None
