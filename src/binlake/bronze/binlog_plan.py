"""How the ROWS events after a TABLE_MAP become change-log rows: the table's schema as binlake
stores it (its column rule applied), its version, and the row decoder of its layout."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from binlake.config import ColumnRule, SourceConfig
from binlake.contract.columns import FlatMasker, apply_to_schema
from binlake.contract.types import TableSchema
from binlake.errors import ArchiveUnreadableError, BinlogDecodeError, UnsupportedColumnError
from binlake.source.binlog.events import TableMapEvent
from binlake.source.binlog.rows import Layout, RowsDecoder, compile_rows_decoder
from binlake.source.binlog.schema import schema_from_table_map
from binlake.source.binlog.table_map import TableMap


@dataclass(frozen=True)
class TablePlan:
    """How the ROWS events after one TABLE_MAP become change-log rows. Everything that does not
    depend on the event is decided here, once per TABLE_MAP; the ROWS handler only lays out
    each event's images (which columns they hold)."""

    database: str
    table: str
    schema: TableSchema | None  # the table as the TABLE_MAP describes it; None when unreadable
    stored: TableSchema | None  # the table as binlake stores it: its column rule applied
    version: str | None  # the stored schema's version, on every row
    decoder: RowsDecoder | None  # event bytes to canonical texts
    rule: ColumnRule | None
    salt: str = ""
    # Why the table's rows cannot be decoded into named columns (no names in the TABLE_MAP):
    # each ROWS event then becomes one record saying so, for silver to stop the table.
    unreadable: str | None = None
    maskers: dict = field(default_factory=dict, compare=False)

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    def masked(self, layout: Layout, values: list | None, n: int) -> tuple[list[str], list | None]:
        """An image layout's names and its ``n`` rows of texts with the column rule applied."""
        if self.rule is None:
            return layout.names, values
        masker = self.maskers.get(id(layout))
        if masker is None:
            masker = self.maskers[id(layout)] = FlatMasker(self.rule, self.salt, layout.names)
        return masker.names, masker.apply(values, n) if values is not None else None


class TablePlanner:
    """The :class:`TablePlan` of each TABLE_MAP event of one range."""

    def __init__(self, source: SourceConfig):
        self.source = source
        self.salt = source.salt_for_any()
        # A TABLE_MAP comes with every transaction: the column rule is applied once per
        # table and source schema, not per transaction.
        self._stored: dict[tuple, tuple[ColumnRule | None, TableSchema, str]] = {}
        self._decoders: dict[tuple, RowsDecoder] = {}

    def plan(self, event: TableMapEvent, where: str = "") -> TablePlan | None:
        """The plan for a TABLE_MAP event (at ``where``, ``file:pos``), None when its table is
        neither captured nor a captured table's online-schema-change shadow."""
        if not self.source.mirrors(event.schema, event.table):
            return None
        table = event.table_map
        if table is None:
            raise BinlogDecodeError(f"{event.schema}.{event.table} is captured, but {event.error}")
        if self.source.archive is not None:
            _check_archive_schema(self.source, table, where)
        if not table.has_names:
            return TablePlan(
                table.schema,
                table.table,
                None,
                None,
                None,
                None,
                None,
                unreadable="its ROWS events carry no column names (binlog_row_metadata=MINIMAL): "
                "SET GLOBAL binlog_row_metadata=FULL, then re-snapshot the table",
            )
        schema = schema_from_table_map(table)
        if not schema.key and self.source.archive is not None:
            schema = replace(schema, key=tuple(self.source.chunk_keys[schema.name]), key_is_primary=False)
        shape = (schema.database, schema.table, schema.columns, schema.key)
        if shape not in self._stored:
            # A shadow table (gh-ost, pt-osc) is stored under its table's column rule: its
            # rows become that table's at the cut-over (binlake.bronze.osc_replay).
            ruled = self.source.shadow_of(schema.database, schema.table)
            ruled = schema.table if ruled is None or self.source.captures(schema.database, schema.table) else ruled
            rule = self.source.column_rule(schema.database, ruled)
            stored = apply_to_schema(rule, schema, self.source.salt_for(rule), strict=False)
            self._stored[shape] = (rule, stored, stored.version())
        rule, stored, version = self._stored[shape]
        layout = (shape, tuple((c.type, c.collation, c.max_length, c.length_size) for c in table.columns))
        decoder = self._decoders.get(layout)
        if decoder is None or decoder.table.table_id != table.table_id:
            try:
                decoder = self._decoders[layout] = compile_rows_decoder(table, schema)
            except UnsupportedColumnError as exc:
                raise BinlogDecodeError(f"{schema.name}: {exc}; exclude the table (source.exclude)") from exc
        # Decoded with the source's own column types, then masked: the snapshot does the
        # same, so both paths store the same text for the same value.
        return TablePlan(
            schema.database, schema.table, schema, stored, version, decoder, rule, self.salt if rule else ""
        )


def _check_archive_schema(source: SourceConfig, table: TableMap, where: str) -> None:
    """An archive source has no catalog: a captured table's TABLE_MAP must name its columns
    and its key (binlog_row_metadata=FULL), or ``source.chunk_keys`` must name NOT NULL
    columns that identify a row. Anything less stops capture before the batch commits."""
    name = table.name
    if not table.has_names:
        raise ArchiveUnreadableError(
            f"{name}'s TABLE_MAP ending at {where} has no column names (binlog_row_metadata=MINIMAL), and an "
            "archive source takes a table's columns from its binlog: the files must be written under "
            "binlog_row_metadata=FULL (SET PERSIST binlog_row_metadata = FULL on the server, for the files written "
            "after it), or exclude the table (source.exclude)"
        )
    if table.primary_key:
        return
    configured = source.chunk_keys.get(name)
    if not configured:
        raise ArchiveUnreadableError(
            f"{name}'s TABLE_MAP ending at {where} names no primary key, and silver merges a table by its key: add "
            f"a primary key to the table, or set source.chunk_keys for {name} (NOT NULL columns that identify a "
            "row), or exclude it (source.exclude)"
        )
    columns = {c.name: c for c in table.columns}
    bad = [k for k in configured if k not in columns or columns[k].nullable]
    if bad:
        raise ArchiveUnreadableError(
            f"source.chunk_keys for {name} names {', '.join(bad)}, which its TABLE_MAP ending at {where} does not "
            "have as a NOT NULL column: name NOT NULL columns that identify a row, or exclude the table "
            "(source.exclude)"
        )
