"""Rows of a text-protocol result set read off the socket in blocks, columns as Arrow arrays.

Why: pymysql parses each row in pure Python (a packet object, a few method calls per
column, a tuple per row), which costs more than everything else a snapshot does with the
row. Here pymysql still sends the query and reads the column definitions; the row packets
are then read in large blocks and cut into columns with numpy, one pass per column over
the whole block, so Python does a few operations per *row* (finding where each packet
starts), none per value. The values come out as the protocol's bytes, exactly what pymysql
would have handed to its converters: an Arrow ``string`` array for text columns (the
connection's utf8mb4, validated) and ``binary`` for binary ones.

The wire format (MySQL client/server protocol, "Text Resultset"): each row is one packet,
``3-byte length, 1-byte sequence id, payload``; the payload is one length-encoded string
per column: ``0xFB`` = NULL, a first byte below ``0xFB`` = that many bytes follow,
``0xFC``/``0xFD``/``0xFE`` = a 2/3/8-byte little-endian length follows. The result ends with
an EOF packet (first byte ``0xFE``, payload under 9 bytes); an error packet starts ``0xFF``.
A payload of ``0xFFFFFF`` bytes continues in the next packet (rows over 16 MiB).

Only for pymysql 1.1 (pinned in pyproject): it relies on the unbuffered result's
internals (``_rfile``, ``_next_seq_id``, ``MySQLResult.converters``).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pymysql
from pymysql.constants import CR

_MAX_PACKET = 0xFFFFFF
_READ_SIZE = 1 << 20
# A block ends at this many bytes too, whatever its row count: memory stays flat with wide
# rows, and Arrow's 32-bit offsets always suffice (a row is at most max_allowed_packet, 1 GiB).
BLOCK_BYTES = 64 << 20


class RowBlock:
    """``rows`` rows of a result: per column, where each value is in ``buf`` and whether it is NULL."""

    def __init__(self, buf: np.ndarray, starts: np.ndarray, binary: list[bool]):
        self.buf = buf
        self.starts = starts
        self.rows = len(starts)
        self.binary = binary
        n = len(binary)
        self.head = np.empty((self.rows, n), dtype=np.int64)
        self.start = np.empty((self.rows, n), dtype=np.int64)
        self.length = np.empty((self.rows, n), dtype=np.int64)
        self.null = np.empty((self.rows, n), dtype=bool)
        pos = starts.astype(np.int64)
        for j in range(n):
            first = buf[pos].astype(np.int64)
            head = np.ones(self.rows, dtype=np.int64)
            length = np.where(first < 0xFB, first, 0)
            wide = first > 0xFB
            if wide.any():  # values of 251 bytes or more: the length is in the next 2, 3 or 8 bytes
                for marker, size in ((0xFC, 2), (0xFD, 3), (0xFE, 8)):
                    at = np.flatnonzero(first == marker)
                    if len(at):
                        value = np.zeros(len(at), dtype=np.int64)
                        for k in range(size):
                            value |= buf[pos[at] + 1 + k].astype(np.int64) << (8 * k)
                        length[at] = value
                        head[at] = 1 + size
            self.head[:, j] = head
            self.start[:, j] = pos + head
            self.length[:, j] = length
            self.null[:, j] = first == 0xFB
            pos = pos + head + length

    def items(self, columns: list[int] | None = None) -> pa.Array:
        """The values of ``columns`` (ascending; default all), row by row, as one Arrow array:
        ``binary`` if they are binary columns, ``string`` (validated UTF-8) if text ones."""
        n = len(self.binary)
        cols = list(range(n)) if columns is None else list(columns)
        if cols != sorted(set(cols)):
            raise ValueError(f"columns must be ascending and distinct, got {cols}")
        if len({self.binary[c] for c in cols}) > 1:
            raise ValueError("columns mixes binary and text columns: ask for them separately")
        length = self.length[:, cols].ravel()
        null = self.null[:, cols].ravel()
        offsets = np.zeros(len(length) + 1, dtype=np.int32)
        np.cumsum(length, out=offsets[1:])
        if 2 * len(cols) >= n:
            # Most columns: every byte of the block is a packet header, a length prefix or a
            # value byte, in row order, so masking out all but the wanted value bytes leaves
            # exactly their data, in order (one pass over the block).
            keep = np.ones(len(self.buf), dtype=bool)
            for k in range(1, 5):
                keep[self.starts - k] = False
            first = self.start - self.head
            for k in range(int(self.head.max(initial=1))):
                keep[first[self.head > k] + k] = False
            dropped = [j for j in range(n) if j not in set(cols)]
            if dropped:
                keep[_ranges(self.start[:, dropped].ravel(), self.length[:, dropped].ravel())] = False
            data = self.buf[keep]
        else:
            # A few columns: gather just their bytes.
            data = self.buf[_ranges(self.start[:, cols].ravel(), length)]
        all_binary = all(self.binary[c] for c in cols)
        kind = pa.binary() if all_binary else pa.string()
        validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if null.any() else None
        arr = pa.Array.from_buffers(
            kind, len(length), [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=int(null.sum())
        )
        if not all_binary:
            arr.validate(full=True)  # the utf8mb4 the connection asked for; pymysql would raise too
        return arr

    def column(self, j: int) -> pa.Array:
        return self.items([j])


def _ranges(start: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The indexes start[0] .. start[0]+size[0]-1, start[1] .. , ... as one array."""
    total = int(size.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    return np.repeat(start - np.cumsum(size) + size, size) + np.arange(total, dtype=np.int64)


def blocks(cursor, max_rows: int) -> Iterator[RowBlock]:
    """Read the rest of ``cursor``'s unbuffered result (a ``pymysql.cursors.SSCursor`` just
    executed) as blocks of at most ``max_rows`` rows. Leaves the connection ready for the
    next query, as reading the result through pymysql would."""
    result = cursor._result
    conn = result.connection
    if conn is None or not result.unbuffered_active:
        return
    binary = [encoding is None for encoding, _ in result.converters]
    reader = PacketReader(conn)
    try:
        while True:
            buf, starts, done = reader.rows(max_rows)
            if len(starts):
                yield RowBlock(buf, starts, binary)
            if done:
                break
    finally:
        if not reader.finished:
            # Abandoned early: read the rest, as pymysql would when the cursor closes (it
            # cannot do it itself, part of the stream is in our buffer).
            try:
                while not reader.rows(max_rows)[2]:
                    pass
            except Exception:  # noqa: BLE001 - the connection is unusable either way
                conn._force_close()
        # The result is consumed (or the connection closed): pymysql must not read it again.
        result.unbuffered_active = False
        result.connection = None
        result.warning_count, result.has_next = reader.warning_count, reader.has_next


class PacketReader:
    def __init__(self, conn):
        self.conn = conn
        self.pending = b""
        self.finished = False
        self.warning_count = 0
        self.has_next = False

    def _read(self, size: int) -> bytes:
        conn = self.conn
        conn._sock.settimeout(conn._read_timeout)
        while True:
            try:
                data = conn._rfile.read1(size)
                break
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                conn._force_close()
                raise pymysql.err.OperationalError(
                    CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({e})"
                ) from e
            except BaseException:
                conn._force_close()
                raise
        if not data:
            conn._force_close()
            raise pymysql.err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
        return data

    def rows(self, max_rows: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """Up to ``max_rows`` whole row packets: (buffer, payload start of each row, end of result)."""
        data = bytearray(self.pending)
        starts: list[int] = []
        append = starts.append
        pos = 0
        first_seq = self.conn._next_seq_id
        done = False
        while len(starts) < max_rows:
            size = len(data)
            # A packet starting at BLOCK_BYTES or later waits for the next block.
            fence = min(size, BLOCK_BYTES + 3)
            # The one loop per row, kept to a few operations: ordinary row packets that are
            # whole in the buffer. Their sequence ids are checked below, all at once.
            for _ in range(max_rows - len(starts)):
                if pos + 4 > fence:
                    break
                length = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
                end = pos + 4 + length
                # No row starts 0xFF; one starting 0xFE is over 16 MiB (a split packet).
                if end > size or not 0 < length < _MAX_PACKET or data[pos + 4] >= 0xFE:
                    break
                append(pos + 4)
                pos = end
            else:
                break  # max_rows
            if pos >= BLOCK_BYTES:
                break
            # The packet at pos is not whole in the buffer yet, or not an ordinary row.
            end = pos + 4 + (data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16) if pos + 4 <= size else size + 1
            if end > size:
                data += self._read(max(_READ_SIZE, end - size))
                continue
            length = end - pos - 4
            seq = (first_seq + len(starts)) % 256
            if data[pos + 3] != seq:
                self._wrong_sequence(data[pos + 3], seq)
            if length == _MAX_PACKET:
                if starts:
                    break  # a row over 16 MiB is its own block
                return self._long_row(data, pos)
            self._end_of_result(data, pos, end, seq)
            done = True
            break
        buf = np.frombuffer(bytes(data[:pos]), dtype=np.uint8)
        at = np.array(starts, dtype=np.int64)
        self._check_sequences(buf, at, first_seq)
        self.conn._next_seq_id = (first_seq + len(starts) + done) % 256
        if not done:
            self.pending = bytes(data[pos:])
        return buf, at, done

    def _end_of_result(self, data: bytearray, pos: int, end: int, seq: int) -> None:
        """The packet ``data[pos:end]`` (sequence id ``seq``), not a row, ends the result set:
        an EOF packet keeps its warning count and status and the bytes after it; an error
        packet raises the server's error; anything else is a protocol error."""
        length = end - pos - 4
        first = data[pos + 4] if length else 0
        if first == 0xFF:
            self.finished = True
            self.conn._next_seq_id = (seq + 1) % 256
            pymysql.protocol.MysqlPacket(bytes(data[pos + 4 : end]), self.conn.encoding).raise_for_error()
        if first == 0xFE and length < 9:  # EOF: the result is complete
            self.warning_count = data[pos + 5] | data[pos + 6] << 8 if length >= 5 else 0
            status = data[pos + 7] | data[pos + 8] << 8 if length >= 5 else 0
            self.has_next = bool(status & pymysql.constants.SERVER_STATUS.SERVER_MORE_RESULTS_EXISTS)
            self.pending = bytes(data[end:])
            self.finished = True
            return
        self.conn._force_close()
        raise pymysql.err.InternalError(f"Unexpected packet in a result set (first byte {first:#04x}, {length} bytes)")

    def _check_sequences(self, buf: np.ndarray, at: np.ndarray, first_seq: int) -> None:
        """The row packets starting at ``at`` (payload offsets in ``buf``) carry the sequence
        ids that follow ``first_seq``, all checked at once."""
        wrong = np.flatnonzero(buf[at - 1] != (first_seq + np.arange(len(at))) % 256)
        if len(wrong):
            self._wrong_sequence(int(buf[at[wrong[0]] - 1]), (first_seq + int(wrong[0])) % 256)

    def _wrong_sequence(self, got: int, expected: int):
        self.conn._force_close()
        raise pymysql.err.InternalError(f"Packet sequence number wrong - got {got} expected {expected}")

    def _long_row(self, data: bytearray, pos: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """One row split over several packets (16 MiB each, then a shorter one): joined."""
        payload = bytearray()
        seq = self.conn._next_seq_id
        while True:
            while pos + 4 > len(data):
                data += self._read(_READ_SIZE)
            length = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
            while pos + 4 + length > len(data):
                data += self._read(max(_READ_SIZE, pos + 4 + length - len(data)))
            if data[pos + 3] != seq:
                self.conn._force_close()
                raise pymysql.err.InternalError(f"Packet sequence number wrong - got {data[pos + 3]} expected {seq}")
            payload += data[pos + 4 : pos + 4 + length]
            seq = (seq + 1) % 256
            pos += 4 + length
            if length < _MAX_PACKET:
                break
        self.conn._next_seq_id = seq
        self.pending = bytes(data[pos:])
        # Behind a (dummy) packet header, like every other row in a block.
        return np.frombuffer(bytes(4) + bytes(payload), dtype=np.uint8), np.array([4], dtype=np.int64), False
