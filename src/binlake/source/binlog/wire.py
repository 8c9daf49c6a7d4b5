"""Reading the binlog's little-endian integers, packed integers and byte strings."""

from __future__ import annotations

import builtins

from binlake.errors import TruncatedEventError


def read_packed(buf: bytes, off: int) -> tuple[int, int]:
    """A packed ("length-encoded") integer at ``off``: (value, offset after it).

    One byte below 251 is the value; 252, 253 and 254 announce 2, 3 and 8 bytes after them.
    """
    first = buf[off]
    if first < 251:
        return first, off + 1
    size = {252: 2, 253: 3, 254: 8}.get(first)
    if size is None:
        raise TruncatedEventError(f"byte {first} does not start a packed integer")
    end = off + 1 + size
    if end > len(buf):
        raise TruncatedEventError("a packed integer runs past the end of its event")
    return int.from_bytes(buf[off + 1 : end], "little"), end


class Reader:
    """A cursor over one event's bytes, for the events read once per transaction (not rows)."""

    __slots__ = ("buf", "off")

    def __init__(self, buf: bytes, off: int = 0):
        self.buf = buf
        self.off = off

    def left(self) -> int:
        return len(self.buf) - self.off

    def bytes(self, n: int) -> bytes:
        end = self.off + n
        if end > len(self.buf):
            raise TruncatedEventError(f"{n} bytes wanted, {len(self.buf) - self.off} left")
        out = self.buf[self.off : end]
        self.off = end
        return out

    def skip(self, n: int) -> None:
        self.bytes(n)

    def uint(self, n: int) -> int:
        return int.from_bytes(self.bytes(n), "little")

    def u8(self) -> int:
        return self.uint(1)

    def u16(self) -> int:
        return self.uint(2)

    def u32(self) -> int:
        return self.uint(4)

    def u64(self) -> int:
        return self.uint(8)

    def packed(self) -> int:
        value, self.off = read_packed(self.buf, self.off)
        return value

    def rest(self) -> builtins.bytes:  # the method bytes() hides the type in the class body
        out = self.buf[self.off :]
        self.off = len(self.buf)
        return out
