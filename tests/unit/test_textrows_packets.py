"""The text-protocol row reader cuts packets exactly, whatever the socket hands it at a time.

Byte-level cases a live server rarely produces on demand: reads that end anywhere inside a
packet, a wrong sequence id (checked for every row), blocks cut by row count, and the EOF
packet. Rows against a real server are in tests/integration/test_textrows.py.
"""

from __future__ import annotations

import io

import pymysql
import pytest

from binlake.source.textrows import PacketReader


class FakeConnection:
    """What the reader uses of a pymysql connection, fed from bytes ``step`` at a time."""

    def __init__(self, data: bytes, step: int, seq: int = 1):
        self._rfile = self
        self._sock = self
        self._read_timeout = None
        self._next_seq_id = seq
        self.encoding = "utf8mb4"
        self.closed = False
        self._data = io.BytesIO(data)
        self._step = step

    def settimeout(self, _):
        pass

    def read1(self, size: int) -> bytes:
        return self._data.read(min(size, self._step))

    def _force_close(self):
        self.closed = True


def packet(seq: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq % 256]) + payload


def row(*values: bytes) -> bytes:
    return b"".join(bytes([len(v)]) + v for v in values)


EOF_PACKET = b"\xfe\x00\x00\x02\x00"  # no warnings, status: autocommit


def stream(rows: list[bytes], first_seq: int = 1) -> bytes:
    packets = [packet(first_seq + i, r) for i, r in enumerate(rows)]
    return b"".join(packets) + packet(first_seq + len(rows), EOF_PACKET)


def payloads(buf, starts) -> list[bytes]:
    ends = [*(starts[1:] - 4), len(buf)]
    return [bytes(buf[s:e]) for s, e in zip(starts, ends)]


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_rows_are_cut_at_packet_bounds_whatever_the_reads_return(step):
    rows = [row(b"%d" % i, b"x" * (i % 250)) for i in range(600)]  # seq ids wrap past 255
    conn = FakeConnection(stream(rows), step)
    reader = PacketReader(conn)
    got, done = [], False
    while not done:
        buf, starts, done = reader.rows(250)
        assert len(starts) <= 250
        got += payloads(buf, starts)
    assert got == rows
    assert reader.finished
    assert conn._next_seq_id == (1 + 600 + 1) % 256
    assert reader.pending == b""
    assert not conn.closed


def test_a_wrong_sequence_id_on_any_row_closes_the_connection_with_the_ids():
    data = bytearray(stream([row(b"a"), row(b"b"), row(b"c")]))
    data[len(packet(1, row(b"a"))) + 3] = 9  # the second row's sequence id
    conn = FakeConnection(bytes(data), 1000)
    with pytest.raises(pymysql.err.InternalError, match="Packet sequence number wrong - got 9 expected 2"):
        PacketReader(conn).rows(10)
    assert conn.closed


def test_an_empty_result_is_just_the_eof_packet():
    conn = FakeConnection(stream([]), 2)
    reader = PacketReader(conn)
    _buf, starts, done = reader.rows(10)
    assert (len(starts), done, conn._next_seq_id) == (0, True, 2)


def test_a_block_ends_at_the_first_packet_starting_past_block_bytes(monkeypatch):
    from binlake.source import textrows

    monkeypatch.setattr(textrows, "BLOCK_BYTES", 100)
    rows = [row(b"%03d" % i, b"y" * 6) for i in range(40)]  # 15-byte packets
    conn = FakeConnection(stream(rows), 1000)
    reader = PacketReader(conn)
    got, done, sizes = [], False, []
    while not done:
        buf, starts, done = reader.rows(1000)
        got += payloads(buf, starts)
        sizes.append(len(starts))
    assert got == rows
    # Packets start at 0, 15, ..., 90 in each block: seven of them start before byte 100.
    assert sizes == [7, 7, 7, 7, 7, 5]
