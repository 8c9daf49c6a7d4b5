"""``binlake preflight``: the source's checks, and gold's expectations against the tables.

The source checks are :mod:`binlake.source.preflight`; this adds, for every captured table,
the check of its Great Expectations expectations against the columns silver and gold will
hold (:func:`binlake.quality.suites.plan_table`), so an unknown expectation type, kwargs GE
rejects, a missing or dropped column or a ``drop`` without a row condition is reported before
anything is written.
"""

from __future__ import annotations

from binlake.config import Config
from binlake.errors import ConfigError
from binlake.quality.suites import plan_table
from binlake.source import preflight as source_preflight


def run_preflight(config: Config) -> source_preflight.PreflightReport:
    """Check the source and the expectations; raise :class:`~binlake.errors.PreflightError`
    listing every problem, else return the report."""
    if not (config.gold.expectations or config.gold.checks):
        return source_preflight.run_preflight(config)

    def expectations(schema) -> list[str]:
        try:
            plan_table(config, schema)
        except ConfigError as exc:
            return [str(exc)]
        return []

    return source_preflight.run_preflight(config, table_check=expectations)


__all__ = ["run_preflight"]
